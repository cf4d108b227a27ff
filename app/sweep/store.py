"""SQLite results store: one row per evaluated design point, committed as soon as it finishes.

Table ``points``: ``key`` (unique: ArchSpec content hash + workload/technology hash, or a hash of
the axis values for a combination that is not a valid ArchSpec), ``sweep``, ``run_id`` (the run
that evaluated it), ``trial`` (the search's index of the point), ``params`` (axis values, JSON),
``arch_hash``, ``arch_json``, ``workloads`` (JSON), ``tech``, ``status`` (``ok`` | ``skipped``
— a static constraint failed, workloads not run | ``invalid`` — not a valid ArchSpec | ``error``),
``error``, ``feasible`` (1 if every constraint holds), ``metrics`` (JSON), ``per_workload`` (JSON),
``tool_version``, ``wall_s`` (seconds of evaluation), ``finished_at`` (Unix time), ``pid``.
Table ``runs``: one row per invocation with counts of evaluated and skipped (already stored)
points, the sweep's ``definition`` (:meth:`~tilewright.app.sweep.spec.SweepSpec.definition`, JSON
of content hashes), ``status`` (``running`` | ``finished`` | ``interrupted`` — a run that died, found
by the next writer) and the writer's ``pid``. WAL journal; every insert is its own transaction, so
``kill -9`` loses only points still being evaluated.

One writer at a time: :meth:`ResultsStore.writer` holds an exclusive lock on ``<db>.lock`` for the
whole run (released by the kernel if the process dies) and refuses a second writer with the first
one's pid and start time.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import pandas as pd

from tilewright.app.sweep.spec import SweepError, axis_assignments
from tilewright.extras import ExtraMissing, require

__all__ = ["ResultsStore", "check_export_path"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS points (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  key TEXT NOT NULL UNIQUE,
  sweep TEXT NOT NULL,
  run_id INTEGER,
  trial INTEGER,
  params TEXT NOT NULL,
  arch_hash TEXT,
  arch_json TEXT,
  workloads TEXT NOT NULL,
  tech TEXT NOT NULL,
  status TEXT NOT NULL,
  error TEXT,
  feasible INTEGER NOT NULL,
  metrics TEXT NOT NULL,
  per_workload TEXT,
  tool_version TEXT NOT NULL,
  wall_s REAL,
  finished_at REAL NOT NULL,
  pid INTEGER
);
CREATE TABLE IF NOT EXISTS runs (
  run_id INTEGER PRIMARY KEY AUTOINCREMENT,
  sweep TEXT NOT NULL,
  spec TEXT NOT NULL,
  started_at REAL NOT NULL,
  finished_at REAL,
  resume INTEGER NOT NULL,
  executor TEXT,
  evaluated INTEGER NOT NULL DEFAULT 0,
  reused INTEGER NOT NULL DEFAULT 0
);
"""
#: columns of ``runs`` added since the first schema (added to an older database when opened)
_RUN_COLUMNS = {"definition": "TEXT", "status": "TEXT", "pid": "INTEGER"}


def _clean(x: Any) -> Any:
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_clean(v) for v in x]
    return x


def _param_columns(params: dict[str, Any]) -> dict[str, Any]:
    """``p:<path>`` -> value of a point's axis values: a comma-joined axis (``tensor_engine.rows,
    tensor_engine.cols``) becomes one column per path with that path's value (zipped lists
    split), so CSV headers hold no commas and Parquet columns hold scalars; a value that is
    still a list or mapping is stored as its JSON text."""
    out: dict[str, Any] = {}
    for name, value in params.items():
        for path, v in axis_assignments(name, value):
            out[f"p:{path}"] = json.dumps(v) if isinstance(v, (list, tuple, dict)) else v
    return out


def check_export_path(path: str | Path) -> Path:
    """``path`` as an export target (``.csv``, or ``.parquet`` with pyarrow installed), checked
    before a sweep runs so that a bad ``--export`` is refused before anything is written."""
    p = Path(path)
    if p.suffix not in (".csv", ".parquet"):
        raise SweepError(f"{p}: export format must be .csv or .parquet")
    if p.is_dir():
        raise SweepError(f"{p}: is a folder; --export takes a .csv or .parquet file path")
    if p.suffix == ".parquet":
        try:
            require("pyarrow")
        except ExtraMissing as exc:
            raise SweepError(f"{p}: Parquet export: {exc}; or use a .csv path") from None
    return p


class ResultsStore:
    """A sweep results database at ``path`` (created if missing)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            raise SweepError(f"{self.path}: is a folder; give a results database file (SQLite)")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(str(self.path), timeout=30)
        try:
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self.conn.executescript(_SCHEMA)
        except sqlite3.DatabaseError as exc:     # e.g. a YAML or binary file given as the db
            self.conn.close()
            raise SweepError(f"{self.path}: is not a tilewright results database (SQLite: "
                             f"{exc})") from None
        have = {row[1] for row in self.conn.execute("PRAGMA table_info(runs)")}
        for col, typ in _RUN_COLUMNS.items():
            if col not in have:
                self.conn.execute(f"ALTER TABLE runs ADD COLUMN {col} {typ}")
        self.conn.commit()
        self._lock_file = None

    def close(self) -> None:
        self.conn.close()
        if self._lock_file is not None:
            self._lock_file.close()            # releases the writer lock
            self._lock_file = None

    # ---- the one writer ------------------------------------------------------------------
    def writer(self, sweep: str) -> None:
        """Become the database's one writer until :meth:`close` (or death): take the exclusive
        lock on ``<db>.lock`` without waiting, then close every run left ``running`` by a writer
        that died as ``interrupted``. Raises :class:`SweepError` naming the other writer's pid,
        sweep and start time when it is held."""
        lock_path = self.path.with_name(self.path.name + ".lock")
        f = open(lock_path, "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            try:
                other = json.loads(f.read() or "{}")
            except json.JSONDecodeError:
                other = {}
            f.close()
            started = other.get("started_at")
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if started else "?"
            raise SweepError(f"{self.path}: in use by another sweep (pid {other.get('pid', '?')}, "
                             f"sweep {other.get('sweep', '?')!r}, started {when}); one writer "
                             f"at a time: wait for it or choose another --db") from None
        f.seek(0)
        f.truncate()
        f.write(json.dumps({"pid": os.getpid(), "sweep": sweep, "started_at": time.time()}))
        f.flush()
        self._lock_file = f
        self.conn.execute("UPDATE runs SET status='interrupted' "
                          "WHERE finished_at IS NULL AND COALESCE(status, 'running') = 'running'")
        self.conn.commit()

    def last_definition(self, sweep: str) -> dict[str, str] | None:
        """The definition recorded by the newest run of ``sweep`` that recorded one (None if
        no run did: a database written before definitions were recorded)."""
        row = self.conn.execute("SELECT definition FROM runs WHERE sweep=? AND definition IS NOT "
                                "NULL ORDER BY run_id DESC LIMIT 1", (sweep,)).fetchone()
        return json.loads(row[0]) if row else None

    def __enter__(self) -> "ResultsStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- runs ------------------------------------------------------------------------------
    def start_run(self, sweep: str, spec_json: str, resume: bool, executor: str,
                  definition: dict[str, str] | None = None) -> int:
        cur = self.conn.execute(
            "INSERT INTO runs (sweep, spec, started_at, resume, executor, definition, status, pid)"
            " VALUES (?,?,?,?,?,?,'running',?)",
            (sweep, spec_json, time.time(), int(resume), executor,
             json.dumps(definition, sort_keys=True) if definition is not None else None,
             os.getpid()))
        self.conn.commit()
        return int(cur.lastrowid)

    def finish_run(self, run_id: int, evaluated: int, reused: int) -> None:
        self.conn.execute("UPDATE runs SET finished_at=?, evaluated=?, reused=?, "
                          "status='finished' WHERE run_id=?",
                          (time.time(), evaluated, reused, run_id))
        self.conn.commit()

    def runs(self) -> pd.DataFrame:
        return pd.read_sql_query("SELECT run_id, sweep, started_at, finished_at, status, resume, "
                                 "executor, evaluated, reused, pid FROM runs ORDER BY run_id",
                                 self.conn)

    # ---- points ----------------------------------------------------------------------------
    def add(self, row: dict[str, Any]) -> None:
        """Insert one evaluated point and commit (one transaction per point)."""
        r = dict(row)
        for k in ("params", "metrics", "per_workload", "workloads"):
            if k in r and not isinstance(r[k], str):
                r[k] = json.dumps(_clean(r[k]), sort_keys=True)
        if isinstance(r.get("arch_json"), dict):
            r["arch_json"] = json.dumps(r["arch_json"], sort_keys=True)
        cols = ", ".join(r)
        marks = ", ".join("?" for _ in r)
        self.conn.execute(f"INSERT INTO points ({cols}) VALUES ({marks})", tuple(r.values()))
        self.conn.commit()

    def keys(self, sweep: str | None = None) -> set[str]:
        q = "SELECT key FROM points" + (" WHERE sweep=?" if sweep else "")
        return {k for (k,) in self.conn.execute(q, (sweep,) if sweep else ())}

    def count(self, sweep: str | None = None) -> int:
        q = "SELECT COUNT(*) FROM points" + (" WHERE sweep=?" if sweep else "")
        return int(self.conn.execute(q, (sweep,) if sweep else ()).fetchone()[0])

    def sweeps(self) -> list[str]:
        return [s for (s,) in self.conn.execute("SELECT DISTINCT sweep FROM points ORDER BY sweep")]

    def get(self, key: str) -> dict[str, Any] | None:
        cur = self.conn.execute("SELECT * FROM points WHERE key=?", (key,))
        row = cur.fetchone()
        if row is None:
            return None
        d = dict(zip([c[0] for c in cur.description], row))
        for k in ("params", "metrics", "per_workload", "workloads"):
            d[k] = json.loads(d[k]) if d.get(k) else None
        return d

    def raw(self, sweep: str | None = None) -> pd.DataFrame:
        q = "SELECT * FROM points" + (" WHERE sweep=?" if sweep else "") + " ORDER BY id"
        return pd.read_sql_query(q, self.conn, params=(sweep,) if sweep else None)

    def frame(self, sweep: str | None = None) -> pd.DataFrame:
        """One row per point: identity columns, ``p:<path>`` parameter columns (one per path:
        a comma-joined axis gives each of its paths a column; :func:`_param_columns`) and one
        column per metric (per-workload metrics as ``<tag>:<metric>``)."""
        df = self.raw(sweep)
        if df.empty:
            return df
        params = pd.DataFrame([_param_columns(json.loads(p)) for p in df["params"]])
        metrics = pd.DataFrame([json.loads(m) if m else {} for m in df["metrics"]])
        metrics = metrics.apply(pd.to_numeric, errors="coerce")   # null (NaN) -> float column
        base = df[["id", "key", "sweep", "run_id", "trial", "arch_hash", "tech", "status", "error",
                   "feasible", "tool_version", "wall_s", "finished_at"]]
        out = pd.concat([base.reset_index(drop=True), params.reset_index(drop=True),
                         metrics.reset_index(drop=True)], axis=1)
        out["feasible"] = out["feasible"].astype(bool)
        return out

    def export(self, path: str | Path, sweep: str | None = None) -> Path:
        """Write :meth:`frame` to ``path``: ``.csv`` or ``.parquet`` (needs pyarrow)."""
        p = check_export_path(path)
        df = counts_as_integers(self.frame(sweep))
        if p.suffix == ".parquet":
            df.to_parquet(p, index=False)
        else:
            df.to_csv(p, index=False)
        return p


#: metric names (the part after a workload tag ``<tag>:``) that are counts: exported as whole
#: numbers (a cycle count averaged or summed in floats reads "1234.0" or "1234.4999" otherwise)
COUNT_METRICS = ("cycles", "chips", "macs", "tokens", "layers", "requests", "finished")


def _is_count(column: str) -> bool:
    name = column.split(":")[-1]
    return name in COUNT_METRICS or name.endswith("_cycles")


def counts_as_integers(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its count columns (:data:`COUNT_METRICS`, ``*_cycles``) rounded to the
    nearest whole number and typed as nullable integers (a missing value stays empty); a
    column holding an infinity is left as it is."""
    out = df.copy()
    for col in out.columns:
        if (_is_count(str(col)) and pd.api.types.is_float_dtype(out[col])
                and not out[col].abs().eq(math.inf).any()):      # inf has no integer
            out[col] = out[col].round().astype("Int64")
    return out
