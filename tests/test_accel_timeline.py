"""The accelerator's instruction-level timeline: the cycle model's (dataflow_sim.accel_timing)
against a count by hand, the RTL's (recorded by the C++ fast driver) against the model's, and the
Perfetto/Chrome trace ``generate --rtl --trace`` writes.

References: the hand counts of tests/test_accel_isa.py and tests/test_vector_accel.py worked out
event by event (closed forms of the DMA, the GEMM core and the vector engine); the RTL's own
``retired`` count and the cycle-model totals that tests/test_accel_fast.py already checks; the
Chrome trace event format's fields (``ph``, ``pid``, ``tid``, ``name``, ``ts``, ``dur``).
The RTL runs use accelerator builds the suite already makes: ws8x8v's fast driver
(tests/test_generate.py, tests/test_vector_accel.py) and the cocotb bench of
tests/test_vector_accel.py's "wide8" accelerator (its RTL test).
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.test_accel_isa import _arch, single_tile_by_hand
from tests.test_vector_accel import ARCHS
from tilewright.arch import load_arch
from tilewright.compiler.codegen import codegen_gemms, disassemble
from tilewright.compiler.vector_codegen import VectorKernel, codegen_vector
from tilewright.dataflow_sim.accel_timing import (UNITS, Busy, Issue, first_difference,
                                                  predict_segment, segment_timeline)
from tilewright.dataflow_sim.timeline import ACCEL_TRACKS, accel_chrome_trace

ARCH = "ws8x8v"


# ---- the cycle model's timeline, by hand --------------------------------------------------------
def test_model_timeline_of_one_gemm_tile_by_hand():
    """The single-tile count of test_accel_isa.py, event by event: LOAD_A in 2 (DMA busy 3 ..
    2 + la), LOAD_B when the DMA is idle, SYNC after it, GEMM next (array busy g cycles), SYNC
    when the core is idle, STORE next (DMA busy 1 + 8 * acc words), END when the DMA is idle."""
    arch, isa, h = single_tile_by_hand()
    la, lb, st, g = h["la"], h["lb"], h["st"], h["g"]
    c_b, c_sync, c_gemm, c_sync2, c_store, c_end = (
        h[k] for k in ("c_load_b", "c_sync", "c_gemm", "c_sync2", "c_store", "c_end"))
    t = segment_timeline(isa, isa.segments[0], arch)
    assert [(i.op, i.cycle, i.pc) for i in t.issues] == [
        ("LOAD_A", 2, 0), ("LOAD_B", c_b, 1), ("SYNC", c_sync, 2), ("GEMM", c_gemm, 3),
        ("SYNC", c_sync2, 4), ("STORE", c_store, 5), ("END", c_end, 6)]
    assert [(b.unit, b.op, b.start, b.end) for b in t.busy] == [
        ("dma", "LOAD_A", 3, 3 + la), ("dma", "LOAD_B", c_b + 1, c_b + 1 + lb),
        ("array", "GEMM", c_gemm + 1, c_gemm + 1 + g), ("dma", "STORE", c_store + 1, c_end)]
    assert t.cycles == c_end
    # predict_segment is the same walk's totals
    p = predict_segment(isa, isa.segments[0], arch)
    assert (p.cycles, p.gemm_cycles, p.dma_cycles, p.instructions) == (c_end, g, la + lb + st, 7)


def test_model_timeline_tells_vector_from_scan_by_hand():
    """The hand counts of test_vector_accel.py (4 lanes, r = 4 beats per word, L = 10): exp —
    LOAD_V in 2 busy 18, VECTOR in 21 busy 7, STORE_V in 29 busy 9, END in 39; scan — LOAD_V in
    2 busy 22, LOAD_V in 25 busy 38, SCAN in 64 busy 7, STORE_V in 72 busy 9, END in 82."""
    arch = ARCHS["narrow4"]
    isa = codegen_vector(arch, [VectorKernel("e", "elementwise", "exp", (8,))])
    t = segment_timeline(isa, isa.segments[0], arch)
    assert [(i.op, i.cycle) for i in t.issues] == [("LOAD_V", 2), ("VECTOR", 21),
                                                   ("STORE_V", 29), ("END", 39)]
    assert [(b.unit, b.start, b.cycles) for b in t.busy] == [("dma", 3, 18), ("vector", 22, 7),
                                                             ("dma", 30, 9)]
    isa = codegen_vector(arch, [VectorKernel("s", "scan", "scan", (1, 3, 1, 2))])
    t = segment_timeline(isa, isa.segments[0], arch)
    assert [(i.op, i.cycle) for i in t.issues] == [("LOAD_V", 2), ("LOAD_V", 25), ("SCAN", 64),
                                                   ("STORE_V", 72), ("END", 82)]
    assert [(b.unit, b.start, b.cycles) for b in t.busy] == [
        ("dma", 3, 22), ("dma", 26, 38), ("scan", 65, 7), ("dma", 73, 9)]
    assert t.unit("vector") == [] and t.cycles == 82


def test_first_difference_names_the_earliest_differing_event():
    arch = _arch(bw=1.0, lat=20.0)
    isa = codegen_gemms(arch, [(5, 6, 7)])
    t = segment_timeline(isa, isa.segments[0], arch)
    assert first_difference(t, t) is None
    gemm = t.unit("array")[0]
    late = dataclasses.replace(gemm, end=gemm.end + 1)
    other = dataclasses.replace(t, busy=tuple(late if b is gemm else b for b in t.busy))
    msg = first_difference(t, other)
    assert msg is not None and "array #0" in msg and f"{gemm.start}..{gemm.end - 1}" in msg
    assert f"{gemm.start}..{gemm.end}" in msg
    # an issue one cycle later is found before any later interval; a missing one shows "none"
    first = t.issues[1]
    moved = dataclasses.replace(t, issues=(t.issues[0], Issue(first.cycle + 1, first.pc,
                                                              first.op), *t.issues[2:]))
    assert "issue #1" in first_difference(t, moved)
    assert "none" in first_difference(t, dataclasses.replace(t, issues=t.issues[:-1]))


# ---- the RTL's timeline (C++ fast driver) against the model's ---------------------------------
def _assert_rtl_equals_model(run, arch, want_units: set[str]) -> list[dict]:
    from tilewright.cosim.program_jobs import timeline_comparison
    rows = timeline_comparison(run, arch)
    assert len(rows) == len(run.records) > 0
    seen = set()
    for row, rec in zip(rows, run.records):
        rtl, model = row["rtl"], row["model"]
        assert row["difference"] is None, row["difference"]
        assert rtl.issues == model.issues and rtl.busy == model.busy
        # not vacuous: one issue per instruction the RTL's own counter retired, every
        # instruction named, the busy cycles per unit the totals of the RTL run's cycle check
        assert len(rtl.issues) == rec["retired"] and rtl.cycles == rec["cycles"]
        assert rtl.issues[-1].op == "END" and rtl.issues[-1].cycle == rec["cycles"]
        assert "?" not in {i.op for i in rtl.issues} | {b.op for b in rtl.busy}
        seen |= {b.unit for b in rtl.busy}
    assert seen == want_units
    return rows


@pytest.mark.verilator
def test_rtl_timeline_equals_model_on_gemms_and_dma():
    """A one-tile GEMM and a two-tile one (the double buffer: DMA overlapping the array) on
    ws8x8v's top."""
    from tilewright.cosim import sim as cosim
    from tilewright.cosim.suites import gemm_suite
    arch = load_arch(ARCH)
    prog, inputs = gemm_suite(arch, [(20, 24, 12, "random"), (128, 128, 128, "random")],
                               seed=7)
    run = cosim.run("accel", prog, arch, driver="fast", inputs=inputs, timeline=True)
    rows = _assert_rtl_equals_model(run, arch, {"dma", "array"})
    big = rows[1]["rtl"]
    # the array computes while the DMA loads the next tile: some DMA interval overlaps a GEMM's
    assert any(d.start < a.end and a.start < d.end for d in big.unit("dma")
               for a in big.unit("array"))
    # mutation: the model one cycle off in one interval, or one RTL event dropped -> caught
    model, rtl = rows[1]["model"], rows[1]["rtl"]
    gemm = model.unit("array")[0]
    shifted = dataclasses.replace(gemm, start=gemm.start + 1, end=gemm.end + 1)
    bad = dataclasses.replace(model, busy=tuple(shifted if b is gemm else b for b in model.busy))
    assert "array #0" in first_difference(bad, rtl)
    assert first_difference(model, dataclasses.replace(rtl, busy=rtl.busy[1:])) is not None


@pytest.mark.verilator
def test_rtl_timeline_equals_model_on_vector_and_scan_kernels():
    from tilewright.cosim import sim as cosim
    from tilewright.cosim.program_jobs import KernelBatch
    from tests.test_vector_accel import _scan_operands, _operand
    arch = load_arch(ARCH)
    kernels = [VectorKernel("sm", "row", "softmax", (3, 9)),
               VectorKernel("ex", "elementwise", "exp", (40,)),
               VectorKernel("sc", "scan", "scan", (2, 5, 3, 4))]
    ops = {"sm": [_operand((3, 9))], "ex": [_operand((40,))],
           "sc": list(_scan_operands((2, 5, 3, 4)))}
    run = cosim.run("accel", KernelBatch(kernels, ops), arch, driver="fast", timeline=True)
    rows = _assert_rtl_equals_model(run, arch, {"dma", "vector", "scan"})
    sc = next(r["rtl"] for r in rows if r["task"] == "sc")
    assert sc.unit("scan") and not sc.unit("vector")


@pytest.mark.verilator
def test_cocotb_bench_records_the_same_timeline():
    """The cocotb bench samples the same events at each falling edge: a GEMM and a scan kernel,
    timelines equal to the model's. On the cocotb build tests/test_vector_accel.py's RTL test
    makes (its "wide8": a 4x4 WS core, 8 vector lanes and the scan unit, the same accelerator
    generator as ws8x8v; the bench's event sampling does not depend on the array's size), so
    the run needs no build of its own."""
    from tilewright.cosim import sim as cosim
    from tilewright.cosim.program_jobs import KernelBatch
    from tilewright.cosim.suites import gemm_suite
    from tests.test_vector_accel import ARCHS, _scan_operands
    arch = ARCHS["wide8"]
    prog, inputs = gemm_suite(arch, [(20, 24, 12, "random")], seed=7)
    run = cosim.run("accel", prog, arch, inputs=inputs, timeline=True)
    _assert_rtl_equals_model(run, arch, {"dma", "array"})
    batch = KernelBatch([VectorKernel("sc", "scan", "scan", (1, 5, 2, 4))],
                        {"sc": list(_scan_operands((1, 5, 2, 4)))})
    run = cosim.run("accel", batch, arch, timeline=True)
    _assert_rtl_equals_model(run, arch, {"dma", "scan"})


# ---- the trace file --------------------------------------------------------------------------
def _check_trace(doc: dict, processes: tuple[str, ...]) -> dict:
    """The Chrome trace event format's fields, the processes and tracks by name, slices on each
    track in time order without overlap, each track holding only its own instructions; returns
    the slices per (process name, track name)."""
    ev = doc["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in ev
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert tuple(names[p] for p in sorted(names)) == processes
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev
              if e["ph"] == "M" and e["name"] == "thread_name"}
    for pid in names:
        assert [tracks[(pid, t)] for t in range(6)] == ["runs", *ACCEL_TRACKS]
    out: dict = {}
    for e in ev:
        assert {"ph", "pid", "tid", "name"} <= set(e) and e["ph"] in ("M", "X")
        if e["ph"] == "X":
            assert isinstance(e["ts"], float) and e["dur"] > 0
            out.setdefault((names[e["pid"]], tracks[(e["pid"], e["tid"])]), []).append(e)
    units = {"dma": {"LOAD_A", "LOAD_B", "STORE", "LOAD_V", "LOAD_VI", "STORE_V", "LOAD_IDX"},
             "array": {"GEMM"}, "vector": {"VECTOR"}, "scan": {"SCAN"}}
    for (_, track), sl in out.items():
        starts = [e["args"]["start_cycle"] for e in sl]
        ends = [e["args"]["start_cycle"] + e["args"]["cycles"] for e in sl]
        assert all(e0 <= s1 for e0, s1 in zip(ends, starts[1:])), track   # no overlap
        if track in units:
            assert {e["name"] for e in sl} <= units[track], track
        if track == "issue":
            assert all(e["args"]["cycles"] == 1 for e in sl)
    return out


def test_trace_has_two_processes_and_the_tracks():
    arch = ARCHS["narrow4"]
    isa = codegen_vector(arch, [VectorKernel("e", "elementwise", "exp", (8,)),
                                VectorKernel("s", "scan", "scan", (1, 3, 1, 2))])
    runs = [(s.task, segment_timeline(isa, s, arch)) for s in isa.segments]
    doc = json.loads(json.dumps(accel_chrome_trace([("RTL", runs), ("cycle model", runs)],
                                                   arch.clock_mhz)))
    out = _check_trace(doc, ("RTL", "cycle model"))
    assert [e["name"] for e in out[("RTL", "runs")]] == ["e", "s"]
    # the second run starts after the first's END cycle; µs at the clock
    second = out[("RTL", "scan")][0]
    assert second["args"]["start_cycle"] == 39 + 1 + 65
    assert second["ts"] == pytest.approx(second["args"]["start_cycle"] / arch.clock_mhz)
    assert [e["name"] for e in out[("cycle model", "issue")]] == [
        "LOAD_V", "VECTOR", "STORE_V", "END", "LOAD_V", "LOAD_V", "SCAN", "STORE_V", "END"]
    assert doc["otherData"]["total_cycles"] == {"RTL": 40 + 83, "cycle model": 40 + 83}
    assert {u for u in UNITS} == set(ACCEL_TRACKS[1:])


# ---- generate --rtl --fast --trace -------------------------------------------------------------
def _cli(*args):
    from tests.test_generate import _cli as run_cli
    return run_cli(*args)


@pytest.mark.verilator
def test_generate_rtl_trace_writes_both_timelines_equal(tmp_path):
    """tiny-llama, 2 prompt tokens + 1 generated, GEMMs and vector kernels on the RTL: exit 0,
    the timeline check passed, the RTL process's slices equal the cycle model's one for one."""
    path = tmp_path / "t.json"
    code, out, err = _cli("generate", "--model", "tiny-llama", "--arch", ARCH,
                          "--prompt-ids", "1,2", "--tokens", "1", "--rtl", "--fast",
                          "--vector", "--json", "--trace", str(path))
    assert code == 0, out + err
    res = json.loads(out)
    from tilewright.app.flows.sim_rtl import TIMELINE_CHECK
    assert {c["check"]: c["ok"] for c in res["checks"]}[TIMELINE_CHECK] is True
    step = res["steps"][0]["rtl"]
    assert step["timeline_runs"] == step["gemms"] + step["vector_kernels"]
    doc = json.loads(path.read_text())
    sl = _check_trace(doc, ("RTL", "cycle model"))
    for track in ("runs", *ACCEL_TRACKS):
        assert [(e["name"], e["args"]) for e in sl.get(("RTL", track), [])] == \
            [(e["name"], e["args"]) for e in sl.get(("cycle model", track), [])], track
    assert len(sl[("RTL", "runs")]) == step["timeline_runs"]
    # the step's RTL busy cycles per unit (--json) are the trace's RTL slices added up
    busy = step["timeline_busy"]
    assert busy["cycles"] == step["rtl_cycles"] + step["vector_rtl_cycles"]
    for unit in ("dma", "array", "vector", "scan"):
        assert busy[unit] == sum(e["args"]["cycles"] for e in sl.get(("RTL", unit), []))
    assert len(sl[("RTL", "array")]) >= step["gemms"] and sl[("RTL", "vector")]
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.verilator
def test_generate_rtl_trace_one_cycle_off_exits_1(tmp_path, monkeypatch):
    """One RTL busy interval one cycle longer (the driver's events as decoded) fails the timeline
    check: exit 1, the first difference named."""
    from tilewright.cosim import accel_commands as ac
    real = ac.timeline_from_events

    def late(events, *args):
        t = real(events, *args)
        b = t.busy[0]
        return dataclasses.replace(t, busy=(Busy(b.unit, b.start, b.end + 1, b.pc, b.op),
                                            *t.busy[1:]))

    monkeypatch.setattr(ac, "timeline_from_events", late)
    code, out, err = _cli("generate", "--model", "tiny-llama", "--arch", ARCH,
                          "--prompt-ids", "1,2", "--tokens", "1", "--rtl", "--fast", "--json",
                          "--trace", str(tmp_path / "t.json"))
    assert code == 1, out + err
    from tilewright.app.flows.sim_rtl import TIMELINE_CHECK
    bad = {c["check"]: c for c in json.loads(out)["checks"] if not c["ok"]}
    assert set(bad) == {TIMELINE_CHECK}, bad
    assert "dma #0" in bad[TIMELINE_CHECK]["detail"]
