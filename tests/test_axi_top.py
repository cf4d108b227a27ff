"""The AXI4-Lite GEMM top (issue 8): register map, handshakes, and GEMMs driven through the bus.

References are independent of the RTL: results against numpy's exact int64 matmul wrapped to int32
and against the functional model; cycles against the closed form of the cycle model; register
values against numbers worked out by hand from the ArchSpec (depths = memory bytes / lane bytes).
The Verilator runs share one build of the demo design (8x8 WS) and drive it with cocotbext-axi's
AxiLiteMaster (one run with random valid/ready pauses on every channel). Amaranth's simulator
covers the bridge's handshake orders and a 3x5 OS top whose windows are not contiguous.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.sim import Simulator

from tilewright.arch import ArchSpec, default_arch
from tilewright.compiler.layout import GemmLayout
from tilewright.dataflow_sim.cycle import gemm_cycles
from tilewright.dataflow_sim.functional import gemm_int8
from tilewright.rtl.axi_gemm_top import (AXI_TOP_NAME, REGISTERS, AxiGemmMap, AxiGemmTop,
                                         generate_axi_verilog, write_axi_top)
from tilewright.rtl.axi_lite import AxiLiteBridge, AxiLiteSignature, AxiResp
from tilewright.rtl.gemm_core import GENERATOR_VERSION

OKAY, SLVERR, DECERR = 0, 2, 3
DOCS = Path(__file__).resolve().parents[1] / "docs" / "axi.md"


def _np_ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.astype(np.int64) @ b.astype(np.int64)).astype(np.uint32).astype(np.int32)


def _small_arch(rows: int, cols: int, dataflow: str, spad_kib: int = 1, acc_kib: int = 1,
                pipeline: dict | None = None):
    base = default_arch()
    return ArchSpec.from_dict({
        **base.model_dump(mode="json"), "name": f"axi-{dataflow}{rows}x{cols}",
        "tensor_engine": {**base.tensor_engine.model_dump(mode="json"), "rows": rows,
                          "cols": cols, "dataflow": dataflow,
                          **({"pipeline": pipeline} if pipeline else {})},
        "memory": {"scratchpad_kib": spad_kib, "accumulator_kib": acc_kib}})


# ---- the map, by hand ------------------------------------------------------------------------
def test_map_of_the_demo_design_by_hand():
    arch = default_arch()                       # 8x8, 64 KiB scratchpad, 64 KiB accumulator
    mp = AxiGemmMap.for_arch(arch)
    # A: 32 KiB / 8 lanes = 4096 words x 2 chunks; acc: 64 KiB / (8 x 4 B) = 2048 words x 8 chunks
    assert (mp.depth_a, mp.depth_b, mp.depth_acc) == (4096, 4096, 2048)
    assert (mp.chunks("a"), mp.chunks("b"), mp.chunks("acc")) == (2, 2, 8)
    assert mp.window_bits == 16 and mp.addr_width == 18       # acc: 2048 * 8 * 4 B = 64 KiB
    assert (mp.base("a"), mp.base("b"), mp.base("acc")) == (0x10000, 0x20000, 0x30000)
    assert mp.addr("a", 3, 1) == 0x10000 + (3 * 2 + 1) * 4
    assert mp.arch_id == int(arch.content_hash()[-8:], 16)
    assert mp.reg("CYCLES") == 0x1C
    with pytest.raises(ValueError, match="register 'FOO': accepted: ID, VERSION"):
        mp.reg("FOO")


def test_map_of_an_odd_design_by_hand():
    mp = AxiGemmMap.for_arch(_small_arch(3, 5, "os"))         # 1 KiB scratchpad, 1 KiB acc
    # A: 512 B / 3 lanes = 170 words x 1 chunk; B: 512 / 5 = 102 words x 2 chunks;
    # acc: 1024 / 20 = 51 words x 5 chunks, stride 8 -> 51 * 8 * 4 = 1632 B -> 4 KiB minimum
    assert (mp.depth_a, mp.depth_b, mp.depth_acc) == (170, 102, 51)
    assert [(mp.chunks(b), mp.stride(b)) for b in ("a", "b", "acc")] == [(1, 1), (2, 2), (5, 8)]
    assert mp.window_bits == 12 and mp.addr("acc", 2, 4) == 0x3000 + (2 * 8 + 4) * 4
    assert mp.reset_values()["CONFIG"] == 3 | (5 << 8) | (1 << 16)


def test_constructor_arguments_are_validated():
    with pytest.raises(TypeError, match="addr_width must be an integer from 3 to 64"):
        AxiLiteBridge(addr_width=2)
    with pytest.raises(TypeError, match="addr_width"):
        AxiLiteSignature(addr_width="16")
    with pytest.raises(ValueError, match="data_width must be 32 or 64"):
        AxiLiteBridge(addr_width=16, data_width=16)
    with pytest.raises(TypeError, match="AxiGemmTop takes an ArchSpec, not str"):
        AxiGemmTop("ws8x8")
    bf16 = ArchSpec.from_dict({**default_arch().model_dump(mode="json"), "tensor_engine": {
        **default_arch().tensor_engine.model_dump(mode="json"), "input_format": "bf16",
        "weight_format": "bf16", "accumulator_format": "fp32"}})
    with pytest.raises(ValueError, match="int8 x int8 -> int32 only"):
        AxiGemmTop(bf16)
    banks = ArchSpec.from_dict({**default_arch().model_dump(mode="json"), "memory": {
        **default_arch().memory.model_dump(mode="json"), "scratchpad_banks": 2}})
    text, _ = generate_axi_verilog(banks)             # banked SRAMs are real banks now
    assert "mem_a_bank1" in text and "mem_a_bank2" not in text


def test_docs_register_table_matches_the_map():
    rows = re.findall(r"^\| `0x([0-9A-F]{2})` \| (\w+) \| (\w+) \| (.+?) \|$", DOCS.read_text(),
                      re.M)
    assert [(int(o, 16), n, a, d) for o, n, a, d in rows] == [
        (r.offset, r.name, r.access, r.doc) for r in REGISTERS]


def test_write_axi_top_manifest_and_lint(tmp_path):
    from tilewright.cosim.verilator import lint_verilog
    # the demo design's Verilog is linted in the Verilator test below (its build has it)
    for arch in (_small_arch(3, 5, "os"), _small_arch(5, 3, "ws")):
        out = tmp_path / arch.name
        man = write_axi_top(arch, out)
        vfile = out / f"{AXI_TOP_NAME}.v"
        text = vfile.read_text()
        assert f"module {AXI_TOP_NAME}(" in text
        names = {p["name"] for p in man["ports"]}
        for sig in ("awaddr", "awvalid", "awready", "wdata", "wstrb", "wvalid", "wready",
                    "bresp", "bvalid", "bready", "araddr", "arvalid", "arready", "rdata",
                    "rresp", "rvalid", "rready"):
            assert f"s_axil_{sig}" in names and re.search(rf"\b(input|output) .*s_axil_{sig};",
                                                          text)
        assert {"clk", "rst", "irq"} <= names
        assert man["address_map"]["addr_width"] == AxiGemmMap.for_arch(arch).addr_width
        assert man["files"][0]["path"] == vfile.name
        clean, log = lint_verilog(vfile, AXI_TOP_NAME)
        assert clean, f"{arch.name}: verilator lint:\n{log[-3000:]}"


# ---- Amaranth simulation: bridge handshakes --------------------------------------------------
class _RegTarget(wiring.Component):
    """Bridge + four 32-bit registers at 0x0..0xC (zero wait states), DECERR elsewhere."""

    def __init__(self):
        super().__init__({"axi": wiring.In(AxiLiteSignature(addr_width=8))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.bridge = br = AxiLiteBridge(addr_width=8)
        wiring.connect(m, wiring.flipped(self.axi), br.axi)
        regs = [Signal(32, name=f"r{i}") for i in range(4)]
        bus = br.reg
        m.d.comb += bus.ack.eq(bus.req)
        with m.If(bus.addr >= 16):
            m.d.comb += bus.resp.eq(AxiResp.DECERR)
        for i, r in enumerate(regs):
            with m.If(bus.req & (bus.addr == 4 * i)):
                m.d.comb += bus.rdata.eq(r)
                with m.If(bus.we):
                    m.d.sync += r.eq(bus.wdata)
        return m


def _run(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def test_bridge_handshakes_in_any_order():
    dut = _RegTarget()
    axi = dut.axi
    log = {}

    async def bench(ctx):
        async def wait_for(sig, limit=20):
            for _ in range(limit):
                if ctx.get(sig):
                    return
                await ctx.tick()
            raise AssertionError(f"{sig.name} never rose")

        # W two cycles before AW: no response until AW arrives
        ctx.set(axi.bready, 1)
        ctx.set(axi.rready, 1)
        ctx.set(axi.wdata, 0xCAFE0001)
        ctx.set(axi.wstrb, 0xF)
        ctx.set(axi.wvalid, 1)
        await ctx.tick()
        ctx.set(axi.wvalid, 0)
        assert ctx.get(axi.wready) == 0              # W held; a second W waits
        for _ in range(2):
            await ctx.tick()
            assert ctx.get(axi.bvalid) == 0
        ctx.set(axi.awaddr, 4)
        ctx.set(axi.awvalid, 1)
        await ctx.tick()                             # AW handshake edge
        ctx.set(axi.awvalid, 0)
        assert ctx.get(axi.bvalid) == 0
        await ctx.tick()                             # one cycle later: the response
        assert ctx.get(axi.bvalid) == 1 and ctx.get(axi.awready) == 1
        log["w_first"] = ctx.get(axi.bresp)
        await ctx.tick()
        # AW first, W later, B back-pressured for 3 cycles
        ctx.set(axi.bready, 0)
        ctx.set(axi.awaddr, 8)
        ctx.set(axi.awvalid, 1)
        await ctx.tick()
        ctx.set(axi.awvalid, 0)
        assert ctx.get(axi.awready) == 0
        await ctx.tick()
        ctx.set(axi.wdata, 0x12345678)
        ctx.set(axi.wvalid, 1)
        await ctx.tick()
        ctx.set(axi.wvalid, 0)
        await wait_for(axi.bvalid)
        for _ in range(3):                           # held while bready is low
            await ctx.tick()
            assert ctx.get(axi.bvalid) == 1
        ctx.set(axi.bready, 1)
        await ctx.tick()
        assert ctx.get(axi.bvalid) == 0
        # a read and a write to an unmapped address together; then R back-pressure
        ctx.set(axi.rready, 0)
        ctx.set(axi.araddr, 4)
        ctx.set(axi.arvalid, 1)
        ctx.set(axi.awaddr, 0x40)
        ctx.set(axi.awvalid, 1)
        ctx.set(axi.wvalid, 1)
        await ctx.tick()
        for s in (axi.arvalid, axi.awvalid, axi.wvalid):
            ctx.set(s, 0)
        seen_b = seen_r = None
        for _ in range(10):
            if ctx.get(axi.bvalid) and seen_b is None:
                seen_b = ctx.get(axi.bresp)
            if ctx.get(axi.rvalid) and seen_r is None:
                seen_r = (ctx.get(axi.rdata), ctx.get(axi.rresp))
            await ctx.tick()
        assert ctx.get(axi.rvalid) == 1              # still held: rready low
        log["concurrent"] = (seen_b, seen_r)
        ctx.set(axi.rready, 1)
        await ctx.tick()
        # read back the second register
        ctx.set(axi.araddr, 8)
        ctx.set(axi.arvalid, 1)
        await ctx.tick()
        ctx.set(axi.arvalid, 0)
        await wait_for(axi.rvalid)
        log["readback"] = (ctx.get(axi.rdata), ctx.get(axi.rresp))

    _run(dut, bench)
    assert log["w_first"] == OKAY
    assert log["concurrent"] == (DECERR, (0xCAFE0001, OKAY))
    assert log["readback"] == (0x12345678, OKAY)


# ---- Amaranth simulation: a whole GEMM through an odd top ------------------------------------
@pytest.mark.parametrize("dataflow,pipeline", [("os", None), ("ws", {"host_read": True,
                                                                       "acc_read": True})],
                         ids=["os", "ws-host_read"])
def test_odd_top_gemm_in_amaranth_sim(dataflow, pipeline):
    """3x5: A words of 1 chunk, B of 2, accumulator of 5 chunks at stride 8 (holes); and WS
    with ``pipeline.host_read``, whose accumulator reads wait two cycles."""
    arch = _small_arch(3, 5, dataflow, pipeline=pipeline)
    top = AxiGemmTop(arch)
    mp, axi = top.map, top.s_axil
    rng = np.random.default_rng(7)
    a = rng.integers(-128, 128, (7, 9), dtype=np.int8)
    b = rng.integers(-128, 128, (9, 6), dtype=np.int8)
    lay = GemmLayout.for_arch(arch, 7, 9, 6)
    got = {}

    async def bench(ctx):
        async def write(addr, value, strb=0xF):
            ctx.set(axi.awaddr, addr)
            ctx.set(axi.wdata, value)
            ctx.set(axi.wstrb, strb)
            ctx.set(axi.awvalid, 1)
            ctx.set(axi.wvalid, 1)
            ctx.set(axi.bready, 1)
            await ctx.tick()
            ctx.set(axi.awvalid, 0)
            ctx.set(axi.wvalid, 0)
            while not ctx.get(axi.bvalid):
                await ctx.tick()
            resp = ctx.get(axi.bresp)
            await ctx.tick()
            return resp

        async def read(addr):
            ctx.set(axi.araddr, addr)
            ctx.set(axi.arvalid, 1)
            ctx.set(axi.rready, 1)
            await ctx.tick()
            ctx.set(axi.arvalid, 0)
            while not ctx.get(axi.rvalid):
                await ctx.tick()
            out = (ctx.get(axi.rdata), ctx.get(axi.rresp))
            await ctx.tick()
            return out

        def words(lanes, chunks):
            pad = np.zeros((lanes.shape[0], 4 * chunks), np.int8)
            pad[:, :lanes.shape[1]] = lanes
            return pad.view("<u4").reshape(-1, chunks)

        resps = []
        for buf, lanes in (("a", lay.a_lanes(a)), ("b", lay.b_lanes(b))):
            for w, chunk_values in enumerate(words(lanes, mp.chunks(buf))):
                for j, v in enumerate(chunk_values):
                    if buf == "b" and w == 0 and j == 0:   # strobes: two halves, two writes
                        resps.append(await write(mp.addr(buf, w, j), int(v) & 0xFFFF, 0x3))
                        resps.append(await write(mp.addr(buf, w, j), int(v) & 0xFFFF0000, 0xC))
                    else:
                        resps.append(await write(mp.addr(buf, w, j), int(v)))
        for name, v in (("M", 7), ("K", 9), ("N", 6), ("CTRL", 1)):
            resps.append(await write(mp.reg(name), v))
        got["busy_write"] = await write(mp.addr("a", 0), 0)           # while BUSY
        while not ctx.get(top.irq):
            await ctx.tick()
        got["status"] = await read(mp.reg("STATUS"))
        got["cycles"] = (await read(mp.reg("CYCLES")))[0]
        lanes = np.zeros((lay.acc_words, 5), np.int64)
        for w in range(lay.acc_words):
            for j in range(5):
                data, resp = await read(mp.addr("acc", w, j))
                resps.append(resp)
                lanes[w, j] = data
        got["c"] = lay.c_from_lanes(lanes.astype(np.uint32).astype(np.int32))
        got["hole"] = await read(mp.addr("acc", 0, 5))             # chunk 5 of 5: a hole
        got["beyond"] = await read(mp.addr("acc", 51, 0))          # word 51 of 51
        got["b_beyond"] = await write(mp.addr("b", 102, 0), 0)
        got["id"] = await read(mp.reg("ID"))
        got["clear"] = await write(mp.reg("STATUS"), 2)
        got["irq_after_clear"] = ctx.get(top.irq)
        got["resps"] = resps

    _run(top, bench)
    assert set(got["resps"]) == {OKAY}
    assert got["busy_write"] == SLVERR
    assert got["status"] == (2, OKAY)                       # DONE, not BUSY
    np.testing.assert_array_equal(got["c"], _np_ref(a, b))
    assert got["cycles"] == gemm_cycles(arch, 7, 9, 6).cycles
    assert got["hole"][1] == DECERR and got["beyond"][1] == DECERR and got["b_beyond"] == DECERR
    assert got["id"] == (int(arch.content_hash()[-8:], 16), OKAY)
    assert got["clear"] == OKAY and got["irq_after_clear"] == 0


# ---- Verilator + cocotbext-axi -----------------------------------------------------------------
def _suite_probes(mp: AxiGemmMap) -> list[list[dict]]:
    r = mp.reg

    def rd(addr):
        return [{"op": "read", "addr": addr}]

    def wr(addr, data):
        return [{"op": "write", "addr": addr, "data": data}]

    return [rd(r("ID")), rd(r("VERSION")), rd(r("CONFIG")), rd(r("A_WORDS")), rd(r("B_WORDS")),
            rd(r("ACC_WORDS")), rd(r("WINDOW")), rd(r("CYCLES")), rd(r("STATUS")),
            wr(r("STATUS"), 2), rd(r("STATUS")),
            rd(0x34), rd(0xFFFC), wr(r("ID"), 5), rd(0x10000), wr(0x30000, 1),
            wr(0x10000 + 4096 * 8, 1),
            wr(r("M"), 0x12345), rd(r("M")),
            [{"op": "write", "addr": r("K"), "data": 64}, {"op": "read", "addr": r("ID")}],
            wr(r("M"), 64), wr(r("N"), 64), wr(r("CTRL"), 1),
            wr(0x10004, 7), rd(r("STATUS")), rd(0x30000)]


@pytest.mark.verilator
def test_gemm_suite_through_the_bus_with_pauses():
    from tilewright.cosim import sim as cosim
    from tilewright.cosim.suites import gemm_suite

    arch = default_arch()
    mp = AxiGemmMap.for_arch(arch)
    program, inputs = gemm_suite(arch, seed=11)
    run = cosim.run("axi-core", program, arch, inputs=inputs, probes=_suite_probes(mp),
                    pause_seed=3)
    from tilewright.cosim.verilator import lint
    clean, log = lint(run.build)
    assert clean, f"verilator lint:\n{log[-3000:]}"
    assert [r["task"] for r in run.records] == [t.name for t in program.gemms()]
    for task, rec in zip(program.gemms(), run.records):
        a, b = inputs[task.a], inputs[task.b]
        np.testing.assert_array_equal(run.outputs[task.out], _np_ref(a, b), err_msg=task.name)
        np.testing.assert_array_equal(run.outputs[task.out], gemm_int8(a, b), err_msg=task.name)
        assert rec["cycles"] == gemm_cycles(arch, task.m, task.k, task.n).cycles, task.name
    p = [[(x["resp"], x["data"]) for x in g] for g in run.probes]
    major, minor, patch = (int(x) for x in GENERATOR_VERSION.split("."))
    last = program.gemms()[-1]
    assert p[0] == [(OKAY, int(arch.content_hash(), 16) & 0xFFFFFFFF)]
    assert p[1] == [(OKAY, (1 << 24) | (major << 16) | (minor << 8) | patch)]
    assert p[2] == [(OKAY, 8 | (8 << 8))]                          # 8x8, ws
    assert p[3:7] == [[(OKAY, 4096)], [(OKAY, 4096)], [(OKAY, 2048)], [(OKAY, 16)]]
    assert p[7] == [(OKAY, gemm_cycles(arch, last.m, last.k, last.n).cycles)]
    assert p[8] == [(OKAY, 2)] and p[9] == [(OKAY, None)] and p[10] == [(OKAY, 0)]
    assert [g[0][0] for g in p[11:17]] == [DECERR, DECERR, SLVERR, SLVERR, SLVERR, DECERR]
    assert p[17] == [(OKAY, None)] and p[18] == [(OKAY, 0x2345)]   # M is 16 bits wide
    assert p[19] == [(OKAY, None), (OKAY, int(arch.content_hash()[-8:], 16))]
    assert [g[0][0] for g in p[20:23]] == [OKAY] * 3               # 64x64x64 started
    assert p[23] == [(SLVERR, None)]                               # buffer write while BUSY
    assert p[24] == [(OKAY, 1)] and p[25][0][0] == OKAY            # BUSY; acc readable


@pytest.mark.verilator
def test_mlp_program_through_the_bus():
    """Every GEMM of the demo's compiled mlp-tiny Program, over AXI; bit-exact with the
    functional model and numpy, cycles equal to the closed form."""
    from tilewright.compiler import compile_model
    from tilewright.cosim import sim as cosim
    from tilewright.dataflow_sim.functional import run_program
    from tilewright.models.configs import build

    arch = default_arch()
    module, x = build("mlp-tiny", seed=0)
    program = compile_model(module, x, arch)
    x_int8 = np.clip(np.round(x.numpy() / program.meta["input_scale"]), -128, 127).astype(np.int8)
    func = run_program(program, {"x": x_int8})
    sim = cosim.run("axi-core", program, arch, inputs={"x": x_int8})
    outputs, cycles = sim.outputs, sim.records
    gemms = program.gemms()
    assert len(gemms) == 3 and len(cycles) == 3
    env = {**program.constants, "x": x_int8, **func}
    for task, rec in zip(gemms, cycles):
        np.testing.assert_array_equal(outputs[task.out], func[task.out], err_msg=task.name)
        np.testing.assert_array_equal(outputs[task.out], _np_ref(env[task.a], env[task.b]),
                                      err_msg=task.name)
        assert rec["cycles"] == gemm_cycles(arch, task.m, task.k, task.n).cycles, task.name
    computed = {k: v for k, v in func.items() if k not in program.constants and k != "x"}
    assert set(computed) == set(outputs)
    for name, value in computed.items():
        np.testing.assert_array_equal(outputs[name], value, err_msg=name)
