"""A replica's run of pure decode iterations, computed in bulk instead of iteration by iteration.

When a replica's queue is empty and every running sequence is decoding, each following
iteration is fixed by the batch alone until something from outside (an arrival, a KV hand-off)
reaches the replica: every sequence gets one token per iteration, a sequence leaves after its
last token, and a sequence takes a new KV block when its context crosses a block boundary.
:class:`DecodeRun` holds that run's arithmetic: per iteration ``j`` the sequences ``n_j`` and
their summed keys (:meth:`DecodeRun.counts`, computed for any range of iterations on demand),
and the KV blocks taken and free before each iteration (:meth:`DecodeRun.blocks`). The serving
loop (:mod:`.serving`) times the iterations, commits as many as have elapsed when something
reaches the replica, and resumes its ordinary event-by-event loop from there.

Definitions (they restate :meth:`.serving._Replica._schedule` and its loop for a decode-only
batch): sequence ``i`` has context ``s_i`` (prompt + generated tokens) at the run's start,
``r_i ≥ 1`` tokens left to generate and ``b_i`` KV blocks; in iteration ``j < r_i`` it attends to
``s_i + j`` keys and needs ``need_i(j) = ⌈(s_i + j)/bt⌉`` blocks (1 with recurrent-state slots);
it leaves, freeing ``max(b_i, need_i(r_i − 1))`` blocks, at the end of iteration ``r_i − 1``.
The run preempts nobody iff the blocks taken in each iteration fit in the blocks free before it
(takes happen one by one in the batch, so any shortfall shows in the total);
:attr:`DecodeRun.feasible` is False otherwise, and the ordinary loop, which preempts, runs.
"""

from __future__ import annotations

from itertools import accumulate

import numpy as np

__all__ = ["DecodeRun"]


#: sequences from which a run's block arithmetic is done in numpy (below, plain Python over the
#: sequences is faster: numpy's fixed cost per call dominates a few sequences' work)
NUMPY_MIN_SEQUENCES = 32


class DecodeRun:
    """The batch and block arithmetic of the decode-only run of sequences with contexts ``s``,
    tokens left ``r`` (each ≥ 1) and KV blocks ``b`` (one entry per sequence) on a replica with
    ``free0`` free blocks of ``block_tokens`` tokens (``slots``: one recurrent-state slot per
    sequence instead). It lasts :attr:`iterations` ``= max r_i`` iterations. Integers
    throughout (exact): numpy over iterations, and over the sequences from
    :data:`NUMPY_MIN_SEQUENCES` of them (plain Python below)."""

    def __init__(self, s: list[int], r: list[int], b: list[int], free0: int,
                 block_tokens: int, slots: bool) -> None:
        self.s, self.r, self.b = s, r, b
        self.free0, self.bt, self.slots = free0, block_tokens, slots
        bt = block_tokens
        self._vector = len(s) >= NUMPY_MIN_SEQUENCES
        if self._vector:
            S, R, B = (np.array(x, dtype=np.int64) for x in (s, r, b))
            self._S, self._R, self._B = S, R, B
            order = np.argsort(R, kind="stable")
            self._r_sorted = R[order]
            self._s_done = np.concatenate(([0], np.cumsum(S[order])))
            # blocks held when leaving: one slot, or the blocks of the last context s + r − 1
            self._final = np.maximum(B, 1) if slots else np.maximum(B, -(-(S + R - 1) // bt))
            taken = int(self._final.sum() - B.sum())
        else:
            pairs = sorted(zip(r, s))
            self._r_sorted = np.array([x for x, _ in pairs], dtype=np.int64)
            self._s_done = np.array([0, *accumulate(y for _, y in pairs)], dtype=np.int64)
            self._final = ([max(x, 1) for x in b] if slots
                           else [max(x, -(-(y + z - 1) // bt)) for x, y, z in zip(b, s, r)])
            taken = sum(self._final) - sum(b)
        self.iterations = K = int(self._r_sorted[-1])
        self._s_total = int(self._s_done[-1])
        # every take is one block except a first catch-up take: Σ(final − b) blocks in all
        self.feasible = free0 >= taken
        if not self.feasible:
            free, grow = self.blocks(K)
            self.feasible = all(f >= g for f, g in zip(free, grow))

    def counts(self, a: int, m: int) -> tuple[np.ndarray, np.ndarray]:
        """(sequences, Σ keys) of iterations ``a … m − 1``."""
        j = np.arange(a, m, dtype=np.int64)
        done = np.searchsorted(self._r_sorted, j, side="right")   # sequences with r ≤ j
        n = len(self.r) - done
        return n, (self._s_total - self._s_done[done]) + j * n

    def blocks(self, stop: int) -> tuple[list[int], list[int]]:
        """(free blocks before each of iterations ``0 … stop`` (``stop + 1`` entries; the last
        after iteration ``stop − 1``), blocks taken in each of iterations ``0 … stop − 1``;
        ``stop ≥ 1``). A sequence takes its blocks short of ``need(0)`` in iteration 0, then
        one at each ``j = m·bt + 1 − s`` (its context crosses a block boundary) for every
        ``m ≥ max(b, need(0))`` while ``j < min(r, stop)``; it frees its final blocks after
        iteration ``r − 1``."""
        if not self._vector:
            return self._blocks_py(stop)
        S, R, B, bt = self._S, self._R, self._B, self.bt
        if self.slots:
            grow = np.zeros(stop, np.int64)
            grow[0] = int(np.maximum(0, 1 - B).sum())
        else:
            need0 = -(-S // bt)
            first = np.maximum(B, need0) * bt + 1 - S        # j of the first later take
            count = np.maximum(0, -(-(np.minimum(R, stop) - first) // bt))
            total = int(count.sum())
            if total:
                ends = np.cumsum(count)
                j = (np.repeat(first - bt * (ends - count), count)
                     + bt * np.arange(total, dtype=np.int64))
                grow = np.bincount(j, minlength=stop)
            else:
                grow = np.zeros(stop, np.int64)
            grow[0] += int(np.maximum(0, need0 - B).sum())
        freed = np.zeros(stop, np.int64)
        left = R <= stop
        np.add.at(freed, R[left] - 1, self._final[left])
        free = np.empty(stop + 1, np.int64)
        free[0] = self.free0
        np.cumsum(freed - grow, out=free[1:])
        free[1:] += self.free0
        return free.tolist(), grow.tolist()

    def _blocks_py(self, stop: int) -> tuple[list[int], list[int]]:
        """:meth:`blocks` sequence by sequence."""
        bt = self.bt
        grow = [0] * stop
        freed = [0] * stop
        for s, r, b, f in zip(self.s, self.r, self.b, self._final):
            if self.slots:
                grow[0] += max(0, 1 - b)
            else:
                need0 = -(-s // bt)
                grow[0] += max(0, need0 - b)
                for j in range(max(b, need0) * bt + 1 - s, min(r, stop), bt):
                    grow[j] += 1
            if r <= stop:
                freed[r - 1] += f
        free = [self.free0]
        for g, f in zip(grow, freed):
            free.append(free[-1] - g + f)
        return free, grow

    def blocks_held(self, stop: int) -> list[int]:
        """Each sequence's blocks after iteration ``stop − 1`` (those still running)."""
        bt = self.bt
        if not self._vector:
            if self.slots:
                return [max(b, 1) for b in self.b]
            return [max(b, -(-(s + stop - 1) // bt)) for s, b in zip(self.s, self.b)]
        if self.slots:
            return np.maximum(self._B, 1).tolist()
        return np.maximum(self._B, -(-(self._S + stop - 1) // bt)).tolist()
