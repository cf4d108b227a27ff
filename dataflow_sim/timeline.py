"""The cycle model's timeline of a run: busy cycles per resource and a Perfetto/Chrome trace.

A Report (:mod:`tilewright.dataflow_sim.report`) adds its tasks' times with no overlap between
tasks, and splits each task's time over the resources of
:data:`~tilewright.dataflow_sim.report.RESOURCES` (overlapping inside the task). The timeline
follows exactly that convention: task ``i`` occupies ``[start_i, start_i + time_cycles_i)`` on
the instruction-issue track, starting when task ``i - 1`` ends, and each resource it uses is busy
from ``start_i`` for its share of the task:

* ``array`` — the tensor engine: ``compute_cycles + fill_cycles`` (operands streaming, weight
  fill and drain);
* ``dma`` — off-chip transfers: ``dram_cycles``;
* ``vector`` — the vector unit: ``vector_cycles`` of every task but a ``scan``;
* ``scan`` — the scan unit: ``vector_cycles`` of a ``scan`` task.

So a track's events never overlap and their durations add up to the resource's busy cycles
(:func:`busy_cycles`). Times in the trace are microseconds at the ArchSpec's clock (Chrome's
``ts``/``dur`` unit); each event also carries its exact ``start_cycle`` and ``cycles``.

The accelerator's own timeline (:func:`accel_chrome_trace`) is instruction level instead: per
segment run of the accelerator top, every instruction's issue cycle and every unit's busy
interval (:class:`~tilewright.dataflow_sim.accel_timing.SegmentTimeline`, from the cycle model
or recorded from the RTL), one process per source on the tracks of :data:`ACCEL_TRACKS`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["TRACKS", "ACCEL_TRACKS", "busy_cycles", "chrome_trace", "accel_chrome_trace"]

#: the trace's tracks, in display order (thread id = index + 1)
TRACKS = ("instruction issue", "dma", "array", "vector", "scan")


def _resource_cycles(row: Any) -> dict[str, int]:
    """Cycles one Report row keeps each resource track busy (module docstring)."""
    vec = int(row.vector_cycles)
    scan = row.kind == "scan"
    return {"dma": int(row.dram_cycles), "array": int(row.compute_cycles + row.fill_cycles),
            "vector": 0 if scan else vec, "scan": vec if scan else 0}


def busy_cycles(report: pd.DataFrame) -> dict[str, int]:
    """Busy cycles of each resource track over a Report (``time`` = its total cycles)."""
    out = {"time": int(report["time_cycles"].sum()), "dma": 0, "array": 0, "vector": 0,
           "scan": 0}
    for row in report.itertuples(index=False):
        for k, v in _resource_cycles(row).items():
            out[k] += v
    return out


def chrome_trace(steps: Iterable[tuple[str, pd.DataFrame]], clock_mhz: float,
                 name: str = "accelerator (cycle model)") -> dict[str, Any]:
    """A Chrome/Perfetto trace (``{"traceEvents": [...]}``) of ``steps`` — (label, Report) run one
    after the other — on the tracks of :data:`TRACKS`; the label of each step is a slice on a
    ``steps`` track (thread id 0). Raises ValueError when a resource's cycles exceed its task's
    time (the tracks would overlap: the Report broke its own convention)."""
    us = 1.0 / clock_mhz
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": 1, "tid": 0, "name": "process_name", "args": {"name": name}},
        {"ph": "M", "pid": 1, "tid": 0, "name": "thread_name", "args": {"name": "steps"}}]
    for i, track in enumerate(TRACKS, 1):
        events.append({"ph": "M", "pid": 1, "tid": i, "name": "thread_name",
                       "args": {"name": track}})
        events.append({"ph": "M", "pid": 1, "tid": i, "name": "thread_sort_index",
                       "args": {"sort_index": i}})

    def slice_(tid: int, label: str, start: int, cycles: int, **args: Any) -> None:
        events.append({"ph": "X", "pid": 1, "tid": tid, "name": label, "ts": start * us,
                       "dur": cycles * us,
                       "args": {"start_cycle": start, "cycles": cycles, **args}})

    t = 0
    for label, report in steps:
        step_start = t
        for row in report.itertuples(index=False):
            time = int(row.time_cycles)
            if time <= 0:
                continue
            slice_(1, str(row.task), t, time, kind=str(row.kind), op=str(row.op))
            for track, cycles in _resource_cycles(row).items():
                if cycles > time:
                    raise ValueError(f"task {row.task}: {track} busy {cycles} cycles in a task "
                                     f"of {time}")
                if cycles:
                    slice_(TRACKS.index(track) + 1, str(row.task), t, cycles)
            t += time
        slice_(0, label, step_start, t - step_start)
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"clock_mhz": clock_mhz, "total_cycles": t,
                          "convention": "tasks in program order, no overlap between tasks; "
                                        "a task's resources start with it (dataflow_sim."
                                        "timeline)"}}


#: the accelerator trace's tracks (thread ids 1..5; 0 is the "runs" track): the issue of every
#: instruction, then the units of :data:`tilewright.dataflow_sim.accel_timing.UNITS`
ACCEL_TRACKS = ("issue", "dma", "array", "vector", "scan")


def accel_chrome_trace(processes: Iterable[tuple[str, Iterable[tuple[str, Any]]]],
                       clock_mhz: float) -> dict[str, Any]:
    """A Chrome/Perfetto trace of accelerator segment runs: ``processes`` are (name, runs), each
    run a (label, :class:`~tilewright.dataflow_sim.accel_timing.SegmentTimeline`) — e.g.
    ("RTL", ...) and ("cycle model", ...) of the same runs. A process's runs are placed back to
    back (run ``k`` occupies its cycles 0 .. ``cycles``, ``start`` sampled in cycle 0; host time
    between runs is not in the trace), each a slice on the "runs" track (thread 0); an issue is a
    one-cycle slice named by its opcode on "issue", a busy interval a slice on its unit's track.
    ``ts``/``dur`` in µs at ``clock_mhz``; ``args`` carry the exact cycles and the address."""
    us = 1.0 / clock_mhz
    events: list[dict[str, Any]] = []
    totals = {}
    for pid, (pname, runs) in enumerate(processes, 1):
        events.append({"ph": "M", "pid": pid, "tid": 0, "name": "process_name",
                       "args": {"name": pname}})
        events.append({"ph": "M", "pid": pid, "tid": 0, "name": "process_sort_index",
                       "args": {"sort_index": pid}})
        for tid, track in enumerate(("runs", *ACCEL_TRACKS)):
            events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name",
                           "args": {"name": track}})
            events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index",
                           "args": {"sort_index": tid}})

        def slice_(tid: int, label: str, start: int, cycles: int, **args: Any) -> None:
            events.append({"ph": "X", "pid": pid, "tid": tid, "name": label, "ts": start * us,
                           "dur": cycles * us,
                           "args": {"start_cycle": start, "cycles": cycles, **args}})

        t = 0
        for label, tl in runs:
            slice_(0, label, t, tl.cycles + 1, task=tl.task)
            for i in tl.issues:
                slice_(1, i.op, t + i.cycle, 1, pc=i.pc)
            for b in tl.busy:
                slice_(ACCEL_TRACKS.index(b.unit) + 1, b.op, t + b.start, b.cycles, pc=b.pc)
            t += tl.cycles + 1
        totals[pname] = t
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"clock_mhz": clock_mhz, "total_cycles": totals,
                          "convention": "accelerator segment runs back to back, each from the "
                                        "cycle sampling start (0) through END's issue; a unit "
                                        "issued in cycle c for D cycles is busy c+1..c+D "
                                        "(dataflow_sim.accel_timing)"}}
