"""Sweep executors and exports: a Ray run (local Ray started by the test) stores the same points
and metrics as the local process pool; Parquet and CSV exports read back equal to the store."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest
import yaml

from tilewright.app.sweep import ResultsStore, run_sweep, sweep_from_dict
from tilewright.app.sweep.store import counts_as_integers

SMALL = {
    "name": "x",
    "base": "ws16x16",
    "tech": "45nm",
    "axes": {"tensor_engine.rows,tensor_engine.cols": [8, 16, 32],
             "tensor_engine.dataflow": ["ws", "os"]},
    "workloads": [{"gemm": [128, 256, 256], "format": "int8"}],
    "objectives": ["latency", "energy"],
}
METRIC_COLS = ["latency_s", "energy_j", "area_mm2", "cycles", "dram_bytes", "macs", "utilization"]


def _spec():
    return sweep_from_dict(json.loads(json.dumps(SMALL)), source="x.yaml")


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    # a local Ray with 2 worker CPUs, no dashboard (startup is ~10-20 s on a loaded 2-core box)
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING", log_to_driver=False)
    yield ray
    ray.shutdown()


def test_ray_executor_matches_local(tmp_path, local_ray):
    import typer
    from typer.testing import CliRunner

    from tilewright.app.cli.sweep import sweep

    app = typer.Typer()
    app.command("sweep")(sweep)
    app.command("noop")(lambda: None)
    f = tmp_path / "x.yaml"
    f.write_text(yaml.safe_dump(SMALL))
    r = CliRunner().invoke(app, ["sweep", str(f), "--db", str(tmp_path / "ray.db"),
                                 "--executor", "ray"])
    assert r.exit_code == 0, r.output
    assert "6 points evaluated" in r.output
    assert local_ray.is_initialized()                 # the test's Ray was used, not shut down
    run_sweep(_spec(), tmp_path / "local.db", workers=1)
    with ResultsStore(tmp_path / "ray.db") as s:
        a = s.frame("x").set_index("key")
        runs = s.runs()
        pids = set(s.raw("x")["pid"])
    with ResultsStore(tmp_path / "local.db") as s:
        b = s.frame("x").set_index("key")
    assert list(runs["executor"]) == ["ray"]
    assert sorted(a.index) == sorted(b.index) and len(a) == 6
    assert (a["status"] == "ok").all()
    np.testing.assert_allclose(a.loc[b.index, METRIC_COLS].to_numpy(float),
                               b[METRIC_COLS].to_numpy(float), rtol=1e-12)
    assert os.getpid() not in pids                   # evaluated in Ray worker processes
    # resume through Ray: nothing re-evaluated
    res = run_sweep(_spec(), tmp_path / "ray.db", executor="ray", resume=True)
    assert (res.evaluated, res.reused) == (0, 6)


def test_unknown_executor_is_one_line_error(tmp_path):
    from tilewright.app.sweep import SweepError
    with pytest.raises(SweepError, match=r"--executor 'spark': must be one of local, dask, ray"):
        run_sweep(_spec(), tmp_path / "e.db", executor="spark")


def test_parquet_and_csv_exports_read_back_equal(tmp_path):
    db = tmp_path / "p.db"
    run_sweep(_spec(), db, workers=1)
    with ResultsStore(db) as s:
        frame = s.frame("x")
        pq = s.export(tmp_path / "p.parquet", "x")
        csv = s.export(tmp_path / "p.csv", "x")
    import pyarrow.parquet as papq
    back = pd.read_parquet(pq)
    # the export writes counts (cycles, MACs, ...) as whole numbers, the rest as stored
    pd.testing.assert_frame_equal(back, counts_as_integers(frame))
    assert str(back["cycles"].dtype) == "Int64" and (back["cycles"] >= 1).all()
    assert papq.read_table(pq).num_rows == 6
    cback = pd.read_csv(csv)
    assert list(cback.columns) == list(frame.columns)
    num = [c for c in frame.columns if pd.api.types.is_numeric_dtype(frame[c])]
    np.testing.assert_allclose(cback[num].to_numpy(float), frame[num].to_numpy(float),
                               rtol=1e-12, equal_nan=True)
    assert (cback["key"] == frame["key"]).all()
    # the independent reference for a metric: area of the 8x8 point from the area model
    from tilewright.dataflow_sim.energy_area import area_mm2, load_tech
    arch = _spec().arch_for({"tensor_engine.rows,tensor_engine.cols": 8,
                             "tensor_engine.dataflow": "ws"})
    row = back[(back["p:tensor_engine.rows"] == 8)
               & (back["p:tensor_engine.dataflow"] == "ws")]
    assert row["area_mm2"].iloc[0] == pytest.approx(area_mm2(arch, load_tech("45nm")))
