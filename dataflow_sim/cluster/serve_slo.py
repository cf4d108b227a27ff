"""Service-level objectives of a serving run: SLO attainment, goodput, and the prefill/decode
split that maximizes goodput.

Definitions (DistServe, Zhong et al., OSDI 2024, §2: "goodput … the number of requests per
second that meet the SLO attainment goal"; Splitwise, Patel et al., ISCA 2024, also sizes pools
under TTFT/TBT SLOs):

* a request **meets the SLOs** when it finished, its TTFT ≤ ``ttft_s`` and its TPOT ≤ ``tpot_s``
  (a one-token output has no TPOT: only its TTFT is checked); a rejected or unfinished request
  does not;
* ``slo_attainment`` = requests meeting the SLOs / all requests (dimensionless);
* ``goodput_requests_per_s`` = requests meeting the SLOs / the run's makespan (first arrival to
  last finish, s) — the same window as ``throughput_requests_per_s``, so goodput ≤ throughput.

``--pd auto`` (:func:`pd_splits`, :func:`best_split`): every split of the cluster's chips into a
prefill pool and a decode pool that whole replicas tile (prefill chips = k·replica, k = 1 …
chips/replica − 1) is simulated on the same requests; the split with the highest goodput wins
(ties: higher attainment, then fewer prefill chips). This is the exhaustive search over pool
sizes that Splitwise's provisioning and DistServe's placement perform, on the simulator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from .cluster_spec import ClusterSpec, ClusterSpecError

__all__ = ["SLO", "slo_metrics", "pd_splits", "with_prefill_chips", "best_split",
           "parse_pd"]


@dataclass(frozen=True)
class SLO:
    """Latency objectives, seconds: time to first token and time per output token."""

    ttft_s: float
    tpot_s: float

    def __post_init__(self) -> None:
        for name, v in (("--slo-ttft", self.ttft_s), ("--slo-tpot", self.tpot_s)):
            if not (isinstance(v, (int, float)) and 0 < v < math.inf):
                raise ClusterSpecError(f"{name} = {v}: must be a finite number of seconds above 0")


def slo_metrics(requests: pd.DataFrame, slo: SLO, makespan_s: float) -> dict[str, Any]:
    """SLO attainment and goodput (module docstring) of a run's per-request table (columns
    ``ttft_s``, ``tpot_s``, ``finish_s``)."""
    finished = requests["finish_s"].notna().to_numpy()
    ttft_ok = (requests["ttft_s"] <= slo.ttft_s).to_numpy()
    tpot = requests["tpot_s"].to_numpy(dtype=float)
    tpot_ok = np.isnan(tpot) | (tpot <= slo.tpot_s)
    met = finished & ttft_ok & tpot_ok
    n = len(requests)
    good = int(met.sum())
    return {"slo_ttft_s": slo.ttft_s, "slo_tpot_s": slo.tpot_s, "slo_met_requests": good,
            "slo_attainment": good / n if n else math.nan,
            "goodput_requests_per_s": good / makespan_s if makespan_s > 0 else math.nan}


def parse_pd(text: str, n_chips: int) -> int | None:
    """``--pd``: ``auto`` -> None; ``P:D`` (prefill chips : decode chips) -> P. Refuses a split
    whose parts do not sum to ``n_chips`` or that leaves a pool empty."""
    if text == "auto":
        return None
    parts = text.split(":")
    if len(parts) == 2 and all(p.strip().isascii() and p.strip().isdigit() for p in parts):
        p, d = (int(x) for x in parts)
        if p + d != n_chips:
            raise ClusterSpecError(f"--pd = {text!r}: prefill + decode chips = {p + d}, but the "
                                   f"cluster has {n_chips} chips")
        if p == 0 or d == 0:
            raise ClusterSpecError(f"--pd = {text!r}: leaves the {'prefill' if p == 0 else 'decode'}"
                                   f" pool empty; each pool needs at least one replica")
        return p
    raise ClusterSpecError(f"--pd = {text!r}: must be auto or P:D (prefill chips:decode chips, "
                           f"summing to the cluster's {n_chips} chips)")


def with_prefill_chips(spec: ClusterSpec, prefill_chips: int) -> ClusterSpec:
    """``spec`` with its pools set to ``prefill_chips`` prefill chips (the rest decode),
    validated like a cluster file's ``pools.prefill_chips``."""
    data = spec.model_dump(mode="json", exclude_none=True)
    data["pools"] = {"prefill_chips": prefill_chips}
    return ClusterSpec.from_dict(data, source=f"{spec.name} (--pd)")


def pd_splits(n_chips: int, replica_chips: int) -> list[int]:
    """Prefill-pool sizes (chips) that leave both pools whole, non-empty sets of replicas."""
    if n_chips < 2 * replica_chips:
        raise ClusterSpecError(f"--pd auto: {n_chips} chips hold fewer than two replicas of "
                               f"{replica_chips} chips; a prefill and a decode pool need one each")
    return list(range(replica_chips, n_chips, replica_chips))


def best_split(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The winning row of a split search (module docstring): highest goodput, then highest
    attainment, then fewest prefill chips. Rows: ``prefill_chips``, ``goodput_requests_per_s``,
    ``slo_attainment``."""
    def key(r: dict[str, Any]) -> tuple[float, float, int]:
        g = r["goodput_requests_per_s"]
        return (-(g if g == g else -1.0), -r["slo_attainment"], r["prefill_chips"])
    return min(rows, key=key)
