"""Speed of the SimPy cluster model on the two runs issue 5 sets (each must take < 60 s on one
core): a 1,024-chip llama3-70b training step (DP×TP×PP on the torus-1024 preset) and a
10,000-request llama3-70b serving run on 64 H100s (h100-64x-ib, 8 replicas of TP=8; and the same
64 GPUs as P/D pools, pd-h100-64). Beside them, the Mamba path: a mamba-2.8b training step on
torus-1024 (compiled per-chip costs, 16-token chunks with carried state) and the same
10,000-request workload served by mamba-2.8b on h100-64x-ib (recurrent state slots instead of
a KV cache; ``--skip-mamba`` leaves them out).

Usage:  python benchmarks/cluster_speed.py [--requests 10000] [--rate 30] [--skip-pd]
        [--cost-source compiler|table|both] [--inlayer-comm network|phase|both] [--skip-mamba]

Events are SimPy events scheduled (the main simulation plus the memoized collective-phase
simulations), counted from SimPy's event-id counter. The anchor is Vidur's published rate of
about 34 k events per CPU-second on its own model (its events are scheduler/batch events, a
coarser unit than ours, so the comparison is of orders of magnitude, not a like-for-like race).
Prints a table; asserts nothing about timings.
"""

from __future__ import annotations

import argparse
import time

from rich.console import Console
from rich.table import Table

from tilewright.dataflow_sim.cluster import (ServePlan, TrainPlan, load_cluster, poisson_requests,
                                             simulate_serving, simulate_training)

VIDUR_EVENTS_PER_CPU_S = 34_000


def timed(fn):
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--rate", type=float, default=30.0, help="arrivals per second")
    ap.add_argument("--skip-pd", action="store_true", help="skip the P/D-disaggregated run")
    ap.add_argument("--skip-mamba", action="store_true", help="skip the mamba-2.8b runs")
    ap.add_argument("--cost-source", default="compiler", choices=["compiler", "table", "both"],
                    help="per-chip compute of the torus-1024 step (ArchSpec chips)")
    ap.add_argument("--inlayer-comm", default="network", choices=["network", "phase", "both"],
                    help="torus-1024 step: TP collectives on the shared network (default) or "
                         "timed apart as phases")
    args = ap.parse_args()
    rows = []

    sources = ["compiler", "table"] if args.cost_source == "both" else [args.cost_source]
    modes = ["network", "phase"] if args.inlayer_comm == "both" else [args.inlayer_comm]
    for src in sources:    # wall time includes the (cached) compile of the sharded layer
        for mode in modes:
            plan = TrainPlan(dp=16, tp=8, pp=8, micro_batches=16, seq_len=4096,
                             inlayer_comm=mode)
            res, wall, cpu = timed(lambda: simulate_training(load_cluster("torus-1024"),
                                                             "llama3-70b", plan, cost_source=src))
            rows.append((f"train llama3-70b, torus-1024 (1,024 chips), {src} costs, "
                         f"in-layer comm: {mode}", plan.label(),
                         f"step {res.step_seconds:.2f} s", wall, cpu, res.events))

    if not args.skip_mamba:
        mplan = TrainPlan(dp=16, tp=8, pp=8, micro_batches=16, seq_len=4096)
        res, wall, cpu = timed(lambda: simulate_training(load_cluster("torus-1024"),
                                                         "mamba-2.8b", mplan))
        rows.append(("train mamba-2.8b, torus-1024 (1,024 chips), compiler costs",
                     mplan.label(), f"step {res.step_seconds:.2f} s", wall, cpu, res.events))

    reqs = poisson_requests(args.requests, args.rate, (128, 2048), (16, 512), seed=0)
    runs = [("h100-64x-ib", None)] + ([] if args.skip_pd else [("pd-h100-64", True)])
    for preset, disagg in runs:
        splan = ServePlan(tp=8, disaggregated=disagg)
        out, wall, cpu = timed(lambda: simulate_serving(load_cluster(preset), "llama3-70b",
                                                        splan, reqs))
        m = out.metrics
        rows.append((f"serve llama3-70b, {preset} (64 GPUs)",
                     f"{args.requests} req @ {args.rate}/s, tp=8" + (", P/D" if disagg else ""),
                     f"{m['makespan_s']:.0f} s, p99 TTFT {m['ttft_p99_s'] * 1e3:.0f} ms",
                     wall, cpu, out.events))

    if not args.skip_mamba:
        splan = ServePlan(tp=8)
        out, wall, cpu = timed(lambda: simulate_serving(load_cluster("h100-64x-ib"),
                                                        "mamba-2.8b", splan, reqs))
        m = out.metrics
        rows.append(("serve mamba-2.8b, h100-64x-ib (64 GPUs)",
                     f"{args.requests} req @ {args.rate}/s, tp=8",
                     f"{m['makespan_s']:.0f} s, p99 TTFT {m['ttft_p99_s'] * 1e3:.0f} ms",
                     wall, cpu, out.events))

    table = Table(title="cluster model speed (SimPy)")
    for col in ("run", "plan", "simulated", "wall s", "CPU s", "events", "events/CPU-s",
                "Vidur events/CPU-s"):
        table.add_column(col, justify="left" if col in ("run", "plan", "simulated") else "right")
    for name, label, sim, wall, cpu, ev in rows:
        table.add_row(name, label, sim, f"{wall:.1f}", f"{cpu:.1f}", f"{ev:,}",
                      f"{ev / cpu:,.0f}", f"~{VIDUR_EVENTS_PER_CPU_S:,}")
    Console(width=200).print(table)


if __name__ == "__main__":
    main()
