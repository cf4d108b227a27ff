"""The double-buffered vector buffer (ArchSpec ``vector_unit.double_buffer``): the ISA's bank
rule by hand, the ping-pong kernels' results against the numpy-composed references of
tests/test_vector_accel.py, and the RTL's cycles against the cycle model."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from tilewright.arch import ArchSpec
from tilewright.compiler.codegen import (VECTOR_OPCODES, Instr, assemble, vbuf_bank_mask)
from tilewright.compiler.vector_codegen import VectorKernel, codegen_vector
from tilewright.dataflow_sim import accel_timing
from tilewright.dataflow_sim.accel_timing import predict_segment, segment_timeline
from tilewright.dataflow_sim.vector_isa import kernel_reference
from tests.test_vector_accel import (ARCHS, _equal, _requant_closed, _scan_composed,
                                     _scan_operands, _suite)


def _banked(arch: ArchSpec) -> ArchSpec:
    d = arch.model_dump(mode="json", exclude_none=True)
    d["vector_unit"]["double_buffer"] = True
    d["name"] += "-db"
    return ArchSpec.from_dict(d)


DB = {name: _banked(a) for name, a in ARCHS.items()}


def _bigger():
    """(kernel, operands, reference): a requant and a scan big enough for several chunks."""
    rng = np.random.default_rng(5)
    acc = rng.integers(-(1 << 31), 1 << 31, (300, 20))
    mult, shift = rng.integers(-(1 << 31), 1 << 31, 20), rng.integers(0, 64, 20)
    ops = _scan_operands((2, 12, 40, 3))
    return [(VectorKernel("bigrequant", "requant", "requant", acc.shape), [acc, mult, shift],
             _requant_closed(acc, mult, shift)),
            (VectorKernel("bigscan", "scan", "scan", (2, 12, 40, 3)), ops, _scan_composed(*ops))]


def _vec(op, count, a, b, dst, b_inc=0, seg=0):
    return Instr("VECTOR", dict(vop=VECTOR_OPCODES[op], count=count, a=a, b=b, b_inc=b_inc,
                                dst=dst, seg=seg))


def test_bank_mask_by_hand():
    """Banks of the first and last word of every range (bit k = bank k, 512 words each)."""
    m = lambda op, **f: vbuf_bank_mask(op, f, 4)  # noqa: E731
    assert m("LOAD_V", vaddr=0, count=512, addr=0) == 1          # words 0..511
    assert m("LOAD_V", vaddr=1, count=512, addr=0) == 3          # 1..512
    assert m("STORE_V", vaddr=1023, count=2, addr=0) == 3        # 1023, 0 (wraps)
    assert m("LOAD_V", vaddr=600, count=0, addr=0) == 0          # moves nothing
    assert m("LOAD_V", vaddr=600, count=600, addr=0) == 3        # longer than a bank
    # a rmax of 4 rows of 100 beats at 512: a 512..911, b (one word per segment) 0..3,
    # dst (one word per segment) 912..915: the b word at 0 puts it in both banks
    assert m("VECTOR", vop=VECTOR_OPCODES["rmax"], count=400, a=512, b=0, b_inc=0, dst=912,
             seg=100) == 3
    assert m("VECTOR", vop=VECTOR_OPCODES["rmax"], count=400, a=512, b=512, b_inc=0, dst=912,
             seg=100) == 2
    # requant reads the shift word after its b word: b = 511 -> 512 is bank 1
    assert m("VECTOR", vop=VECTOR_OPCODES["requant"], count=1, a=0, b=511, b_inc=0, dst=0,
             seg=0) == 3
    assert m("VECTOR", vop=VECTOR_OPCODES["mul"], count=1, a=0, b=511, b_inc=0, dst=0,
             seg=0) == 1
    # SCAN of 5 steps on 4 lanes: ab 520..529, c 700..704, h0 1000, dst 1010..1012
    assert m("SCAN", count=5, ab=520, c=700, h0=1000, dst=1010) == 2
    assert m("SCAN", count=5, ab=520, c=700, h0=1000, dst=510) == 3   # 510..512


def _timeline(arch, instrs):
    words = assemble(instrs + [Instr("END")])
    return segment_timeline(SimpleNamespace(words=tuple(words)),
                            SimpleNamespace(entry=0, end=len(words) - 1, task="hand"), arch)


@pytest.mark.parametrize("b_second,cycles", [(512, 61), (0, 69)])
def test_bank_rule_cycle_model_by_hand(b_second, cycles):
    """4 lanes behind a 4-byte port (r = 4 beats per word, L = 10; fetch in cycle 1):
    LOAD_V 2 words into bank 0 issues in 2 (busy 10 + 8, DMA free from 21); exp on them waits
    for it: 21 (busy 2 + 5, engine free from 29); LOAD_V into bank 1 does not wait for the
    engine (bank 0): 22 (DMA free from 41); STORE_V of bank 0 waits for the DMA: 41 (busy
    1 + 8, free from 51); exp on bank 1 (b = 512) does not wait for the STORE (bank 0): 42 (free
    from 50); STORE_V of bank 1 waits for the DMA: 51 (free from 61); END 61. With b = 0 the
    second exp reads a word of bank 0 too, so it waits for the STORE: 51 (free from 59), the
    last STORE_V for it: 59 (free from 69); END 69. One shared buffer: 2, 21, 29, 48, 58, 66,
    END 76."""
    code = [Instr("LOAD_V", dict(vaddr=0, count=2, addr=0)), _vec("exp", 2, 0, 0, 0),
            Instr("LOAD_V", dict(vaddr=512, count=2, addr=8)),
            Instr("STORE_V", dict(vaddr=0, count=2, addr=16)),
            _vec("exp", 2, 512, b_second, 512),
            Instr("STORE_V", dict(vaddr=512, count=2, addr=24))]
    t = _timeline(DB["narrow4"], code)
    second = 42 if b_second == 512 else 51
    assert [i.cycle for i in t.issues] == [2, 21, 22, 41, second, 51 if b_second else 59,
                                           cycles]
    assert t.cycles == cycles
    assert [i.cycle for i in _timeline(ARCHS["narrow4"], code).issues] == \
        [2, 21, 29, 48, 58, 66, 76]


@pytest.mark.parametrize("name", list(ARCHS))
def test_pingpong_kernels_equal_the_references_and_the_single_buffer(name):
    """Every kernel of the suite on the instruction-level model with the double-buffered code:
    equal to its numpy-composed reference and to the single-buffer code's result; the
    ping-pong code is really different (several chunks, interleaved) and not slower by the
    cycle model; a row longer than a bank falls back to the single-buffer code."""
    one, two = ARCHS[name], DB[name]
    pingpong = 0
    for kernel, ops, ref in _suite() + _bigger():
        isa1, isa2 = codegen_vector(one, [kernel]), codegen_vector(two, [kernel])
        got = kernel_reference(kernel, two, *ops, isa=isa2)
        assert _equal(got, ref), kernel.name
        assert _equal(got, kernel_reference(kernel, one, *ops, isa=isa1)), kernel.name
        c1 = predict_segment(isa1, isa1.segments[0], one).cycles
        c2 = predict_segment(isa2, isa2.segments[0], two).cycles
        assert c2 <= c1, (kernel.name, c1, c2)
        pingpong += c2 < c1 and len(isa2.segments[0].chunks) > 1
    assert pingpong >= 4, pingpong
    long_row = VectorKernel("long", "row", "sum", (1, 4 * 600))    # 600 words on 4 lanes
    if one.vector_unit.lanes == 4:
        assert codegen_vector(two, [long_row]).words == codegen_vector(one, [long_row]).words


def test_softmax_overlaps_on_the_model():
    """A softmax of 64 rows of 100 on 8 lanes: the ping-pong code hides most of the DMA, so the
    cycles drop below the single buffer's and the vector engine is busy most of them."""
    k = VectorKernel("sm", "row", "softmax", (64, 100))
    isa1, isa2 = codegen_vector(ARCHS["wide8"], [k]), codegen_vector(DB["wide8"], [k])
    t1 = predict_segment(isa1, isa1.segments[0], ARCHS["wide8"])
    t2 = predict_segment(isa2, isa2.segments[0], DB["wide8"])
    # the same compute (beats and pipeline fills of its 7 VECTORs per chunk aside)
    assert t2.cycles < t1.cycles and t2.vector_cycles / t2.cycles > 0.85 > \
        t1.vector_cycles / t1.cycles


def test_pingpong_kernels_on_the_rtl_bit_exact_and_cycle_exact(monkeypatch):
    """The suite on the double-buffered top (4 lanes, 4-byte port) on the C++ fast driver:
    results equal the references, RTL cycles equal the cycle model's; a model that ignores the
    banks (waits as for one shared buffer) disagrees on the ping-pong kernels."""
    from tilewright.cosim import sim as cosim
    from tilewright.cosim.program_jobs import KernelBatch
    arch = DB["narrow4"]
    suite = _suite() + _bigger()
    batch = KernelBatch([k for k, _, _ in suite], {k.name: ops for k, ops, _ in suite})
    run = cosim.run("accel", batch, arch, driver="fast")
    for kernel, _, ref in suite:
        assert _equal(run.outputs[kernel.name], ref), kernel.name
    rows = run.comparison(arch)
    assert all(r["equal"] for r in rows), [r for r in rows if not r["equal"]]
    monkeypatch.setattr(accel_timing, "vbuf_bank_mask", lambda *a, **k: 3)
    off = {r["kernel"]: r["equal"] for r in run.comparison(arch)}
    assert not any(off[k] for k in ("exp", "rsum", "softmax9", "mean508", "scan9", "bigrequant",
                                    "bigscan")), off


def _controller_issues(code, durations, double_buffer=True):
    """Issue cycles of ``code`` (END appended) on the controller alone in Amaranth's simulator,
    the DMA and the vector engine stood in by counters: an instruction issued in cycle ``c``
    keeps its unit busy in ``c + 1 .. c + D`` with ``D = durations[index]`` (``start`` sampled
    in cycle 0)."""
    from amaranth.sim import Simulator
    from tilewright.rtl.controller import Controller
    ctrl = (Controller(indirect=True, double_buffer=True, vec_lanes=4) if double_buffer
            else Controller(indirect=True))
    words = assemble(code + [Instr("END")])
    issues: list[int] = []

    async def bench(ctx):
        for i, w in enumerate(words):
            ctx.set(ctrl.imem_wr_en, 1)
            ctx.set(ctrl.imem_wr_addr, i)
            ctx.set(ctrl.imem_wr_data, w)
            await ctx.tick()
        ctx.set(ctrl.imem_wr_en, 0)
        ctx.set(ctrl.start, 1)
        await ctx.tick()                                  # cycle 0 samples start
        ctx.set(ctrl.start, 0)
        left = {"dma": 0, "vec": 0}
        for t in range(1, 200):
            ctx.set(ctrl.dma_busy, left["dma"] > 0)
            ctx.set(ctrl.vec_busy, left["vec"] > 0)
            started = {"dma": ctx.get(ctrl.dma_start), "vec": ctx.get(ctrl.vec_start)}
            before = ctx.get(ctrl.retired)
            await ctx.tick()
            if ctx.get(ctrl.retired) > before:
                issues.append(t)
            for unit in left:
                left[unit] = (durations[len(issues) - 1] if started[unit]
                              else max(0, left[unit] - 1))
            if ctx.get(ctrl.done):
                return

    sim = Simulator(ctrl)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return issues


@pytest.mark.parametrize("b_second", [512, 0])
def test_controller_alone_applies_the_bank_rule(b_second):
    """The controller in Amaranth's simulator, with the hand sequence's busy cycles (18 per
    LOAD_V, 7 per exp, 9 per STORE_V): it issues in the cycles the bank rule gives — the same
    ones as the hand count of the cycle model above; the single-buffer controller waits for
    both units every time (2, 21, 29, 48, 58, 66, 76)."""
    code = [Instr("LOAD_V", dict(vaddr=0, count=2, addr=0)), _vec("exp", 2, 0, 0, 0),
            Instr("LOAD_V", dict(vaddr=512, count=2, addr=8)),
            Instr("STORE_V", dict(vaddr=0, count=2, addr=16)),
            _vec("exp", 2, 512, b_second, 512),
            Instr("STORE_V", dict(vaddr=512, count=2, addr=24))]
    expect = ([2, 21, 22, 41, 42, 51, 61] if b_second else [2, 21, 22, 41, 51, 59, 69])
    assert _controller_issues(code, [18, 7, 18, 9, 7, 9, 0]) == expect
    assert [i.cycle for i in _timeline(DB["narrow4"], code).issues] == expect
    assert _controller_issues(code, [18, 7, 18, 9, 7, 9, 0], double_buffer=False) == \
        [2, 21, 29, 48, 58, 66, 76]
