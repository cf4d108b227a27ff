"""The programmable accelerator behind AXI (issue 8): AXI4-Lite control, AXI4 memory, cocotbext-axi.

One Verilator build (4x4 WS, 4-byte AXI4 data bus, 2 KiB memories so GEMMs take many tiles) is
driven only through its buses: cocotbext-axi's AxiLiteMaster writes the program through the
instruction-memory window, ENTRY and START, waits for ``irq`` and reads STATUS/CYCLES/RETIRED;
cocotbext-axi's AxiRam is the memory on the AXI4 manager port. References are independent of the
RTL: C against numpy's exact int64 product wrapped to int32, Program outputs against the
functional model, CYCLES against the accelerator cycle model (dataflow_sim/accel_timing.py) with
the arch's latency equal to the one the AXI port has (3 cycles: derivation at
``AXI_RAM_READ_LATENCY``), burst and beat counts against the AXI4 rules (INCR bursts of at most
256 beats, none crossing 4 KiB) applied to the instructions' addresses, register values worked out
by hand.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tilewright.arch import ArchSpec, ArchSpecError, default_arch
from tilewright.compiler.codegen import beats_per_word, disassemble, memory_latency_cycles
from tilewright.cosim.suites import gemm_suite
from tilewright.dataflow_sim.accel_timing import predict_segment
from tilewright.rtl.axi_accel_top import (ADDR_WIDTH, IMEM_BASE, REGISTERS, AxiAccelMap,
                                          AxiAccelTop, AxiMasterBridge, axi_data_bytes)

OKAY, SLVERR, DECERR = 0, 2, 3
DONE, ERROR = 2, 4
DOCS = Path(__file__).resolve().parents[1] / "docs" / "axi.md"


def _arch(bw_gbps: float = 2.0, latency_ns: float = 6.0) -> ArchSpec:
    base = default_arch().model_dump(mode="json")
    base.update(name="axi-accel-ws4x4", offchip={"bandwidth_gbps": bw_gbps,
                                                 "latency_ns": latency_ns},
                memory={"scratchpad_kib": 2, "accumulator_kib": 2})
    base["tensor_engine"].update(rows=4, cols=4, dataflow="ws")
    return ArchSpec.from_dict(base)


#: 2 GB/s at 500 MHz = 4 bytes per cycle; 6 ns = 3 cycles, the AXI port's read latency
ARCH = _arch()
SHAPES = [(4, 4, 4, "exact"), (7, 9, 6, "ragged"), (1, 13, 5, "gemv"), (29, 11, 23, "random"),
          (40, 8, 30, "tiles"), (6, 300, 7, "ksplit"), (2, 515, 5, "extreme")]
BAD_AT = 1000            #: instruction index of the bad word of the raw run
BAD_WORD = 0xF           #: opcode 15: not in the ISA


def _exact(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)


def _bursts(byte_addr: int, beats: int, w: int) -> int:
    """AXI4 INCR bursts for ``beats`` beats of ``w`` bytes from ``byte_addr``: at most 256
    beats, never crossing a 4 KiB boundary."""
    n = 0
    while beats:
        step = min(beats, 256, (4096 - byte_addr % 4096) // w)
        byte_addr, beats, n = byte_addr + step * w, beats - step, n + 1
    return n


# ---- no simulator ------------------------------------------------------------------------------
def test_map_by_hand_and_validation():
    mp = AxiAccelMap.for_arch(ARCH)
    # 1024 instruction words x 8 bytes = 8 KiB window above 8 KiB of registers: 14 address bits
    assert (IMEM_BASE, ADDR_WIDTH) == (0x2000, 14)
    assert mp.imem_addr(3, high=True) == 0x2000 + 3 * 8 + 4
    assert mp.data_bytes == 4 and mp.axi_addr_width == 32 + 2
    assert mp.reset_values() == {"ID": int(ARCH.content_hash()[-8:], 16),
                                 "VERSION": 0x0100_0500,              # top 1, accelerator 0.5.0
                                 "CONFIG": 4 | 4 << 8 | 0 << 16 | 4 << 24, "IMEM_WORDS": 1024}
    with pytest.raises(ValueError, match="register 'FOO': accepted: ID, VERSION"):
        mp.reg("FOO")
    with pytest.raises(ValueError, match="instruction index 1024: accepted 0 .. 1023"):
        mp.imem_addr(1024)
    with pytest.raises(TypeError, match="AxiAccelTop takes an ArchSpec, not str"):
        AxiAccelTop("ws4x4")
    with pytest.raises(ValueError, match="data_bytes must be a power of two from 1 to 128"):
        AxiMasterBridge(data_bytes=3)
    # 256 GB/s at 500 MHz = 512-byte beats: wider than AXI4's 1024-bit bus
    with pytest.raises(ArchSpecError, match="512-byte beats; the AXI4 memory port accepts 1 to "
                                            "128 bytes"):
        axi_data_bytes(_arch(bw_gbps=256.0))


def test_docs_register_table_matches_the_map():
    rows = re.findall(r"^\| `0x([0-9A-F]{4})` \| (\w+) \| (\w+) \| (.+?) \|$", DOCS.read_text(),
                      re.M)
    assert [(int(o, 16), n, a, d) for o, n, a, d in rows] == [
        (r.offset, r.name, r.access, r.doc) for r in REGISTERS]


def _sim(dut, bench) -> None:
    from amaranth.sim import Simulator
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def test_master_bridge_bursts_wlast_and_b_tracking_one_byte_beats():
    """Amaranth simulation, W = 1 byte (an 8-bit AXI4 bus): a 600-beat write from byte 4090 is
    4 bursts — 6 beats to the 4 KiB boundary, then 256, 256 (the AXI4 limit) and 82 — with
    AWREADY and WREADY stalling on fixed patterns; WLAST on each burst's last beat; no new request
    while bursts are left; ``writes_pending`` until the last B."""
    br = AxiMasterBridge(data_bytes=1)
    axi, seen = br.axi, {"aw": [], "wlast_at": [], "ready_low": 0, "pending_after": None}

    async def bench(ctx):
        ctx.set(br.mem_req_valid, 1)
        ctx.set(br.mem_req_write, 1)
        ctx.set(br.mem_req_addr, 4090)
        ctx.set(br.mem_req_len, 600)
        assert ctx.get(br.mem_req_ready) == 1 and ctx.get(axi.awvalid) == 0
        await ctx.tick()
        ctx.set(br.mem_req_valid, 0)
        ctx.set(br.mem_wr_valid, 1)
        beats = bs_due = 0
        for cycle in range(2000):
            if beats == 600:
                ctx.set(br.mem_wr_valid, 0)
            ctx.set(axi.awready, cycle % 3 != 0)
            ctx.set(axi.wready, cycle % 4 != 1)
            ctx.set(axi.bvalid, bs_due > 0)
            assert ctx.get(axi.awsize) == 0 and ctx.get(axi.awburst) == 1
            if ctx.get(axi.awvalid) and ctx.get(axi.awready):
                seen["aw"].append((ctx.get(axi.awaddr), ctx.get(axi.awlen) + 1))
            if ctx.get(br.mem_req_ready) == 0:
                seen["ready_low"] += 1
            if ctx.get(axi.wvalid) and ctx.get(axi.wready):
                if ctx.get(axi.wlast):
                    seen["wlast_at"].append(beats)
                    bs_due += 1
                beats += 1
            if ctx.get(axi.bvalid) and ctx.get(axi.bready):
                bs_due -= 1
            if beats == 600 and bs_due == 0 and len(seen["wlast_at"]) == 4:
                assert ctx.get(br.writes_pending) == 1      # the last B is answered at this edge
                await ctx.tick()
                seen["pending_after"] = ctx.get(br.writes_pending)
                return
            await ctx.tick()

    _sim(br, bench)
    assert seen["aw"] == [(4090, 6), (4096, 256), (4352, 256), (4608, 82)]
    assert seen["wlast_at"] == [5, 261, 517, 599]
    assert seen["ready_low"] > 0 and seen["pending_after"] == 0


def test_master_bridge_read_bursts_wide_beats():
    """Amaranth simulation, W = 128 bytes (1024-bit bus): 5 beats from word 30 (byte 3840) are
    2 bursts (2 beats to the 4 KiB boundary, then 3), ARSIZE 7; R passes straight through."""
    br = AxiMasterBridge(data_bytes=128)
    axi, ars, data = br.axi, [], []

    async def bench(ctx):
        ctx.set(br.mem_req_valid, 1)
        ctx.set(br.mem_req_addr, 30)
        ctx.set(br.mem_req_len, 5)
        await ctx.tick()
        ctx.set(br.mem_req_valid, 0)
        ctx.set(br.mem_rd_ready, 1)
        ctx.set(axi.arready, 1)
        for cycle in range(8):
            assert ctx.get(axi.arsize) == 7
            if ctx.get(axi.arvalid):
                ars.append((ctx.get(axi.araddr), ctx.get(axi.arlen) + 1))
            ctx.set(axi.rvalid, cycle % 2)
            ctx.set(axi.rdata, (cycle + 1) << 1000)
            assert ctx.get(axi.rready) == 1 and ctx.get(br.mem_rd_valid) == cycle % 2
            if cycle % 2:
                data.append(ctx.get(br.mem_rd_data))
            await ctx.tick()

    _sim(br, bench)
    assert ars == [(3840, 2), (4096, 3)]
    assert data == [(c + 1) << 1000 for c in (1, 3, 5, 7)]


# ---- Verilator: one build, two runs -------------------------------------------------------------
@pytest.fixture(scope="module")
def suite_run():
    from tilewright.cosim import sim as cosim
    mp = AxiAccelMap.for_arch(ARCH)
    prog, inputs = gemm_suite(ARCH, SHAPES, seed=11)
    probes = [[{"op": "read", "addr": mp.reg(n), "data": 0}]
              for n in ("ID", "VERSION", "CONFIG", "IMEM_WORDS", "STATUS", "PC")]
    probes += [[{"op": "read", "addr": 0x2C, "data": 0}],            # unmapped register
               [{"op": "read", "addr": 0x06, "data": 0}],            # not a multiple of 4
               [{"op": "write", "addr": 0x1FFC, "data": 1}],          # top of the register region
               [{"op": "write", "addr": mp.reg("CYCLES"), "data": 5}],  # read-only
               [{"op": "read", "addr": IMEM_BASE, "data": 0}],        # write-only window
               [{"op": "write", "addr": mp.reg("ENTRY"), "data": 0x3FF},
                {"op": "read", "addr": mp.reg("IRQ_EN"), "data": 0}],
               [{"op": "read", "addr": mp.reg("ENTRY"), "data": 0}]]
    run = cosim.run("axi-accel", prog, ARCH, inputs=inputs, probes=probes,
                    raw_runs=[{"words": {BAD_AT: BAD_WORD}, "entry": BAD_AT}])
    return prog, inputs, run


def test_gemms_through_the_bus_bit_exact_and_cycle_exact(suite_run):
    from tilewright.cosim.verilator import lint
    from tilewright.cosim.program_jobs import AXI_RAM_READ_LATENCY
    prog, inputs, run = suite_run
    assert memory_latency_cycles(ARCH) == AXI_RAM_READ_LATENCY == 3
    w = AxiAccelMap.for_arch(ARCH).data_bytes
    r = beats_per_word(ARCH)
    assert r == {"a": 1, "b": 1, "c": 4}
    split = 0
    for task, rec in zip(prog.gemms(), run.records, strict=True):
        assert rec["task"] == task.name and rec["status"] == DONE
        assert np.array_equal(run.outputs[task.out], _exact(inputs[task.a], inputs[task.b])), \
            task.name
        seg = run.isa.segment(task.name)
        pred = predict_segment(run.isa, seg, ARCH)
        assert (rec["cycles"], rec["retired"]) == (pred.cycles, pred.instructions), task.name
        # every beat and burst on the AXI4 port, from the instructions and the AXI4 rules
        want = {"ar": 0, "aw": 0, "r": 0, "w": 0}
        for ins in disassemble(list(run.isa.words[seg.entry:seg.end + 1])):
            if ins.op in ("LOAD_A", "LOAD_B", "STORE"):
                beats = ins.fields["count"] * r[{"LOAD_A": "a", "LOAD_B": "b"}.get(ins.op, "c")]
                bursts = _bursts(ins.fields["addr"] * w, beats, w)
                side = ("aw", "w") if ins.op == "STORE" else ("ar", "r")
                want[side[0]] += bursts
                want[side[1]] += beats
                split += bursts > 1
        got = {k: rec[f"axi_{k}"] for k in want}
        assert got == want and rec["axi_b"] == want["aw"], task.name
    assert split >= 1, "no transfer crossed a 4 KiB boundary: the burst split went untested"
    ok, out = lint(run.build)
    assert ok, out[-3000:]


def test_bad_instruction_sets_error_and_registers_answer(suite_run):
    _, _, run = suite_run
    mp = AxiAccelMap.for_arch(ARCH)
    (bad,) = run.raw_runs
    assert bad["status"] == DONE | ERROR and bad["pc"] == BAD_AT and bad["retired"] == 0
    want = mp.reset_values()
    got = [g[0] for g in run.probes]
    assert [(p["resp"], p["data"]) for p in got[:4]] == [
        (OKAY, want[n]) for n in ("ID", "VERSION", "CONFIG", "IMEM_WORDS")]
    # the bench cleared DONE (W1C) after the bad run; ERROR stays until the next START
    assert (got[4]["resp"], got[4]["data"]) == (OKAY, ERROR)
    assert (got[5]["resp"], got[5]["data"]) == (OKAY, BAD_AT)
    # unmapped, misaligned, top of the register region; write to read-only; read of the window
    assert [p["resp"] for p in got[6:11]] == [DECERR, DECERR, DECERR, SLVERR, SLVERR]
    # a write and a read issued together; IRQ_EN reads the 1 the bench wrote before the program
    assert [(p["resp"], p["data"]) for p in run.probes[11]] == [(OKAY, None), (OKAY, 1)]
    assert (got[12]["resp"], got[12]["data"]) == (OKAY, 0x3FF)


def test_back_pressure_keeps_results_exact_and_only_adds_cycles():
    """Random pauses on every AxiRam channel (late AWREADY/WREADY/ARREADY, held-back R and B):
    results stay bit-exact and, as the accelerator's schedule is a max-plus recurrence that only
    grows when a transfer takes longer, CYCLES is at least the always-ready model's."""
    from tilewright.cosim import sim as cosim
    prog, inputs = gemm_suite(ARCH, [(7, 9, 6, "ragged"), (29, 11, 23, "random"),
                                     (6, 300, 7, "ksplit")], seed=5)
    run = cosim.run("axi-accel", prog, ARCH, inputs=inputs, pause_seed=3)
    slower = 0
    for task, rec in zip(prog.gemms(), run.records, strict=True):
        assert rec["status"] == DONE
        assert np.array_equal(run.outputs[task.out], _exact(inputs[task.a], inputs[task.b])), \
            task.name
        model = predict_segment(run.isa, run.isa.segment(task.name), ARCH).cycles
        assert rec["cycles"] >= model, task.name
        slower += rec["cycles"] > model
    assert slower == len(run.records)          # the pauses did reach the DMA


def test_compiled_mlp_through_the_bus_like_the_functional_model():
    """mlp-tiny compiled for the top: its GEMMs consume vector tasks' outputs (requantize on
    the host between segments); every tensor equals the functional model."""
    from tilewright.compiler import compile_model
    from tilewright.cosim import sim as cosim
    from tilewright.dataflow_sim.functional import run_program
    from tilewright.models.configs import build
    module, x = build("mlp-tiny", seed=0)
    program = compile_model(module, x, ARCH)
    x8 = np.clip(np.round(x.numpy() / program.meta["input_scale"]), -128, 127).astype(np.int8)
    func = run_program(program, {"x": x8})
    run = cosim.run("axi-accel", program, ARCH, inputs={"x": x8})
    gemms = program.gemms()
    assert len(gemms) >= 2 and len(run.records) == len(gemms)
    for g in gemms:
        assert np.array_equal(run.outputs[g.out], func[g.out]), g.name
    out = program.outputs[0]
    assert np.array_equal(run.outputs[out], func[out])
    assert all(r["equal"] for r in run.comparison(ARCH))


def test_tiny_mamba_layer_end_to_end_through_the_bus():
    from tilewright.app.flows.sim_rtl import simulate_model
    res = simulate_model("tiny-mamba", ARCH, rtl=True, top="axi-accel")
    names = [c[0] for c in res.checks]
    assert res.ok, [c for c in res.checks if not c[1]]
    assert any("layer output with RTL GEMMs == functional" in n for n in names)
    assert any("CYCLES register == accelerator cycle model" in n for n in names)
    assert len(res.gemm_rows) == 4 and all(r["rtl"] == r["model"] > 0 for r in res.gemm_rows)
    with pytest.raises(ValueError, match="--top axi-accel\\) runs on the cocotb bench only"):
        simulate_model("tiny-mamba", ARCH, rtl=True, top="axi-accel", driver="fast")
