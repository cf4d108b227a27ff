"""benchmarks/validation.py joins the three validation files into one table: every collective
(nccl-tests) and MoE serving row appears with its set, source and error, and the held-out totals
count them."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _validation():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import validation   # noqa: PLC0415  (the benchmark script, not a package)
    finally:
        sys.path.pop(0)
    return validation


def test_collective_and_serving_rows_join_the_table():
    v = _validation()
    nccl = yaml.safe_load((ROOT / "configs/validation/collective_points.yaml").read_text())["rows"]
    serve = yaml.safe_load((ROOT / "configs/validation/serving_points.yaml").read_text())["points"]
    rows = v.evaluate_collectives() + v.evaluate_serving()
    assert [r["id"] for r in rows] == [p["id"] for p in nccl] + [p["name"] for p in serve]
    published = [p["measured_busbw_gbps"] for p in nccl] + \
        [p["published_tokens_per_s_per_node"] for p in serve]
    for r, pub, p in zip(rows, published, nccl + serve):
        assert r["published"] == pub and r["set"] == p["set"] and r["source"]
        assert r["failed"] is None and r["predicted"] > 0
        assert math.isclose(r["error"], r["predicted"] / pub - 1)
    s = v.summary(rows)
    assert s["held_out_points"] == sum(p["set"] == "held_out" for p in nccl + serve)
    held = sorted(abs(r["error"]) for r in rows if r["set"] == "held_out")
    assert s["held_out_max"] == held[-1]
    # a held-out set filter keeps only held-out rows
    assert {r["set"] for r in v.evaluate_serving("held_out")} == {"held_out"}


def test_no_measurement_is_counted_twice():
    # one published measurement (source, figure, collective, GPU) is one row of the table: the
    # cluster file's collective rows and the nccl-tests file's rows must not repeat each other
    from tilewright.dataflow_sim.cluster.nccl_calibration import load_points as load_nccl_points
    v = _validation()
    data = v.load()
    preset = {name: c["chip"]["preset"] for name, c in (data.get("clusters") or {}).items()}
    preset.update({"h100-8x-nvlink": "h100-sxm", "a100-8x-nvlink": "a100-sxm-80gb"})

    def key(source, published, collective, gpu):     # the source's URL (its first word)
        return (str(source).split()[0], float(published), collective, gpu)

    ours = [key(p["source"], p["published"], p["collective"], preset.get(p["cluster"]))
            for p in data["points"] if p["kind"] == "collective"]
    theirs = [key(r["source"], r["measured_busbw_gbps"], r["collective"], r["gpu"])
              for r in load_nccl_points()]
    assert not set(ours) & set(theirs)
    assert len(set(theirs)) == len(theirs)


def test_mlperf_offline_point_matches_its_cited_workload():
    # the MLPerf Inference v4.1 llama2-70b Offline row: its drawn lengths have the cited means
    # (OpenOrca input tokens 5,463,976 / 24,576; generated tokens 24,524.9 / 84.4792 per
    # sample), its plan is NVIDIA's 4 x TP2 with 896 sequences, and an Offline run queues every
    # request at 0 s
    v = _validation()
    data = v.load()
    p = next(q for q in data["points"] if q["id"].startswith("mlperf-inf-v41-llama2-70b"))
    assert p["set"] == "held_out" and p["published"] == 24524.9
    r = p["requests"]
    assert r["n"] == 24576 and math.isinf(r["rate"])
    assert sum(r["prompt_tokens"]) / 2 == pytest.approx(5463976 / 24576, rel=0.005)
    assert sum(r["output_tokens"]) / 2 == pytest.approx(24524.9 / 84.4792, rel=0.005)
    assert p["plan"]["tp"] * 4 == 8 and p["plan"]["max_seqs"] == 896
    seen = {}
    real = v.simulate_serving
    v.simulate_serving = lambda spec, cfg, plan, reqs: seen.update(reqs=reqs) or real(
        spec, cfg, plan, reqs)
    try:
        small = {**p, "requests": {**r, "n": 16}}
        m = v.run_point(data, small)
    finally:
        v.simulate_serving = real
    reqs = seen["reqs"]
    assert (reqs.arrival_s == 0).all() and len(reqs) == 16
    assert reqs.prompt_tokens.between(48, 397).all() and reqs.output_tokens.between(1, 580).all()
    assert m["finished"] == 16 and m["throughput_tokens_per_s"] > 0
