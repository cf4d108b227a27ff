"""Commands for the accelerator top's C++ fast driver (``fast_driver/accel_main.cpp``): the binary
streams both sides agree on.

Host -> driver (little-endian uint32 fields): a stream header (``TWA1``, beat bytes W, memory
latency L, the instruction words), then per segment its entry, the index register's value
(``idx``, what ``LOAD_VI`` reads; 0 for code without it), a watchdog, the memory-image words
to store and the word ranges to read back (:func:`segment_command`), then ``DONE``. Driver ->
host, per segment (:func:`read_result`): cycles by the top's counter and by the driver, retired,
error, pc, read/write beats, busy wall time (ns) and the words read back.

A segment sent with ``trace=True`` (magic ``SEGT`` instead of ``SEGM``) also records its
timeline: its result record is followed by ``TRCE``, n and n events (cycle, kind, value) — an
instruction issued (kind :data:`EV_ISSUE`, value its address) or ``gemm_busy``/``dma_busy``/
``vec_busy`` taking a new level (kinds :data:`EV_GEMM`, :data:`EV_DMA`, :data:`EV_VEC`);
:func:`timeline_from_events` turns them into a
:class:`~tilewright.dataflow_sim.accel_timing.SegmentTimeline`.
"""

from __future__ import annotations

import struct

import numpy as np

from tilewright.cosim.gemm_commands import read_exact
from tilewright.dataflow_sim.accel_timing import UNITS, Busy, Issue, SegmentTimeline

__all__ = ["stream_header", "segment_command", "stream_end", "read_result", "PREFIX",
           "EV_ISSUE", "EV_GEMM", "EV_DMA", "EV_VEC", "timeline_from_events"]

#: the Verilated model's class name the driver includes (``--prefix``)
PREFIX = "Vtw_accel"

MAGIC_STREAM, MAGIC_SEG, MAGIC_END, MAGIC_RESULT, MAGIC_SEG_TRACED, MAGIC_TRACE = (
    int.from_bytes(s, "little") for s in (b"TWA1", b"SEGM", b"DONE", b"RSLT", b"SEGT", b"TRCE"))
#: trace event kinds (accel_main.cpp): an issue, and the three debug busy outputs' transitions
EV_ISSUE, EV_GEMM, EV_DMA, EV_VEC = 0, 1, 2, 3


def _chunks(w: int) -> int:
    return -(-w // 4)


def stream_header(words, w: int, latency: int) -> bytes:
    """``TWA1``, W, L, the instruction words (low, high uint32 each)."""
    body = b"".join(struct.pack("<Q", int(x)) for x in words)
    return struct.pack("<4I", MAGIC_STREAM, w, latency, len(words)) + body


def segment_command(entry: int, watchdog: int, image: dict[int, int],
                    ranges: list[tuple[int, int]], w: int, idx: int = 0,
                    trace: bool = False) -> bytes:
    """One segment: entry, index register, watchdog, the image words to store, the ranges to
    read back; ``trace``: record its timeline (the result carries ``events``)."""
    nbytes = 4 * _chunks(w)
    parts = [struct.pack("<5I", MAGIC_SEG_TRACED if trace else MAGIC_SEG, entry, idx,
                         min(watchdog, 0xFFFFFFFF), len(image))]
    parts += [struct.pack("<I", a) + int(v).to_bytes(nbytes, "little") for a, v in image.items()]
    parts.append(struct.pack("<I", len(ranges)))
    parts += [struct.pack("<2I", a, n) for a, n in ranges]
    return b"".join(parts)


def stream_end() -> bytes:
    return struct.pack("<I", MAGIC_END)


def read_result(f, w: int, trace: bool = False) -> dict:
    """One result record: cycles (counter, driver), retired, error, pc, beats, busy ns, words;
    ``trace`` (the segment was sent with it): also ``events``, (cycle, kind, value) triples."""
    head = struct.unpack("<11I", read_exact(f, 44))
    if head[0] != MAGIC_RESULT:
        raise RuntimeError(f"bad result magic {head[0]:#x}")
    ch = _chunks(w)
    raw = np.frombuffer(read_exact(f, 4 * ch * head[10]), "<u4").reshape(head[10], ch)
    words = [sum(int(c) << (32 * i) for i, c in enumerate(row)) for row in raw] if ch > 1 \
        else [int(x) for x in raw[:, 0]]
    out = {"cycles": head[1], "cycles_driver": head[2], "retired": head[3], "error": head[4],
           "pc": head[5], "read_beats": head[6], "write_beats": head[7],
           "run_seconds": (head[8] | (head[9] << 32)) * 1e-9, "words": words}
    if trace:
        magic, n = struct.unpack("<2I", read_exact(f, 8))
        if magic != MAGIC_TRACE:
            raise RuntimeError(f"bad trace magic {magic:#x}")
        ev = np.frombuffer(read_exact(f, 12 * n), "<u4").reshape(n, 3)
        out["events"] = [tuple(int(x) for x in row) for row in ev]
    return out


def timeline_from_events(events, task: str, cycles: int, ops: dict[int, str]
                         ) -> SegmentTimeline:
    """The RTL's timeline of one segment run from the driver's ``events`` (``cycles``: the run's
    count; ``ops``: the opcode name at each instruction address, to name the issues and tell
    the vector engine's VECTOR from its SCAN). A busy interval starting in cycle ``s`` belongs
    to the instruction issued in cycle ``s - 1`` (None there: op ``"?"``); an interval still
    open at the end is closed after the run's last cycle."""
    issues = [Issue(c, v, ops.get(v, "?")) for c, k, v in events if k == EV_ISSUE]
    at = {i.cycle: i for i in issues}
    busy: list[Busy] = []
    opened: dict[int, int] = {}
    for c, k, v in events:
        if k == EV_ISSUE:
            continue
        if v:
            opened[k] = c
            continue
        s = opened.pop(k)
        busy.append(_interval(k, s, c, at.get(s - 1)))
    busy += [_interval(k, s, cycles + 1, at.get(s - 1)) for k, s in opened.items()]
    busy.sort(key=lambda b: (b.start, UNITS.index(b.unit)))
    return SegmentTimeline(task, cycles, tuple(issues), tuple(busy))


def _interval(kind: int, start: int, end: int, issue: Issue | None) -> Busy:
    unit = {EV_GEMM: "array", EV_DMA: "dma"}.get(kind) or (
        "scan" if issue is not None and issue.op == "SCAN" else "vector")
    return Busy(unit, start, end, -1 if issue is None else issue.pc,
                "?" if issue is None else issue.op)
