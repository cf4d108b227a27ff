"""Predicted versus published MoE serving throughput (``configs/validation/serving_points.yaml``).

Each point is one steady-state iteration of a DeepSeek-V3 deployment timed by the cluster
model's :class:`~tilewright.dataflow_sim.cluster.IterationCost` (GPU roofline, ``table`` cost
source) with what the source says the system does: TP1, attention data-parallel over the EP
ranks, EPLB redundant experts, DeepEP dispatch/combine with per-node dedup and FP8 dispatch, FP8
weights and FP8 GEMMs at the H100 FP8 peak (DeepSeek's Day 6 overview: "matrix multiplications
and dispatch transmissions adopt the FP8 format aligned with training, while core MLA
computations and combine transmissions use the BF16 format"), two-micro-batch overlap of
all-to-all with compute. Attention is DeepSeek's MLA (absorbed form). The routing is balanced
(uniform), as in DeepSeek's profiles. Nothing here is fitted: this table measures how far the
model is.

MTP speculative decoding (a point's ``mtp_acceptance``, set only where the source says the
system decodes with MTP): each step verifies one draft token per sequence (``q = 2``: the last
token and the draft, over the main model) and drafts the next with the one MTP module
(DeepSeek-V3 ``num_nextn_predict_layers = 1``: one more layer at ``q = 1``, costed as
``1/n_layers`` of a ``q = 1`` step); a step emits ``1 + acceptance`` tokens per sequence. The
ITL constraint of ``decode_slo`` is applied to the step time (the gap between token bursts).

* ``decode``: ``seqs_per_gpu`` one-token sequences per GPU at ``context`` keys; tokens/s per node
  = 8 · seqs_per_gpu / iteration seconds.
* ``prefill``: ``tokens_per_gpu / prompt`` whole prompts per GPU; tokens/s per node =
  8 · tokens_per_gpu / iteration seconds. With ``cache_hit`` h (the share of input tokens
  served from the prefix cache) each prompt computes only its last ``round(prompt·(1 − h))``
  tokens, attending to all ``prompt`` keys (its cached prefix included);
  ``tokens_per_gpu // that`` prompts per GPU, tokens/s per node = 8 · computed tokens /
  iteration seconds (the published figure counts computed tokens).
* ``a2a_sms`` (prefill rows): SMs the DeepEP normal kernels hold while overlapped; the
  overlapped compute runs on the rest (decode's low-latency kernels hold none, profile-data
  README "Decoding").
* ``decode_slo``: the largest batch per GPU (powers of two and midpoints) whose iteration fits
  the ITL; tokens/s per node at that batch.

Run: ``python benchmarks/serving_validation.py [--json]`` (prints predicted vs published, the
error and whether the stand-in's KV cache would fit; median/max |error| per set).
``--redundant-experts N``: every point with N EPLB redundant experts instead of its own count
(``0``: the points without replicas; a point whose experts + N do not split over its EP ranks
gets no prediction).
``--components``: per-layer components of each prefill point's busiest EP rank
(:func:`components`, milliseconds) beside the published per-layer time, and the point
predicted without its ``a2a_sms`` and ``cache_hit`` and without its ``cache_hit``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import yaml

from tilewright.dataflow_sim.cluster import (ClusterSpec, CollectiveTimer, IterationCost,
                                             ServePlan, Topology, chip_model)
from tilewright.dataflow_sim.cluster.moe_serving import standin_attention
from tilewright.dataflow_sim.cluster.plan import serve_memory
from tilewright.dataflow_sim.cluster.serving import SERVE_COMPONENTS
from tilewright.models.llm_configs import get_config

POINTS = Path(__file__).resolve().parent.parent / "configs" / "validation" / "serving_points.yaml"
DRAWS = 5          # routing draws averaged per iteration


def h800_cluster(nodes: int) -> ClusterSpec:
    """H800 nodes (serving_points.yaml header: NVLink 160 GB/s, one 50 GB/s NIC per GPU)."""
    return ClusterSpec.from_dict({
        "name": f"h800x{8 * nodes}", "chip": {"kind": "gpu", "preset": "h100-sxm"},
        "nodes": nodes, "chips_per_node": 8,
        "intra_node": {"topology": "switch", "link_gbps": 160.0, "latency_us": 0.5},
        "inter_node": {"topology": "fat_tree", "link_gbps": 50.0, "latency_us": 1.0,
                       "planes": 8, "nodes_per_leaf": 2, "spines": 2}})


def _plan(p: dict) -> ServePlan:
    # the table cost path does not read max_batch_tokens/max_seqs: the batch is given per call
    return ServePlan(ep=p["ep"], a2a="deepep", dispatch_bytes=1, weight_bytes=1,
                     gemm_format="fp8",
                     redundant_experts=p["redundant_experts"], overlap_a2a=True,
                     a2a_sms=p.get("a2a_sms", 0), max_batch_tokens=2**20, max_seqs=2**20)


def prefill_batch(p: dict) -> tuple[np.ndarray, np.ndarray]:
    """(new tokens, keys) per prompt of one GPU's prefill batch (module docstring): whole
    prompts, or with ``cache_hit`` the uncached end of each prompt over all its keys."""
    new = round(p["prompt"] * (1 - p.get("cache_hit", 0.0)))
    per = p["tokens_per_gpu"] // new
    return np.full(per, new), np.full(per, p["prompt"])


def _iteration(cost: IterationCost, q: np.ndarray, c: np.ndarray, ranks: np.ndarray) -> float:
    return float(np.mean([cost.seconds(q, c, len(q), ranks) for _ in range(DRAWS)]))


def _kv_fits(cfg, plan: ServePlan, spec: ClusterSpec, tokens_per_gpu: int) -> bool:
    mem = serve_memory(plan, chip_model(spec), cfg)
    return mem["kv_tokens"] >= tokens_per_gpu


def predict(p: dict) -> dict:
    """Predicted tokens/s per node of one point (module docstring)."""
    cfg, label = standin_attention(get_config(p["model"]))
    spec, ep = h800_cluster(p["nodes"]), p["ep"]
    plan = _plan(p)
    cost = IterationCost(cfg, plan, chip_model(spec), CollectiveTimer(Topology(spec)),
                         list(range(ep)), cost_source="table", seed=0)
    if p["phase"] == "prefill":
        q1, c1 = prefill_batch(p)
        per = len(q1)
        q, c = np.tile(q1, ep), np.tile(c1, ep)
        t = _iteration(cost, q, c, np.repeat(np.arange(ep), per))
        out = {"predicted": 8 * int(q1.sum()) / t, "iteration_s": t,
               "kv_fits": _kv_fits(cfg, plan, spec, int(c1.sum()))}
    else:
        acc = p.get("mtp_acceptance")

        def step(b: int, q: int) -> float:
            n = b * ep
            return _iteration(cost, np.full(n, q, np.int64), np.full(n, p["context"]),
                              np.repeat(np.arange(ep), b))

        def at(b: int) -> float:
            if acc is None:
                return step(b, 1)
            return step(b, 2) + step(b, 1) / cfg.n_layers     # verify 2 + draft (MTP layer)
        if p["phase"] == "decode":
            b = p["seqs_per_gpu"]
        else:
            sizes = sorted({int(x) for k in range(2, 10) for x in (2**k, 1.5 * 2**k)})
            fit = [s for s in sizes if at(s) <= p["itl_s"]]
            b = fit[-1] if fit else sizes[0]
        t = at(b)
        out = {"predicted": 8 * b * (1 + (acc or 0.0)) / t, "iteration_s": t, "seqs_per_gpu": b,
               "kv_fits": _kv_fits(cfg, plan, spec, b * p["context"])}
    out["attention"] = label
    return out


def components(p: dict) -> dict[str, float]:
    """Per-layer seconds of a prefill point's busiest EP rank (one routing draw per
    :data:`DRAWS`, experts averaged): core attention (MLA), the rest of the attention side
    (projections, norms, gate), shared experts, routed experts, dispatch and combine (both
    micro-batches), the SM scale of the overlapped compute, the layer under the overlap
    schedule and its exposed communication (layer − compute · SM scale), and that compute by
    component (GEMM, attention, other compute, kernel launches, at the SM share) — the split
    :meth:`IterationCost.moe_layers_comp` gives the serving simulation's ``components``;
    ``published_layer``:
    the published tokens/s per node turned into seconds per layer (8 · computed tokens per GPU
    / published / layers)."""
    cfg = get_config(p["model"])
    spec, ep = h800_cluster(p["nodes"]), p["ep"]
    cost = IterationCost(cfg, _plan(p), chip_model(spec), CollectiveTimer(Topology(spec)),
                         list(range(ep)), cost_source="table", seed=0)
    q, c = prefill_batch(p)
    T = int(q.sum())
    attn = cost.attention_seconds(q, c)
    lin, shared = cost._dense_seconds(T), cost.shared_seconds(T)
    draws = [cost.expert_seconds(cost.expert_loads(T * ep), parts=True) for _ in range(DRAWS)]
    experts = float(np.mean([x.mean() for x, _ in draws]))
    # (GEMM, launches, activation) of one layer, as SERVE_COMPONENTS
    g, o, v = np.mean([np.array(y) / len(x) for x, y in draws], axis=0)
    expert_parts = np.zeros(len(SERVE_COMPONENTS))
    expert_parts[[SERVE_COMPONENTS.index(k) for k in ("gemm_s", "overhead_s",
                                                       "other_compute_s")]] = g, o, v
    d, b = cost.a2a_parts(T / 2)
    layer = float(cost.overlap_period(lin + attn, shared, experts, d, b))
    compute = lin + attn + experts
    # the simulation's split of a layer (IterationCost.moe_layers_comp): compute at the SM
    # share it runs on while overlapped, exposed communication = layer − that compute
    split = dict(zip(SERVE_COMPONENTS, cost.moe_layers_comp(
        cost.layer_comp(T, attn), expert_parts, 1, layer, cost.sm_scale).tolist()))
    return {"tokens_per_gpu": T, "attention": attn, "attention_side": lin - shared,
            "shared": shared, "experts": experts, "compute": compute,
            "sm_scale": cost.sm_scale, "dispatch": 2 * d, "combine": 2 * b, "layer": layer,
            "exposed_comm": split["exposed_comm_s"],
            **{f"{k[:-2]} (overlapped)": v for k, v in split.items() if k != "exposed_comm_s"},
            "published_layer": 8 * T / p["published_tokens_per_s_per_node"] / cfg.n_layers}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--components", action="store_true",
                    help="per-layer components of the prefill points (ms)")
    ap.add_argument("--redundant-experts", type=int, metavar="N",
                    help="every point with N redundant experts instead of its own count (a "
                         "point whose experts + N do not split over its EP ranks is printed "
                         "without a prediction)")
    args = ap.parse_args()
    points = yaml.safe_load(POINTS.read_text())["points"]
    if args.redundant_experts is not None:
        if args.redundant_experts < 0:
            ap.error(f"--redundant-experts = {args.redundant_experts}: must be >= 0")
        points = [{**p, "redundant_experts": args.redundant_experts} for p in points]
    if args.components:
        for p in points:
            if p["phase"] == "prefill":
                x = components(p)
                print(p["name"] + ": " + ", ".join(
                    f"{k} {v:.3f}" if k in ("sm_scale",) else f"{k} {v}" if k == "tokens_per_gpu"
                    else f"{k} {v * 1e3:.2f} ms" for k, v in x.items()))
                pub = p["published_tokens_per_s_per_node"]
                for label, q in (("without a2a_sms and cache_hit", {"a2a_sms": 0, "cache_hit": 0}),
                                 ("without cache_hit", {"cache_hit": 0}), ("as given", {})):
                    r = predict({**p, **q})["predicted"]
                    print(f"  {label}: {r:.0f} tokens/s per node ({r / pub - 1:+.1%})")
        return
    rows = []
    for p in points:
        pub = p["published_tokens_per_s_per_node"]
        if (get_config(p["model"]).n_experts + p["redundant_experts"]) % p["ep"]:
            rows.append({"point": p["name"], "set": p["set"], "published": pub,
                         "predicted": None, "error": None, "iteration_ms": None,
                         "seqs_per_gpu": None, "stand-in KV fits": None})
            continue
        r = predict(p)
        rows.append({"point": p["name"], "set": p["set"], "published": pub,
                     "predicted": round(r["predicted"]), "error": r["predicted"] / pub - 1,
                     "iteration_ms": r["iteration_s"] * 1e3,
                     "seqs_per_gpu": r.get("seqs_per_gpu"), "stand-in KV fits": r["kv_fits"]})
    if args.json:
        print(json.dumps(rows))
        return
    cols = list(rows[0])
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join("no placement" if c == "predicted" and r[c] is None else
                         "-" if r[c] is None else
                         f"{r[c]:+.1%}" if c == "error" else
                         f"{r[c]:.1f}" if isinstance(r[c], float) else str(r[c]) for c in cols))
    for s in ("calibration", "held_out"):
        e = [abs(r["error"]) for r in rows if r["set"] == s and r["error"] is not None]
        if e:
            print(f"{s}: median |error| {np.median(e):.1%}, max {max(e):.1%} ({len(e)} points)")
    print("attention: " + str(standin_attention(get_config(points[0]["model"]))[1]))


if __name__ == "__main__":
    main()
