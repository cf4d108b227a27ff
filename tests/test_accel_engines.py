"""The accelerator top with the tile-MAC tensor engines (adder_tree, outer_product, cube).

Three small builds, one per kind, each with memories small enough (1 KiB) that the GEMM suite
needs multi-tile GEMMs and split K chunks (GEMM acc=1), and three external-port widths (2-byte
beats: every on-chip word several beats; 32-byte beats wider than every word but the outer
product's accumulator tile; 8-byte beats). References are independent of the RTL: C against numpy's
exact int64 product wrapped to int32; cycles against the cycle model
(dataflow_sim/accel_timing.py, which reads the ISA, the tile core's closed form in
compiler/engine_timing.py and the ArchSpec, never the RTL), and one segment's cycles summed by hand
from the timing contracts of rtl/accel_top.py, rtl/dma.py and rtl/tile_core.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.test_accel_rtl import _exact, check_gemm_segments
from tests.test_cli import tw
from tilewright.arch import ArchSpec, default_arch
from tilewright.compiler.codegen import beats_per_word, codegen_gemms, word_bytes
from tilewright.compiler.layout import GemmLayout, pack_lanes, unpack_lanes
from tilewright.cosim.suites import gemm_suite
from tilewright.dataflow_sim.accel_timing import predict_segment


def _arch(kind: str, rows: int, depth: int, cols: int, bw: float, lat: float, spad: int = 1,
          acc: int = 1) -> ArchSpec:
    base = default_arch().model_dump(mode="json")
    base.update(name=f"accel-{kind}", offchip={"bandwidth_gbps": bw, "latency_ns": lat},
                memory={"scratchpad_kib": spad, "accumulator_kib": acc})
    base["tensor_engine"] = {"kind": kind, "rows": rows, "cols": cols, "depth": depth}
    return ArchSpec.from_dict(base)


#: 500 MHz: adder_tree W = 2 bytes, L = 10 cycles; outer_product W = 32, L = 50; cube W = 8,
#: L = 20. 1 KiB memories: A/B halves of 32 (adder tree, cube) or 64 (outer product) words.
ARCHS = {"adder_tree": _arch("adder_tree", 1, 8, 1, 1.0, 20.0),
         "outer_product": _arch("outer_product", 4, 1, 4, 16.0, 100.0),
         "cube": _arch("cube", 2, 4, 2, 4.0, 40.0)}
#: "tiny" is one beat on the cube (its cycles summed by hand below);
#: "ksplit" and "extreme" (all -128 against mixed +-: the largest sums) split K on every kind
SHAPES = [(2, 4, 2, "tiny"), (4, 4, 4, "exact"), (7, 9, 6, "ragged"), (1, 13, 5, "gemv"),
          (29, 11, 23, "random"), (40, 8, 30, "tiles"), (6, 300, 7, "ksplit"),
          (2, 515, 5, "extreme")]


def test_tile_layouts_by_hand():
    """Word sizes and the tile layouts of compiler/layout.py, element by element."""
    cube = ARCHS["cube"]                 # Tm, Tk, Tn = 2, 4, 2
    assert word_bytes(cube) == {"a": 8, "b": 8, "c": 16}
    assert GemmLayout.depths(cube) == (64, 64, 64)
    assert beats_per_word(cube) == {"a": 1, "b": 1, "c": 2}
    assert word_bytes(ARCHS["outer_product"]) == {"a": 4, "b": 4, "c": 64}
    assert word_bytes(ARCHS["adder_tree"]) == {"a": 8, "b": 8, "c": 4}
    lay = GemmLayout.for_arch(cube, 3, 5, 3)  # MB = KB = NB = 2
    assert (lay.a_words, lay.b_words, lay.acc_words, lay.acc_lanes) == (4, 4, 4, 4)
    a = np.arange(15, dtype=np.int8).reshape(3, 5)
    b = np.arange(15, dtype=np.int8).reshape(5, 3)
    al, bl = lay.a_lanes(a), lay.b_lanes(b)
    # A word mb*KB + kb, lane i*Tk + k = A[mb*2 + i, kb*4 + k]
    assert al[0].tolist() == [0, 1, 2, 3, 5, 6, 7, 8]
    assert al[1].tolist() == [4, 0, 0, 0, 9, 0, 0, 0]
    assert al[2].tolist() == [10, 11, 12, 13, 0, 0, 0, 0]
    # B word nb*KB + kb, lane k*Tn + j = B[kb*4 + k, nb*2 + j]
    assert bl[0].tolist() == [0, 1, 3, 4, 6, 7, 9, 10]
    assert bl[1].tolist() == [12, 13, 0, 0, 0, 0, 0, 0]
    assert bl[2].tolist() == [2, 0, 5, 0, 8, 0, 11, 0]
    # accumulator word mb*NB + nb, lane i*Tn + j = C[mb*2 + i, nb*2 + j]
    lanes = np.arange(16).reshape(4, 4)
    assert lay.c_from_lanes(lanes).tolist() == [[0, 1, 4], [2, 3, 6], [8, 9, 12]]
    # one packed word: lane 0 in the low byte
    assert pack_lanes(al[:1], 8)[0] == int.from_bytes(bytes(al[0].astype(np.uint8)), "little")
    assert unpack_lanes(pack_lanes(al, 8), 8, 8).tolist() == al.tolist()


#: cycles of the 2x4x2 GEMM on the cube top, summed by hand (test_cycle_count_by_hand_tiny_gemm)
HAND_CYCLES = 59


def test_cycle_count_by_hand_tiny_gemm():
    """cube 2x4x2, W = 8 bytes, L = 20: a 2x4x2 GEMM (one beat) as LOAD_A, LOAD_B, SYNC dma,
    GEMM, SYNC gemm, STORE, END; start sampled in cycle 0, fetch in cycle 1."""
    arch = ARCHS["cube"]
    isa = codegen_gemms(arch, [(2, 4, 2)])
    assert [i.op for i in isa.instructions()] == ["LOAD_A", "LOAD_B", "SYNC", "GEMM", "SYNC",
                                                  "STORE", "END"]
    load_a = 2                      # D = L + 1 word * 1 beat = 21: DMA idle from 24
    load_b = 24                     # D = 21: DMA idle from 46
    sync = 46
    gemm = 47                       # D = 1 beat + (2 + log2 4) + 1 = 6: core idle from 54
    sync2 = 54
    store = 55                      # D = 1 + 1 word * 2 beats = 3: DMA idle from 59
    end = HAND_CYCLES
    assert (load_a, load_b, sync, gemm, sync2, store) == (2, 24, 46, 47, 54, 55)
    pred = predict_segment(isa, isa.segments[0], arch)
    assert (pred.cycles, pred.gemm_cycles, pred.dma_cycles) == (end, 6, 21 + 21 + 3)


@pytest.mark.verilator
@pytest.mark.parametrize("kind", list(ARCHS))
def test_accel_engine_gemms_bit_exact_cycle_exact(kind):
    from tilewright.cosim.verilator import lint
    from tilewright.cosim import sim as cosim
    arch = ARCHS[kind]
    prog, inputs = gemm_suite(arch, SHAPES, seed=11)
    run = cosim.run("accel", prog, arch, inputs=inputs)
    multi_tile, k_split = check_gemm_segments(prog, inputs, run, arch)
    assert multi_tile >= 3 and k_split == 2
    if kind == "cube":       # the RTL agrees with the hand count too
        assert run.records[0]["task"].endswith("tiny") and run.records[0]["cycles"] == HAND_CYCLES
    assert all(row["equal"] for row in run.comparison(arch))
    ok, out = lint(run.build)
    assert ok, out[-3000:]


def test_top_refuses_what_it_cannot_build():
    """One-line errors naming the field and what is accepted."""
    from tilewright.arch import ArchSpecError
    from tilewright.rtl.accel_top import AccelTop
    from tilewright.rtl.axi_accel_top import AxiAccelTop
    # an 8x8 outer product's accumulator word is 256 bytes: 1 KiB holds 4 words, halves of 2 ...
    AccelTop(_arch("outer_product", 8, 1, 8, 16.0, 100.0))
    # ... a 16x16 one's is 1 KiB: one word, no halves
    with pytest.raises(ArchSpecError, match=r"memory\.accumulator_kib = 1 .*accepted: at least 2"):
        AccelTop(_arch("outer_product", 16, 1, 16, 16.0, 100.0))
    with pytest.raises(ArchSpecError, match=r"tensor_engine\.kind = 'cube'.*accepted: 'systolic'"):
        AxiAccelTop(ARCHS["cube"])


@pytest.mark.verilator
def test_cli_sim_tiny_mamba_on_a_tile_mac_accelerator(tmp_path):
    """`tilewright sim --rtl --top accel` with a cube ArchSpec: every check PASS; --top core and
    --top axi-accel are refused in one line."""
    arch = tmp_path / "cube.yaml"
    arch.write_text("name: cube2x4x2\ntensor_engine: {kind: cube, rows: 2, depth: 4, cols: 2}\n"
                    "memory: {scratchpad_kib: 4, accumulator_kib: 4}\n")
    proc = tw("sim", "--model", "tiny-mamba", "--arch", str(arch), "--rtl", "--top", "accel")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "all cross-checks passed" in proc.stdout and "FAIL" not in proc.stdout
    assert proc.stdout.count("PASS") == 4, proc.stdout
    for top in ("core", "axi-accel"):
        proc = tw("sim", "--model", "tiny-mamba", "--arch", str(arch), "--rtl", "--top", top)
        lines = [x for x in proc.stderr.strip().splitlines() if x.strip()]
        assert proc.returncode == 2 and "Traceback" not in proc.stderr + proc.stdout
        assert len(lines) == 1 and "tensor_engine.kind = 'cube'" in lines[0] \
            and "accepted: --top accel" in lines[0], proc.stderr


@pytest.mark.verilator
def test_fast_driver_runs_tile_mac_tops_unchanged():
    """The C++ fast driver on the outer-product top: the same outputs, cycles, instructions and
    beats as the cocotb bench, cycles equal to the model."""
    from tests.test_accel_fast import _SAME
    from tilewright.cosim import sim as cosim
    arch = ARCHS["outer_product"]
    prog, inputs = gemm_suite(arch, SHAPES, seed=5)
    fast = cosim.run("accel", prog, arch, driver="fast", inputs=inputs)
    slow = cosim.run("accel", prog, arch, inputs=inputs)
    for task, f, s in zip(prog.gemms(), fast.records, slow.records):
        assert np.array_equal(fast.outputs[task.out], _exact(inputs[task.a], inputs[task.b]))
        assert np.array_equal(fast.outputs[task.out], slow.outputs[task.out])
        assert {k: f[k] for k in _SAME} == {k: s[k] for k in _SAME}, task.name
        assert f["error"] == 0 and f["cycles_driver"] == f["cycles"]
    assert all(r["equal"] for r in fast.comparison(arch))
