"""benchmarks/validation.py joins the three validation files into one table: every collective
(nccl-tests) and MoE serving row appears with its set, source and error, and the held-out totals
count them."""

from __future__ import annotations

import math
import sys
from pathlib import Path

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
