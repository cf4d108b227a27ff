"""Design-space exploration: sweep files, search (grid, random, Optuna TPE, NSGA-II), executors
(local process pool, Dask), a resumable SQLite results store, Pareto fronts and reports."""

from tilewright.app.sweep.pareto import pareto_mask
from tilewright.app.sweep.runner import EXECUTORS, SweepResult, random_points, run_sweep
from tilewright.app.sweep.spec import (METRICS, SweepError, SweepSpec, apply_point, load_sweep,
                                   sweep_from_dict)
from tilewright.app.sweep.store import ResultsStore

__all__ = ["SweepSpec", "SweepError", "load_sweep", "sweep_from_dict", "apply_point", "METRICS",
           "run_sweep", "SweepResult", "random_points", "EXECUTORS", "ResultsStore",
           "pareto_mask", "pareto_frame"]


def pareto_frame(df, objectives, feasible_only: bool = True):
    """Rows of a store frame on the Pareto front of ``objectives`` (``[(metric, direction)]``)."""
    sub = df[df["status"] == "ok"]
    if feasible_only:
        sub = sub[sub["feasible"]]
    if sub.empty:
        return sub
    mask = pareto_mask(sub[[m for m, _ in objectives]].to_numpy(float), [d for _, d in objectives])
    return sub[mask]
