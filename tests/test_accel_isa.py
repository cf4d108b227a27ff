"""The accelerator ISA (compiler/codegen.py): encoding, every assembler error, codegen tiling and
the cycle model's rules on hand-computed cases. Fast: no simulator.

References are independent of the code under test: bit positions written out by hand from the ISA
table in the module docstring, tile counts and addresses from the buffer-size arithmetic, and cycle
counts summed by hand from the timing contract of rtl/accel_top.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from tilewright.arch import ArchSpec, default_arch, load_arch
from tilewright.compiler.codegen import (FIELD_MIN, ISA, AssemblerError, CodegenError, Instr,
                                         assemble, beat_bytes, beats_per_word, beats_to_words,
                                         codegen, codegen_gemm, codegen_gemms, disassemble,
                                         memory_latency_cycles, words_to_beats)
from tilewright.compiler.core_timing import gemm_cycles_array
from tilewright.compiler.layout import DoesNotFit, GemmLayout, pack_lanes
from tilewright.cosim.suites import gemm_suite
from tilewright.dataflow_sim.accel_timing import predict_segment, segment_timeline
from tilewright.dataflow_sim.functional import gemm_int8

ROOT_CONFIGS = __import__("pathlib").Path(__file__).resolve().parents[1] / "configs"


def _arch(df="ws", bw=16.0, lat=100.0, rows=4, cols=4, spad=32, acc=16) -> ArchSpec:
    base = default_arch().model_dump(mode="json")
    base.update(name=f"t{df}{rows}x{cols}", offchip={"bandwidth_gbps": bw, "latency_ns": lat},
                memory={"scratchpad_kib": spad, "accumulator_kib": acc})
    base["tensor_engine"].update(rows=rows, cols=cols, dataflow=df)
    return ArchSpec.from_dict(base)


async def _write_imem(ctx, dut, words, base: int = 0) -> None:
    """Write ``words`` into the controller's instruction memory from address ``base``, one per
    cycle (the host's write port)."""
    for i, w in enumerate(words):
        ctx.set(dut.imem_wr_en, 1)
        ctx.set(dut.imem_wr_addr, base + i)
        ctx.set(dut.imem_wr_data, w)
        await ctx.tick()
    ctx.set(dut.imem_wr_en, 0)


def _simulate(dut, bench) -> None:
    """Run the async testbench ``bench`` on ``dut`` in Amaranth's simulator (100 MHz clock)."""
    from amaranth.sim import Simulator
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


# ---- encoding --------------------------------------------------------------------------------
def test_encoding_bit_positions_by_hand():
    words = assemble([Instr("END"),
                      Instr("LOAD_B", {"buf": 1, "count": 3, "addr": 5}),
                      Instr("GEMM", {"m": 2, "k": 3, "n": 4, "a_buf": 1, "b_buf": 0, "c_buf": 1,
                                     "acc": 1}),
                      Instr("SYNC", {"dma": 1, "gemm": 0, "vec": 0})])
    assert words[0] == 0
    assert words[1] == 2 | (1 << 4) | (3 << 5) | (5 << 29)
    assert words[2] == 4 | (2 << 4) | (3 << 20) | (4 << 36) | (1 << 52) | (1 << 54) | (1 << 55)
    assert words[3] == 5 | (1 << 4)


def test_round_trip_random_fields():
    rng = np.random.default_rng(1)
    instrs = []
    for _ in range(200):
        op = list(ISA)[rng.integers(len(ISA))]
        instrs.append(Instr(op, {f: int(rng.integers(FIELD_MIN.get((op, f), 0), 1 << w))
                                 for f, w in ISA[op][1]}))
    words = assemble(instrs)
    assert all(0 <= w < 1 << 64 for w in words)
    assert disassemble(words) == instrs


@pytest.mark.parametrize("instr,match", [
    (Instr("JUMP"), r"instruction 1: unknown op 'JUMP'; accepted: END, LOAD_A"),
    (Instr("SYNC", {"dma": 1}), r"instruction 1 \(SYNC\): field 'gemm' is missing"),
    (Instr("END", {"x": 1}), r"instruction 1 \(END\): unknown field 'x'; accepted: none"),
    (Instr("GEMM", {"m": 65536, "k": 1, "n": 1, "a_buf": 0, "b_buf": 0, "c_buf": 0, "acc": 0}),
     r"instruction 1 \(GEMM\): field m=65536 does not fit: accepted 1 \.\. 65535 \(16 bits\)"),
    (Instr("GEMM", {"m": 1, "k": 0, "n": 1, "a_buf": 0, "b_buf": 0, "c_buf": 0, "acc": 0}),
     r"instruction 1 \(GEMM\): field k=0 does not fit: accepted 1 \.\. 65535"),
    (Instr("LOAD_A", {"buf": 2, "count": 1, "addr": 0}),
     r"field buf=2 does not fit: accepted 0 \.\. 1 \(1 bits\)"),
    (Instr("STORE", {"buf": 0, "count": -1, "addr": 0}), r"field count=-1 does not fit"),
    (Instr("STORE", {"buf": 0, "count": 1, "addr": 1 << 32}), r"field addr=4294967296"),
    (Instr("SYNC", {"dma": True, "gemm": 0}), r"field dma=True does not fit"),
    (Instr("SYNC", {"dma": 0.5, "gemm": 0}), r"field dma=0.5 does not fit"),
])
def test_assembler_errors_name_index_op_field(instr, match):
    with pytest.raises(AssemblerError, match=match):
        assemble([Instr("END"), instr])
    assert issubclass(AssemblerError, ValueError)


@pytest.mark.parametrize("word,match", [
    (0xF, r"word 1 \(0x000000000000000f\): unknown opcode 15; accepted: 0 \(END\)"),
    (5 | (1 << 40), r"word 1 \(0x0000010000000005, SYNC\): reserved bits 7\.\.63 are not zero"),
    (4 | (1 << 56), r"word 1 \(0x0100000000000004, GEMM\): reserved bits 56\.\.63"),
    (4 | (1 << 4) | (1 << 36), r"word 1 \(0x0000001000000014, GEMM\): field k=0: accepted "
                               r"from 1"),
    (1 << 64, r"word 1: 18446744073709551616 is not a 64-bit unsigned word"),
    (-1, r"word 1: -1 is not a 64-bit"),
])
def test_disassembler_rejects_garbage(word, match):
    with pytest.raises(AssemblerError, match=match):
        disassemble([0, word])


# ---- external memory format ----------------------------------------------------------------------
def test_beat_width_and_latency_from_archspec():
    # 16 GB/s at 500 MHz = 32 B/cycle; 100 ns at 500 MHz = 50 cycles
    assert beat_bytes(_arch(bw=16.0)) == 32 and memory_latency_cycles(_arch()) == 50
    assert beat_bytes(_arch(bw=20.0)) == 32            # 40 B/cycle rounds down
    assert beat_bytes(_arch(bw=0.1)) == 1              # 0.2 B/cycle: at least one byte
    assert memory_latency_cycles(_arch(lat=0.0)) == 1
    assert memory_latency_cycles(_arch(lat=3.0)) == 2  # 1.5 cycles rounds up
    assert beats_per_word(_arch(bw=1.0)) == {"a": 2, "b": 2, "c": 8}   # W = 2 bytes


def test_words_to_beats_is_little_endian_bytes():
    words = [0x0807060504030201]          # 8-byte word, bytes 01 02 .. 08 from the LSB
    assert words_to_beats(words, 8, 2) == [0x0201, 0x0403, 0x0605, 0x0807]
    assert words_to_beats([0x030201], 3, 2) == [0x0201, 0x03]      # padded last beat
    assert beats_to_words([0x0201, 0x03], 3, 2) == [0x030201]
    assert words_to_beats([0x030201], 3, 4) == [0x030201]          # W larger than the word


# ---- codegen ------------------------------------------------------------------------------------
def test_codegen_256_cube_on_ws16x16_by_hand():
    arch = load_arch(ROOT_CONFIGS / "ws16x16.yaml")
    isa = codegen_gemms(arch, [(256, 256, 256)])
    seg = isa.segments[0]
    # A half: 128 KiB / 2 / 16 / 2 = 2048 words = 16 (K blocks) x 128 rows; B half: 2048 =
    # 8 N blocks x 16 K blocks x 16; accumulator half 1024 = 8 x 128: four 128 x 128 tiles
    assert [(t.m0, t.tm, t.n0, t.tn) for t in seg.tiles] == [
        (0, 128, 0, 128), (0, 128, 128, 128), (128, 128, 0, 128), (128, 128, 128, 128)]
    ops = [i.op for i in isa.instructions()]
    assert ops == (["LOAD_A", "LOAD_B"] + ["SYNC", "GEMM", "LOAD_A", "LOAD_B"]
                   + 2 * ["SYNC", "GEMM", "STORE", "LOAD_A", "LOAD_B"]
                   + ["SYNC", "GEMM", "STORE", "SYNC", "STORE", "END"])
    # W = 32 B: A/B words (16 B) one beat each, accumulator words (64 B) two
    t0 = seg.tiles[0]
    assert (t0.a_addr, t0.b_addr, t0.c_addr, seg.tiles[1].a_addr) == (0, 2048, 4096, 6144)
    assert isa.ext_words == 4 * (2048 + 2048 + 2 * 1024)


def test_codegen_alternates_halves_and_syncs():
    arch = _arch()
    code, seg, _ = codegen_gemm(arch, 200, 40, 40, "g")   # several tiles on a 4x4
    assert len(seg.tiles) > 2
    gemms = [i for i in code if i.op == "GEMM"]
    assert [g.fields["a_buf"] for g in gemms] == [i % 2 for i in range(len(gemms))]
    stores = [i for i in code if i.op == "STORE"]
    assert [s.fields["buf"] for s in stores] == [i % 2 for i in range(len(stores))]
    # every GEMM is preceded by a SYNC on the DMA; code ends SYNC gemm, STORE, END
    for i, ins in enumerate(code):
        if ins.op == "GEMM":
            assert code[i - 1].op == "SYNC" and code[i - 1].fields["dma"] == 1
    assert [i.op for i in code[-3:]] == ["SYNC", "STORE", "END"]


def test_image_and_c_result_round_trip():
    arch = _arch(bw=1.0)          # W = 2: every word split over beats
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (30, 9), dtype=np.int8)
    b = rng.integers(-128, 128, (9, 11), dtype=np.int8)
    isa = codegen_gemms(arch, [(30, 9, 11)])
    seg = isa.segments[0]
    img = isa.image(arch, seg, a, b)
    t = seg.tiles[0]
    lay = GemmLayout.for_arch(arch, t.tm, 9, t.tn)
    a_words = pack_lanes(lay.a_lanes(a[t.m0:t.m0 + t.tm]), 8)
    assert [img[t.a_addr + i] for i in range(2)] == [a_words[0] & 0xFFFF, a_words[0] >> 16]
    # a fake "hardware" that writes C in the accumulator layout: c_result must undo it
    c = gemm_int8(a, b)
    mem = {}
    for t in seg.tiles:
        lay = GemmLayout.for_arch(arch, t.tm, 9, t.tn)
        pad = np.zeros((lay.acc_words, 4), np.int32)
        if lay.dataflow == "ws":
            full = np.zeros((lay.m, lay.nb * 4), np.int32)
            full[:, :t.tn] = c[t.m0:t.m0 + t.tm, t.n0:t.n0 + t.tn]
            pad = full.reshape(lay.m, lay.nb, 4).transpose(1, 0, 2).reshape(-1, 4)
        words = pack_lanes(pad, 32)
        for j, beat in enumerate(words_to_beats(words, 16, 2)):
            mem[t.c_addr + j] = beat
    got = isa.c_result(arch, seg, lambda addr, n: [mem[addr + i] for i in range(n)])
    assert np.array_equal(got, c)


def test_codegen_splits_k_when_it_does_not_fit():
    arch = _arch(spad=2, acc=2)   # 2 KiB: A/B halves of 128 words, accumulator halves of 64
    code, seg, _ = codegen_gemm(arch, 6, 300, 7, "g")
    # WS: a K chunk of KB blocks needs KB*4 B words per 4 columns: at most 32 blocks = 128 of K;
    # 300 -> 3 chunks, evened to 100; M: 4 rows x 32 blocks fit A, evened to 2 tiles of 3 rows
    assert {(t.k0, t.k, t.last) for t in seg.tiles} == {(0, 100, False), (100, 100, False),
                                                        (200, 100, True)}
    assert [(t.m0, t.tm, t.n0, t.tn) for t in seg.tiles[::3]] == [
        (0, 3, 0, 4), (0, 3, 4, 3), (3, 3, 0, 4), (3, 3, 4, 3)]
    gemms = [i.fields for i in code if i.op == "GEMM"]
    assert [g["acc"] for g in gemms] == [0, 1, 1] * 4
    assert [g["c_buf"] for g in gemms] == [0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 1]
    assert [g["a_buf"] for g in gemms] == [i % 2 for i in range(12)]
    # a K step's blocks hold exactly its K range; the tile's steps share one C block
    assert len({t.c_addr for t in seg.tiles}) == 4
    stores = [i.fields for i in code if i.op == "STORE"]
    assert [s["addr"] for s in stores] == [t.c_addr for t in seg.tiles if t.last]


def test_codegen_errors():
    arch = _arch(spad=1, acc=1, rows=64, cols=64)   # B half: 4 words < one 64-row K block
    with pytest.raises(DoesNotFit, match=r"task g: GEMM 4x100x4 on tws64x64: not even one 64x64 "
                                         r"output block with a K chunk of 64 fits half of a "
                                         r"buffer \(halves: A 4, B 4, accumulator 2 words"):
        codegen_gemm(arch, 4, 100, 4, "g")
    with pytest.raises(DoesNotFit, match=r"GEMM K=0: must be from 1 to 65535"):
        codegen_gemm(arch, 4, 0, 4, "g")
    prog, _ = gemm_suite(_arch(), [(4, 4, 4, "exact")])
    with pytest.raises(CodegenError, match=r"was compiled for arch .* not tws4x4"):
        codegen(prog, _arch(bw=1.0))
    with pytest.raises(CodegenError, match=r"needs \d+ instruction words; the controller's "
                                         r"instruction memory holds 1024"):
        codegen_gemms(_arch(), [(4, 4, 4)] * 200)


# ---- cycle model rules, by hand -----------------------------------------------------------------
def single_tile_by_hand():
    """One 5x6x7 GEMM tile on a 4x4 array at W = 2 (r = 2, 2, 8 beats per word; L = 10), counted
    by hand: start s = 0; fetch 1; LOAD_A issues in 2 (DMA idle from 3 + la); LOAD_B at 3 + la;
    SYNC at 3 + la + lb + 1; GEMM the next cycle; SYNC (gemm) when the core is idle; STORE next;
    END when the DMA is idle. Returns (arch, isa, counts): the busy cycles ``la``, ``lb``, ``st``,
    ``g`` and the issue cycles ``c_load_b`` .. ``c_end``."""
    arch = _arch(bw=1.0, lat=20.0)
    isa = codegen_gemms(arch, [(5, 6, 7)])
    lay = GemmLayout.for_arch(arch, 5, 6, 7)
    g = int(gemm_cycles_array(5, 6, 7, 4, 4, "ws")[0])
    la, lb, st = 10 + 2 * lay.a_words, 10 + 2 * lay.b_words, 1 + 8 * lay.acc_words
    c_load_b = 2 + la + 1
    c_sync = c_load_b + lb + 1
    c_gemm = c_sync + 1
    c_sync2 = c_gemm + g + 1
    c_store = c_sync2 + 1
    c_end = c_store + st + 1
    return arch, isa, dict(la=la, lb=lb, st=st, g=g, c_load_b=c_load_b, c_sync=c_sync,
                           c_gemm=c_gemm, c_sync2=c_sync2, c_store=c_store, c_end=c_end)


def test_cycle_model_single_tile_by_hand():
    arch, isa, h = single_tile_by_hand()
    t = predict_segment(isa, isa.segments[0], arch)
    assert t.cycles == h["c_end"] and t.instructions == 7
    assert t.gemm_cycles == h["g"] and t.dma_cycles == h["la"] + h["lb"] + h["st"]


def test_cycle_model_fetch_and_host_read_by_hand():
    """The same tile with ``pipeline.fetch`` (three fetch cycles: every issue two cycles later)
    and ``host_read`` (the STORE reads word 0 before its request: ``st`` = 2 + 8 words), each
    alone and together, counted by hand from the counts above."""
    base, isa, h = single_tile_by_hand()
    for stages, shift, st in (({"fetch": True}, 2, h["st"]), ({"host_read": True}, 0, h["st"] + 1),
                              ({"fetch": True, "host_read": True}, 2, h["st"] + 1)):
        d = base.model_dump(mode="json")
        d["tensor_engine"]["pipeline"] = stages
        arch = ArchSpec.from_dict(d)
        t = predict_segment(isa, isa.segments[0], arch)
        assert t.cycles == h["c_store"] + shift + st + 1, stages
        assert t.dma_cycles == h["la"] + h["lb"] + st and t.gemm_cycles == h["g"]


def test_cycle_model_issue_stage_by_hand():
    """The same tile with ``pipeline.issue``: each unit's command passes a register, so each of
    the four unit instructions (LOAD_A, LOAD_B, GEMM, STORE) keeps its unit one cycle longer
    and everything after it issues one cycle later: END at ``c_end + 4``; busy intervals as
    long as before, starting two cycles after their issue."""
    base, isa, h = single_tile_by_hand()
    d = base.model_dump(mode="json")
    d["tensor_engine"]["pipeline"] = {"issue": True}
    arch = ArchSpec.from_dict(d)
    t = predict_segment(isa, isa.segments[0], arch)
    assert t.cycles == h["c_end"] + 4
    assert t.dma_cycles == h["la"] + h["lb"] + h["st"] and t.gemm_cycles == h["g"]
    tl = segment_timeline(isa, isa.segments[0], arch)
    issued = {i.op: i.cycle for i in tl.issues if i.op != "SYNC"}
    assert issued == {"LOAD_A": 2, "LOAD_B": h["c_load_b"] + 1, "GEMM": h["c_gemm"] + 2,
                      "STORE": h["c_store"] + 3, "END": h["c_end"] + 4}
    assert [(b.op, b.start - issued[b.op], b.end - b.start) for b in tl.busy] == [
        ("LOAD_A", 2, h["la"]), ("LOAD_B", 2, h["lb"]), ("GEMM", 2, h["g"]),
        ("STORE", 2, h["st"])]


def test_cycle_model_overlap_is_less_than_serial():
    arch = load_arch(ROOT_CONFIGS / "ws16x16.yaml")
    isa = codegen_gemms(arch, [(256, 256, 256)])
    t = predict_segment(isa, isa.segments[0], arch)
    assert t.cycles < t.gemm_cycles + t.dma_cycles
    assert t.cycles >= t.gemm_cycles          # never faster than the core alone


# ---- controller and constructors in Amaranth's simulator (no Verilator) --------------------------
@pytest.mark.parametrize("fetch_reg", [False, True])
@pytest.mark.parametrize("last", ["bad", "unwritten"])
def test_controller_issues_stalls_and_stops_on_a_bad_opcode(fetch_reg, last):
    """The controller alone, its units faked: every issue cycle and decoded field against the
    timing contract (one fetch cycle — three with ``fetch_reg`` —, one cycle per instruction,
    stall while a unit is busy) and an unknown opcode stopping with ``error`` and ``pc`` at the
    bad word; a word never written reads as zero, the opcode-0 END (with ``fetch_reg`` too, whose
    memory keeps each word's issue classes beside it)."""
    from tilewright.rtl.controller import Controller
    from tilewright.rtl.dma import OP_LOAD_B
    words = assemble([Instr("LOAD_B", {"buf": 1, "count": 5, "addr": 9}),
                      Instr("GEMM", {"m": 2, "k": 3, "n": 4, "a_buf": 1, "b_buf": 0, "c_buf": 1,
                                     "acc": 1}),
                      Instr("SYNC", {"dma": 1, "gemm": 0, "vec": 0})])
    if last == "bad":
        words.append(0xF)
    dut = Controller(fetch_reg=fetch_reg)
    f = 2 * int(fetch_reg)
    log = []

    async def bench(ctx):
        await _write_imem(ctx, dut, words, base=3)
        ctx.set(dut.entry, 3)
        ctx.set(dut.start, 1)
        ctx.set(dut.dma_busy, 1)          # the DMA is busy for the first 5 cycles after start
        await ctx.tick()                  # start sampled: cycle s = 0
        ctx.set(dut.start, 0)
        for cyc in range(1, 20):
            if cyc == 5 + f:
                ctx.set(dut.dma_busy, 0)
            if ctx.get(dut.dma_start):
                log.append((cyc, "dma", ctx.get(dut.dma_op), ctx.get(dut.dma_buf),
                            ctx.get(dut.dma_count), ctx.get(dut.dma_addr)))
            if ctx.get(dut.gemm_start):
                log.append((cyc, "gemm", ctx.get(dut.gemm_m), ctx.get(dut.gemm_k),
                            ctx.get(dut.gemm_n), ctx.get(dut.gemm_a_half),
                            ctx.get(dut.gemm_b_half), ctx.get(dut.gemm_c_half)))
            if cyc >= 3 and not ctx.get(dut.busy) and not log[-1][1] == "stop":
                log.append((cyc, "stop", ctx.get(dut.done), ctx.get(dut.error), ctx.get(dut.pc),
                            ctx.get(dut.retired), ctx.get(dut.cycles)))
            await ctx.tick()

    _simulate(dut, bench)
    # fetch in cycle 1 (1..3 with fetch_reg: f = 2); LOAD_B ready from cycle 5 + f (stalled);
    # GEMM 6 + f; SYNC 7 + f; the bad word seen in 8 + f -> stops: busy low from 9 + f, cycles =
    # 8 + f, 3 retired, pc at the bad word; END (unwritten) issues in 8 + f: 4 retired, pc on it
    bad = last == "bad"
    assert log == [(5 + f, "dma", OP_LOAD_B, 1, 5, 9), (6 + f, "gemm", 2, 3, 4, 1, 0, 1),
                   (9 + f, "stop", 1, int(bad), 6, 3 + int(not bad), 8 + f)]


@pytest.mark.parametrize("fetch_reg", [False, True])
def test_controller_fetch_stage_shifts_every_issue_by_its_cycle(fetch_reg):
    """``fetch_reg`` (ArchSpec ``pipeline.fetch``): the memory reads ahead into the prefetch
    buffer. By hand, with F = 1 fetch cycle (3 with the stage):
    LOAD_B issues in F + 1; the faked DMA is busy F + 2 .. F + 5 (D = 4); GEMM issues in F + 2
    (back to back, its fields decoded from the prefetched word); LOAD_A waits for the DMA and
    issues in F + 6; END in F + 7; ``busy`` high 1 .. F + 7."""
    from tilewright.rtl.controller import Controller
    from tilewright.rtl.dma import OP_LOAD_A, OP_LOAD_B
    words = assemble([Instr("LOAD_B", {"buf": 1, "count": 5, "addr": 9}),
                      Instr("GEMM", {"m": 2, "k": 3, "n": 4, "a_buf": 1, "b_buf": 0, "c_buf": 1,
                                     "acc": 1}),
                      Instr("LOAD_A", {"buf": 0, "count": 7, "addr": 11}),
                      Instr("END", {})])
    dut = Controller(fetch_reg=fetch_reg)
    F = 3 if fetch_reg else 1
    log = []

    async def bench(ctx):
        await _write_imem(ctx, dut, words, base=5)
        ctx.set(dut.entry, 5)
        ctx.set(dut.start, 1)
        await ctx.tick()                  # start sampled: cycle 0
        ctx.set(dut.start, 0)
        for cyc in range(1, 20):
            ctx.set(dut.dma_busy, F + 2 <= cyc <= F + 5)
            if ctx.get(dut.dma_start):
                log.append((cyc, "dma", ctx.get(dut.dma_op), ctx.get(dut.dma_buf),
                            ctx.get(dut.dma_count), ctx.get(dut.dma_addr)))
            if ctx.get(dut.gemm_start):
                log.append((cyc, "gemm", ctx.get(dut.gemm_m), ctx.get(dut.gemm_k),
                            ctx.get(dut.gemm_n), ctx.get(dut.gemm_accumulate)))
            if not ctx.get(dut.busy) and log and log[-1][1] != "stop":
                log.append((cyc, "stop", ctx.get(dut.done), ctx.get(dut.error),
                            ctx.get(dut.retired), ctx.get(dut.cycles)))
            await ctx.tick()

    _simulate(dut, bench)
    assert log == [(F + 1, "dma", OP_LOAD_B, 1, 5, 9), (F + 2, "gemm", 2, 3, 4, 1),
                   (F + 6, "dma", OP_LOAD_A, 0, 7, 11), (F + 8, "stop", 1, 0, 4, F + 7)]


def _contract_issues(program, holds, fetch: int) -> list:
    """The timing contract by hand (module docstring of ``rtl/controller.py``), for LOAD_A /
    GEMM / END programs on units faked busy ``hold`` cycles after their start: instruction ``i``
    issues in the first cycle ``c >= c_{i-1} + 1`` (``c_{-1}`` = the last fetch cycle) in which
    its unit is idle (END: both). Returns [(cycle, unit)] with ("end", cycle) last."""
    until = {"dma": -1, "gemm": -1}
    c, out = fetch, []
    for unit, hold in zip(program, holds):
        c += 1
        units = ("dma", "gemm") if unit == "end" else (unit,)
        while any(c <= until[u] for u in units):
            c += 1
        out.append((c, unit))
        if unit != "end":
            until[unit] = c + hold
    return out


def test_controller_prefetch_buffer_keeps_the_contract_through_stalls_and_restarts():
    """``fetch_reg``'s prefetch buffer (four words read ahead, the memory's read enable from
    registers only): 60 LOAD_A/GEMM instructions with random unit busy times (0..6 cycles:
    back-to-back issue, short stalls and stalls long enough to fill the buffer), then END; three
    more runs of other lengths each start the cycle after the last one's ``busy`` falls, from
    another entry, while a word read past its END is still arriving and the buffer's pointers
    stand elsewhere. Every issue cycle and field equals the contract's
    (:func:`_contract_issues`, three fetch cycles) in every run."""
    import random
    from tilewright.rtl.controller import Controller
    rng = random.Random(7)
    runs = []
    for base, n in ((0, 60), (100, 25), (200, 13), (300, 7)):
        program = [rng.choice(("dma", "gemm")) for _ in range(n)] + ["end"]
        holds = [rng.choice((0, 0, 1, 2, 3, 6)) for _ in program]
        holds[-6:] = [0] * 6       # back-to-back into END: words still in flight at the restart
        code = [Instr("LOAD_A", {"buf": 0, "count": i + 1, "addr": i}) if u == "dma" else
                Instr("GEMM", {"m": i + 1, "k": 1, "n": 1, "a_buf": 0, "b_buf": 0, "c_buf": 0,
                               "acc": 0}) if u == "gemm" else Instr("END", {})
                for i, u in enumerate(program)]
        runs.append((base, program, holds, assemble(code)))
    dut = Controller(fetch_reg=True)
    logs = [[] for _ in runs]

    async def bench(ctx):
        for base, _, _, words in runs:
            await _write_imem(ctx, dut, words, base=base)
        await ctx.tick()
        for r, (base, program, holds, _) in enumerate(runs):
            ctx.set(dut.entry, base)
            ctx.set(dut.start, 1)
            await ctx.tick()              # start sampled: this run's cycle 0
            ctx.set(dut.start, 0)
            until, k = {"dma_busy": -1, "gemm_busy": -1}, 0
            for cyc in range(1, 600):
                for busy, last in until.items():
                    ctx.set(getattr(dut, busy), cyc <= last)
                for port, busy, field in (("dma_start", "dma_busy", "dma_count"),
                                          ("gemm_start", "gemm_busy", "gemm_m")):
                    if ctx.get(getattr(dut, port)):
                        until[busy] = cyc + holds[k]
                        logs[r].append((cyc, port.split("_")[0], ctx.get(getattr(dut, field))))
                        k += 1
                if not ctx.get(dut.busy):
                    logs[r].append((cyc - 1, "end", ctx.get(dut.retired)))
                    break
                await ctx.tick()
            ctx.set(dut.dma_busy, 0)
            ctx.set(dut.gemm_busy, 0)

    _simulate(dut, bench)
    for (base, program, holds, _), log in zip(runs, logs):
        want = [(c, u, i + 1) for i, (c, u) in enumerate(_contract_issues(program, holds, 3))]
        want[-1] = (want[-1][0], "end", len(program))
        assert log == want


def _run_controller(dut, words, units: dict, *, base: int = 0, cycles: int = 30) -> list:
    """Run ``words`` from ``base`` on the controller alone, its units faked: ``units`` maps a
    start port (``"dma_start"``) to (its busy input, the cycles it stays busy after a start it
    sees, the field ports to log). Returns the log: ``(cycle, unit, *fields)`` per start seen,
    then ``(cycle, "stop", done, error, retired, cycles)`` when ``busy`` falls (``start``
    sampled in cycle 0)."""
    log = []

    async def bench(ctx):
        await _write_imem(ctx, dut, words, base=base)
        ctx.set(dut.entry, base)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        until = {busy: -1 for busy, _, _ in units.values()}
        for cyc in range(1, cycles):
            for busy, last in until.items():
                ctx.set(getattr(dut, busy), cyc <= last)
            for port, (busy, hold, fields) in units.items():
                if ctx.get(getattr(dut, port)):
                    until[busy] = cyc + hold
                    log.append((cyc, port.removesuffix("_start"),
                                *(ctx.get(getattr(dut, f)) for f in fields)))
            if not ctx.get(dut.busy) and log and log[-1][1] != "stop":
                log.append((cyc, "stop", ctx.get(dut.done), ctx.get(dut.error),
                            ctx.get(dut.retired), ctx.get(dut.cycles)))
            await ctx.tick()

    _simulate(dut, bench)
    return log


@pytest.mark.parametrize("fetch_reg,issue_reg", [(False, False), (False, True), (True, True)])
def test_controller_issue_stage_delays_each_command_by_one_cycle(fetch_reg, issue_reg):
    """``issue_reg`` (ArchSpec ``pipeline.issue``): each unit's start pulse and fields leave the
    controller one cycle after the issue (lag g = 1), and the command in that register counts
    as its unit busy. By hand, with F fetch cycles and a faked DMA busy in the 4 cycles after
    each start it sees: LOAD_B issues in F + 1 (start seen F + 1 + g); GEMM in F + 2 (seen
    F + 2 + g); LOAD_A waits for the DMA (busy to F + 5 + g) and issues in F + 6 + g (seen
    F + 6 + 2g); END when that transfer ends: F + 11 + 2g; ``busy`` low from F + 12 + 2g."""
    from tilewright.rtl.controller import Controller
    from tilewright.rtl.dma import OP_LOAD_A, OP_LOAD_B
    words = assemble([Instr("LOAD_B", {"buf": 1, "count": 5, "addr": 9}),
                      Instr("GEMM", {"m": 2, "k": 3, "n": 4, "a_buf": 1, "b_buf": 0, "c_buf": 1,
                                     "acc": 1}),
                      Instr("LOAD_A", {"buf": 0, "count": 7, "addr": 11}),
                      Instr("END", {})])
    F, g = 1 + 2 * int(fetch_reg), int(issue_reg)
    log = _run_controller(Controller(fetch_reg=fetch_reg, issue_reg=issue_reg), words, {
        "dma_start": ("dma_busy", 4, ("dma_op", "dma_buf", "dma_count", "dma_addr")),
        "gemm_start": ("gemm_busy", 0, ("gemm_m", "gemm_k", "gemm_n", "gemm_accumulate"))},
        base=5)
    assert log == [(F + 1 + g, "dma", OP_LOAD_B, 1, 5, 9), (F + 2 + g, "gemm", 2, 3, 4, 1),
                   (F + 6 + 2 * g, "dma", OP_LOAD_A, 0, 7, 11),
                   (F + 12 + 2 * g, "stop", 1, 0, 4, F + 11 + 2 * g)]


@pytest.mark.parametrize("issue_reg", [False, True])
def test_issue_stage_on_the_vector_engine(issue_reg):
    """The vector engine's commands through the issue register: LOAD_V issues in 2 (start seen
    2 + g), the faked DMA busy the 3 cycles after it; VECTOR waits for the DMA (and the vector
    engine) and issues in 6 + g (start seen 6 + 2g, its fields registered with it); the faked
    engine is busy the 5 cycles after; SCAN waits for it: issues in 12 + 2g (seen 12 + 3g);
    END waits for its 2 busy cycles: 15 + 3g. F = 1 fetch cycle, g = 1 with the stage."""
    from tilewright.rtl.controller import Controller
    code = [Instr("LOAD_V", {"vaddr": 2, "count": 3, "addr": 7}),
            Instr("VECTOR", {"vop": 3, "count": 4, "a": 2, "b": 0, "b_inc": 0, "dst": 9,
                             "seg": 0}),
            Instr("SCAN", {"count": 1, "ab": 1, "c": 2, "h0": 3, "dst": 4}), Instr("END", {})]
    g = int(issue_reg)
    log = _run_controller(Controller(issue_reg=issue_reg), assemble(code), {
        "dma_start": ("dma_busy", 3, ("dma_vaddr", "dma_count")),
        "vec_start": ("vec_busy", 5, ("vec_op", "vec_count", "vec_dst")),
        "scan_start": ("vec_busy", 2, ("scan_count", "scan_dst"))})
    assert log == [(2 + g, "dma", 2, 3), (6 + 2 * g, "vec", 3, 4, 9), (12 + 3 * g, "scan", 1, 4),
                   (16 + 3 * g, "stop", 1, 0, 4, 15 + 3 * g)]


def test_issue_stage_zero_count_transfer_starts_nothing():
    """With ``issue_reg`` a zero-count LOAD_A issues (F + 1) but its start never leaves the
    register, so the LOAD_B behind it issues the next cycle (F + 2, start seen F + 3); the faked
    DMA is busy F + 4 .. F + 7 and END issues in F + 8. The cycle model says the same of the
    program (zero-count: no busy cycle, with or without the stage)."""
    from tilewright.rtl.controller import Controller
    from tilewright.rtl.dma import OP_LOAD_B
    code = [Instr("LOAD_A", {"buf": 0, "count": 0, "addr": 4}),
            Instr("LOAD_B", {"buf": 1, "count": 5, "addr": 9}), Instr("END", {})]
    F = 3
    log = _run_controller(Controller(fetch_reg=True, issue_reg=True), assemble(code),
                          {"dma_start": ("dma_busy", 4, ("dma_op", "dma_count"))}, cycles=20)
    assert log == [(F + 3, "dma", OP_LOAD_B, 5), (F + 9, "stop", 1, 0, 3, F + 8)]
    from tilewright.compiler.codegen import IsaProgram, Segment
    d = _arch(bw=1.0, lat=20.0).model_dump(mode="json")
    for stage, lag in ((False, 0), (True, 1)):
        d["tensor_engine"]["pipeline"] = {"fetch": True, "issue": stage}
        arch = ArchSpec.from_dict(d)
        isa = IsaProgram(arch.content_hash(), tuple(assemble(code)),
                         (Segment("t", 1, 1, 1, 0, 2, ()),), 1, 0)
        tl = segment_timeline(isa, isa.segments[0], arch)
        (b,) = tl.busy                                   # LOAD_A (count 0) keeps nothing busy
        assert [i.cycle for i in tl.issues] == [F + 1, F + 2, b.end]
        assert (b.op, b.start) == ("LOAD_B", F + 2 + 1 + lag)


def test_constructor_validation():
    from tilewright.rtl.accel_top import AccelTop
    from tilewright.rtl.dma import Dma
    from tilewright.rtl.gemm_core import GemmCore
    with pytest.raises(TypeError, match="GemmCore halves must be a bool, not int"):
        GemmCore(_arch(), halves=1)
    with pytest.raises(TypeError, match="Dma takes arch=ArchSpec, not str"):
        Dma(arch="ws")
    with pytest.raises(TypeError, match="AccelTop takes an ArchSpec, not dict"):
        AccelTop({})
    assert "a_half" in GemmCore(_arch(), halves=True).signature.members
    assert "a_half" not in GemmCore(_arch()).signature.members


def test_layers_do_not_import_each_other():
    """docs/design.md: the compiler never imports dataflow_sim; rtl and dataflow_sim never import each
    other (the cycle model checks the RTL, so it must not be derived from it)."""
    import subprocess
    import sys

    def loaded(module: str) -> list[str]:
        code = (f"import sys, {module}; print(' '.join(m for m in sys.modules "
                f"if m.startswith(('tilewright.', 'amaranth'))))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True)
        return out.stdout.split()

    timing = loaded("tilewright.dataflow_sim.accel_timing")
    assert "tilewright.compiler.codegen" in timing
    assert not [m for m in timing if m.startswith(("tilewright.rtl", "amaranth"))]
    top = loaded("tilewright.rtl.accel_top")
    assert "tilewright.compiler.codegen" in top
    assert not [m for m in top if m.startswith("tilewright.dataflow_sim")]
    assert not [m for m in loaded("tilewright.compiler.codegen")
                if m.startswith(("tilewright.dataflow_sim", "tilewright.rtl"))]


@pytest.mark.parametrize("host_read", [False, True])
def test_dma_gearboxes_under_backpressure(host_read):
    """The DMA alone (W = 2 bytes: A words of 4 bytes arrive as 2 beats, accumulator words of 16
    bytes leave as 8), with the handshakes the bench's memory never exercises: a request held
    while ``mem_req_ready`` is low, read beats with gaps, write beats refused by
    ``mem_wr_ready``. Expected words/beats are the image format of compiler/codegen.py. With
    ``pipeline.host_read`` the fake accumulator answers through two registers that move every
    cycle (the accelerator top ties the core's ``acc_rd_en`` high): the STORE spends one cycle
    reading word 0 before its request (even with ``mem_req_ready`` high), and its beats are the
    same — through the DMA's skid buffer while the write side refuses beats."""
    from tilewright.rtl.dma import OP_LOAD_A, OP_STORE, Dma
    arch = _arch(bw=1.0)
    if host_read:
        d = arch.model_dump(mode="json")
        d["tensor_engine"]["pipeline"] = {"host_read": True}
        arch = ArchSpec.from_dict(d)
    half_a = GemmLayout.depths(arch)[0] // 2
    half_c = GemmLayout.depths(arch)[2] // 2
    dut = Dma(arch=arch)
    rng = np.random.default_rng(5)
    a_words = [int(x) for x in rng.integers(0, 1 << 32, 3)]
    acc = {i: int.from_bytes(rng.bytes(16), "little") for i in range(6)}
    got = {"a": [], "beats": [], "req": []}
    regs = [0, 0]         # host_read: the RAM's read register, then the output register

    async def tick(ctx):
        """One clock, the fake accumulator's read registers with it (word a - half_c + 2 of
        the 6-word fake: half 1 holds words 2 .. 5)."""
        addr = ctx.get(dut.acc_rd_addr)
        word = acc.get(addr - half_c + 2, 0)
        if host_read:
            regs[:] = [word, regs[0]]
        await ctx.tick()
        ctx.set(dut.acc_rd_data, regs[1] if host_read else word)

    async def bench(ctx):
        async def command(op, buf, count, addr):
            ctx.set(dut.op, op)
            ctx.set(dut.buf, buf)
            ctx.set(dut.count, count)
            ctx.set(dut.addr, addr)
            ctx.set(dut.start, 1)
            await tick(ctx)
            ctx.set(dut.start, 0)
            if host_read and op == OP_STORE:  # one cycle reading word 0, no request yet
                ctx.set(dut.mem_req_ready, 1)
                assert (ctx.get(dut.busy), ctx.get(dut.mem_req_valid)) == (1, 0)
                got["prime"] = got.get("prime", 0) + 1
                await tick(ctx)
            for ready in (0, 0, 1):          # request held until accepted
                ctx.set(dut.mem_req_ready, ready)
                assert ctx.get(dut.mem_req_valid) == 1
                got["req"].append((ctx.get(dut.mem_req_write), ctx.get(dut.mem_req_addr),
                                   ctx.get(dut.mem_req_len)))
                await tick(ctx)
            ctx.set(dut.mem_req_ready, 0)

        await command(OP_LOAD_A, 1, 3, 100)
        beats = words_to_beats(a_words, 4, 2)
        while beats or ctx.get(dut.busy):
            valid = bool(beats) and rng.random() < 0.6
            ctx.set(dut.mem_rd_valid, int(valid))
            if valid:
                ctx.set(dut.mem_rd_data, beats[0])
            if valid and ctx.get(dut.mem_rd_ready):
                beats.pop(0)
            if ctx.get(dut.a_wr_en):
                got["a"].append((ctx.get(dut.a_wr_addr), ctx.get(dut.a_wr_data)))
            await ctx.tick()
        ctx.set(dut.mem_rd_valid, 0)

        await command(OP_STORE, 1, 4, 7)    # accumulator half 1 = words 2 .. 5 of the fake
        refusals = 0
        for _ in range(200):
            if not ctx.get(dut.busy):
                break
            ready = int(rng.random() < 0.5)
            refusals += not ready
            ctx.set(dut.mem_wr_ready, ready)
            if ready and ctx.get(dut.mem_wr_valid):
                got["beats"].append(ctx.get(dut.mem_wr_data))
            await tick(ctx)
        got["store_refusals"] = refusals

    _simulate(dut, bench)
    # (write, addr, len) while the request waits: held stable for all three cycles
    assert got["req"] == [(0, 100, 6)] * 3 + [(1, 7, 32)] * 3
    assert got["a"] == [(half_a + i, w) for i, w in enumerate(a_words)]
    assert got["beats"] == words_to_beats([acc[i] for i in range(2, 6)], 16, 2)
    assert got["store_refusals"] >= 4           # the write side really stalled
    assert got.get("prime", 0) == int(host_read)


@pytest.mark.parametrize("pattern", ["always", "gaps"])
def test_dma_store_through_the_skid_buffer_at_full_rate(pattern):
    """``pipeline.host_read`` with one beat per accumulator word (W = 32 bytes, words of 16): the
    free-running read hands word 0 straight from the RAM's output register to the write port
    (skid buffer empty) in the STORE's third cycle, and with ``mem_wr_ready`` always high every
    later word too — ``busy`` for exactly ``2 + count`` cycles (the enabled pipeline's timing).
    With refused beats ("gaps") the words that arrive meanwhile wait in the skid buffer; each
    refusal costs one cycle and nothing else (``2 + count + refusals``)."""
    from tilewright.compiler.codegen import beats_per_word
    from tilewright.rtl.dma import OP_STORE, Dma
    d = _arch(bw=16.0).model_dump(mode="json")
    d["tensor_engine"]["pipeline"] = {"host_read": True}
    d["clock_mhz"] = 500.0
    arch = ArchSpec.from_dict(d)
    assert beats_per_word(arch)["c"] == 1
    half_c = GemmLayout.depths(arch)[2] // 2
    dut = Dma(arch=arch)
    rng = np.random.default_rng(11)
    count = 6
    acc = {half_c + i: int.from_bytes(rng.bytes(16), "little") for i in range(count)}
    regs = [0, 0]
    ready = {"always": [1] * 40, "gaps": [1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 1, 0] + [1] * 28}[pattern]
    got = {"beats": [], "busy": 0, "refused": 0}

    async def bench(ctx):
        ctx.set(dut.mem_req_ready, 1)
        ctx.set(dut.op, OP_STORE)
        ctx.set(dut.buf, 1)
        ctx.set(dut.count, count)
        ctx.set(dut.addr, 3)
        ctx.set(dut.start, 1)
        for cycle in range(40):
            ctx.set(dut.mem_wr_ready, ready[got["busy"] - 2] if got["busy"] >= 2 else 1)
            if cycle and ctx.get(dut.busy):
                got["busy"] += 1
                if ctx.get(dut.mem_wr_valid):
                    if ctx.get(dut.mem_wr_ready):
                        got["beats"].append(ctx.get(dut.mem_wr_data))
                    else:
                        got["refused"] += 1
            word = acc.get(ctx.get(dut.acc_rd_addr), 0)
            regs[:] = [word, regs[0]]          # the free-running two-register read
            await ctx.tick()
            ctx.set(dut.start, 0)
            ctx.set(dut.acc_rd_data, regs[1])

    _simulate(dut, bench)
    assert got["beats"] == [acc[half_c + i] for i in range(count)]
    assert (got["refused"] == 0) if pattern == "always" else (got["refused"] >= 3)
    assert got["busy"] == 2 + count + got["refused"]


# ---- SCALE: per-tensor fp8 scales carried by the ISA ------------------------------------------
def test_scale_encoding_codegen_and_refusals():
    """SCALE: opcode 10, operand bit 4, the fp32 pattern in bits 36..5 (by hand); an fp8 task's
    one-element scales become its segment's first two instructions; refused on an int8 ArchSpec,
    for a per-channel or run-time scale."""
    from tilewright.app.flows.sim_rtl import gemm_program
    assert assemble([Instr("SCALE", {"operand": 1, "value": 0x3E000000})]) == [
        10 | 1 << 4 | 0x3E000000 << 5]
    fp8 = load_arch("ws4x4-fp8")
    prog = gemm_program([(np.zeros((3, 5), np.int8), np.zeros((5, 2), np.int8))], fp8, "p")
    consts = {**prog.constants, "sa": np.array([0.25], np.float32),
              "sb": np.array([3.0], np.float32)}
    task = prog.tasks[0].model_copy(update={"a_scale": "sa", "b_scale": "sb"})
    scaled = prog.model_copy(update={"tasks": [task], "constants": consts})
    ins = codegen(scaled, fp8).instructions()
    assert [str(i) for i in ins[:2]] == ["SCALE operand=0 value=1048576000",    # 0x3E800000
                                         "SCALE operand=1 value=1077936128"]    # 0x40400000
    assert ins[2].op == "LOAD_A" and ins[2:] == codegen(prog, fp8).instructions()
    assert "SCALE" not in {i.op for i in codegen(prog, fp8).instructions()}   # unscaled: none
    with pytest.raises(CodegenError, match=r"task g: tws4x4's int8 engine takes no per-tensor "
                                           r"scales \(SCALE: fp8 formats only\)"):
        codegen_gemm(_arch(), 4, 4, 4, "g", scales=(0x3F800000, 0x3F800000))
    bad = {**consts, "sb": np.ones(3, np.float32)}           # N = 2
    with pytest.raises(CodegenError, match=r"task g0: scale 'sb' must be an fp32 constant of "
                                           r"the program with one element or N=2 \(per column\)"
                                           r" .* not float32 of shape \(3,\)"):
        codegen(scaled.model_copy(update={"constants": bad}), fp8)
    bad = {**consts, "sa": np.ones(2, np.float32)}           # A: per tensor only
    with pytest.raises(CodegenError, match=r"scale 'sa' must be an fp32 constant of the program "
                                           r"with one element \(operand A: SCALE\), not float32"):
        codegen(scaled.model_copy(update={"constants": bad}), fp8)
    runtime = {k: v for k, v in consts.items() if k != "sa"}
    with pytest.raises(CodegenError, match=r"scale 'sa' .* not a run-time tensor"):
        codegen(scaled.model_copy(update={"constants": runtime}), fp8)


def test_scale_col_encoding_and_per_column_codegen_by_hand():
    """SCALE_COL: opcode 12, lane in bits 9..4, the fp32 pattern in bits 41..10 (by hand). A task
    whose B scale has N elements: SCALE A first, no SCALE B; output tiles one array width (4)
    wide; before each STORE the lanes whose scale changes, lane j = column n0 + j."""
    assert assemble([Instr("SCALE_COL", {"lane": 5, "value": 0x3E000000})]) == [
        12 | 5 << 4 | 0x3E000000 << 10]
    with pytest.raises(AssemblerError, match=r"\(SCALE_COL\): field lane=64 does not fit"):
        assemble([Instr("SCALE_COL", {"lane": 64, "value": 0})])
    fp8 = load_arch("ws4x4-fp8")
    sb = tuple(range(100, 109))                       # 9 columns: tiles 4, 4, 1 wide
    code, seg, _ = codegen_gemm(fp8, 3, 5, 9, "g", scales=(7, sb))
    assert [t.n0 for t in seg.tiles] == [0, 4, 8] and [t.tn for t in seg.tiles] == [4, 4, 1]
    assert str(code[0]) == "SCALE operand=0 value=7"
    assert not any(i.op == "SCALE" for i in code[1:])
    lanes, stores = [], []
    for i in code:
        if i.op == "SCALE_COL":
            lanes.append((i.fields["lane"], i.fields["value"]))
        elif i.op == "STORE":
            stores.append(lanes)
            lanes = []
    assert stores == [[(0, 100), (1, 101), (2, 102), (3, 103)],
                      [(0, 104), (1, 105), (2, 106), (3, 107)], [(0, 108)]]
    # equal column scales are set once: a second tile with the same values sets none
    code, _, _ = codegen_gemm(fp8, 3, 5, 8, "g", scales=(7, (1, 2, 3, 4) * 2))
    assert sum(i.op == "SCALE_COL" for i in code) == 4
    with pytest.raises(CodegenError, match=r"task g: 3 per-column B scales for N=9"):
        codegen_gemm(fp8, 3, 5, 9, "g", scales=(7, (1, 2, 3)))


def test_cycle_model_scale_waits_for_the_dma_by_hand():
    """Two SCALEs, a LOAD_A, a SCALE (waits for the DMA), END: issue cycles by the contract."""
    from tilewright.compiler.codegen import IsaProgram, Segment, memory_latency_cycles
    arch = load_arch("ws4x4-fp8")
    lat = memory_latency_cycles(arch)
    code = assemble([Instr("SCALE", {"operand": 0, "value": 1}),
                     Instr("SCALE", {"operand": 1, "value": 2}),
                     Instr("LOAD_A", {"buf": 0, "count": 3, "addr": 0}),
                     Instr("SCALE", {"operand": 0, "value": 3}), Instr("END", {})])
    isa = IsaProgram(arch.content_hash(), tuple(code), (Segment("s", 1, 1, 1, 0, 4, ()),),
                     beat_bytes(arch), 0)
    d = lat + 3 * beats_per_word(arch)["a"]
    # fetch 1; SCALE 2, 3; LOAD_A 4 (DMA idle from 4 + d + 1); SCALE then; END the cycle after
    assert predict_segment(isa, isa.segments[0], arch).cycles == 4 + d + 1 + 1


def test_controller_scale_registers_in_amaranths_simulator():
    """Controller(scales=True): SCALE sets scale_a/scale_b in its issue cycle (stalling while the
    DMA is busy), both read 1.0 again after the next start; Controller() stops at SCALE with
    ``error`` (an unknown opcode there)."""
    from tilewright.rtl.controller import Controller
    words = assemble([Instr("SCALE", {"operand": 1, "value": 0x40400000}),
                      Instr("SCALE", {"operand": 0, "value": 0x7FC00000}), Instr("END", {})])

    def trace(dut):
        log = []

        async def bench(ctx):
            await _write_imem(ctx, dut, words)
            for run in range(2):
                ctx.set(dut.start, 1)
                ctx.set(dut.dma_busy, 1)   # busy for the first 4 cycles after start
                await ctx.tick()
                ctx.set(dut.start, 0)
                for cyc in range(1, 10):
                    if cyc == 4:
                        ctx.set(dut.dma_busy, 0)
                    log.append((run, cyc, ctx.get(dut.busy), ctx.get(dut.error),
                                *((ctx.get(dut.scale_a), ctx.get(dut.scale_b))
                                  if hasattr(dut, "scale_a") else ())))
                    await ctx.tick()

        _simulate(dut, bench)
        return log

    one, three, nan = 0x3F800000, 0x40400000, 0x7FC00000
    log = trace(Controller(scales=True))
    # run 0: fetch 1; SCALE b waits for the DMA, issues in 4 -> visible from 5; SCALE a 5 -> 6;
    # END 6; run 1 starts again at 1.0 and repeats
    for run in range(2):
        got = {c: (a, b) for r, c, _, _, a, b in log if r == run}
        assert [got[c] for c in (1, 4, 5, 6, 7)] == [(one, one), (one, one), (one, three),
                                                     (nan, three), (nan, three)]
        assert [(c, busy) for r, c, busy, _, _, _ in log if r == run and c in (6, 7)] == [
            (6, 1), (7, 0)]
    bare = trace(Controller())
    assert (0, 5, 0, 1) in bare      # stopped with error at the SCALE it cannot decode


# ---- LOAD_VI: indirect vector load (row idx of a table), the index register ---------------------
def test_load_vi_encoding_and_cycle_model_by_hand():
    """LOAD_VI: opcode 11, LOAD_V's fields (vaddr bits 4..15, count 16..31, addr 32..63, by
    hand); the cycle model charges it as LOAD_V (L + count * r) whatever the index."""
    from tilewright.compiler.codegen import IsaProgram, Segment
    assert assemble([Instr("LOAD_VI", {"vaddr": 5, "count": 3, "addr": 0x1234})]) == [
        11 | 5 << 4 | 3 << 16 | 0x1234 << 32]
    arch = load_arch("ws8x8v")
    lat, r = memory_latency_cycles(arch), beats_per_word(arch)["v"]
    code = assemble([Instr("LOAD_VI", {"vaddr": 0, "count": 4, "addr": 0}),
                     Instr("STORE_V", {"vaddr": 0, "count": 4, "addr": 100}), Instr("END", {})])
    isa = IsaProgram(arch.content_hash(), tuple(code), (Segment("s", 1, 1, 1, 0, 2, ()),),
                     beat_bytes(arch), 0)
    # fetch 1; LOAD_VI 2 (DMA idle from 2 + lat + 4r + 1); STORE_V then; END after 1 + 4r + 1
    c_store = 2 + lat + 4 * r + 1
    assert predict_segment(isa, isa.segments[0], arch).cycles == c_store + 1 + 4 * r + 1


def test_load_vi_controller_and_dma_in_amaranths_simulator():
    """Controller(indirect=True) issues LOAD_VI as the DMA op OP_LOAD_VI with LOAD_V's fields and
    the idx sampled at start (a later change of the input is not seen); Controller() stops at
    LOAD_VI with error. Dma(indirect=True) requests external word addr + idx * count * r
    (r = 2 beats per 4-lane vector word at W = 8 bytes), then loads like LOAD_V."""
    from tilewright.rtl.controller import Controller
    from tilewright.rtl.dma import OP_LOAD_V, OP_LOAD_VI, Dma
    words = assemble([Instr("LOAD_VI", {"vaddr": 7, "count": 3, "addr": 40}), Instr("END", {})])

    def run_ctrl(dut):
        log = []

        async def bench(ctx):
            await _write_imem(ctx, dut, words)
            if hasattr(dut, "idx"):
                ctx.set(dut.idx, 41)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            if hasattr(dut, "idx"):
                ctx.set(dut.idx, 9)          # changed after start: the run keeps 41
            for cyc in range(1, 6):
                if ctx.get(dut.dma_start):
                    log.append((cyc, ctx.get(dut.dma_op), ctx.get(dut.dma_vaddr),
                                ctx.get(dut.dma_count), ctx.get(dut.dma_addr),
                                ctx.get(dut.dma_idx)))
                log.append((cyc, ctx.get(dut.busy), ctx.get(dut.error)))
                await ctx.tick()

        _simulate(dut, bench)
        return log

    log = run_ctrl(Controller(indirect=True))
    assert (2, OP_LOAD_VI, 7, 3, 40, 41) in log and (4, 0, 0) in log   # END 3, idle from 4
    assert (3, 0, 1) in run_ctrl(Controller())      # unknown opcode there: error

    arch = ArchSpec.from_dict({**load_arch("ws8x8v").model_dump(mode="json", exclude_none=True),
                               "vector_unit": {"lanes": 4},
                               "offchip": {"bandwidth_gbps": 4.0, "latency_ns": 20.0}})
    assert beat_bytes(arch) == 8 and beats_per_word(arch)["v"] == 2
    dut = Dma(arch=arch, indirect=True)
    got = {}

    async def dma_bench(ctx):
        ctx.set(dut.op, OP_LOAD_VI)
        ctx.set(dut.count, 3)
        ctx.set(dut.addr, 1000)
        ctx.set(dut.idx, 41)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        ctx.set(dut.mem_req_ready, 1)
        got["req"] = (ctx.get(dut.mem_req_valid), ctx.get(dut.mem_req_write),
                      ctx.get(dut.mem_req_addr), ctx.get(dut.mem_req_len))
        await ctx.tick()
        got["busy_reading"] = ctx.get(dut.busy) and ctx.get(dut.mem_rd_ready)

    _simulate(dut, dma_bench)
    assert got["req"] == (1, 0, 1000 + 41 * 3 * 2, 3 * 2) and got["busy_reading"]
    assert OP_LOAD_V != OP_LOAD_VI
    with pytest.raises(ValueError, match="tws4x4: indirect loads .* no vector_unit"):
        Dma(arch=_arch(), indirect=True)


# ---- LOAD_IDX: the index register loaded from external memory -----------------------------------
def _vec_arch(bw: float, lanes: int = 4) -> ArchSpec:
    return ArchSpec.from_dict({**load_arch("ws8x8v").model_dump(mode="json", exclude_none=True),
                               "vector_unit": {"lanes": lanes},
                               "offchip": {"bandwidth_gbps": bw, "latency_ns": 20.0}})


def test_load_idx_encoding_and_cycle_model_by_hand():
    """LOAD_IDX: opcode 13, addr in bits 4..35 (by hand); refused where it does not fit. Cycles
    (ws8x8v: W = 32 bytes, one beat per index word, L = memory latency, r beats per vector
    word): fetch 1; LOAD_IDX issues in 2, DMA busy L + 1 (idle from L + 4); LOAD_VI waits for
    the DMA: issues in L + 4, busy L + 2r (idle from 2L + 2r + 5); LOAD_IDX then, busy L + 1
    (idle from 3L + 2r + 7); LOAD_VI in 3L + 2r + 7, idle from 4L + 4r + 8; END then."""
    from tilewright.compiler.codegen import IsaProgram, Segment, index_beats
    assert assemble([Instr("LOAD_IDX", {"addr": 0xFEDC_BA98})]) == [13 | 0xFEDC_BA98 << 4]
    assert disassemble([13 | 7 << 4]) == [Instr("LOAD_IDX", {"addr": 7})]
    with pytest.raises(AssemblerError, match=r"LOAD_IDX\): field addr=4294967296 does not fit"):
        assemble([Instr("LOAD_IDX", {"addr": 1 << 32})])
    with pytest.raises(AssemblerError, match=r"reserved bits 36\.\.63 are not zero"):
        disassemble([13 | 1 << 36])
    arch = load_arch("ws8x8v")
    lat, r = memory_latency_cycles(arch), beats_per_word(arch)["v"]
    assert (beat_bytes(arch), index_beats(arch), index_beats(_vec_arch(0.5))) == (32, 1, 2)
    code = assemble([Instr("LOAD_IDX", {"addr": 90}),
                     Instr("LOAD_VI", {"vaddr": 0, "count": 2, "addr": 0}),
                     Instr("LOAD_IDX", {"addr": 91}),
                     Instr("LOAD_VI", {"vaddr": 2, "count": 2, "addr": 0}), Instr("END", {})])
    isa = IsaProgram(arch.content_hash(), tuple(code), (Segment("s", 1, 1, 1, 0, 4, ()),),
                     beat_bytes(arch), 0)
    t = predict_segment(isa, isa.segments[0], arch)
    assert (t.cycles, t.dma_cycles) == (4 * lat + 4 * r + 8, 2 * (lat + 1) + 2 * (lat + 2 * r))


@pytest.mark.parametrize("bw", [4.0, 0.5])
def test_load_idx_controller_and_dma_in_amaranths_simulator(bw):
    """Controller(indirect=True) + Dma(indirect=True) wired as in the top, a memory model that
    answers L cycles after each request: LOAD_IDX 500; LOAD_VI of a 3-word row at 1000;
    LOAD_IDX 501 (W = 1: 502); LOAD_VI again. The idx input (7) is replaced by the index word's
    low 16 bits (41, then 5; the high bits of W = 8's words are junk the register must drop),
    so the LOAD_VIs request 1000 + 41 * 3 * r and 1000 + 5 * 3 * r and write rows 41 and 5 into
    the vector buffer; busy cycles == the cycle model. W = 8 bytes (one beat per index word,
    r = 2) and W = 1 byte (two beats per index word, r = 16: the read gearbox)."""
    from amaranth import Module
    from amaranth.lib import wiring

    from tilewright.compiler.codegen import IsaProgram, Segment, index_beats
    from tilewright.rtl.controller import Controller
    from tilewright.rtl.dma import OP_LOAD_IDX, OP_LOAD_VI, Dma
    arch = _vec_arch(bw)
    w, ri, r = beat_bytes(arch), index_beats(arch), beats_per_word(arch)["v"]
    lat = memory_latency_cycles(arch)
    assert (w, ri, r) == ((8, 1, 2) if bw == 4.0 else (1, 2, 16))
    rng = np.random.default_rng(5)
    table = {1000 + i: int.from_bytes(rng.bytes(w), "little") for i in range(50 * 3 * r)}
    junk = 0xABCD_0000_0000 if w == 8 else 0
    ids = words_to_beats([41, 5], 2, w)
    mem = {**table, **{500 + j: b | (junk if j % ri == 0 else 0) for j, b in enumerate(ids)}}
    words = [Instr("LOAD_IDX", {"addr": 500}),
             Instr("LOAD_VI", {"vaddr": 0, "count": 3, "addr": 1000}),
             Instr("LOAD_IDX", {"addr": 500 + ri}),
             Instr("LOAD_VI", {"vaddr": 3, "count": 3, "addr": 1000}), Instr("END", {})]

    class Pair(wiring.Component):
        def __init__(self):
            self.ctrl, self.dma = Controller(indirect=True), Dma(arch=arch, indirect=True)
            super().__init__({})

        def elaborate(self, platform):
            m = Module()
            c, d = self.ctrl, self.dma
            m.submodules.ctrl, m.submodules.dma = c, d
            m.d.comb += [d.start.eq(c.dma_start), d.op.eq(c.dma_op), d.buf.eq(c.dma_buf),
                         d.count.eq(c.dma_count), d.addr.eq(c.dma_addr),
                         d.vaddr.eq(c.dma_vaddr), c.dma_busy.eq(d.busy), d.idx.eq(c.dma_idx),
                         c.idx_wr_en.eq(d.idx_wr_en), c.idx_wr_data.eq(d.idx_wr_data)]
            return m

    top = Pair()
    ctrl, dma = top.ctrl, top.dma
    issued, requests, vwrites, out = [], [], {}, {}

    async def bench(ctx):
        await _write_imem(ctx, ctrl, assemble(words))
        ctx.set(ctrl.idx, 7)
        ctx.set(ctrl.start, 1)
        await ctx.tick()
        ctx.set(ctrl.start, 0)
        ctx.set(dma.mem_req_ready, 1)
        beats = {}                       # cycle -> beat value
        for cyc in range(1, 400):
            ctx.set(dma.mem_rd_valid, cyc in beats)
            ctx.set(dma.mem_rd_data, beats.get(cyc, 0))
            if ctx.get(ctrl.dma_start):
                issued.append((cyc, ctx.get(ctrl.dma_op), ctx.get(ctrl.dma_idx)))
            if ctx.get(dma.mem_req_valid):
                a, n = ctx.get(dma.mem_req_addr), ctx.get(dma.mem_req_len)
                requests.append((a, n))
                beats.update({cyc + lat + j: mem.get(a + j, 0) for j in range(n)})
            if ctx.get(dma.v_wr_en):
                vwrites[ctx.get(dma.v_wr_addr)] = ctx.get(dma.v_wr_data)
            if ctx.get(ctrl.done):
                out["cycles"], out["error"] = ctx.get(ctrl.cycles), ctx.get(ctrl.error)
                break
            await ctx.tick()

    _simulate(top, bench)
    assert out == {"cycles": out["cycles"], "error": 0}
    assert requests == [(500, ri), (1000 + 41 * 3 * r, 3 * r), (500 + ri, ri),
                        (1000 + 5 * 3 * r, 3 * r)]
    # the LOAD_VIs issued with the register holding the word LOAD_IDX read, not the input's 7
    assert [(op, i) for _, op, i in issued] == [(OP_LOAD_IDX, 7), (OP_LOAD_VI, 41),
                                                (OP_LOAD_IDX, 41), (OP_LOAD_VI, 5)]
    row = lambda k: beats_to_words([table[1000 + k * 3 * r + j] for j in range(3 * r)],  # noqa
                                   16, w)
    assert [vwrites[i] for i in range(6)] == row(41) + row(5) and row(41) != row(40)
    isa = IsaProgram(arch.content_hash(), tuple(assemble(words)),
                     (Segment("s", 1, 1, 1, 0, 4, ()),), w, 0)
    assert out["cycles"] == predict_segment(isa, isa.segments[0], arch).cycles
    # the LOAD_VI issued in the first cycle the DMA was idle after its LOAD_IDX: L + ri busy
    assert issued[1][0] == issued[0][0] + lat + ri + 1


def test_controller_scale_col_lanes_in_amaranths_simulator():
    """Controller(scales=True, lanes=3): SCALE_COL sets one lane of scale_b (lane j in bits
    32j..), SCALE B sets all three, one instruction per cycle; a SCALE_COL lane the array does
    not have (3) stops the run with ``error``, the lanes unchanged."""
    from tilewright.rtl.controller import Controller
    one, x, y, z = 0x3F800000, 0x40400000, 0x3E000000, 0x7F800000
    words = assemble([Instr("SCALE_COL", {"lane": 2, "value": x}),
                      Instr("SCALE", {"operand": 1, "value": y}),
                      Instr("SCALE_COL", {"lane": 0, "value": z}),
                      Instr("SCALE_COL", {"lane": 3, "value": x}), Instr("END", {})])
    dut, log = Controller(scales=True, lanes=3), []

    async def bench(ctx):
        await _write_imem(ctx, dut, words)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        for _ in range(8):
            b = ctx.get(dut.scale_b)
            log.append((ctx.get(dut.busy), ctx.get(dut.error),
                        tuple(b >> (32 * j) & 0xFFFFFFFF for j in range(3))))
            await ctx.tick()

    _simulate(dut, bench)
    # sample i: fetch 0; SCALE_COL 1 -> visible from 2; SCALE B 2 -> 3; SCALE_COL 3 -> 4; the
    # bad lane in 4 stops the run: not busy, error from 5
    assert [lanes for _, _, lanes in log[:6]] == [(one, one, one), (one, one, one),
                                                  (one, one, x), (y, y, y), (z, y, y),
                                                  (z, y, y)]
    assert log[4][:2] == (1, 0) and log[5][:2] == (0, 1) and log[7][2] == (z, y, y)
