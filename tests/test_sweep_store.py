"""A sweep database has one owner and one definition (issue: every answer is to the question
asked).

Before: ``--resume`` after the workload changed (GEMM 64 -> 128x256x256) mixed old and new points
under one sweep name and drew a Pareto front of the old workload's points; two sweeps on one
database both passed the "already holds N points" guard; after ``kill -9`` of a sweep (local
executor) its pool workers stayed alive, orphaned, for as long as anyone looked; the dead run's
row stayed unfinished.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tilewright.app.sweep import ResultsStore, SweepError, load_sweep, run_sweep, sweep_from_dict

SWEEP = {
    "name": "t",
    "base": "ws16x16",
    "tech": "45nm",
    "axes": {"tensor_engine.rows,tensor_engine.cols": [8, 16],
             "tensor_engine.dataflow": ["ws", "os"]},
    "workloads": [{"gemm": [64, 64, 64], "format": "int8"}],
    "objectives": ["latency", "energy"],
}


def _spec(**changes):
    return sweep_from_dict({**json.loads(json.dumps(SWEEP)), **changes}, source="test")


@pytest.mark.parametrize("changes,part", [
    ({"workloads": [{"gemm": [128, 256, 256], "format": "int8"}]}, "workloads"),
    ({"tech": "7nm"}, "tech"),
    ({"base": "os16x16"}, "base"),
    ({"constraints": ["area_mm2 <= 1"]}, "constraints"),
    ({"axes": {"tensor_engine.rows,tensor_engine.cols": [8, 32],
               "tensor_engine.dataflow": ["ws", "os"]}}, "axes"),
])
def test_resume_with_a_changed_definition_is_refused_naming_what_changed(tmp_path, changes, part):
    db = tmp_path / "s.db"
    run_sweep(_spec(), db, workers=1)
    with pytest.raises(SweepError) as exc:
        run_sweep(_spec(**changes), db, workers=1, resume=True)
    assert f"({part} changed)" in str(exc.value) and "mix" in str(exc.value)
    with ResultsStore(db) as s:                   # nothing of the refused run was written
        assert s.count("t") == 4 and len(s.runs()) == 1


def test_resume_with_the_same_definition_and_other_objectives_or_search_is_allowed(tmp_path):
    db = tmp_path / "s.db"
    run_sweep(_spec(), db, workers=1)
    res = run_sweep(_spec(objectives=["latency", "area"]), db, workers=1, resume=True)
    assert res.reused == 4 and res.evaluated == 0


def test_resume_of_a_database_without_definitions_is_refused(tmp_path):
    """A database from before definitions were recorded cannot be checked, so it is not resumed."""
    db = tmp_path / "s.db"
    run_sweep(_spec(), db, workers=1)
    with ResultsStore(db) as s:
        s.conn.execute("UPDATE runs SET definition = NULL")
        s.conn.commit()
    with pytest.raises(SweepError, match="stored without its definition"):
        run_sweep(_spec(), db, workers=1, resume=True)


def wait_until_stored(db: Path, proc: subprocess.Popen, points: int, *,
                      timeout_s: float) -> int:
    """Poll ``db`` until it holds ``points`` points, ``proc`` ends or ``timeout_s`` passes;
    return how many it holds."""
    deadline = time.time() + timeout_s
    stored = 0
    while time.time() < deadline and proc.poll() is None and stored < points:
        time.sleep(0.1)
        if db.exists():
            try:
                with ResultsStore(db) as s:
                    stored = s.count()
            except Exception:  # noqa: BLE001 - db being created
                continue
    return stored


def _children(pid: int) -> set[int]:
    """Pids of the live processes whose parent is ``pid`` (from /proc)."""
    kids = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            kids.add(int(stat.parent.name))
    return kids


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _start_sweep(tmp_path: Path, executor: str, *, delay_s: float, new_session: bool = False):
    """(sweep file, database, process) of a 24-point sweep started in its own Python process
    with ``executor``, each point slowed by ``delay_s`` so the test can act while it runs
    (``new_session``: in a session of its own, apart from the test's)."""
    spec = {**SWEEP, "axes": {"tensor_engine.rows": [8, 16, 24, 32, 40, 48],
                              "tensor_engine.cols": [8, 16, 32, 64]}}
    f = tmp_path / "k.yaml"
    f.write_text(yaml.safe_dump(spec))
    db = tmp_path / "k.db"
    code = ("import sys; from tilewright.app.sweep import load_sweep, run_sweep; "
            f"run_sweep(load_sweep(sys.argv[1]), sys.argv[2], workers=2, executor={executor!r})")
    env = {**os.environ, "TILEWRIGHT_SWEEP_TEST_DELAY_S": str(delay_s)}
    return f, db, subprocess.Popen([sys.executable, "-c", code, str(f), str(db)], env=env,
                                   start_new_session=new_session)


def test_one_writer_and_kill9_leaves_no_worker_and_an_interrupted_run(tmp_path):
    """A second writer is refused with the first one's pid; ``kill -9`` of the sweep process
    alone (not its group) ends its pool workers; the next writer marks the dead run
    interrupted and resumes it without losing or repeating a point."""
    f, db, proc = _start_sweep(tmp_path, "local", delay_s=0.3)
    try:
        stored = wait_until_stored(db, proc, 4, timeout_s=60)
        assert proc.poll() is None and stored >= 4, "the sweep ended before the test could act"
        with pytest.raises(SweepError) as exc:          # a second writer, while the first runs
            run_sweep(load_sweep(f), db, workers=1, resume=True)
        assert f"in use by another sweep (pid {proc.pid}, sweep 't', started" in str(exc.value)
        workers = _children(proc.pid)
        assert len(workers) >= 2, workers
        os.kill(proc.pid, signal.SIGKILL)               # the sweep process only
        proc.wait()
        deadline = time.time() + 10
        while time.time() < deadline and any(_alive(w) for w in workers):
            time.sleep(0.1)
        assert not [w for w in workers if _alive(w)], "pool workers outlived the sweep"
    finally:
        if proc.poll() is None:
            proc.kill()
    _resume_after_kill(f, db, proc.pid)


def _resume_after_kill(f: Path, db: Path, dead_pid: int, points: int = 24) -> None:
    """Resume the sweep of file ``f`` whose writer ``dead_pid`` was killed: its run is marked
    interrupted, no stored point is lost or evaluated again, every point ends up stored once."""
    with ResultsStore(db) as s:
        before = s.frame("t")
    res = run_sweep(load_sweep(f), db, workers=2, resume=True)
    with ResultsStore(db) as s:
        after, runs = s.frame("t"), s.runs()
    assert runs["status"].tolist() == ["interrupted", "finished"]
    assert runs["pid"].tolist()[0] == dead_pid
    assert len(after) == points and after["key"].is_unique
    assert res.reused == len(before) and res.evaluated == points - len(before)


def _descendants(pid: int) -> set[int]:
    """Pids of every live process below ``pid`` (children, their children, ...; from /proc)."""
    found, todo = set(), [pid]
    while todo:
        kids = _children(todo.pop()) - found
        found |= kids
        todo.extend(kids)
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:120]
    except OSError:
        return "?"


@pytest.mark.slow
@pytest.mark.parametrize("executor,start_s", [("dask", 120), ("ray", 180)])
def test_kill9_with_dask_or_ray_leaves_no_process_and_an_interrupted_run(tmp_path, executor,
                                                                        start_s):
    """``kill -9`` of a sweep process alone (not its group) that started its own Dask
    LocalCluster or local Ray: every process it spawned (found recursively via /proc before the
    kill: workers, nannies, raylet, GCS, ...) ends within 30 s, and the next run marks the dead
    run interrupted and resumes it without losing or repeating a point."""
    pytest.importorskip("distributed" if executor == "dask" else "ray")
    f, db, proc = _start_sweep(tmp_path, executor, delay_s=0.5, new_session=True)
    spawned: set[int] = set()
    try:
        stored = wait_until_stored(db, proc, 3, timeout_s=start_s)
        assert proc.poll() is None and stored >= 3, "the sweep ended before the test could act"
        time.sleep(1.0)                                  # let late helpers start too
        spawned = _descendants(proc.pid)
        assert spawned, "the sweep spawned no process"
        os.kill(proc.pid, signal.SIGKILL)               # the sweep process only
        proc.wait()
        deadline = time.time() + 30
        while time.time() < deadline and any(_alive(p) for p in spawned):
            time.sleep(0.2)
        left = {p: _cmdline(p) for p in spawned if _alive(p)}
        assert not left, f"{executor}: processes outlived the sweep: {left}"
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in spawned:
            if _alive(p):
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
    _resume_after_kill(f, db, proc.pid)
