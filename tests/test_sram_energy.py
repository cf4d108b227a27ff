"""SRAM access energy follows the engine's reuse: the mapper's per-op scratchpad and accumulator
bytes (issue 22, item 4). References are closed forms written here by hand from each engine
kind's dataflow, independent of the mapper's code."""

from __future__ import annotations

import math

import pytest

from tilewright.arch import ArchSpec
from tilewright.compiler.gemm_mapper import GemmOp, command_sram_bytes, map_gemm, native_dataflow
from tilewright.dataflow_sim.energy_area import (TechError, energy_breakdown, load_tech,
                                                 sram_bank_kib, sram_pj_per_byte)

M, K, N = 32, 64, 48          # one command; int8 operands (e = 1 byte), int32 partial sums

#: equal peak (64 MAC/cycle), int8; the hand-written (scratchpad, accumulator) bytes of one
#: M x K x N command:
#: * WS 8x8: ceil(K/8)*ceil(N/8) = 48 folds, each loads 8x8 weights and streams M rows of 8
#:   activations; each fold read-modify-writes M x 8 int32 sums -> A 48*32*8, B 48*64,
#:   acc 48*32*8*4*2
#: * OS 8x8: ceil(M/8)*ceil(N/8) = 24 folds, each streams K columns of 8 A and K rows of 8 B;
#:   each drains 8x8 int32 sums once -> A = B = 24*64*8, acc 24*64*4
#: * outer product 8x8 (Tm, Tk, Tn) = (8, 1, 8): 4*6*64 = 1536 beats of 8 A + 8 B; 24 output
#:   tiles of 8x8 written once -> 1536*16, acc 24*64*4
#: * cube 4x4x4: 8*12*16 = 1536 beats of a 4x4 A and a 4x4 B tile; 96 output tiles of 4x4
#:   -> 1536*32, acc 96*16*4
#: * adder tree 64 (1, 64, 1): 32*48*1 = 1536 beats of 64 A + 64 B; 1536 outputs -> 1536*128,
#:   acc 1536*4
CASES = {
    "ws": ({"kind": "systolic", "rows": 8, "cols": 8, "dataflow": "ws"},
           48 * 32 * 8 + 48 * 64, 48 * 32 * 8 * 4 * 2),
    "os": ({"kind": "systolic", "rows": 8, "cols": 8, "dataflow": "os"},
           2 * 24 * 64 * 8, 24 * 64 * 4),
    "outer_product": ({"kind": "outer_product", "rows": 8, "cols": 8}, 1536 * 16, 24 * 64 * 4),
    "cube": ({"kind": "cube", "rows": 4, "depth": 4, "cols": 4}, 1536 * 32, 96 * 16 * 4),
    "adder_tree": ({"kind": "adder_tree", "depth": 64}, 1536 * 128, 1536 * 4),
}


def _arch(te: dict) -> ArchSpec:
    return ArchSpec.from_dict({"name": "t", "clock_mhz": 500.0,
                               "tensor_engine": {**te, "input_format": "int8"}})


@pytest.mark.parametrize("kind", CASES)
def test_command_sram_bytes_by_hand(kind):
    te, sp_want, acc_want = CASES[kind]
    arch = _arch(te)
    sp, acc = command_sram_bytes(arch, native_dataflow(arch), 1, M, K, N)
    assert (int(sp), int(acc)) == (sp_want, acc_want)


def test_energy_from_mapper_bytes_by_hand():
    """The SRAM term with the mapper's bytes: the engine tasks' bytes at the bank energies, the
    other MACs at the per-MAC rate, the other off-chip bytes once through the scratchpad."""
    arch, t = _arch(CASES["ws"][0]), load_tech("7nm")
    sp_kib, acc_kib = sram_bank_kib(arch)
    sp, acc = sram_pj_per_byte(t, sp_kib), sram_pj_per_byte(t, acc_kib)
    v = energy_breakdown(arch, t, macs=1.0)["voltage_v"]
    v_scale = (v / t.vf.v_nom) ** 2           # dynamic energy at the supply 500 MHz needs
    e = energy_breakdown(arch, t, macs=1000, vector_ops=10, dram_bytes=500,
                         scratchpad_bytes=3000, accumulator_bytes=700, sram_dram_bytes=400,
                         sram_macs=600)
    want = ((1000 - 600) * (1 / 8 * sp + 8 / 8 * acc) + 3000 * sp + 700 * acc
            + (500 - 400) * sp + 10 * 8 * sp) * v_scale
    assert e["sram_pj"] == pytest.approx(want, rel=1e-12)
    # no SRAM bytes given: every MAC at the WS rate e/C + 8/R, as before
    e0 = energy_breakdown(arch, t, macs=1000, dram_bytes=500)
    assert e0["sram_pj"] == pytest.approx(
        (1000 * (1 / 8 * sp + 8 / 8 * acc) + 500 * sp) * v_scale, rel=1e-12)


def test_sram_bytes_must_be_parts_of_the_totals():
    arch, t = _arch(CASES["ws"][0]), load_tech("7nm")
    with pytest.raises(TechError, match="sram_macs = 2000 .* macs = 1000"):
        energy_breakdown(arch, t, macs=1000, sram_macs=2000)


def test_sram_energy_differs_by_engine_reuse_on_one_gemm():
    """The issue's complaint: OS, outer product and cube gave bit-identical SRAM energy on one
    workload. With the mapper's bytes, the same 512x1024x512 GEMM on equal-peak engines with the
    same memory costs SRAM energy in the order of their operand reuse per beat: an adder tree
    reuses nothing (2 bytes per MAC), a 4x4x4 cube each operand 4 times, an 8x8 outer product
    (and an 8x8 OS array) 8 times; each engine's scratchpad reads are at least its per-MAC
    steady-state bytes."""
    t = load_tech("7nm")
    sram = {}
    for kind in ("outer_product", "cube", "adder_tree", "os"):
        arch = _arch(CASES[kind][0])
        c = map_gemm(GemmOp("g", 512, 1024, 512, elem_bytes=1, out_bytes=4), arch).cost
        e = energy_breakdown(arch, t, macs=c.macs, dram_bytes=c.dram_bytes,
                             scratchpad_bytes=c.scratchpad_bytes,
                             accumulator_bytes=c.accumulator_bytes,
                             sram_dram_bytes=c.dram_bytes, sram_macs=c.macs)
        sram[kind] = e["sram_pj"]
        te = arch.tensor_engine
        tm, tk, tn = (te.rows, 1, te.cols) if te.kind == "systolic" else te.tile_shape
        # operand reads alone: one A (Tm x Tk) and one B (Tk x Tn) tile per Tm*Tk*Tn MACs
        # (an OS R x C array: R A and C B elements per R*C MACs)
        per_mac = (tm * tk + tk * tn) / (tm * tk * tn)
        assert c.scratchpad_bytes >= math.floor(c.macs * per_mac)
    assert sram["adder_tree"] > sram["cube"] > sram["outer_product"]
    # an OS array and an outer product of the same R x C read the same R + C operands per
    # R*C MACs and keep their sums inside: the same SRAM traffic, as physics says
    assert sram["os"] == pytest.approx(sram["outer_product"], rel=0.02)
    print({k: round(v / 1e6, 3) for k, v in sram.items()}, "uJ")


def test_compiled_step_sram_energy_follows_the_engine():
    """The issue's case on a compiled LLM step (tiny-llama prefill, one layer, int8): engines of
    equal peak and equal memory no longer give the same SRAM energy — a 4x4x4 cube reads each
    operand for 4 MACs, an 8x8 outer product for 8 — and every MAC of the step is in a task that
    reports its SRAM bytes (none charged at the per-MAC fallback)."""
    from tilewright.dataflow_sim.token_cost import llm_step_cost

    t = load_tech("7nm")
    steps = {}
    for kind in ("outer_product", "cube"):
        arch = _arch(CASES[kind][0])
        step = llm_step_cost(arch, "tiny-llama", phase="prefill", seq=32, batch=1, fmt="int8",
                             layers=1)
        assert step.sram["sram_macs"] == step.macs > 0
        assert step.sram["scratchpad_bytes"] > 0 and step.sram["accumulator_bytes"] > 0
        steps[kind] = step
    o, c = steps["outer_product"], steps["cube"]
    assert c.sram["scratchpad_bytes"] > o.sram["scratchpad_bytes"]
    assert c.energy["sram_pj"] > o.energy["sram_pj"]
    # same memory, same non-engine work (vector ops, off-chip bytes of the other tasks): the
    # SRAM energies differ by the engine tasks' SRAM bytes alone (their DMA is in them)
    assert (c.macs, c.vector_ops) == (o.macs, o.vector_ops)
    assert c.dram_bytes - c.sram["sram_dram_bytes"] == o.dram_bytes - o.sram["sram_dram_bytes"]
    arch = _arch(CASES["cube"][0])
    sp_kib, acc_kib = sram_bank_kib(arch)
    v = c.energy["voltage_v"]
    want = ((c.sram["scratchpad_bytes"] - o.sram["scratchpad_bytes"]) * sram_pj_per_byte(t, sp_kib)
            + (c.sram["accumulator_bytes"] - o.sram["accumulator_bytes"])
            * sram_pj_per_byte(t, acc_kib)) * (v / t.vf.v_nom) ** 2
    assert c.energy["sram_pj"] - o.energy["sram_pj"] == pytest.approx(want, rel=1e-9)
