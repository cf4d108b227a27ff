"""A replica's run of pure decode iterations, computed at once instead of iteration by iteration.

When a replica's queue is empty and every running sequence is decoding, each following
iteration is fixed by the batch alone until something from outside (an arrival, a KV hand-off)
reaches the replica: every sequence gets one token per iteration, a sequence leaves after its
last token, and a sequence takes a new KV block when its context crosses a block boundary. This
module computes that whole run (:func:`plan_decode_run`): per iteration ``j`` the sequences
``n_j`` and their summed keys ``C_j``, the KV blocks taken (``grow_j``) and freed (``freed_j``),
and the free blocks before each iteration. The serving loop (:mod:`.serving`) times the run,
commits as much of it as has elapsed when something reaches the replica, and resumes its
ordinary event-by-event loop from there.

Definitions (they restate :meth:`.serving._Replica._schedule` and its loop for a decode-only
batch): sequence ``i`` has context ``s_i`` (prompt + generated tokens) at the run's start,
``r_i ≥ 1`` tokens left to generate and ``b_i`` KV blocks; in iteration ``j < r_i`` it attends to
``s_i + j`` keys and needs ``need_i(j) = ⌈(s_i + j)/bt⌉`` blocks (1 with recurrent-state slots).
The run preempts nobody iff the blocks taken in each iteration fit in the blocks free before it
(takes happen one by one in the batch, so any shortfall shows in the total); otherwise the run is
refused (``None``) and the ordinary loop, which preempts, takes over.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["DecodeRun", "plan_decode_run"]


@dataclass
class DecodeRun:
    """The block and batch arithmetic of a decode-only run of ``K = max r_i`` iterations.

    ``n``, ``keys``: sequences and Σ keys of each iteration (``(K,)``); ``free``: free KV blocks
    before each iteration (``(K + 1,)``; entry K after the run); ``grow``: blocks taken in each
    iteration (``(K,)``); ``final_blocks``: each sequence's blocks when it leaves."""

    n: np.ndarray
    keys: np.ndarray
    free: np.ndarray
    grow: np.ndarray
    final_blocks: np.ndarray

    @property
    def iterations(self) -> int:
        return len(self.n)


def plan_decode_run(s: np.ndarray, r: np.ndarray, b: np.ndarray, free0: int,
                    block_tokens: int, slots: bool) -> DecodeRun | None:
    """The run of sequences with contexts ``s``, tokens left ``r`` (each ≥ 1) and blocks ``b``
    (int arrays, one entry per sequence) on a replica with ``free0`` free blocks of
    ``block_tokens`` tokens (``slots``: one recurrent-state slot per sequence instead). ``None``
    when some iteration would need more blocks than are free (a preemption)."""
    s, r, b = (np.asarray(x, dtype=np.int64) for x in (s, r, b))
    N, K, bt = len(r), int(r.max()), block_tokens
    gone = np.cumsum(np.bincount(r, minlength=K + 1))[:K]   # sequences done before iteration j
    n = N - gone
    s_gone = np.cumsum(np.bincount(r, weights=s, minlength=K + 1))[:K].astype(np.int64)
    keys = (int(s.sum()) - s_gone) + np.arange(K, dtype=np.int64) * n
    grow = np.zeros(K, dtype=np.int64)
    if slots:
        grow[0] = int(np.maximum(0, 1 - b).sum())
        final = np.maximum(b, 1)
    else:
        need0 = -(-s // bt)
        grow[0] = int(np.maximum(0, need0 - b).sum())
        # later takes: at j = m·bt + 1 − s (the context crosses a block boundary) for every
        # m ≥ max(b, need(0)), while j < r
        first = np.maximum(b, need0) * bt + 1 - s
        cnt = np.maximum(0, -(-(r - first) // bt))
        if cnt.any():
            total = int(cnt.sum())
            k = np.arange(total) - np.repeat(np.cumsum(cnt) - cnt, cnt)
            grow += np.bincount(np.repeat(first, cnt) + k * bt, minlength=K)[:K]
        final = np.maximum(b, -(-(s + r - 1) // bt))
    freed = np.bincount(r - 1, weights=final, minlength=K)[:K].astype(np.int64)
    free = free0 + np.concatenate(([0], np.cumsum(freed - grow)))
    if (free[:K] < grow).any():
        return None
    return DecodeRun(n, keys, free, grow, final)
