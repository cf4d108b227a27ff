"""Exact cycle model of the programmable accelerator top (:mod:`tilewright.rtl.accel_top`).

Reads only the compiler's ISA (:mod:`tilewright.compiler.codegen`), the GEMM closed forms
(:mod:`tilewright.compiler.core_timing`) and the ArchSpec — never the RTL — and predicts the
cycles ``busy`` is high for one run of a segment (start at its entry, until END), under the timing
contract stated in the docstring of :mod:`tilewright.rtl.accel_top`:

* the controller needs one fetch cycle after ``start`` (three with the ArchSpec's
  ``tensor_engine.pipeline.fetch``); instruction ``i`` issues in cycle
  ``c_i = max(c_{i-1} + 1, ready_i)`` (``c_{-1}`` = the last fetch cycle);
* ``ready``: LOAD/STORE — the DMA is idle; GEMM — the core is idle; LOAD_V/LOAD_VI/STORE_V/
  VECTOR (and SCAN) — the DMA and the vector engine are idle (with the ArchSpec's
  ``vector_unit.double_buffer``: LOAD_V/LOAD_VI/STORE_V — the DMA, and the vector engine only
  when its running instruction shares a bank with theirs; VECTOR/SCAN — the engine, and the DMA
  only when its running transfer shares a bank with theirs: the banks of
  :func:`~tilewright.compiler.codegen.vbuf_bank_mask`, the rule stated in
  :mod:`tilewright.compiler.codegen`); LOAD_IDX — the DMA is idle;
  SCALE/SCALE_COL — the DMA is idle (they keep no unit busy); SYNC — every selected unit is
  idle; END — all are idle. A unit issued in cycle ``c`` for ``D`` busy cycles is idle again
  from cycle ``c + D + 1`` (with the ArchSpec's ``tensor_engine.pipeline.issue`` the command
  reaches the unit one cycle later: busy ``c + 2 .. c + D + 1``, idle from ``c + D + 2``; a
  zero-count transfer starts nothing and is idle from ``c + 1`` as without it);
* busy cycles: GEMM ``D`` = :func:`~tilewright.compiler.core_timing.gemm_cycles_array`
  (systolic) or :func:`~tilewright.compiler.engine_timing.tile_core_busy_cycles` (tile-MAC
  kinds);
  LOAD ``D = L + count * r`` (one request cycle … first beat ``L`` cycles after the request,
  one beat per cycle, ``r`` beats per word); STORE ``D = 1 + count * r`` (request, then posted
  write beats; ``2 + count * r`` with the ArchSpec's ``pipeline.host_read``, whose accumulator
  read the DMA starts one cycle before the request); ``count = 0``: ``D = 0``; LOAD_V/LOAD_VI/STORE_V the same with ``r`` beats per
  vector word (LOAD_VI's address from the index register changes no cycle); LOAD_IDX
  ``D = L + ri`` (one index word of ``ri`` =
  :func:`~tilewright.compiler.codegen.index_beats` beats; the register holds it from the
  cycle the DMA is idle again, so a following LOAD_VI's DMA wait orders them); VECTOR
  ``D = count + VECTOR_OVERHEAD_CYCLES``; SCAN ``D = count + SCAN_OVERHEAD_CYCLES``;
* total = ``c_END - c_start`` (``start`` sampled in cycle ``c_start``; ``busy`` high from the next
  cycle through the one END issues in).

One walk applies these rules: :func:`segment_timeline` gives every instruction's issue cycle and
every unit's busy interval (a unit issued in ``c`` for ``D`` cycles is busy in cycles ``c + 1`` ..
``c + D``: the top's ``*_busy`` debug outputs, which the fast driver records — see
:mod:`tilewright.cosim.accel_commands`); :func:`predict_segment` is its totals;
:func:`first_difference` compares two timelines event by event.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilewright.arch import ArchSpec
from tilewright.compiler.codegen import (SCAN_OVERHEAD_CYCLES, VECTOR_OVERHEAD_CYCLES,
                                         IsaProgram, Segment,
                                         VBUF_DMA_OPS, beats_per_word, disassemble,
                                         index_beats, memory_latency_cycles, vbuf_bank_mask)
from tilewright.compiler.core_timing import gemm_cycles_array
from tilewright.compiler.engine_timing import tile_core_busy_cycles

__all__ = ["SegmentTiming", "predict_segment", "predict_accel_cycles", "serial_cycles",
           "UNITS", "Issue", "Busy", "SegmentTimeline", "segment_timeline", "unit_of",
           "first_difference"]

#: the units of a timeline, in display order: the DMA, the GEMM array, the vector engine running
#: a VECTOR instruction, the vector engine running a SCAN (one engine, ``vec_busy``; the two are
#: told apart by the instruction that started it)
UNITS = ("dma", "array", "vector", "scan")


@dataclass(frozen=True)
class SegmentTiming:
    """Predicted timing of one segment run."""

    task: str
    cycles: int          #: cycles ``busy`` is high (start sampled -> END issued)
    gemm_cycles: int     #: sum of the GEMM instructions' busy cycles
    dma_cycles: int      #: sum of the DMA instructions' busy cycles
    instructions: int    #: instructions retired (END included)
    vector_cycles: int = 0  #: sum of the VECTOR and SCAN instructions' busy cycles


@dataclass(frozen=True)
class Issue:
    """One instruction issued: in cycle ``cycle`` (``start`` sampled in cycle 0), from
    instruction-memory address ``pc``."""

    cycle: int
    pc: int
    op: str


@dataclass(frozen=True)
class Busy:
    """A unit busy in cycles ``start`` .. ``end - 1`` (``end - start`` busy cycles), started by
    the instruction at ``pc`` issued in cycle ``start - 1`` (``start - 2`` with the ArchSpec's
    ``pipeline.issue``)."""

    unit: str            #: one of :data:`UNITS`
    start: int
    end: int
    pc: int
    op: str

    @property
    def cycles(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class SegmentTimeline:
    """One segment run cycle by cycle: every instruction's issue and every unit's busy interval
    (cycles counted from the one that samples ``start``, as ``cycles``)."""

    task: str
    cycles: int                    #: cycles ``busy`` is high (= the END's issue cycle)
    issues: tuple[Issue, ...]
    busy: tuple[Busy, ...]         #: in issue order

    def unit(self, unit: str) -> list[Busy]:
        """The busy intervals of ``unit`` (one of :data:`UNITS`), in time order."""
        return [b for b in self.busy if b.unit == unit]

    def busy_cycles(self, unit: str) -> int:
        """Cycles ``unit`` is busy in the run."""
        return sum(b.cycles for b in self.busy if b.unit == unit)


def unit_of(op: str) -> str | None:
    """The timeline unit an instruction keeps busy (None: SCALE, SYNC, END keep none)."""
    if op in ("LOAD_A", "LOAD_B", "STORE", "LOAD_V", "LOAD_VI", "STORE_V", "LOAD_IDX"):
        return "dma"
    return {"GEMM": "array", "VECTOR": "vector", "SCAN": "scan"}.get(op)


def _gemm_busy(arch: ArchSpec, m: int, k: int, n: int) -> int:
    """The GEMM core's busy cycles: systolic closed form, or the tile-MAC core's."""
    te = arch.tensor_engine
    if not te.systolic:
        return int(tile_core_busy_cycles(te, m, k, n))
    cyc, _ = gemm_cycles_array(m, k, n, te.rows, te.cols, te.dataflow,
                               pipeline_cycles=te.pipeline_cycles)
    return int(cyc)


def segment_timeline(isa: IsaProgram, seg: Segment, arch: ArchSpec) -> SegmentTimeline:
    """Every instruction's issue cycle and every unit's busy interval in one run of ``seg`` (the
    rules of the module docstring; :func:`predict_segment` is this walk's totals)."""
    lat = memory_latency_cycles(arch)
    bpw = beats_per_word(arch)
    beats = {"LOAD_A": bpw["a"], "LOAD_B": bpw["b"], "STORE": bpw["c"],
             "LOAD_V": bpw.get("v", 0), "LOAD_VI": bpw.get("v", 0), "STORE_V": bpw.get("v", 0)}
    idx_load = lat + index_beats(arch)       # LOAD_IDX: one index word
    # STORE: its request cycle, and with pipeline.host_read one more to read word 0 first
    store_first = arch.tensor_engine.pipeline.host_read_latency
    instrs = disassemble(list(isa.words[seg.entry:seg.end + 1]))
    start = 0
    prev = start + arch.tensor_engine.pipeline.fetch_cycles   # the last fetch cycle
    lag = arch.tensor_engine.pipeline.issue_cycles   # issue -> the unit's command (cycles)
    free = {"dma": 0, "gemm": 0, "vec": 0}  # first cycle each engine is idle
    vu = arch.vector_unit
    banked = vu is not None and bool(vu.double_buffer)
    lanes = vu.lanes if vu is not None else 1
    banks = {"dma": 0, "vec": 0}     # vector-buffer banks of each engine's last instruction
    issues: list[Issue] = []
    busy: list[Busy] = []
    for pc, ins in enumerate(instrs, seg.entry):
        f = ins.fields
        mine = vbuf_bank_mask(ins.op, f, lanes) if banked else 0
        if ins.op in beats:
            engine = "dma"
            first = (store_first if ins.op == "STORE" else 1 if ins.op == "STORE_V"
                     else lat)
            dur = (first + f["count"] * beats[ins.op]
                   if f["count"] else 0)      # count 0: the DMA does nothing
            # the vector buffer's transfers also wait for the vector engine (banked: only when
            # the engine's running instruction shares a bank with them)
            ready = free["dma"]
            if ins.op in VBUF_DMA_OPS and (not banked or banks["vec"] & mine):
                ready = max(ready, free["vec"])
        elif ins.op == "LOAD_IDX":
            engine, dur, ready = "dma", idx_load, free["dma"]
        elif ins.op == "GEMM":
            engine, dur, ready = "gemm", _gemm_busy(arch, f["m"], f["k"], f["n"]), free["gemm"]
        elif ins.op in ("VECTOR", "SCAN"):
            engine = "vec"
            dur = f["count"] + (VECTOR_OVERHEAD_CYCLES if ins.op == "VECTOR"
                                else SCAN_OVERHEAD_CYCLES)
            ready = (max(free["vec"], free["dma"]) if not banked or banks["dma"] & mine
                     else free["vec"])
        elif ins.op in ("SCALE", "SCALE_COL"):   # sets a scale register once the DMA is idle
            engine, ready = None, free["dma"]
        elif ins.op == "SYNC":
            engine, ready = None, max([0] + [free[u] for u in ("dma", "gemm", "vec") if f[u]])
        else:   # END
            engine, ready = None, max(free.values())
        c = max(prev + 1, ready)
        issues.append(Issue(c, pc, ins.op))
        if engine:
            # a zero-count transfer starts nothing, with or without the issue register
            free[engine] = c + (lag if dur else 0) + dur + 1
            if engine in banks:          # the running instruction's banks (none: GEMM-path DMA)
                banks[engine] = mine
            if dur:
                busy.append(Busy(unit_of(ins.op), c + lag + 1, c + lag + dur + 1, pc, ins.op))
        prev = c
        if ins.op == "END":
            break
    return SegmentTimeline(seg.task, prev - start, tuple(issues), tuple(busy))


def predict_segment(isa: IsaProgram, seg: Segment, arch: ArchSpec) -> SegmentTiming:
    """Cycles of one run of ``seg`` (see the module docstring for the rules): the totals of
    :func:`segment_timeline`."""
    t = segment_timeline(isa, seg, arch)
    return SegmentTiming(seg.task, t.cycles, t.busy_cycles("array"), t.busy_cycles("dma"),
                         len(t.issues), t.busy_cycles("vector") + t.busy_cycles("scan"))


def first_difference(model: SegmentTimeline, other: SegmentTimeline) -> str | None:
    """None when ``other`` (e.g. the RTL's) has exactly ``model``'s issue cycles and addresses,
    busy intervals per unit and cycles; else one line naming the earliest differing event
    (track, index, both values; a missing event shown as ``none``)."""
    def show(x) -> str:
        if x is None:
            return "none"
        if isinstance(x, Issue):
            return f"{x.op} at pc {x.pc} issued in cycle {x.cycle}"
        return f"{x.op} (pc {x.pc}) busy cycles {x.start}..{x.end - 1}"

    diffs = []
    tracks = [("issue", list(model.issues), list(other.issues), lambda i: (i.cycle, i.pc))]
    tracks += [(u, model.unit(u), other.unit(u), lambda b: (b.start, b.end)) for u in UNITS]
    for name, a, b, key in tracks:
        for j in range(max(len(a), len(b))):
            x = a[j] if j < len(a) else None
            y = b[j] if j < len(b) else None
            if x is None or y is None or key(x) != key(y):
                when = min(e.cycle if isinstance(e, Issue) else e.start
                           for e in (x, y) if e is not None)
                diffs.append((when, f"{model.task}: {name} #{j}: model {show(x)}, other "
                                    f"{show(y)}"))
                break
    if diffs:
        return min(diffs)[1]
    if model.cycles != other.cycles:
        return f"{model.task}: cycles: model {model.cycles}, other {other.cycles}"
    return None


def predict_accel_cycles(isa: IsaProgram, arch: ArchSpec) -> int:
    """Total cycles of running every segment of ``isa`` once, one after the other (the sum of
    each segment's busy cycles; host time between segments not counted)."""
    return sum(predict_segment(isa, s, arch).cycles for s in isa.segments)


def serial_cycles(t: SegmentTiming) -> int:
    """Cycles the same segment would take with no overlap of DMA and GEMM (a reference for how
    much the double buffer saves): one cycle per instruction plus every unit's busy cycles."""
    return t.gemm_cycles + t.dma_cycles + t.vector_cycles + 2 * t.instructions
