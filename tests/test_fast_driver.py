"""The C++ fast driver vs the cocotb bench, numpy, the functional model and the cycle model.

The same Programs (a GEMM corner-case suite and the compiled mlp-tiny, whose GEMMs consume vector
tasks' outputs) run on the Verilated GEMM core through both drivers. Both must give identical
outputs and identical per-GEMM cycle counts; outputs must equal the functional model (and numpy
for the suite), cycles the cycle model's closed form. The architectures are the demo's 8x8 WS and
the RTL suite's 4x4 OS (their cocotb builds are shared with cocotb_tests/ in CI).
"""

from __future__ import annotations

import shutil
import struct
import subprocess

import numpy as np
import pytest

from tests.rtl_suite import suite_arch
from tests.test_cli import tw
from tilewright.arch import default_arch
from tilewright.compiler.layout import GemmLayout, pack_lanes
from tilewright.cosim.gemm_commands import (MAGIC_END, MAGIC_GEMM, MAGIC_STREAM, GemmCommand,
                                            read_result, stream_header)

ARCHS = {"ws8x8": default_arch, "os4x4": lambda: suite_arch(4, 4, "os")}


# ---- encoding (no tools needed) ---------------------------------------------------------------
@pytest.mark.parametrize("rows,cols,dataflow", [(3, 5, "ws"), (8, 8, "os"), (16, 16, "ws")])
def test_binary_words_are_the_bench_words(rows, cols, dataflow):
    """Each binary A/B word, read back as a little-endian integer, is the word the cocotb bench
    writes (pack_lanes of the layout's lanes)."""
    arch = suite_arch(rows, cols, dataflow)
    rng = np.random.default_rng(rows)
    a = rng.integers(-128, 128, (7, 2 * rows + 1), dtype=np.int8)
    b = rng.integers(-128, 128, (2 * rows + 1, cols + 3), dtype=np.int8)
    cmd = GemmCommand.from_operands(arch, a, b)
    lay = GemmLayout.for_arch(arch, 7, 2 * rows + 1, cols + 3)
    blob = cmd.to_bytes()
    head = struct.unpack("<7I", blob[:28])
    assert head == (MAGIC_GEMM, 7, 2 * rows + 1, cols + 3, lay.a_words, lay.b_words, lay.acc_words)
    wa, wb = 4 * ((8 * rows + 31) // 32), 4 * ((8 * cols + 31) // 32)
    body = blob[28:]
    assert len(body) == lay.a_words * wa + lay.b_words * wb
    a_ints = [int.from_bytes(body[i * wa:(i + 1) * wa], "little") for i in range(lay.a_words)]
    b_off = lay.a_words * wa
    b_ints = [int.from_bytes(body[b_off + i * wb:b_off + (i + 1) * wb], "little")
              for i in range(lay.b_words)]
    assert a_ints == pack_lanes(lay.a_lanes(a), 8) == cmd.a_words
    assert b_ints == pack_lanes(lay.b_lanes(b), 8) == cmd.b_words


def test_unknown_driver_is_a_clear_error():
    from tilewright.cosim import sim as cosim
    from tilewright.cosim.suites import gemm_suite
    arch = suite_arch(4, 4, "ws")
    prog, inputs = gemm_suite(arch, [(4, 4, 4, "exact")])
    with pytest.raises(ValueError, match="driver 'verilog': accepted: cocotb, fast"):
        cosim.run("core", prog, arch, inputs=inputs, driver="verilog")


# ---- RTL: both drivers -----------------------------------------------------------------------
def _programs(arch):
    from tilewright.compiler import compile_model
    from tilewright.cosim.suites import gemm_suite
    from tilewright.models.configs import build
    suite, suite_in = gemm_suite(arch, seed=7)
    module, x = build("mlp-tiny", seed=3)
    mlp = compile_model(module, x, arch)
    x_int8 = np.clip(np.round(x.numpy() / mlp.meta["input_scale"]), -128, 127).astype(np.int8)
    return [(suite, suite_in), (mlp, {"x": x_int8})]


@pytest.mark.verilator
@pytest.mark.parametrize("name", list(ARCHS))
def test_fast_and_cocotb_agree_with_models(name, tmp_path):
    from tilewright.cosim import sim as cosim
    from tilewright.dataflow_sim.cycle import gemm_cycles
    from tilewright.dataflow_sim.functional import run_program
    arch = ARCHS[name]()
    for program, inputs in _programs(arch):
        fast = cosim.run("core", program, arch, inputs=inputs, driver="fast", keep_dir=tmp_path / program.name)
        slow = cosim.run("core", program, arch, inputs=inputs, driver="cocotb")
        func = run_program(program, inputs)
        gemms = program.gemms()
        assert len(fast.records) == len(slow.records) == len(gemms) > 0
        assert sorted(fast.outputs) == sorted(slow.outputs)
        for key, val in fast.outputs.items():
            np.testing.assert_array_equal(val, slow.outputs[key], err_msg=f"{program.name} {key}")
            np.testing.assert_array_equal(val, func[key], err_msg=f"{program.name} {key} vs func")
        for task, f, s in zip(gemms, fast.records, slow.records):
            assert f["task"] == s["task"] == task.name
            model = gemm_cycles(arch, task.m, task.k, task.n).cycles
            assert f["cycles"] == f["cycles_driver"] == s["cycles"] == model, (name, task.name)
            if program.name.startswith("gemm-suite"):
                a, b = inputs[task.a].astype(np.int64), inputs[task.b].astype(np.int64)
                ref = (a @ b).astype(np.uint32).astype(np.int32)
                np.testing.assert_array_equal(fast.outputs[task.out], ref, err_msg=task.name)


@pytest.mark.verilator
def test_saved_stream_replays_standalone(tmp_path):
    """keep_dir saves the exact command stream; the executable replays it to the same results
    (C words and both cycle counts; the busy-period wall time naturally differs)."""
    from tilewright.cosim import sim as cosim
    from tilewright.cosim.suites import gemm_suite
    arch = ARCHS["os4x4"]()
    prog, inputs = gemm_suite(arch, [(5, 9, 6, "ragged"), (4, 4, 4, "exact")], seed=1)
    run = cosim.run("core", prog, arch, inputs=inputs, driver="fast", keep_dir=tmp_path)
    out = tmp_path / "replay.bin"
    proc = subprocess.run([str(run.build.executable), str(tmp_path / "commands.bin"), str(out)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    with open(out, "rb") as fr, open(tmp_path / "results.bin", "rb") as fs:
        for task in prog.gemms():          # every field but the wall time must be identical
            r, s = read_result(fr, 4), read_result(fs, 4)
            assert (r.cycles_counter, r.cycles_driver) == (s.cycles_counter, s.cycles_driver)
            np.testing.assert_array_equal(r.c_lanes, s.c_lanes, err_msg=task.name)
        assert fr.read() == fs.read() == b""


@pytest.mark.verilator
def test_driver_rejects_a_stream_for_another_array(tmp_path):
    from tilewright.cosim.build import build
    built = build("core", ARCHS["os4x4"](), driver="fast")
    bad = tmp_path / "bad.bin"
    bad.write_bytes(stream_header(suite_arch(8, 8, "os")) + struct.pack("<I", MAGIC_END))
    proc = subprocess.run([str(built.executable), str(bad), "-"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "stream is for another array size (rows, cols) (8, 8)" in proc.stderr
    bad.write_bytes(struct.pack("<3I", MAGIC_STREAM + 1, 4, 4))
    proc = subprocess.run([str(built.executable), str(bad), "-"], capture_output=True, text=True)
    assert proc.returncode == 2 and "bad magic" in proc.stderr


@pytest.mark.verilator
def test_cli_demo_fast_driver():
    assert shutil.which("g++")
    proc = tw("demo", "--driver", "fast", timeout=1200)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    for needle in ("C++ fast driver", "RTL cycles == cycle model", "all cross-checks passed"):
        assert needle in out, needle
    assert "FAIL" not in out


def test_cli_demo_rejects_unknown_driver():
    proc = tw("demo", "--driver", "verilog", timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "verilog" in proc.stderr
