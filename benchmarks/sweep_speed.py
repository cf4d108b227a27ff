"""Sweep throughput: a random sweep of one transformer layer (Llama-3-8B, prefill 512 tokens) on
the analytical model (mapper tiling + per-op Report + energy/area), local process pool.

    python benchmarks/sweep_speed.py [--points 10000] [--workers 2] [--model llama3-8b]

Prints points/s and the projected time of 10,000 points. Goal (issue 7): 10,000 points in
under 5 minutes on 2 cores. Benchmarks print; they never assert timings.

Wall time depends on what else the machine runs, so the CPU seconds of the driver (this
process: proposals, ArchSpec validation, results store) and of the workers (evaluation) are
printed too; ``cpu-bound points/s`` = points / (total CPU s / cores) is what an otherwise idle
machine with ``--workers`` cores would reach.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

from tilewright.app.sweep import ResultsStore, pareto_frame, run_sweep, sweep_from_dict
from tilewright.app.sweep.evaluate import _graph


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--model", default="llama3-8b")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--db", default=None, help="results db (default: a temporary file)")
    args = ap.parse_args()
    spec = sweep_from_dict({
        "name": "sweep-speed",
        "base": "ws16x16",
        "tech": "7nm",
        "axes": {
            "tensor_engine.rows": [4, 8, 16, 24, 32, 48, 64],
            "tensor_engine.cols": [4, 8, 16, 24, 32, 48, 64],
            "tensor_engine.dataflow": ["ws", "os"],
            "memory.scratchpad_kib": {"low": 64, "high": 4096, "log": True},
            "memory.accumulator_kib": [64, 128, 256, 512],
            "offchip.bandwidth_gbps": {"low": 16.0, "high": 1024.0, "log": True},
            "clock_mhz": {"low": 300.0, "high": 1500.0},
        },
        "workloads": [{"model": args.model, "seq": args.seq, "batch": 1, "phase": "prefill"}],
        "objectives": ["latency", "energy", "area"],
        "search": {"method": "random", "trials": args.points, "seed": 0},
    }, source="sweep_speed")
    db = Path(args.db) if args.db else Path(tempfile.mkdtemp()) / "speed.db"
    last = [time.perf_counter()]

    def progress(done: int, total: int) -> None:
        if done % max(1, total // 20) == 0 or done == total:
            now = time.perf_counter()
            print(f"  {done}/{total} points, {now - last[0]:.1f} s since last report", flush=True)
            last[0] = now

    tg = time.perf_counter()
    _graph(args.model, args.seq, 1, "prefill")       # one-off torch.export (workers inherit it)
    graph_s = time.perf_counter() - tg
    t0 = time.perf_counter()
    cpu0 = {w: resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)}
    res = run_sweep(spec, db, workers=args.workers, progress=progress, resume=True)
    wall = time.perf_counter() - t0
    cpu = {w: (lambda a, b: a.ru_utime + a.ru_stime - b.ru_utime - b.ru_stime)(
        resource.getrusage(w), cpu0[w]) for w in cpu0}
    driver_s, workers_s = cpu[resource.RUSAGE_SELF], cpu[resource.RUSAGE_CHILDREN]
    cores = min(args.workers, os.cpu_count() or 1)
    with ResultsStore(db) as s:
        df = s.frame("sweep-speed")
    front = pareto_frame(df, [("latency_s", "minimize"), ("energy_j", "minimize"),
                              ("area_mm2", "minimize")])
    per = df["wall_s"].median()
    print(f"{args.model} layer (prefill {args.seq}), {res.evaluated} points evaluated "
          f"({res.reused} reused, {res.invalid} invalid), {args.workers} workers: "
          f"{wall:.1f} s wall = {res.evaluated / wall:.1f} points/s "
          f"(median {per * 1e3:.1f} ms per point in a worker; graph built once before, "
          f"{graph_s:.1f} s)")
    n = max(res.evaluated, 1)
    print(f"CPU: driver {driver_s:.1f} s ({driver_s / n * 1e3:.2f} ms/point), workers "
          f"{workers_s:.1f} s ({workers_s / n * 1e3:.2f} ms/point); load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; cpu-bound points/s on {cores} "
          f"idle cores = {n / ((driver_s + workers_s) / cores):.1f}")
    print(f"projected 10,000 points: {10_000 / (res.evaluated / wall) / 60:.1f} min "
          f"(goal < 5 min on 2 cores); status counts {df['status'].value_counts().to_dict()}; "
          f"Pareto front (latency, energy, area): {len(front)} points; db {db}")


if __name__ == "__main__":
    main()
