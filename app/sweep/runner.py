"""Run a sweep: propose points (grid, random, Optuna TPE, NSGA-II), evaluate them on an executor
(local process pool, Dask or Ray), commit each to the results store as it finishes, resume without
re-evaluating anything stored.

Resume: a point's key is ``<ArchSpec content hash>:<workloads+tech hash>``; keys already in the
store are never submitted again. Grid and random sweeps regenerate the same proposal list (random
uses ``search.seed``) and skip stored keys; TPE and NSGA-II re-seed the Optuna study with every
stored point of the sweep (as completed trials) and ask for the remaining ``trials``; a proposal
that matches a stored key is answered from the store.
"""

from __future__ import annotations

import hashlib
import json
import math
import multiprocessing as mp
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tilewright import __version__
from tilewright.app.sweep.evaluate import _graph, evaluate_point
from tilewright.app.sweep.spec import WORKLOAD_AXIS_PREFIXES, SweepError, SweepSpec
from tilewright.app.sweep.store import ResultsStore
from tilewright.arch import ArchSpecError
from tilewright.extras import require

__all__ = ["run_sweep", "SweepResult", "random_points", "EXECUTORS"]

EXECUTORS = ("local", "dask", "ray")
Progress = Callable[[int, int], None]


@dataclass
class SweepResult:
    db: Path
    run_id: int
    evaluated: int = 0          # points evaluated by this run
    reused: int = 0             # points found in the store (not re-evaluated)
    invalid: int = 0            # axis combinations that are not a valid ArchSpec
    total: int = 0              # points this sweep asks for
    seconds: float = 0.0
    keys: list[str] = field(default_factory=list)

    @property
    def points_per_s(self) -> float:
        return self.evaluated / self.seconds if self.seconds else math.inf


def random_points(spec: SweepSpec, n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` points drawn from the axes with ``numpy.random.default_rng(seed)`` (deterministic)."""
    rng = np.random.default_rng(seed)
    pts = []
    for _ in range(n):
        p: dict[str, Any] = {}
        for a in spec.axes:
            if a.values is not None:
                p[a.name] = a.values[int(rng.integers(len(a.values)))]
                continue
            lo, hi = float(a.low), float(a.high)  # type: ignore[arg-type]
            if a.step is not None:
                k = int(rng.integers(int(math.floor((hi - lo) / a.step + 1e-9)) + 1))
                v = lo + k * a.step
            elif a.log:
                v = math.exp(rng.uniform(math.log(lo), math.log(hi)))
            else:
                v = rng.uniform(lo, hi)
            p[a.name] = int(round(v)) if a.integer else float(v)
        pts.append(p)
    return pts


# ---- executors ---------------------------------------------------------------------------------
def _evaluate_batch(batch: list[tuple]) -> list[dict[str, Any]]:
    """:func:`evaluate_point` of every argument tuple of ``batch`` (one pool task)."""
    return [evaluate_point(*args) for args in batch]


class _BatchItem:
    """One point of a batch sent to the local pool: ``done()`` and ``result()`` like a future."""

    def __init__(self) -> None:
        self.fut: Any = None
        self.index = 0

    def done(self) -> bool:
        return self.fut is not None and self.fut.done()

    def result(self) -> dict[str, Any]:
        return self.fut.result()[self.index]


#: the most worker processes (or Dask/Ray workers) a sweep starts: each is a process, and a
#: mistyped count (4,762,232 in the fuzz suite) must not fork until the machine runs out of memory
MAX_WORKERS = 256


def _die_with_parent(parent: int) -> None:
    """Pool-worker initializer: a thread that ends this worker within 0.5 s of the sweep process
    that forked it going away — after ``kill -9`` of the sweep nothing else would (the pool's
    shutdown never runs), and the orphans would sleep forever."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)
    threading.Thread(target=watch, daemon=True, name="tilewright-parent-watch").start()


#: the reaper of :func:`_start_reaper`, run as ``python -c`` (it imports only the standard library):
#: every 0.5 s it records the processes below the driver (pid and start time, from /proc); when the
#: driver is gone it SIGKILLs the recorded ones still alive (same start time: not a reused pid)
_REAPER = r"""
import os, signal, sys, time
driver, me = int(sys.argv[1]), os.getpid()
def stat(pid):
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return f[0], int(f[1]), f[19]          # state, ppid, start time
def below(root):
    kids = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = stat(int(name))
            if st and st[0] != "Z":
                kids.setdefault(st[1], []).append((int(name), st[2]))
    found, todo = {}, [root]
    while todo:
        for pid, start in kids.get(todo.pop(), []):
            if pid != me and pid not in found:
                found[pid] = start
                todo.append(pid)
    return found
seen = {}
while (st := stat(driver)) and st[0] != "Z":
    seen.update(below(driver))
    seen = {p: s for p, s in seen.items() if (x := stat(p)) and x[2] == s}
    time.sleep(0.5)
for pid, start in seen.items():
    st = stat(pid)
    if st and st[2] == start:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
"""


def _start_reaper() -> subprocess.Popen:
    """Start a process that SIGKILLs every process this one spawned (recursively) once this one is
    gone — e.g. after ``kill -9`` of the sweep, Ray's dashboard and runtime-env agents outlive
    it (measured: still running 30 s later) where nothing else would end them. It is in its own
    session so that a signal to the sweep's process group does not end it first."""
    return subprocess.Popen([sys.executable, "-c", _REAPER, str(os.getpid())],
                            stdin=subprocess.DEVNULL, start_new_session=True)


class _Local:
    """Process pool, started by ``spawn``: a fresh interpreter per worker (each builds the LLM
    graphs it needs once), never ``fork`` — a child forked from a process with other threads (a
    notebook kernel's, a test runner's, Dask's) can inherit a lock one of them held and wait on
    it forever (seen: notebook 05's two-worker sweep hung in the child's first torch call).
    Points are sent in batches of ``batch`` (one pool task each, cutting inter-process traffic
    per point); a partial batch is sent as soon as the driver waits for results."""

    def __init__(self, workers: int, batch: int = 1) -> None:
        self.pool = ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"),
                                        initializer=_die_with_parent, initargs=(os.getpid(),))
        self.workers = workers
        self.batch = max(1, int(batch))
        self._pending: list[tuple[_BatchItem, tuple]] = []

    def submit(self, *args: Any) -> _BatchItem:
        item = _BatchItem()
        self._pending.append((item, args))
        if len(self._pending) >= self.batch:
            self._flush()
        return item

    def _flush(self) -> None:
        if not self._pending:
            return
        fut = self.pool.submit(_evaluate_batch, [args for _, args in self._pending])
        for i, (item, _) in enumerate(self._pending):
            item.fut, item.index = fut, i
        self._pending = []

    def wait(self, futures):
        self._flush()
        by_fut: dict[Any, list[_BatchItem]] = {}
        for item in futures:
            by_fut.setdefault(item.fut, []).append(item)
        done, _ = wait(list(by_fut), return_when=FIRST_COMPLETED)
        return [item for f in done for item in by_fut[f]]

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


class _InProcess:
    """One worker: each point is evaluated in this process when it is submitted (no pool). A
    forked pool child of a process that runs other threads (a notebook kernel, Dask's offload
    thread, a test runner's) can inherit a lock one of them held at the fork and wait on it
    forever (seen: a sweep of ``workers=1`` hung in the child's first torch call); with one
    worker there is nothing to fork for."""

    workers = 1
    batch = 1

    def submit(self, *args: Any) -> Future:
        fut: Future = Future()
        fut.set_result(evaluate_point(*args))
        return fut

    def wait(self, futures):
        return list(futures)

    def close(self) -> None:
        pass


def _local_batch(points: int, workers: int) -> int:
    """Points per pool task: up to 16, keeping at least 16 tasks per worker (balance)."""
    return max(1, min(16, points // (16 * workers)))


class _Dask:
    def __init__(self, workers: int, address: str | None) -> None:
        dist = require("distributed")
        Client, LocalCluster = dist.Client, dist.LocalCluster
        self.cluster = None
        if address:
            self.client = Client(address)
        else:
            self.cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                        dashboard_address=None)
            self.client = Client(self.cluster)
        self.workers = max(1, len(self.client.scheduler_info().get("workers", {})) or workers)

    def submit(self, *args: Any):
        return self.client.submit(evaluate_point, *args, pure=False)

    def wait(self, futures):
        from distributed import wait as dwait  # noqa: PLC0415  (lazy: optional executor)
        done, _ = dwait(list(futures), return_when="FIRST_COMPLETED")
        return done

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


class _RayFuture:
    """A Ray ObjectRef with the two methods the driver uses (``result``, ``done``)."""

    def __init__(self, ref: Any) -> None:
        self.ref = ref

    def result(self) -> Any:
        import ray  # noqa: PLC0415  (lazy: optional executor)
        return ray.get(self.ref)

    def done(self) -> bool:
        import ray  # noqa: PLC0415  (lazy: optional executor)
        ready, _ = ray.wait([self.ref], timeout=0)
        return bool(ready)


class _Ray:
    """Ray tasks: ``ray.remote(evaluate_point)`` on a running Ray (``address``, or the one this
    process already initialised) or on a local Ray started here with ``workers`` CPUs."""

    def __init__(self, workers: int, address: str | None) -> None:
        ray = require("ray")
        self.started = False
        self.reaper: subprocess.Popen | None = None
        if not ray.is_initialized():
            if address:
                ray.init(address=address, logging_level="WARNING", log_to_driver=False)
            else:
                ray.init(num_cpus=workers, include_dashboard=False, logging_level="WARNING",
                         log_to_driver=False)
                # Ray's agents are not fate-shared with the driver: end them if it is killed
                self.reaper = _start_reaper()
            self.started = True
        self.task = ray.remote(num_cpus=1)(evaluate_point)
        self.workers = max(1, int(ray.cluster_resources().get("CPU", workers)))

    def submit(self, *args: Any) -> _RayFuture:
        return _RayFuture(self.task.remote(*args))

    def wait(self, futures):
        import ray  # noqa: PLC0415  (lazy: optional executor)
        by_ref = {f.ref: f for f in futures}
        ready, _ = ray.wait(list(by_ref), num_returns=1)
        return [by_ref[r] for r in ready]

    def close(self) -> None:
        import ray  # noqa: PLC0415  (lazy: optional executor)
        if self.started:
            ray.shutdown()
        if self.reaper is not None:
            self.reaper.kill()
            self.reaper.wait()


# ---- helpers -------------------------------------------------------------------------------------
def _invalid_key(params: dict[str, Any], wkey: str) -> str:
    text = json.dumps(params, sort_keys=True, default=str)
    return "invalid:" + hashlib.sha256(text.encode()).hexdigest()[:16] + ":" + wkey


def _feasible(spec: SweepSpec, metrics: dict[str, Any], status: str) -> bool:
    return status == "ok" and all(c.ok(metrics.get(c.metric)) for c in spec.constraints)


def _objective_values(spec: SweepSpec, metrics: dict[str, Any]) -> list[float]:
    return [float(metrics.get(o.metric)) if metrics.get(o.metric) is not None else math.nan
            for o in spec.objectives]


class _Driver:
    """Shared machinery: submit points, commit results, count."""

    def __init__(self, spec: SweepSpec, store: ResultsStore, ex, run_id: int,
                 progress: Progress | None, total: int) -> None:
        self.spec, self.store, self.ex, self.run_id = spec, store, ex, run_id
        # workloads and their hash depend on the point only through cluster./plan. axes
        self.per_point = any(p.startswith(WORKLOAD_AXIS_PREFIXES) for a in spec.axes
                             for p in a.paths)
        self.wkey = spec.workloads_key()
        self.workloads = spec.workloads_for()
        # grid/random skip the workloads of points failing a static constraint; the Optuna
        # samplers evaluate every point (their constraint handling needs the objectives)
        self.static = [c.model_dump() for c in spec.static_constraints] \
            if spec.search.method in ("grid", "random") else []
        self.stored = store.keys()
        self.res = SweepResult(db=store.path, run_id=run_id, total=total)
        self.progress = progress
        self.done = 0
        self.inflight: dict[Any, tuple[str, dict, dict, str, int]] = {}

    def tick(self) -> None:
        self.done += 1
        if self.progress:
            self.progress(self.done, self.res.total)

    def prepare(self, params: dict[str, Any], trial: int) -> tuple[str, Any]:
        """(key, arch or None). Invalid combinations are stored at once."""
        try:
            arch = self.spec.arch_for(params)
        except ArchSpecError as exc:
            key = _invalid_key(params, self._wkey(params))
            if key not in self.stored:
                self.store.add({"key": key, "sweep": self.spec.name, "run_id": self.run_id,
                                "trial": trial, "params": params,
                                "workloads": self._workloads(params),
                                "tech": self.spec.tech, "status": "invalid", "error": str(exc),
                                "feasible": 0, "metrics": {}, "tool_version": __version__,
                                "wall_s": 0.0, "finished_at": time.time()})
                self.stored.add(key)
                self.res.invalid += 1
            return key, None
        return f"{arch.content_hash()}:{self._wkey(params)}", arch

    def _wkey(self, params: dict[str, Any]) -> str:
        return self.spec.workloads_key(params) if self.per_point else self.wkey

    def _workloads(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        return self.spec.workloads_for(params) if self.per_point else self.workloads

    def submit(self, key: str, arch, params: dict[str, Any], trial: int) -> None:
        fut = self.ex.submit(arch.model_dump(mode="json", exclude_none=True),
                             self._workloads(params),
                             self.spec.tech, self.static)
        self.inflight[fut] = (key, arch.model_dump(mode="json", exclude_none=True), params,
                              arch.content_hash(), trial)

    def collect(self, block: bool = True) -> list[tuple[str, dict, dict]]:
        """Wait for at least one in-flight point; commit all finished ones."""
        if not self.inflight:
            return []
        done = self.ex.wait(list(self.inflight)) if block else [f for f in self.inflight if f.done()]
        out = []
        for fut in done:
            key, arch_json, params, ahash, trial = self.inflight.pop(fut)
            r = fut.result()
            feas = _feasible(self.spec, r["metrics"], r["status"])
            self.store.add({"key": key, "sweep": self.spec.name, "run_id": self.run_id,
                            "trial": trial, "params": params, "arch_hash": ahash,
                            "arch_json": arch_json, "workloads": self._workloads(params),
                            "tech": self.spec.tech, "status": r["status"], "error": r["error"],
                            "feasible": int(feas), "metrics": r["metrics"],
                            "per_workload": r["per_workload"], "tool_version": __version__,
                            "wall_s": r["wall_s"], "finished_at": time.time(), "pid": r["pid"]})
            self.stored.add(key)
            self.res.evaluated += 1
            self.res.keys.append(key)
            self.tick()
            out.append((key, params, r))
        return out


def _run_list(d: _Driver, points: list[dict[str, Any]]) -> None:
    limit = 2 * d.ex.workers * getattr(d.ex, "batch", 1)      # points in flight
    seen: set[str] = set()
    for trial, params in enumerate(points):
        key, arch = d.prepare(params, trial)
        if key in d.stored or key in seen:       # stored earlier, or a duplicate proposal
            if arch is not None and key in d.stored and key not in seen:
                d.res.reused += 1
            seen.add(key)
            d.tick()
            continue
        seen.add(key)
        d.submit(key, arch, params, trial)
        while len(d.inflight) >= limit:
            d.collect()
    while d.inflight:
        d.collect()


def _optuna_dists(spec: SweepSpec):
    import optuna  # noqa: PLC0415  (lazy: optional sweep search)
    dists = {}
    for a in spec.axes:
        if a.values is not None:
            dists[a.name] = optuna.distributions.CategoricalDistribution(list(a.values))
        elif a.integer:
            dists[a.name] = optuna.distributions.IntDistribution(
                int(a.low), int(a.high), log=a.log and a.step is None,
                step=int(a.step) if a.step else 1)
        else:
            dists[a.name] = optuna.distributions.FloatDistribution(
                float(a.low), float(a.high), log=a.log and a.step is None,
                step=float(a.step) if a.step else None)
    return dists


def _constraint_values(spec: SweepSpec, metrics: dict[str, Any], status: str) -> list[float]:
    """Optuna constraint values (<= 0 feasible) per constraint."""
    out = []
    for c in spec.constraints:
        v = metrics.get(c.metric)
        if v is None or status not in ("ok", "skipped"):
            out.append(1.0)
            continue
        viol = 0.0
        if c.max is not None:
            viol = max(viol, (v - c.max) / (abs(c.max) or 1.0))
        if c.min is not None:
            viol = max(viol, (c.min - v) / (abs(c.min) or 1.0))
        out.append(viol)
    return out or [0.0]


def _run_optuna(d: _Driver, spec: SweepSpec) -> None:
    import optuna  # noqa: PLC0415  (lazy: optional sweep search)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    s = spec.search
    # optuna >= 5 records constraints on the trial (set_constraint); older versions read them
    # through a constraints_func
    native = hasattr(optuna.trial.Trial, "set_constraint")
    cfunc = (lambda t: t.user_attrs.get("constraints", [0.0])) \
        if spec.constraints and not native else None
    if s.method == "tpe":
        sampler = optuna.samplers.TPESampler(seed=s.seed, constraints_func=cfunc,
                                             multivariate=True, n_startup_trials=min(10, s.trials))
    else:
        sampler = optuna.samplers.NSGAIISampler(seed=s.seed, population_size=s.population,
                                                constraints_func=cfunc)
    study = optuna.create_study(directions=[o.direction for o in spec.objectives], sampler=sampler)
    dists = _optuna_dists(spec)
    # re-seed with the stored points of this sweep (resume)
    stored = d.store.raw(spec.name)
    n_done = 0
    for _, row in stored.iterrows():
        params = json.loads(row["params"])
        metrics = json.loads(row["metrics"]) if row["metrics"] else {}
        if set(params) != set(dists):
            continue
        vals = _objective_values(spec, metrics)
        ok = row["status"] == "ok" and not any(math.isnan(v) for v in vals)
        cons = _constraint_values(spec, metrics, row["status"])
        extra = {"constraints": {f"c{i}": v for i, v in enumerate(cons)}} \
            if native and spec.constraints else {}
        try:
            study.add_trial(optuna.trial.create_trial(
                params=params, distributions=dists,
                values=vals if ok else None,
                state=optuna.trial.TrialState.COMPLETE if ok else optuna.trial.TrialState.FAIL,
                user_attrs={"constraints": cons, "key": row["key"]}, **extra))
        except ValueError:
            continue
        n_done += 1
        d.res.reused += 1
        d.tick()
    pending: dict[str, list] = {}            # key -> [optuna trials waiting for it]

    def tell(trial, params, r_status, metrics) -> None:
        cons = _constraint_values(spec, metrics, r_status)
        trial.set_user_attr("constraints", cons)
        if native and spec.constraints:
            for i, v in enumerate(cons):
                trial.set_constraint(f"c{i}", v)
        vals = _objective_values(spec, metrics)
        if r_status == "ok" and not any(math.isnan(v) for v in vals):
            study.tell(trial, vals)
        else:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)

    asked = n_done
    while asked < s.trials or d.inflight:
        while asked < s.trials and len(d.inflight) < d.ex.workers:
            trial = study.ask(dists)
            params = dict(trial.params)
            key, arch = d.prepare(params, trial.number)
            asked += 1
            if arch is None:
                tell(trial, params, "invalid", {})
                d.tick()
                continue
            if key in d.stored or key in pending:
                if key in pending:
                    pending[key].append(trial)
                else:
                    row = d.store.get(key)
                    tell(trial, params, row["status"], row["metrics"] or {})
                    d.res.reused += 1
                    d.tick()
                continue
            pending[key] = [trial]
            d.submit(key, arch, params, trial.number)
        for key, params, r in d.collect():
            for t in pending.pop(key, []):
                tell(t, params, r["status"], r["metrics"])


def _check_same_definition(before: dict[str, str] | None, now: dict[str, str], name: str,
                           db: str | Path) -> None:
    """Refuse to resume a sweep whose stored points were made by another definition (or by an
    older tilewright that recorded none), naming the parts that changed: resuming would mix two
    sweeps' points in one Pareto front."""
    if before is None:
        raise SweepError(f"{db}: sweep {name!r} was stored without its definition (an older "
                         f"tilewright), so --resume cannot tell whether it changed; choose "
                         f"another --db")
    changed = [part for part in now if before.get(part) != now[part]]
    if changed:
        raise SweepError(f"{db}: sweep {name!r} was run with another definition ("
                         f"{', '.join(changed)} changed); --resume would mix the two: choose "
                         f"another --db or rename the sweep")


def run_sweep(spec: SweepSpec, db: str | Path, *, resume: bool = False, executor: str = "local",
              workers: int | None = None, dask_address: str | None = None,
              progress: Progress | None = None, ray_address: str | None = None) -> SweepResult:
    """Run ``spec``, committing every point to the SQLite ``db`` as it finishes.

    ``resume=False`` refuses a database that already holds points of this sweep; ``resume=True``
    evaluates only what is not stored, and refuses when the sweep's definition (base, axes,
    workloads, constraints, tech table: :meth:`SweepSpec.definition`) differs from the one the
    stored points were made with. The database has one writer at a time
    (:meth:`ResultsStore.writer`); a run left unfinished by a writer that died is marked
    ``interrupted`` when the next one starts. ``executor``: ``local`` (process pool of
    ``workers``, default ``os.cpu_count()``; one worker evaluates in this process) or
    ``dask`` (``dask_address`` of a running scheduler, else a LocalCluster of ``workers``) or
    ``ray`` (``ray_address`` of a running cluster, else the Ray this process already started,
    else a local Ray of ``workers`` CPUs, shut down at the end). Whatever the executor, the
    driver commits each point to SQLite as its result arrives.
    """
    if executor not in EXECUTORS:
        raise SweepError(f"--executor {executor!r}: must be one of {', '.join(EXECUTORS)}")
    workers = workers or os.cpu_count() or 1
    if not 1 <= workers <= MAX_WORKERS:         # each worker is a process: refuse before any
        raise SweepError(f"--workers {workers}: must be from 1 to {MAX_WORKERS}")
    definition = spec.definition()
    store = ResultsStore(db)
    try:
        store.writer(spec.name)
        have = store.count(spec.name)
        if have and not resume:
            raise SweepError(f"{db}: already holds {have} points of sweep {spec.name!r}; pass "
                             f"--resume to continue it or choose another --db")
        if have:
            _check_same_definition(store.last_definition(spec.name), definition, spec.name, db)
        s = spec.search
        if s.method == "grid":
            points, total = spec.grid_points(), spec.grid_size()
        elif s.method == "random":
            points, total = random_points(spec, int(s.trials), s.seed), int(s.trials)
        else:
            points, total = [], int(s.trials)
        run_id = store.start_run(spec.name, spec.model_dump_json(), resume, executor, definition)
        t0 = time.perf_counter()
        if executor == "local":
            # build the LLM graphs once here (a one-worker sweep evaluates in this process).
            # A workload whose graph cannot be built fails in each point's evaluation instead,
            # stored with its one-line error while the sweep goes on (evaluate_point)
            for w in spec.workloads:
                if w.kind == "llm" and not w.user_module:
                    try:
                        _graph(w.model, w.seq, w.batch, w.phase)
                    except Exception:  # noqa: BLE001 - recorded per point by evaluate_point
                        pass
        if executor == "local":
            ex = _InProcess() if workers == 1 else \
                _Local(workers, _local_batch(len(points), workers))
        else:
            ex = _Dask(workers, dask_address) if executor == "dask" else \
                _Ray(workers, ray_address)
        d = _Driver(spec, store, ex, run_id, progress, total)
        try:
            if s.method in ("grid", "random"):
                _run_list(d, points)
            else:
                _run_optuna(d, spec)
        finally:
            ex.close()
        d.res.seconds = time.perf_counter() - t0
        store.finish_run(run_id, d.res.evaluated, d.res.reused)
        return d.res
    finally:
        store.close()
