"""Commands for the accelerator top's C++ fast driver (``fast_driver/accel_main.cpp``): the binary
streams both sides agree on.

Host -> driver (little-endian uint32 fields): a stream header (``TWA1``, beat bytes W, memory
latency L, the instruction words), then per segment its entry, the index register's value
(``idx``, what ``LOAD_VI`` reads; 0 for code without it), a watchdog, the memory-image words
to store and the word ranges to read back (:func:`segment_command`), then ``DONE``. Driver ->
host, per segment (:func:`read_result`): cycles by the top's counter and by the driver, retired,
error, pc, read/write beats, busy wall time (ns) and the words read back.
"""

from __future__ import annotations

import struct

import numpy as np

from tilewright.cosim.gemm_commands import read_exact

__all__ = ["stream_header", "segment_command", "stream_end", "read_result", "PREFIX"]

#: the Verilated model's class name the driver includes (``--prefix``)
PREFIX = "Vtw_accel"

MAGIC_STREAM, MAGIC_SEG, MAGIC_END, MAGIC_RESULT = (
    int.from_bytes(s, "little") for s in (b"TWA1", b"SEGM", b"DONE", b"RSLT"))


def _chunks(w: int) -> int:
    return -(-w // 4)


def stream_header(words, w: int, latency: int) -> bytes:
    """``TWA1``, W, L, the instruction words (low, high uint32 each)."""
    body = b"".join(struct.pack("<Q", int(x)) for x in words)
    return struct.pack("<4I", MAGIC_STREAM, w, latency, len(words)) + body


def segment_command(entry: int, watchdog: int, image: dict[int, int],
                    ranges: list[tuple[int, int]], w: int, idx: int = 0) -> bytes:
    """One segment: entry, index register, watchdog, the image words to store, the ranges to
    read back."""
    nbytes = 4 * _chunks(w)
    parts = [struct.pack("<5I", MAGIC_SEG, entry, idx, min(watchdog, 0xFFFFFFFF), len(image))]
    parts += [struct.pack("<I", a) + int(v).to_bytes(nbytes, "little") for a, v in image.items()]
    parts.append(struct.pack("<I", len(ranges)))
    parts += [struct.pack("<2I", a, n) for a, n in ranges]
    return b"".join(parts)


def stream_end() -> bytes:
    return struct.pack("<I", MAGIC_END)


def read_result(f, w: int) -> dict:
    """One result record: cycles (counter, driver), retired, error, pc, beats, busy ns, words."""
    head = struct.unpack("<11I", read_exact(f, 44))
    if head[0] != MAGIC_RESULT:
        raise RuntimeError(f"bad result magic {head[0]:#x}")
    ch = _chunks(w)
    raw = np.frombuffer(read_exact(f, 4 * ch * head[10]), "<u4").reshape(head[10], ch)
    words = [sum(int(c) << (32 * i) for i, c in enumerate(row)) for row in raw] if ch > 1 \
        else [int(x) for x in raw[:, 0]]
    return {"cycles": head[1], "cycles_driver": head[2], "retired": head[3], "error": head[4],
            "pc": head[5], "read_beats": head[6], "write_beats": head[7],
            "run_seconds": (head[8] | (head[9] << 32)) * 1e-9, "words": words}
