"""Sweeps an architect can use (issue 22, item 9): per-workload metrics as columns, objectives and
constraints per workload, J/token and pJ/MAC, a failing workload stored as each point's one-line
error while the sweep goes on, parameter columns that stay readable in CSV/Parquet."""

from __future__ import annotations

import csv
import json
import math

import pytest

from tilewright.app.sweep import ResultsStore, SweepError, run_sweep, sweep_from_dict
from tilewright.app.sweep.evaluate import evaluate_point
from tilewright.app.sweep.spec import PER_WORKLOAD_METRICS
from tilewright.arch import load_arch

BASE = {
    "name": "a",
    "base": "ws16x16",
    "tech": "45nm",
    "axes": {"tensor_engine.rows,tensor_engine.cols": [8, 16]},
    "workloads": [{"gemm": [64, 64, 64], "name": "small"},
                  {"gemm": [256, 256, 256], "weight": 2.0}],
    "objectives": ["latency"],
}


def _spec(**changes):
    d = json.loads(json.dumps(BASE))
    d.update(changes)
    return sweep_from_dict(d, source="a.yaml")


def _point(workloads):
    arch = load_arch("ws16x16").model_dump(mode="json", exclude_none=True)
    return evaluate_point(arch, workloads, "45nm")


def test_per_workload_metrics_are_each_workloads_own_figures():
    """Workload tags: the name, else w<index>. Per-workload figures are unweighted: the point's
    latency is 1·small + 2·w1 (the weights), and each pJ/MAC is J / MACs with the MACs by hand
    (64³ = 262144 and 256³ = 16777216)."""
    r = _point([{"gemm": [64, 64, 64], "name": "small", "batch": 1},
                {"gemm": [256, 256, 256], "weight": 2.0, "batch": 1}])
    m = r["metrics"]
    assert r["status"] == "ok"
    for tag in ("small", "w1"):
        assert {f"{tag}:{k}" for k in PER_WORKLOAD_METRICS} <= set(m)
    assert m["small:macs"] == 64 ** 3 and m["w1:macs"] == 256 ** 3
    assert m["latency_s"] == pytest.approx(m["small:latency_s"] + 2 * m["w1:latency_s"])
    assert m["energy_j"] == pytest.approx(m["small:energy_j"] + 2 * m["w1:energy_j"])
    assert m["small:pj_per_mac"] == pytest.approx(m["small:energy_j"] / 64 ** 3 * 1e12)
    assert m["pj_per_mac"] == pytest.approx(m["energy_j"] / (64 ** 3 + 2 * 256 ** 3) * 1e12)
    # a GEMM has no tokens: J/token is not a number, not zero
    assert math.isnan(m["j_per_token"]) and math.isnan(m["small:j_per_token"])
    # utilization of a 16x16 array: MACs / (cycles · 256)
    assert m["w1:utilization"] == pytest.approx(256 ** 3 / (m["w1:cycles"] * 256))


def test_j_per_token_of_an_llm_workload():
    """tiny-llama decode, batch 2: 2 tokens per step, so J/token = J / 2 = 1 / (tokens/J)."""
    r = _point([{"model": "tiny-llama", "seq": 16, "batch": 2, "phase": "decode", "layers": 1}])
    m = r["metrics"]
    assert r["status"] == "ok", r["error"]
    assert m["w0:j_per_token"] == pytest.approx(m["w0:energy_j"] / 2)
    assert m["j_per_token"] == pytest.approx(1 / m["tokens_per_j"])
    assert m["w0:tokens_per_s"] == pytest.approx(2 / m["w0:latency_s"])


def test_objectives_and_constraints_per_workload_parse():
    spec = _spec(objectives=[{"metric": "latency", "workload": "small"},
                             {"metric": "energy_j", "workload": 1}, "j_per_token"],
                 constraints=["w1:latency_s <= 1", {"metric": "pj_per_mac", "workload": "small",
                                                     "max": 100}])
    assert [(o.metric, o.direction) for o in spec.objectives] == [
        ("small:latency_s", "minimize"), ("w1:energy_j", "minimize"), ("j_per_token", "minimize")]
    assert [(c.metric, c.max) for c in spec.constraints] == [("w1:latency_s", 1.0),
                                                             ("small:pj_per_mac", 100.0)]


@pytest.mark.parametrize("changes, match", [
    ({"objectives": [{"metric": "latency", "workload": "decode"}]},
     r"^a\.yaml: objectives .*workload 'decode' is not a workload of this sweep \(names or tags: "
     r"small, w1"),
    ({"objectives": [{"metric": "latency", "workload": 5}]}, r"workload 5 is not a workload"),
    ({"constraints": ["w0:latency_s <= 1"]}, r"^a\.yaml: constraints .*workload 'w0' is not"),
    ({"objectives": [{"metric": "area_mm2", "workload": "small"}]},
     r"area_mm2 is not reported per workload \(accepted: latency_s, energy_j"),
    ({"objectives": [{"metric": "latency", "workload": "small", "weight": 2}]},
     r"accepted keys are metric, direction and workload"),
    ({"workloads": [{"gemm": [8, 8, 8], "name": "g"}, {"gemm": [16, 8, 8], "name": "g"}]},
     r"^a\.yaml: workloads\[1\]\.name = 'g': must be unique"),
    ({"workloads": [{"gemm": [8, 8, 8], "name": "a:b"}]}, r"contain no ':'"),
])
def test_bad_per_workload_objectives_are_one_line(changes, match):
    with pytest.raises(SweepError, match=match) as ei:
        _spec(**changes)
    assert "\n" not in str(ei.value)


def test_a_per_workload_constraint_decides_feasibility(tmp_path):
    """The constraint reads the workload's own latency: the 8x8 point's w1 GEMM (256³) is slower
    than the 16x16 point's, and the threshold between them makes only the 16x16 point feasible,
    though its aggregate latency is not what the constraint names."""
    probe = {n: _point_for(n) for n in (8, 16)}
    lo, hi = probe[16]["w1:latency_s"], probe[8]["w1:latency_s"]
    assert lo < hi
    spec = _spec(constraints=[{"metric": "latency_s", "workload": 1, "max": (lo + hi) / 2}])
    run_sweep(spec, tmp_path / "c.db", workers=1)
    with ResultsStore(tmp_path / "c.db") as s:
        df = s.frame("a").set_index("p:tensor_engine.rows")
    assert bool(df.loc[16, "feasible"]) and not bool(df.loc[8, "feasible"])
    assert df.loc[8, "w1:latency_s"] == pytest.approx(hi)


def _point_for(side: int) -> dict:
    arch = load_arch("ws16x16").model_dump(mode="json", exclude_none=True)
    arch["tensor_engine"].update(rows=side, cols=side)
    return evaluate_point(arch, [w | {"batch": 1} for w in BASE["workloads"]], "45nm")["metrics"]


def test_a_failing_workload_is_each_points_one_line_error(tmp_path):
    """tiny-llama has a 256-token context: a 300-token prefill cannot be built. The sweep still
    evaluates every point and stores the error in one line (it used to stop in the driver)."""
    spec = _spec(workloads=[{"gemm": [64, 64, 64]}, {"model": "tiny-llama", "seq": 300}])
    res = run_sweep(spec, tmp_path / "e.db", workers=1)
    assert res.evaluated == 2
    with ResultsStore(tmp_path / "e.db") as s:
        df = s.frame("a")
    assert (df["status"] == "error").all() and len(df) == 2
    for err in df["error"]:
        assert "\n" not in err and len(err) < 300
        assert "--seq 300 needs 300 positions" in err and "max_seq_len = 256" in err


def test_parameter_columns_stay_readable_in_csv_and_parquet(tmp_path):
    """A comma-joined axis becomes one column per path (no comma in any CSV header), and a
    zipped axis (one value per path) gives each path its own scalar value."""
    axes = {"tensor_engine.rows,tensor_engine.cols": [8, 16],
            "memory.scratchpad_kib,memory.accumulator_kib": [[64, 32], [128, 64]]}
    spec = _spec(axes=axes, workloads=[{"gemm": [64, 64, 64]}])
    db = tmp_path / "x.db"
    run_sweep(spec, db, workers=1)
    with ResultsStore(db) as s:
        path = s.export(tmp_path / "x.csv", "a")
        frame = s.frame("a")
    with open(path, newline="") as f:
        header = next(csv.reader(f))
    params = [h for h in header if h.startswith("p:")]
    assert sorted(params) == ["p:memory.accumulator_kib", "p:memory.scratchpad_kib",
                              "p:tensor_engine.cols", "p:tensor_engine.rows"]
    assert not any("," in h for h in header)
    pairs = set(zip(frame["p:memory.scratchpad_kib"], frame["p:memory.accumulator_kib"]))
    assert pairs == {(64, 32), (128, 64)}
    assert (frame["p:tensor_engine.rows"] == frame["p:tensor_engine.cols"]).all()
    pytest.importorskip("pyarrow")
    import pandas as pd
    with ResultsStore(db) as s:
        pq = s.export(tmp_path / "x.parquet", "a")
    back = pd.read_parquet(pq)
    assert back["p:memory.accumulator_kib"].dtype.kind == "i"
    assert sorted(back["p:tensor_engine.rows"]) == [8, 8, 16, 16]


def test_report_plots_a_per_workload_front(tmp_path):
    """The report's Pareto plot of per-workload objectives: the axis is the workload's column,
    the file name has no ':' (not a URL scheme in the page, a legal name everywhere)."""
    from tilewright.app.sweep.report import write_report
    spec = _spec(objectives=[{"metric": "latency_s", "workload": "small"}, "pj_per_mac"])
    run_sweep(spec, tmp_path / "r.db", workers=1)
    page = write_report(tmp_path / "r.db", tmp_path / "rep")
    names = [p.name for p in (tmp_path / "rep").iterdir()]
    assert "a_pareto_small_latency_s_pj_per_mac.png" in names
    assert not any(":" in n for n in names)
    assert "a_pareto_small_latency_s_pj_per_mac.png" in page.read_text()
