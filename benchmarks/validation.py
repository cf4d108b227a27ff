"""Validation table: the cluster model's predictions against published measurements.

Run: ``python benchmarks/validation.py`` (all points; ``--only ID`` for some, ``--set held_out``
for one set, ``--kind serve`` for one kind, ``--fit`` to redo the calibration grid of the GPU GEMM
efficiency). Prints one row per point — set, predicted, published, error, source — then the
held-out median and max |error| over every kind against the goal (median ≤ 10 %, max ≤ 25 %),
whether met or not, and the same per kind.

One table joins three data files: this script's own points (below), the nccl-tests bus-bandwidth
rows of ``configs/validation/collective_points.yaml`` (predicted by
:func:`~tilewright.dataflow_sim.cluster.nccl_calibration.predict_collective`, the flow-level ring
whose two efficiencies were fitted on that file's calibration rows) and the DeepSeek-V3 MoE
serving rows of ``configs/validation/serving_points.yaml`` (predicted by
``benchmarks/serving_validation.py``'s ``predict``, one steady-state iteration). Each keeps its own
file, fields and predictor; nothing is refitted here.

Data file (default ``configs/validation/cluster_points.yaml``), a mapping with:

* ``clusters``: name -> a cluster mapping (:class:`~tilewright.dataflow_sim.cluster.ClusterSpec`
  fields); a point's ``cluster`` is one of these names or a preset name (``h100-8x-nvlink``).
* ``models``: name -> ``{kind: llama, <LlamaConfig fields>}``; a point's ``model`` is one of
  these or a built-in config name (``llama3-8b``).
* ``points``: a list; every point has
  ``id`` (unique), ``set`` (``calibration`` — the only points any constant may be fitted on — or
  ``held_out``), ``kind`` (``train`` | ``collective`` | ``serve``), ``source`` (URL or paper,
  table, row), ``confirmed`` (false: the figure was not checked against its primary source),
  ``metric``, ``published`` (the number, in the metric's unit) and optional ``note``.
  ``skip: <reason>`` keeps a point in the table but does not run it (printed as not
  evaluated; a skipped held-out point counts as missed). Keys starting with ``_`` at the top
  level are YAML anchors only.

  - ``train``: ``cluster``, ``model``, ``plan`` (:class:`~.plan.TrainPlan` fields), optional
    ``simulate`` (plan fields overridden for simulator cost only, e.g. fewer data-parallel
    replicas; printed beside the row). Metrics: ``tokens_per_s_per_chip``, ``mfu``,
    ``model_tflops_per_chip`` (MFU × peak, TFLOP/s), ``step_s``, ``memory_gib`` (per chip).
  - a component row (any kind): ``component_of: <id>`` and a ``metric`` read from that point's
    run — a published breakdown (MFU, memory, communication share) checked within 20 %.
  - ``collective``: ``cluster``, ``collective`` (all_reduce | all_gather | reduce_scatter |
    all_to_all), ``ranks`` (chips 0..ranks-1), ``bytes`` (per-rank buffer, as nccl-tests'
    size), optional ``algo``. Metrics: ``busbw_gbps`` (nccl-tests bus bandwidth: all-reduce
    ``S/t · 2(n−1)/n``, all-gather / reduce-scatter ``S/t · (n−1)/n``), ``seconds``.
  - ``serve``: ``cluster``, ``model``, ``plan`` (:class:`~.plan.ServePlan` fields),
    ``requests`` (``{n, rate, prompt_tokens, output_tokens, seed}``; rate ``.inf`` = all at 0 s,
    MLPerf's Offline scenario; a token count is a whole number or ``[lo, hi]``, drawn uniformly).
    Metrics: any key of the serving metrics (``e2e_mean_s``, ``tpot_mean_s``, ...).

Error = predicted / published − 1. A point whose run fails prints the error instead of a number
and counts as missed.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from tilewright.dataflow_sim.cluster import (ClusterSpec, ServePlan, TrainPlan, load_cluster,
                                             simulate_serving, simulate_training)
from tilewright.dataflow_sim.cluster.cluster_spec import GPU_PRESETS
from tilewright.dataflow_sim.cluster.collectives import CollectiveTimer
from tilewright.dataflow_sim.cluster.nccl_calibration import load_points as load_nccl_points
from tilewright.dataflow_sim.cluster.nccl_calibration import predict_collective
from tilewright.dataflow_sim.cluster.topology import Topology
from tilewright.models.llm_configs import get_config
from tilewright.models.llm_shapes import LlamaConfig

DATA = Path(__file__).resolve().parents[1] / "configs" / "validation" / "cluster_points.yaml"
GOAL_MEDIAN, GOAL_MAX, COMPONENT_TOL = 0.10, 0.25, 0.20
BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
              "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n}


def load(path: Path = DATA) -> dict[str, Any]:
    """The data file, checked: unique ids, known sets and kinds, components naming a point."""
    data = yaml.safe_load(path.read_text())
    ids = [p["id"] for p in data["points"]]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise ValueError(f"{path}: duplicate point ids {sorted(dup)}")
    for p in data["points"]:
        for key in ("id", "set", "kind", "source", "metric", "published"):
            if key not in p:
                raise ValueError(f"{path}: point {p.get('id')}: missing {key}")
        if p["set"] not in ("calibration", "held_out"):
            raise ValueError(f"{path}: point {p['id']}: set = {p['set']!r}: calibration|held_out")
        if p["kind"] not in ("train", "collective", "serve"):
            raise ValueError(f"{path}: point {p['id']}: kind = {p['kind']!r}")
        if "component_of" in p and p["component_of"] not in ids:
            raise ValueError(f"{path}: point {p['id']}: component_of names no point")
    return data


def _cluster(data: dict, name: str) -> ClusterSpec:
    spec = (data.get("clusters") or {}).get(name)
    return ClusterSpec.from_dict(spec, source=name) if spec is not None else load_cluster(name)


def _model(data: dict, name: str):
    m = (data.get("models") or {}).get(name)
    if m is None:
        return get_config(name)
    m = dict(m)
    if m.pop("kind") != "llama":
        raise ValueError(f"model {name}: only kind llama is defined inline")
    return LlamaConfig(**m)


def run_point(data: dict, p: dict) -> dict[str, float]:
    """The metrics of one (non-component) point's run."""
    spec = _cluster(data, p["cluster"])
    if p["kind"] == "collective":
        n, nbytes = int(p["ranks"]), float(p["bytes"])
        t = CollectiveTimer(Topology(spec)).seconds(p["collective"], [list(range(n))], nbytes,
                                                    p.get("algo"))
        return {"seconds": t, "busbw_gbps": nbytes / t * BUS_FACTOR[p["collective"]](n) / 1e9}
    cfg = _model(data, p["model"])
    if p["kind"] == "train":
        plan = TrainPlan(**{**p["plan"], **(p.get("simulate") or {})})
        if plan.dp * plan.tp * plan.pp * plan.sp != spec.n_chips:     # the slice simulated
            per_node = spec.chips_per_node
            chips = plan.dp * plan.tp * plan.pp * plan.sp
            spec = spec.model_copy(update={"nodes": max(1, chips // per_node),
                                           "chips_per_node": min(per_node, chips)})
        m = simulate_training(spec, cfg, plan).metrics
        chip_peak = GPU_PRESETS[spec.chip.preset].tensor_flops
        return {"tokens_per_s_per_chip": m["tokens_per_s"] / m["chips"], "mfu": m["mfu"],
                "model_tflops_per_chip": m["mfu"] * chip_peak / 1e12, "step_s": m["step_s"],
                "memory_gib": m["memory_peak_gib"]}
    from tilewright.dataflow_sim.cluster import poisson_requests  # noqa: PLC0415
    r = p["requests"]

    def tokens(x):
        return int(x) if isinstance(x, int) else (int(x[0]), int(x[1]))
    rate = float(r.get("rate", 1e9))
    reqs = poisson_requests(int(r["n"]), rate if math.isfinite(rate) else 1.0,
                            tokens(r["prompt_tokens"]), tokens(r["output_tokens"]),
                            seed=int(r.get("seed", 0)))
    if not math.isfinite(rate):          # Offline: every request queued at 0 s
        reqs["arrival_s"] = 0.0
    return simulate_serving(spec, cfg, ServePlan(**p.get("plan", {})), reqs).metrics


def evaluate(data: dict, only: set[str] | None = None, which: str | None = None,
             kinds: set[str] | None = None) -> list[dict[str, Any]]:
    """Rows: id, set, metric, published, predicted, error (predicted/published − 1), source,
    note — runs each point once; component rows read their parent's run."""
    runs: dict[str, Any] = {}
    rows = []
    for p in data["points"]:
        if (only and p["id"] not in only and p.get("component_of") not in only) or (
                which and p["set"] != which) or (kinds and p["kind"] not in kinds):
            continue
        base_id = p.get("component_of", p["id"])
        base = next(q for q in data["points"] if q["id"] == base_id)
        t0 = time.perf_counter()
        if base.get("skip"):
            runs[base_id] = RuntimeError(f"not evaluated: {base['skip']}")
        if base_id not in runs:
            try:
                runs[base_id] = run_point(data, base)
            except Exception as exc:  # noqa: BLE001  (a failed point is reported, not fatal)
                runs[base_id] = exc
        res = runs[base_id]
        pred = res.get(p["metric"]) if isinstance(res, dict) else None
        err = pred / p["published"] - 1 if isinstance(pred, (int, float)) else math.nan
        rows.append({"id": p["id"], "set": p["set"], "kind": p["kind"],
                     "component": "component_of" in p,
                     "metric": p["metric"], "published": p["published"], "predicted": pred,
                     "error": err, "failed": None if isinstance(res, dict) else str(res),
                     "simulate": base.get("simulate"), "confirmed": p.get("confirmed", False),
                     "source": p["source"], "wall_s": time.perf_counter() - t0})
    return rows


def _row(p: dict, kind: str, metric: str, published: float, run, source: str, note=None
         ) -> dict[str, Any]:
    """A table row for a point of the collective or serving files: ``run()`` gives the
    prediction (a failure is reported in the row, not raised)."""
    t0 = time.perf_counter()
    try:
        pred, failed = float(run()), None
    except Exception as exc:  # noqa: BLE001  (a failed point is reported, not fatal)
        pred, failed = None, str(exc)
    return {"id": p.get("id") or p["name"], "set": p["set"], "kind": kind, "component": False,
            "metric": metric, "published": float(published), "predicted": pred,
            "error": pred / published - 1 if pred is not None else math.nan, "failed": failed,
            "simulate": None, "confirmed": p.get("confirmed", True), "source": " ".join(
                source.split()), "note": note, "wall_s": time.perf_counter() - t0}


def evaluate_collectives(which: str | None = None, only: set[str] | None = None,
                         path: Path | None = None) -> list[dict[str, Any]]:
    """Rows of the nccl-tests file (``collective_points.yaml``): busbw predicted by
    :func:`predict_collective` at its fitted efficiencies, GB/s."""
    rows = load_nccl_points(path) if path else load_nccl_points()
    return [_row(r, "collective", "busbw_gbps", r["measured_busbw_gbps"],
                 lambda r=r: predict_collective(r), r["source"])
            for r in rows if (not which or r["set"] == which) and (not only or r["id"] in only)]


def _serving_validation():
    """``benchmarks/serving_validation.py`` (a script beside this one, not a package)."""
    import importlib.util  # noqa: PLC0415
    spec = importlib.util.spec_from_file_location(
        "serving_validation", Path(__file__).resolve().parent / "serving_validation.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def evaluate_serving(which: str | None = None, only: set[str] | None = None
                     ) -> list[dict[str, Any]]:
    """Rows of the MoE serving file (``serving_points.yaml``): output (decode) or input
    (prefill) tokens/s per 8-GPU node, predicted by ``serving_validation.predict``."""
    sv = _serving_validation()
    points = yaml.safe_load(sv.POINTS.read_text())["points"]
    return [_row(p, "serve", "tokens_per_s_per_node", p["published_tokens_per_s_per_node"],
                 lambda p=p: sv.predict(p)["predicted"], p["source"])
            for p in points if (not which or p["set"] == which) and (not only or p["name"] in only)]


def summary(rows: list[dict]) -> dict[str, float]:
    """Held-out totals: median and max |error| over held-out non-component rows (a failed row
    counts as an infinite error), the worst held-out component error, and the counts."""
    held = [abs(r["error"]) if not math.isnan(r["error"]) else math.inf
            for r in rows if r["set"] == "held_out" and not r["component"]]
    comp = [abs(r["error"]) if not math.isnan(r["error"]) else math.inf
            for r in rows if r["component"]]
    return {"held_out_points": len(held),
            "held_out_median": statistics.median(held) if held else math.nan,
            "held_out_max": max(held) if held else math.nan,
            "component_points": len(comp), "component_max": max(comp) if comp else math.nan}


def fit_gemm_efficiency(data: dict, preset: str, grid: list[float]) -> list[tuple[float, float]]:
    """(gemm_efficiency, median |error| over the calibration train rows of ``preset``) for each
    value of ``grid`` — the calibration the constant in GPU_PRESETS was chosen from."""
    cal = [p for p in data["points"] if p["set"] == "calibration" and p["kind"] == "train"
           and "component_of" not in p and not p.get("skip")
           and _cluster(data, p["cluster"]).chip.preset == preset]
    original = GPU_PRESETS[preset]
    out = []
    try:
        for g in grid:
            GPU_PRESETS[preset] = original.model_copy(update={"gemm_efficiency": g})
            errs = [abs(run_point(data, p)[p["metric"]] / p["published"] - 1) for p in cal]
            out.append((g, statistics.median(errs)))
    finally:
        GPU_PRESETS[preset] = original
    return out


def _max_text(rows: list[dict], kind: str | None = None) -> str:
    """The held-out max |error| as printed: a point that was not evaluated (or failed) makes it
    unbounded, said in words beside the max over the evaluated ones."""
    held = [r for r in rows if r["set"] == "held_out" and not r["component"]
            and (kind is None or r["kind"] == kind)]
    errs = [abs(r["error"]) for r in held if not math.isnan(r["error"])]
    missing = len(held) - len(errs)
    text = f"{max(errs):.1%}" if errs else "n/a"
    return text + (f" over the evaluated, {missing} not evaluated (counted as missed)"
                   if missing else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--only", nargs="*", help="point ids")
    ap.add_argument("--set", choices=("calibration", "held_out"))
    ap.add_argument("--kind", nargs="*", choices=("train", "collective", "serve"),
                    help="only rows of these kinds (default: all)")
    ap.add_argument("--fit", action="store_true", help="print the GEMM-efficiency grid fit on "
                    "the calibration rows of each GPU preset")
    ap.add_argument("--preset", nargs="*", help="--fit: only these presets")
    ap.add_argument("--grid", nargs="*", type=float, help="--fit: efficiencies to try "
                    "(default 0.50, 0.55, ..., 1.00)")
    a = ap.parse_args(argv)
    data = load(a.data)
    if a.fit:
        for preset in a.preset or GPU_PRESETS:
            grid = a.grid or [round(0.5 + 0.05 * i, 2) for i in range(11)]
            res = fit_gemm_efficiency(data, preset, grid)
            if res:
                best = min(res, key=lambda x: x[1])
                print(f"{preset}: " + "  ".join(f"{g:.2f}:{e:.1%}" for g, e in res)
                      + f"  -> best {best[0]:.2f}")
        return 0
    only = set(a.only) if a.only else None
    kinds = set(a.kind or ("train", "collective", "serve"))
    rows = evaluate(data, only, a.set, kinds)
    if "collective" in kinds:
        rows += evaluate_collectives(a.set, only)
    if "serve" in kinds:
        rows += evaluate_serving(a.set, only)
    sources = list(dict.fromkeys(r["source"] for r in rows))
    head = f"{'point':50s} {'kind':10s} {'set':11s} {'metric':22s} {'published':>10s} " \
           f"{'predicted':>10s} {'error':>8s} src"
    print(head)
    print("-" * len(head))
    for r in rows:
        pred = "FAILED" if r["failed"] else f"{r['predicted']:.4g}"
        name = ("  ↳ " if r["component"] else "") + r["id"]
        print(f"{name:50s} {r['kind']:10s} {r['set']:11s} {r['metric']:22s} "
              f"{r['published']:>10.4g} {pred:>10s} {r['error']:>+8.1%} "
              f"[{sources.index(r['source']) + 1}]"
              + (f"  [simulated with {r['simulate']}]" if r["simulate"] else "")
              + ("" if r["confirmed"] else "  [unconfirmed figure]")
              + (f"  {r['failed']}" if r["failed"] else ""))
    s = summary(rows)
    print()
    for kind in ("train", "collective", "serve"):
        k = summary([r for r in rows if r["kind"] == kind])
        if k["held_out_points"]:
            print(f"held-out {kind} points: {k['held_out_points']}; median |error| "
                  f"{k['held_out_median']:.1%}, max |error| {_max_text(rows, kind)}")
    print(f"held-out points, all kinds: {s['held_out_points']}; median |error| "
          f"{s['held_out_median']:.1%} (goal ≤ {GOAL_MEDIAN:.0%}: {'met' if s['held_out_median'] <= GOAL_MEDIAN else 'MISSED'})"
          f", max |error| {_max_text(rows)} (goal ≤ {GOAL_MAX:.0%}: "
          f"{'met' if s['held_out_max'] <= GOAL_MAX else 'MISSED'})")
    if s["component_points"]:
        print(f"component points: {s['component_points']}; max |error| "
              f"{s['component_max']:.1%} (goal ≤ {COMPONENT_TOL:.0%}: "
              f"{'met' if s['component_max'] <= COMPONENT_TOL else 'MISSED'})")
    print("sources:")
    for i, src in enumerate(sources, 1):
        print(f"  [{i}] {src}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
