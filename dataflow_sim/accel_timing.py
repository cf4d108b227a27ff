"""Exact cycle model of the programmable accelerator top (:mod:`tilewright.rtl.accel_top`).

Reads only the compiler's ISA (:mod:`tilewright.compiler.codegen`), the GEMM closed forms
(:mod:`tilewright.compiler.core_timing`) and the ArchSpec — never the RTL — and predicts the
cycles ``busy`` is high for one run of a segment (start at its entry, until END), under the timing
contract stated in the docstring of :mod:`tilewright.rtl.accel_top`:

* the controller needs one fetch cycle after ``start``; instruction ``i`` issues in cycle
  ``c_i = max(c_{i-1} + 1, ready_i)`` (``c_{-1}`` = the fetch cycle);
* ``ready``: LOAD/STORE — the DMA is idle; GEMM — the core is idle; LOAD_V/LOAD_VI/STORE_V/
  VECTOR (and SCAN) — the DMA and the vector engine are idle; LOAD_IDX — the DMA is idle;
  SCALE/SCALE_COL — the DMA is idle (they keep no unit busy); SYNC — every selected unit is
  idle; END — all are idle. A unit issued in cycle ``c`` for ``D`` busy cycles is idle again
  from cycle ``c + D + 1``;
* busy cycles: GEMM ``D`` = :func:`~tilewright.compiler.core_timing.gemm_cycles_array`
  (systolic) or :func:`~tilewright.compiler.engine_timing.tile_core_busy_cycles` (tile-MAC
  kinds);
  LOAD ``D = L + count * r`` (one request cycle … first beat ``L`` cycles after the request,
  one beat per cycle, ``r`` beats per word); STORE ``D = 1 + count * r`` (request, then posted
  write beats); ``count = 0``: ``D = 0``; LOAD_V/LOAD_VI/STORE_V the same with ``r`` beats per
  vector word (LOAD_VI's address from the index register changes no cycle); LOAD_IDX
  ``D = L + ri`` (one index word of ``ri`` =
  :func:`~tilewright.compiler.codegen.index_beats` beats; the register holds it from the
  cycle the DMA is idle again, so a following LOAD_VI's DMA wait orders them); VECTOR
  ``D = count + VECTOR_OVERHEAD_CYCLES``; SCAN ``D = count + SCAN_OVERHEAD_CYCLES``;
* total = ``c_END - c_start`` (``start`` sampled in cycle ``c_start``; ``busy`` high from the next
  cycle through the one END issues in).
"""

from __future__ import annotations

from dataclasses import dataclass

from tilewright.arch import ArchSpec
from tilewright.compiler.codegen import (SCAN_OVERHEAD_CYCLES, VECTOR_OVERHEAD_CYCLES,
                                         IsaProgram, Segment,
                                         beats_per_word, disassemble, index_beats,
                                         memory_latency_cycles)
from tilewright.compiler.core_timing import gemm_cycles_array
from tilewright.compiler.engine_timing import tile_core_busy_cycles

__all__ = ["SegmentTiming", "predict_segment", "predict_accel_cycles", "serial_cycles"]


@dataclass(frozen=True)
class SegmentTiming:
    """Predicted timing of one segment run."""

    task: str
    cycles: int          #: cycles ``busy`` is high (start sampled -> END issued)
    gemm_cycles: int     #: sum of the GEMM instructions' busy cycles
    dma_cycles: int      #: sum of the DMA instructions' busy cycles
    instructions: int    #: instructions retired (END included)
    vector_cycles: int = 0  #: sum of the VECTOR and SCAN instructions' busy cycles


def _gemm_busy(arch: ArchSpec, m: int, k: int, n: int) -> int:
    """The GEMM core's busy cycles: systolic closed form, or the tile-MAC core's."""
    te = arch.tensor_engine
    if not te.systolic:
        return int(tile_core_busy_cycles(te, m, k, n))
    cyc, _ = gemm_cycles_array(m, k, n, te.rows, te.cols, te.dataflow,
                               pipeline_cycles=te.pipeline_cycles)
    return int(cyc)


def predict_segment(isa: IsaProgram, seg: Segment, arch: ArchSpec) -> SegmentTiming:
    """Cycles of one run of ``seg`` (see the module docstring for the rules)."""
    lat = memory_latency_cycles(arch)
    bpw = beats_per_word(arch)
    beats = {"LOAD_A": bpw["a"], "LOAD_B": bpw["b"], "STORE": bpw["c"],
             "LOAD_V": bpw.get("v", 0), "LOAD_VI": bpw.get("v", 0), "STORE_V": bpw.get("v", 0)}
    idx_load = lat + index_beats(arch)       # LOAD_IDX: one index word
    instrs = disassemble(list(isa.words[seg.entry:seg.end + 1]))
    start = 0
    prev = start + 1              # the fetch cycle
    free = {"dma": 0, "gemm": 0, "vec": 0}  # first cycle each unit is idle
    sums = {"dma": 0, "gemm": 0, "vec": 0}
    for ins in instrs:
        f = ins.fields
        if ins.op in beats:
            unit = "dma"
            dur = ((1 if ins.op.startswith("STORE") else lat) + f["count"] * beats[ins.op]
                   if f["count"] else 0)      # count 0: the DMA does nothing
            # the vector buffer's transfers also wait for the vector engine
            ready = (max(free["dma"], free["vec"]) if ins.op in ("LOAD_V", "LOAD_VI", "STORE_V")
                     else free["dma"])
        elif ins.op == "LOAD_IDX":
            unit, dur, ready = "dma", idx_load, free["dma"]
        elif ins.op == "GEMM":
            unit, dur, ready = "gemm", _gemm_busy(arch, f["m"], f["k"], f["n"]), free["gemm"]
        elif ins.op in ("VECTOR", "SCAN"):
            unit = "vec"
            dur = f["count"] + (VECTOR_OVERHEAD_CYCLES if ins.op == "VECTOR"
                                else SCAN_OVERHEAD_CYCLES)
            ready = max(free["dma"], free["vec"])
        elif ins.op in ("SCALE", "SCALE_COL"):   # sets a scale register once the DMA is idle
            unit, ready = None, free["dma"]
        elif ins.op == "SYNC":
            unit, ready = None, max([0] + [free[u] for u in ("dma", "gemm", "vec") if f[u]])
        else:   # END
            unit, ready = None, max(free.values())
        c = max(prev + 1, ready)
        if unit:
            free[unit] = c + dur + 1
            sums[unit] += dur
        prev = c
        if ins.op == "END":
            break
    return SegmentTiming(seg.task, prev - start, sums["gemm"], sums["dma"], len(instrs),
                         sums["vec"])


def predict_accel_cycles(isa: IsaProgram, arch: ArchSpec) -> int:
    """Total cycles of running every segment of ``isa`` once, one after the other (the sum of
    each segment's busy cycles; host time between segments not counted)."""
    return sum(predict_segment(isa, s, arch).cycles for s in isa.segments)


def serial_cycles(t: SegmentTiming) -> int:
    """Cycles the same segment would take with no overlap of DMA and GEMM (a reference for how
    much the double buffer saves): one cycle per instruction plus every unit's busy cycles."""
    return t.gemm_cycles + t.dma_cycles + t.vector_cycles + 2 * t.instructions
