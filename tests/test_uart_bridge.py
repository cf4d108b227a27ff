"""The host link (issue 19 item 3): the UART bridge top, its protocol and the host driver.

No simulator: the baud divisor against hand arithmetic, the UartLink's refusals, the driver's
request bytes against the protocol table written out by hand, the pyserial extra. Amaranth
simulation: the 8N1 transmitter's line against the bit pattern by hand and a TX -> RX loopback.
Verilator (one build: 4x4 WS, 4-byte words, 32 Ki-word memory, 4 clocks per bit = 125 Mbaud at
the ArchSpec's 500 MHz): the cocotb bench drives only the ``rx`` pin and samples ``tx``
(:mod:`tilewright.cocotb_tests.uart_bench`), running the host driver's own code; GEMM outputs
against numpy's exact product, a compiled mlp-tiny and the int8 GEMMs of a tiny-llama layer
against the functional model, CYCLES read over the line against the accelerator cycle model.
The tiny-llama run moves about 75 KB over the line (3 M clock cycles): also marked ``slow``.
"""

from __future__ import annotations

import numpy as np
import pytest

from tilewright.arch import ArchSpec, default_arch
from tilewright.rtl.uart import MIN_DIVISOR, baud_divisor
from tilewright.rtl.uart_bridge_top import (BRIDGE_READ_LATENCY, Cmd, SIM_CLOCKS_PER_BIT,
                                            UartLink)


def _arch() -> ArchSpec:
    base = default_arch().model_dump(mode="json")
    base.update(name="uart-ws4x4", offchip={"bandwidth_gbps": 2.0, "latency_ns": 6.0},
                memory={"scratchpad_kib": 2, "accumulator_kib": 2})
    base["tensor_engine"].update(rows=4, cols=4, dataflow="ws")
    return ArchSpec.from_dict(base)


#: 500 MHz, 2 GB/s: 4-byte memory words; the bench runs at 4 clocks per bit
ARCH = _arch()
#: 32 Ki words x 4 bytes: the tiny-llama layer's 15 GEMMs need 17,424 words
LINK = UartLink(ARCH, mem_words=32768)


# ---- no simulator ------------------------------------------------------------------------------
def test_baud_divisor_by_hand_and_refusals():
    # iCEBreaker: 12 MHz / 115200 = 104.17 -> 104, 115384.6 baud (+0.16 %)
    assert baud_divisor(12e6, 115_200) == 104
    # ULX3S 25 MHz: 217.01 -> 217; OrangeCrab 48 MHz: 416.67 -> 417
    assert (baud_divisor(25e6, 115_200), baud_divisor(48e6, 115_200)) == (217, 417)
    assert UartLink(ARCH, baud=115_200).divisor == round(500e6 / 115_200) == 4340
    assert UartLink(ARCH).divisor == SIM_CLOCKS_PER_BIT == MIN_DIVISOR
    with pytest.raises(ValueError, match="at least 4"):
        baud_divisor(12e6, 6e6)
    # 12 MHz / 1.7 Mbaud = 7.06 -> 7: 1.71 Mbaud, 0.84 % off (accepted); 12 MHz / 2.6 M = 4.6
    # -> 5: 2.4 Mbaud, 7.7 % off (refused)
    assert baud_divisor(12e6, 1.7e6) == 7
    with pytest.raises(ValueError, match="7.7 % off"):
        baud_divisor(12e6, 2.6e6)
    with pytest.raises(ValueError, match="mem_words must be a power of two"):
        UartLink(ARCH, mem_words=3000)
    with pytest.raises(TypeError, match="UartLink takes an ArchSpec"):
        UartLink("ws4x4")


class _Recorder:
    """A transport that records the bytes written and answers reads with ``replies`` in order
    (each exactly the length asked for)."""

    def __init__(self, replies: list[bytes]):
        self.sent, self.replies = [], list(replies)

    def write(self, data: bytes) -> None:
        self.sent.append(data)

    def read(self, n: int) -> bytes:
        r = self.replies.pop(0)
        assert len(r) == n
        return r


def _capture(op, replies: list[bytes]) -> list:
    """The bytes an operation sends, driven by the host's own :func:`run_sync` on a
    :class:`_Recorder`, followed by the operation's result."""
    from tilewright.cosim.uart_host import run_sync
    link = _Recorder(replies)
    result = run_sync(op, link)
    return [*link.sent, result]


def test_request_bytes_by_hand():
    from tilewright.cosim.uart_host import BridgeOps, LinkError
    ops = BridgeOps(LINK)
    # REG_WRITE CTRL (0x08) = 1: 01 | 08 00 | 01 00 00 00
    assert _capture(ops.write_reg("CTRL", 1), [b"\x00"]) == [
        bytes.fromhex("01 0800 01000000"), None]
    # REG_READ CYCLES (0x18): 02 | 18 00; reply OK + 0x00000123
    assert _capture(ops.read_reg("CYCLES"), [bytes.fromhex("00 23010000")]) == [
        bytes.fromhex("02 1800"), 0x123]
    # instruction words 5, 6 through the window 0x2000 + 8 i, low half first: one REG_BURST
    assert _capture(ops.load_words({5: 0x11223344_55667788, 6: 0x0A}), [b"\x00"]) == [
        bytes.fromhex("03 2820 0400 88776655 44332211 0a000000 00000000"), None]
    # MEM_WRITE 2 words at word 0x1234: 04 | 34 12 00 00 | 02 00 | 4-byte words
    assert _capture(ops.mem_write(0x1234, [1, 0xDEADBEEF]), [b"\x00"]) == [
        bytes.fromhex("04 34120000 0200 01000000 efbeadde"), None]
    # MEM_READ 1 word at 7: status then the word
    assert _capture(ops.mem_read(7, 1), [b"\x00", bytes.fromhex("78563412")]) == [
        bytes.fromhex("05 07000000 0100"), [0x12345678]]
    with pytest.raises(LinkError, match="answered SLVERR"):
        _capture(ops.write_reg("CYCLES", 5), [b"\x02"])
    with pytest.raises(LinkError, match="memory words 32767 .. 32768: the bridge has 32768"):
        _capture(ops.mem_read(32767, 2), [])
    assert [int(c) for c in Cmd] == [1, 2, 3, 4, 5]


def test_serial_transport_needs_the_board_extra(monkeypatch):
    """Without pyserial (hidden here: the [all] install has it) the transport names the extra."""
    import sys
    from tilewright.extras import ExtraMissing
    from tilewright.cosim.uart_host import SerialTransport
    monkeypatch.setitem(sys.modules, "serial", None)
    with pytest.raises(ExtraMissing, match="board"):
        SerialTransport("/dev/null", 115_200)


def test_prepare_refuses_before_any_build():
    from tilewright.cosim.suites import gemm_suite
    from tilewright.cosim.uart_jobs import prepare_uart
    prog, inputs = gemm_suite(ARCH, [(40, 8, 30, "tiles")], seed=1)
    with pytest.raises(ValueError, match="needs .* external words of 4 bytes; the bridge "
                                         "memory has 2"):
        prepare_uart(prog, UartLink(ARCH, mem_words=2), inputs=inputs)
    with pytest.raises(TypeError, match="takes a UartLink .* or an ArchSpec, not str"):
        prepare_uart(prog, "ws4x4", inputs=inputs)
    other = UartLink(default_arch())
    with pytest.raises(ValueError, match="was compiled for arch"):
        prepare_uart(prog, other, inputs=inputs)


def test_bridge_drives_the_register_block_and_dma_without_axi():
    """The bridge puts no AXI4-Lite or AXI4 adapter between its command engine and the
    accelerator (they were 40 % of its logic on the UP5K: docs/fpga.md): its Verilog has no AXI
    channel handshake, and its register block is the AXI top's (same register map)."""
    import re
    from tilewright.rtl.axi_accel_top import AccelRegs, AxiAccelTop, generate_axi_accel_verilog
    from tilewright.rtl.uart_bridge_top import generate_uart_bridge_verilog
    text, top = generate_uart_bridge_verilog(UartLink(ARCH, mem_words=512))
    assert not re.findall(r"\w*(?:awvalid|arvalid|wlast|bvalid|rlast)\b", text)
    assert isinstance(top._regs, AccelRegs) and isinstance(AxiAccelTop(ARCH)._regs, AccelRegs)
    assert "module \\tw_uart_bridge_top.accel.accel.dma" in text
    # the same pattern finds the AXI top's channels (the check can fail)
    assert len(set(re.findall(r"\w*(?:awvalid|arvalid|wlast|bvalid|rlast)\b",
                              generate_axi_accel_verilog(ARCH)[0]))) >= 5


# ---- Amaranth simulation -----------------------------------------------------------------------
def _sim(dut, bench) -> None:
    from amaranth.sim import Simulator
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def test_tx_line_by_hand_and_loopback():
    """Divisor 5: 0xA5 goes out as 0, 1,0,1,0,0,1,0,1 (LSB first), 1 — each bit 5 cycles; then
    three bytes looped from TX into RX come out in order with no frame error."""
    from amaranth import Module
    from tilewright.rtl.uart import UartRx, UartTx
    m = Module()
    m.submodules.tx = tx = UartTx(divisor=5)
    m.submodules.rx = rx = UartRx(divisor=5)
    m.d.comb += rx.rx.eq(tx.tx)
    got, line = [], []

    async def bench(ctx):
        async def tick():
            assert not ctx.get(rx.frame_error)
            if ctx.get(rx.valid):
                got.append(ctx.get(rx.data))
            await ctx.tick()

        ctx.set(tx.data, 0xA5)
        ctx.set(tx.valid, 1)
        await tick()
        ctx.set(tx.valid, 0)
        for _ in range(50):
            line.append(ctx.get(tx.tx))
            await tick()
        for byte in (0x00, 0xFF, 0x3C):
            while not ctx.get(tx.ready):
                await tick()
            ctx.set(tx.data, byte)
            ctx.set(tx.valid, 1)
            await tick()
            ctx.set(tx.valid, 0)
        for _ in range(80):
            await tick()

    _sim(m, bench)
    bits = [0, 1, 0, 1, 0, 0, 1, 0, 1, 1]
    assert line == [b for b in bits for _ in range(5)]
    assert got == [0xA5, 0x00, 0xFF, 0x3C]
    with pytest.raises(ValueError, match="divisor must be an int >= 4"):
        UartTx(divisor=3)


def test_bridge_ram_late_write_data_ranges_and_read_latency():
    """BridgeRam alone (8 words of 2 bytes) on the DMA's memory port: a 2-beat write request at
    word 2 whose data comes 3 cycles after the request lands at words 2, 3; a write past the
    end (words 7, 8) pulses bus_error on each beat and writes nothing; a 3-beat read from word 1
    taken in cycle 0 gives its beats in cycles L, L+1, L+2 (L = BRIDGE_READ_LATENCY = 2: the
    address is read in cycle 1, registered) and holds a beat while mem_rd_ready is low; a read
    past the end gives zeros with bus_error; the host port reads the words back."""
    from tilewright.rtl.uart_bridge_top import BridgeRam
    ram, seen = BridgeRam(depth=8, data_bytes=2, addr_bits=8, len_bits=4), {}

    async def request(ctx, write, addr, n):
        ctx.set(ram.mem_req_write, write)
        ctx.set(ram.mem_req_addr, addr)
        ctx.set(ram.mem_req_len, n)
        ctx.set(ram.mem_req_valid, 1)
        assert ctx.get(ram.mem_req_ready)
        await ctx.tick()
        ctx.set(ram.mem_req_valid, 0)

    async def bench(ctx):
        for addr, data in ((2, (0x1111, 0x2222)), (7, (0x7777, 0x8888))):
            await request(ctx, 1, addr, len(data))
            await ctx.tick().repeat(3)                         # late write data
            for d in data:
                ctx.set(ram.mem_wr_data, d)
                ctx.set(ram.mem_wr_valid, 1)
                assert ctx.get(ram.mem_wr_ready) and not ctx.get(ram.mem_req_ready)
                seen.setdefault("werr", []).append(ctx.get(ram.bus_error))
                await ctx.tick()
            ctx.set(ram.mem_wr_valid, 0)
            assert not ctx.get(ram.mem_wr_ready) and ctx.get(ram.mem_req_ready)
        for addr, n, stall in ((1, 3, None), (6, 3, 3)):
            await request(ctx, 0, addr, n)                     # taken in cycle 0
            beats = []
            for cycle in range(1, 8):
                ctx.set(ram.mem_rd_ready, cycle != stall)
                if ctx.get(ram.mem_rd_valid) and cycle != stall:
                    beats.append((cycle, ctx.get(ram.mem_rd_data), ctx.get(ram.bus_error)))
                await ctx.tick()
            seen.setdefault("r", []).append(beats)
        words = []
        for a in range(8):
            ctx.set(ram.host_req, 1)
            ctx.set(ram.host_addr, a)
            assert ctx.get(ram.host_ack)
            await ctx.tick()
            ctx.set(ram.host_req, 0)
            words.append(ctx.get(ram.host_rdata))
        seen["words"] = words

    _sim(ram, bench)
    assert BRIDGE_READ_LATENCY == 2
    assert seen["werr"] == [0, 0, 1, 1]
    assert seen["r"] == [[(2, 0, 0), (3, 0x1111, 0), (4, 0x2222, 0)],
                         [(2, 0, 1), (4, 0, 1), (5, 0, 1)]]     # cycle 3 stalled
    assert seen["words"] == [0, 0, 0x1111, 0x2222, 0, 0, 0, 0]


# ---- Verilator: one build, three runs over the UART line ---------------------------------------
def _exact(a, b):
    return (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)


def _cycles_equal_model(run):
    rows = run.comparison(LINK)
    assert rows and all(r["equal"] for r in rows), [r for r in rows if not r["equal"]]
    return rows


@pytest.mark.verilator
def test_gemms_over_the_line_bit_exact_and_cycle_exact():
    from tilewright.cosim import sim as cosim
    from tilewright.cosim.suites import gemm_suite
    from tilewright.dataflow_sim.accel_timing import predict_segment
    from tilewright.cosim.program_jobs import axi_timing_arch
    prog, inputs = gemm_suite(ARCH, [(7, 9, 6, "ragged"), (40, 8, 30, "tiles"),
                                     (6, 300, 7, "ksplit")], seed=11)
    the_id = LINK.map.reset_values()["ID"].to_bytes(4, "little").hex()
    # raw requests after the Program and their replies worked out from the protocol table
    probes = [
        ("ff", "11"),                                          # unknown command: BAD_CMD
        ("02 0040", "03 00000000"),                            # register 0x4000 >= 2^14: DECERR
        ("01 1800 05000000", "02"),                            # CYCLES is read-only: SLVERR
        ("02 0000", "00" + the_id),                            # ID
        ("04 ff7f0000 0200 aabbccdd eeff0011", "10"),          # words 32767, 32768: RANGE ...
        ("05 ff7f0000 0100", "00 00000000"),                   # ... and nothing written
        ("05 ff7f0000 0200", "10"),                            # a read past the end: RANGE
        ("04 fe7f0000 0200 11223344 55667788", "00"),          # the last two words ...
        ("05 fe7f0000 0200", "00 11223344 55667788"),          # ... read back
        ("03 0800 0000", "00"),                                # an empty burst
        ("02 0c00", "00 00000000"),                            # STATUS: DONE cleared, no error
    ]
    reqs = [(bytes.fromhex(r), len(bytes.fromhex(a))) for r, a in probes]
    run = cosim.run("uart-accel", prog, LINK, inputs=inputs, probes=reqs)
    assert [p.hex() for p in run.probes] == [a.replace(" ", "") for _, a in probes]
    tarch = axi_timing_arch(ARCH, BRIDGE_READ_LATENCY)
    for task, rec in zip(prog.gemms(), run.records, strict=True):
        assert np.array_equal(run.outputs[task.out], _exact(inputs[task.a], inputs[task.b]))
        pred = predict_segment(run.isa, run.isa.segment(task.name), tarch)
        assert (rec["status"], rec["cycles"], rec["retired"]) == (2, pred.cycles,
                                                                   pred.instructions)
        # every byte costs at least 10 bits of 4 clocks on the line
        assert rec["line_cycles"] >= 40 * rec["line_bytes"]
    _cycles_equal_model(run)


@pytest.mark.verilator
def test_compiled_mlp_over_the_line_like_the_functional_model():
    from tilewright.compiler import compile_model
    from tilewright.cosim import sim as cosim
    from tilewright.dataflow_sim.functional import run_program
    from tilewright.models.configs import build
    module, x = build("mlp-tiny", seed=0)
    program = compile_model(module, x, ARCH)
    x8 = np.clip(np.round(x.numpy() / program.meta["input_scale"]), -128, 127).astype(np.int8)
    func = run_program(program, {"x": x8})
    run = cosim.run("uart-accel", program, LINK, inputs={"x": x8})
    gemms = program.gemms()
    assert len(gemms) >= 2 and len(run.records) == len(gemms)
    for g in gemms:
        assert np.array_equal(run.outputs[g.out], func[g.out]), g.name
    assert np.array_equal(run.outputs[program.outputs[0]], func[program.outputs[0]])
    _cycles_equal_model(run)


@pytest.mark.verilator
@pytest.mark.slow
def test_tiny_llama_layer_gemms_over_the_line():
    """Every int8 GEMM of a tiny-llama layer (seq 4) recorded from the functional model, run as
    one Program over the line; the layer replayed with the bridge's results equals the
    functional model."""
    from tilewright.app.flows.sim_rtl import gemm_program
    from tilewright.cosim import sim as cosim
    from tilewright.dataflow_sim.compile_flow import compile_module
    from tilewright.dataflow_sim.functional import gemm_int8, int8_matmul, run_program
    from tilewright.models.llm_configs import build_llm
    module, example = build_llm("tiny-llama", seed=0, seq=4, batch=1)
    compiled = compile_module(module, example, ARCH, fmt="int8", name="tiny-llama")
    recorded = []

    def record(a, b):
        out = gemm_int8(a, b)
        recorded.append((a.copy(), b.copy()))
        return out

    with int8_matmul(record):
        func = run_program(compiled.program, compiled.inputs)
    assert len(recorded) >= 7
    gprog = gemm_program(recorded, ARCH, "tiny-llama-gemms")
    run = cosim.run("uart-accel", gprog, LINK)
    outs = [run.outputs[f"c{i}"] for i in range(len(recorded))]
    for (a, b), c in zip(recorded, outs, strict=True):
        assert np.array_equal(c, _exact(a, b))
    answers = iter(outs)
    with int8_matmul(lambda a, b: next(answers)):
        again = run_program(compiled.program, compiled.inputs)
    for o in compiled.program.outputs:
        assert np.array_equal(again[o], func[o]), o
    _cycles_equal_model(run)
