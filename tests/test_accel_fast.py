"""The accelerator top's C++ fast driver (cosim/accel_fast.py) against the cocotb bench.

The same two 4x4 builds as tests/test_accel_rtl.py (WS with a 2-byte port: every on-chip word
several beats; OS with 32-byte beats): the GEMM suite on both drivers, outputs identical to each
other and to numpy's exact product, per-segment cycles (and instructions retired, beats moved)
identical between the drivers and equal to the cycle model. A 256x256x256 GEMM on a 16x16 WS top
runs on the fast driver only (the cocotb bench would take far longer), cycles == model (nightly:
``.ci/nightly``).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.test_accel_rtl import ARCHS, SHAPES, _exact
from tilewright.arch import ArchSpec, default_arch
from tilewright.cosim.suites import gemm_suite
from tilewright.dataflow_sim.accel_timing import predict_segment

pytestmark = pytest.mark.verilator

_SAME = ("task", "m", "k", "n", "tiles", "cycles", "retired", "read_beats", "write_beats")


@pytest.mark.parametrize("name", list(ARCHS))
def test_fast_driver_equals_cocotb_bench_and_model(name):
    from tilewright.cosim import sim as cosim
    arch = ARCHS[name]
    prog, inputs = gemm_suite(arch, SHAPES, seed=7)
    fast = cosim.run("accel", prog, arch, driver="fast", inputs=inputs)
    slow = cosim.run("accel", prog, arch, inputs=inputs)
    assert set(fast.outputs) == set(slow.outputs)
    assert len(fast.records) == len(slow.records) == len(prog.gemms())
    for task, f, s in zip(prog.gemms(), fast.records, slow.records):
        exact = _exact(inputs[task.a], inputs[task.b])
        assert np.array_equal(fast.outputs[task.out], slow.outputs[task.out]), task.name
        assert np.array_equal(fast.outputs[task.out], exact), task.name
        assert {k: f[k] for k in _SAME} == {k: s[k] for k in _SAME}, task.name
        pred = predict_segment(fast.isa, fast.isa.segment(task.name), arch)
        assert (f["cycles"], f["retired"]) == (pred.cycles, pred.instructions), task.name
        assert f["error"] == 0 and f["cycles_driver"] == f["cycles"]
    assert all(r["equal"] for r in fast.comparison(arch))


def _ws16() -> ArchSpec:
    base = default_arch().model_dump(mode="json")
    base.update(name="accel-ws16x16")
    base["tensor_engine"].update(rows=16, cols=16, dataflow="ws")
    return ArchSpec.from_dict(base)


@pytest.mark.slow
@pytest.mark.nightly
def test_fast_driver_large_gemm_on_16x16():
    """256^3 on a 16x16 WS top (64 KiB memories: the GEMM is tiled), fast driver only.

    Nightly: its own -O3 build of a 16x16 top (the longest single test of this file, 252 s of
    wall on the loaded 2-core machine). In CI the same path — the accelerator top's fast driver
    running tiled and K-split GEMMs, bit-exact and cycle-exact against the accelerator timing
    model — is covered on the 4x4 tops by test_fast_driver_equals_cocotb_bench_and_model;
    what only this test adds is the 16x16 array size."""
    from tilewright.cosim import sim as cosim
    arch = _ws16()
    prog, inputs = gemm_suite(arch, [(256, 256, 256, "random")], seed=3)
    run = cosim.run("accel", prog, arch, driver="fast", inputs=inputs)
    (task,), (rec,) = prog.gemms(), run.records
    assert np.array_equal(run.outputs[task.out], _exact(inputs[task.a], inputs[task.b]))
    seg = run.isa.segment(task.name)
    pred = predict_segment(run.isa, seg, arch)
    assert rec["cycles"] == pred.cycles and rec["retired"] == pred.instructions
    assert rec["tiles"] == len(seg.tiles) > 1
    # utilisation bound: 256^3 MACs on 256 PEs need at least 65,536 cycles
    assert rec["cycles"] >= 256 ** 3 // 256


def test_fast_driver_keeps_streams_and_reports_driver_errors(tmp_path):
    """keep_dir saves the command/result streams (replayable stand-alone); a stream the driver
    rejects fails with its stderr message."""
    import io
    import subprocess

    from tilewright.compiler.codegen import beat_bytes
    from tilewright.cosim import sim as cosim
    from tilewright.cosim.accel_commands import read_result
    from tilewright.cosim.build import build
    arch = ARCHS["ws-narrow"]
    prog, inputs = gemm_suite(arch, SHAPES[:2], seed=1)
    cosim.run("accel", prog, arch, driver="fast", inputs=inputs, keep_dir=tmp_path)
    exe = build("accel", arch, driver="fast").executable
    replay = subprocess.run([str(exe), str(tmp_path / "commands.bin"), "-"], capture_output=True)
    assert replay.returncode == 0, replay.stderr
    def records(data: bytes) -> list[dict]:
        f, out = io.BytesIO(data), []
        while f.tell() < len(data):
            rec = read_result(f, beat_bytes(arch))
            rec.pop("run_seconds")           # wall time: differs between runs
            out.append(rec)
        return out

    kept = records((tmp_path / "results.bin").read_bytes())
    assert len(kept) == 2 and records(replay.stdout) == kept
    bad = subprocess.run([str(exe), "-", "-"], input=b"nope" * 4, capture_output=True)
    assert bad.returncode == 2 and b"bad magic" in bad.stderr
    # a top without a vector unit has no index register: a segment asking for idx 1 is refused
    from tilewright.compiler.codegen import memory_latency_cycles
    from tilewright.cosim.accel_commands import segment_command, stream_end, stream_header
    w = beat_bytes(arch)
    stream = (stream_header([0], w, memory_latency_cycles(arch))
              + segment_command(0, 100, {}, [], w, idx=1) + stream_end())
    noidx = subprocess.run([str(exe), "-", "-"], input=stream, capture_output=True)
    assert noidx.returncode == 2 and b"no index register" in noidx.stderr, noidx.stderr


def test_cli_sim_top_accel_fast(tmp_path):
    """``tilewright sim --rtl --top accel --fast``: the layer's GEMMs through the fast driver."""
    from tests.test_cli import tw

    arch = tmp_path / "arch.yaml"
    arch.write_text(ARCHS["ws-narrow"].to_yaml())
    r = tw("sim", "--model", "tiny-mamba", "--arch", str(arch), "--rtl", "--top", "accel",
           "--fast", "--gemms")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "accelerator cycle model" in r.stdout and "FAIL" not in r.stdout
    assert "all cross-checks passed" in r.stdout
