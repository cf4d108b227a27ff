"""Pareto front extraction (non-dominated points), numpy."""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["pareto_mask"]


def pareto_mask(values, directions: Sequence[str]) -> np.ndarray:
    """Boolean mask of the non-dominated rows of ``values`` (n points x k objectives).

    ``directions[j]`` is ``"minimize"`` or ``"maximize"``. A point is dominated if another is no
    worse in every objective and strictly better in one. Rows with NaN are never on the front.
    Duplicates of a front point are all kept. O(n * front size) with numpy.
    """
    v = np.asarray(values, dtype=float)
    if v.ndim != 2 or v.shape[1] != len(directions):
        raise ValueError(f"values shape {v.shape}: must be (n, {len(directions)})")
    sign = np.array([1.0 if d == "minimize" else -1.0 for d in directions])
    v = v * sign                                            # now: smaller is better everywhere
    n = len(v)
    ok = ~np.isnan(v).any(axis=1)
    mask = np.zeros(n, dtype=bool)
    idx = np.flatnonzero(ok)
    if idx.size == 0:
        return mask
    order = idx[np.lexsort(v[idx].T[::-1])]                 # lexicographic: first objective first
    front: list[int] = []
    for i in order:
        if front:
            f = v[front]
            dominated = np.any(np.all(f <= v[i], axis=1) & np.any(f < v[i], axis=1))
            if dominated:
                continue
        front.append(i)
    mask[front] = True
    return mask
