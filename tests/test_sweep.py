"""Sweep files, search methods, results store (incl. kill -9 and resume), Pareto, constraints."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.test_sweep_store import wait_until_stored
from tilewright.compiler.gemm_mapper import GemmOp, map_gemm
from tilewright.app.sweep import (ResultsStore, SweepError, load_sweep, pareto_frame, pareto_mask,
                              run_sweep, sweep_from_dict)

GEMM_SWEEP = {
    "name": "t",
    "base": "ws16x16",
    "tech": "45nm",
    "axes": {"tensor_engine.rows,tensor_engine.cols": [8, 16, 32],
             "tensor_engine.dataflow": ["ws", "os"],
             "memory.scratchpad_kib": [64, 256]},
    "workloads": [{"gemm": [256, 512, 512], "format": "int8"}],
    "objectives": ["latency", "energy"],
}


def _spec(**changes):
    d = json.loads(json.dumps(GEMM_SWEEP))
    d.update(changes)
    return sweep_from_dict(d, source="t.yaml")


# ---- pareto ----------------------------------------------------------------------------------
def _brute_front(v, dirs):
    s = np.array([1 if d == "minimize" else -1 for d in dirs])
    w = v * s
    out = []
    for i in range(len(w)):
        dom = any(np.all(w[j] <= w[i]) and np.any(w[j] < w[i]) for j in range(len(w)) if j != i)
        out.append(not dom)
    return np.array(out)


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("seed", range(6))
def test_pareto_matches_brute_force(k, seed):
    rng = np.random.default_rng(seed)
    v = rng.integers(0, 8, size=(60, k)).astype(float)      # ties and duplicates on purpose
    dirs = ["minimize", "maximize", "minimize"][:k]
    assert (pareto_mask(v, dirs) == _brute_front(v, dirs)).all()


def test_pareto_ignores_nan():
    v = np.array([[1.0, 1.0], [np.nan, 0.0], [2.0, 0.5]])
    assert pareto_mask(v, ["minimize", "minimize"]).tolist() == [True, False, True]


# ---- spec errors -----------------------------------------------------------------------------
@pytest.mark.parametrize("change, words", [
    ({"axes": {"tensor_engine.rowz": [8]}}, ["axes.", "rowz", "not a field", "rows"]),
    ({"axes": {"tensor_engine": [8]}}, ["axes.", "is a section"]),
    ({"axes": {"clock_mhz": {"low": 5}}}, ["clock_mhz", "needs `low` and `high`"]),
    ({"axes": {"clock_mhz": {"low": 100, "high": 500}}}, ["step", "grid"]),
    ({"objectives": ["speed"]}, ["objectives", "'speed'", "latency_s"]),
    ({"constraints": ["area_mm2 ~ 3"]}, ["constraints", "'area_mm2 ~ 3'", "<="]),
    ({"workloads": [{"gemm": [1, 2, 3], "model": "llama3-8b"}]}, ["workloads[0]", "exactly one"]),
    ({"workloads": [{"model": "gpt5"}]}, ["workloads[0]", "'gpt5'", "llama3-8b"]),
    ({"workloads": [{"gemm": [8, 8, 8], "format": "int4"}]}, ["workloads[0]", "'int4'"]),
    ({"workloads": [{"gemm": [8, 8, 8], "sq": 3}]}, ["workloads[0].sq", "unknown key"]),
    ({"search": {"method": "tpe"}}, ["search.trials", "required"]),
    ({"search": {"method": "annealing"}}, ["search.method", "'annealing'"]),
    ({"bogus": 1}, ["bogus", "unknown key", "axes"]),
    ({"base": "nosuchpreset"}, ["base", "nosuchpreset", "presets"]),
    ({"tech": "3nm"}, ["tech", "3nm", "45nm", "7nm"]),
])
def test_malformed_sweep_one_line_errors(change, words):
    with pytest.raises(SweepError) as ei:
        _spec(**change)
    msg = str(ei.value)
    assert "\n" not in msg and msg.startswith("t.yaml")
    for w in words:
        assert w in msg, (w, msg)


def test_missing_key_and_bad_yaml(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("name: x\naxes: [\n")
    with pytest.raises(SweepError, match=r"s.yaml: line \d+ is not valid YAML"):
        load_sweep(p)
    d = dict(GEMM_SWEEP)
    del d["workloads"]
    p.write_text(yaml.safe_dump(d))
    with pytest.raises(SweepError, match="workloads = \\(missing\\): is required"):
        load_sweep(p)


def test_example_sweeps_validate():
    root = Path(__file__).resolve().parents[1] / "configs" / "sweeps"
    files = sorted(root.glob("*.yaml"))
    assert len(files) >= 3
    for f in files:
        load_sweep(f)


def test_linked_axes_and_format_axis():
    s = _spec(axes={"tensor_engine.rows,tensor_engine.cols": [4],
                    "tensor_engine.input_format": ["bf16"]},
              workloads=[{"gemm": [256, 512, 512]}])      # runs in each point's format
    a = s.arch_for(s.grid_points()[0])
    te = a.tensor_engine
    assert (te.rows, te.cols, te.weight_format, te.accumulator_format) == (4, 4, "bf16", "fp32")


# ---- running ---------------------------------------------------------------------------------
def test_grid_metrics_and_resume(tmp_path):
    spec = _spec()
    db = tmp_path / "r.db"
    res = run_sweep(spec, db, workers=2)
    assert (res.evaluated, res.reused, res.total) == (12, 0, 12)
    df = ResultsStore(db).frame("t")
    assert len(df) == 12 and (df["status"] == "ok").all() and df["key"].is_unique
    row = df.set_index("trial").loc[0]          # rows are stored in completion order
    arch = spec.arch_for(spec.grid_points()[0])
    cost = map_gemm(GemmOp("g", 256, 512, 512, elem_bytes=1), arch).cost
    assert row["latency_s"] == pytest.approx(cost.cycles / (arch.clock_mhz * 1e6))
    assert row["throughput_tops"] == pytest.approx(2 * 256 * 512 * 512 / row["latency_s"] / 1e12)
    assert row["perf_per_w"] == pytest.approx(row["throughput_tops"] / row["power_w"])
    with pytest.raises(SweepError, match="--resume"):
        run_sweep(spec, db, workers=1)
    again = run_sweep(spec, db, workers=1, resume=True)
    assert (again.evaluated, again.reused) == (0, 12)
    out = ResultsStore(db).export(tmp_path / "r.csv")
    assert len(out.read_text().splitlines()) == 13


def test_constraints_filter_and_skip(tmp_path):
    # 9 mm^2 laid out (45 nm table, 16 GB/s DDR4 PHY 2.4 of it): the 8x8 and 16x16 points with
    # 64 KiB of scratchpad (6.8 and 8.4 mm^2) pass, the rest (9.9 .. 16.8 mm^2) do not
    spec = _spec(constraints=["area_mm2 <= 9", {"metric": "throughput", "min": 0.1}])
    db = tmp_path / "c.db"
    run_sweep(spec, db, workers=2)
    df = ResultsStore(db).frame("t")
    # static constraint violated -> workloads skipped; feasible iff both constraints hold
    assert set(df.loc[df["area_mm2"] > 9, "status"]) == {"skipped"}
    ok = df[df["status"] == "ok"]
    assert (ok["feasible"] == (ok["throughput_tops"] >= 0.1)).all()
    assert 0 < (df["status"] == "skipped").sum() < len(df) and 0 < ok["feasible"].sum() < len(ok)
    assert not df.loc[df["status"] == "skipped", "feasible"].any()
    front = pareto_frame(df, [("latency_s", "minimize"), ("energy_j", "minimize")])
    assert front["feasible"].all() and len(front) >= 1


def test_invalid_points_are_stored_not_fatal(tmp_path):
    spec = _spec(axes={"tensor_engine.rows": [8, 32], "tensor_engine.input_format": ["mxint8"]},
                 workloads=[{"gemm": [256, 512, 512]}])      # runs in each point's format
    db = tmp_path / "i.db"
    res = run_sweep(spec, db, workers=1)
    df = ResultsStore(db).frame("t")
    assert res.invalid == 1 and sorted(df["status"]) == ["invalid", "ok"]
    assert "multiple of 32" in df.loc[df["status"] == "invalid", "error"].iloc[0]


@pytest.mark.parametrize("method", ["random", "tpe", "nsga2"])
def test_search_methods_and_resume(tmp_path, method):
    axes = {"tensor_engine.rows": {"low": 8, "high": 64, "step": 8},
            "tensor_engine.cols": {"low": 8, "high": 64, "step": 8},
            "tensor_engine.dataflow": ["ws", "os"],
            "offchip.bandwidth_gbps": {"low": 8.0, "high": 64.0, "log": True}}
    spec = _spec(axes=axes, search={"method": method, "trials": 16, "population": 8},
                 constraints=["area_mm2 <= 3"])
    db = tmp_path / "s.db"
    first = run_sweep(spec, db, workers=2)
    n1 = ResultsStore(db).count("t")
    assert first.evaluated == n1 and 1 <= n1 <= 16
    more = _spec(axes=axes, search={"method": method, "trials": 24, "population": 8},
                 constraints=["area_mm2 <= 3"])
    second = run_sweep(more, db, workers=2, resume=True)
    df = ResultsStore(db).frame("t")
    assert df["key"].is_unique and len(df) == n1 + second.evaluated
    assert second.evaluated + second.reused >= 24 - first.reused
    assert df["p:tensor_engine.rows"].between(8, 64).all()
    assert df["p:offchip.bandwidth_gbps"].between(8.0, 64.0).all()


def test_dask_executor(tmp_path):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        res = run_sweep(_spec(), tmp_path / "d.db", executor="dask",
                        dask_address=cluster.scheduler_address)
    local = run_sweep(_spec(), tmp_path / "l.db", workers=1)
    a = ResultsStore(tmp_path / "d.db").frame("t").set_index("key")
    b = ResultsStore(tmp_path / "l.db").frame("t").set_index("key")
    assert res.evaluated == 12
    assert np.allclose(a.loc[b.index, "latency_s"], b["latency_s"])


def _wait_lock_free(db: Path, timeout_s: float = 10.0) -> None:
    """Wait until no process holds the writer lock of ``db``: the killed sweep's forked pool
    workers share its lock and may still be exiting when the sweep process itself is reaped."""
    import fcntl
    import time
    deadline = time.time() + timeout_s
    with open(db.with_name(db.name + ".lock"), "a+") as f:
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(f, fcntl.LOCK_UN)
                return
            except BlockingIOError:
                if time.time() > deadline:
                    raise
                time.sleep(0.05)


def test_kill9_then_resume_loses_nothing_and_reevaluates_nothing(tmp_path):
    spec = {**GEMM_SWEEP, "axes": {"tensor_engine.rows": [8, 16, 24, 32, 40, 48],
                                   "tensor_engine.cols": [8, 16, 32, 64],
                                   "tensor_engine.dataflow": ["ws", "os"]}}
    f = tmp_path / "k.yaml"
    f.write_text(yaml.safe_dump(spec))
    db = tmp_path / "k.db"
    code = ("import sys; from tilewright.app.sweep import load_sweep, run_sweep; "
            "run_sweep(load_sweep(sys.argv[1]), sys.argv[2], workers=2)")
    env = {**os.environ, "TILEWRIGHT_SWEEP_TEST_DELAY_S": "0.15"}
    proc = subprocess.Popen([sys.executable, "-c", code, str(f), str(db)], env=env,
                            start_new_session=True)
    wait_until_stored(db, proc, 8, timeout_s=40)
    assert proc.poll() is None, "the sweep finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)                    # the sweep and its pool workers
    proc.wait()
    _wait_lock_free(db)
    with ResultsStore(db) as s:
        before = s.frame("t")
    assert 8 <= len(before) < 48
    res = run_sweep(load_sweep(f), db, workers=2, resume=True)
    with ResultsStore(db) as s:
        after = s.frame("t")
    assert len(after) == 48 and after["key"].is_unique                  # no point lost
    assert res.reused == len(before) and res.evaluated == 48 - len(before)  # none re-evaluated
    kept = after.set_index("key").loc[before["key"]]
    assert (kept["run_id"] == before["run_id"].iloc[0]).all()           # rows untouched
    assert (after.loc[~after["key"].isin(before["key"]), "run_id"] == res.run_id).all()
    expected = {(r, c, d) for r, c, d in itertools.product([8, 16, 24, 32, 40, 48],
                                                           [8, 16, 32, 64], ["ws", "os"])}
    got = set(zip(after["p:tensor_engine.rows"], after["p:tensor_engine.cols"],
                  after["p:tensor_engine.dataflow"]))
    assert got == expected


def test_cli_sweep_and_report(tmp_path):
    import typer
    from typer.testing import CliRunner

    from tilewright.app.cli.sweep import report, sweep

    app = typer.Typer()
    app.command("sweep")(sweep)
    app.command("report")(report)
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(GEMM_SWEEP))
    r = CliRunner().invoke(app, ["sweep", str(f), "--db", str(tmp_path / "s.db"), "--workers",
                                 "1", "--export", str(tmp_path / "s.csv")])
    assert r.exit_code == 0, r.output
    assert "12 points evaluated" in r.output and (tmp_path / "s.csv").exists()
    r = CliRunner().invoke(app, ["report", str(tmp_path / "s.db"), "-o", str(tmp_path / "rep")])
    assert r.exit_code == 0, r.output
    html = (tmp_path / "rep" / "index.html").read_text()
    assert "Pareto front" in html and list((tmp_path / "rep").glob("*.png"))
    r = CliRunner().invoke(app, ["sweep", str(tmp_path / "nope.yaml")])
    assert isinstance(r.exception, SweepError)
