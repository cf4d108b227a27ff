"""Speed of the SimPy cluster model on the two runs issue 5 sets (each must take < 60 s on one
core): a 1,024-chip llama3-70b training step (DP×TP×PP on the torus-1024 preset) and a
10,000-request llama3-70b serving run on 64 H100s (h100-64x-ib, 8 replicas of TP=8; and the same
64 GPUs as P/D pools, pd-h100-64). Beside them, the Mamba path: a mamba-2.8b training step on
torus-1024 (compiled per-chip costs, 16-token chunks with carried state) and the same
10,000-request workload served by mamba-2.8b on h100-64x-ib (recurrent state slots instead of
a KV cache; ``--skip-mamba`` leaves them out).

Issue 15's scale targets (CPU-s, one core): a 1,024-GPU llama3-8b training step (TP 8 × DP 128)
≤ 5; a 16,384-GPU Llama-3-405B step with the Llama 3 paper's 4D parallelism (TP 8, CP 1, PP 16,
DP 128, 8,192-token sequences, 16M tokens per step: "The Llama 3 Herd of Models",
arXiv:2407.21783, Table 4) ≤ 60; 10,000 serving requests on 64 GPUs ≤ 3. The GPUs are H100s in
8-GPU nodes on a rail-optimized fabric (:func:`h100_rail_cluster`), simulated at the network
level ``network="auto"`` picks (flow above 64 chips; ``--event-baseline`` also times the
1,024-GPU step at event level, ~1-2 CPU-minutes). Llama-3-405B has 126 layers, which PP 16 does
not divide (the paper drops one layer from the first and the last stage; our pipeline needs
equal stages), so the 16K row runs a 128-layer stand-in, labelled as such; the row measures
simulation cost, not the model's accuracy. Full recompute is on (the activation model does not
fit 405B in 80 GB without it).

MoE serving (``--only-moe`` for these rows alone): mixtral-8x7b on h100-64x-ib, 8 replicas of EP 8
with DP attention (one KV pool per rank), Zipf(1.2) routing and 8 redundant experts (EPLB),
``--moe-requests`` requests (default 3,000) at ``--rate``; run in bulk (decode-only runs timed many
iterations at once, :meth:`IterationCost.decode_steps_seconds`) and with the event-level loop,
metrics compared (bit-equal).

Pipeline-parallel serving (``--only-pp`` for these rows alone): llama3-70b on h100-64x-ib as 4
replicas of TP 8 × PP 2 (stage sends between two nodes over InfiniBand), the same
``--requests`` workload, in bulk (decode-only runs through the stages,
:meth:`tilewright.dataflow_sim.cluster.serving._Replica._pipeline_times`; prefill and mixed
iterations timed without SimPy events,
:meth:`tilewright.dataflow_sim.cluster.serving._Replica._timed_pipeline`) and with the
event-level loop, metrics compared (bit-equal).

Usage:  python benchmarks/cluster_speed.py [--requests 10000] [--rate 30] [--skip-pd]
        [--cost-source compiler|table|both] [--inlayer-comm network|phase|both] [--skip-mamba]
        [--skip-scale] [--event-baseline] [--only-scale] [--only-moe] [--moe-requests 3000]
        [--skip-moe] [--only-pp] [--skip-pp]

Events are SimPy events scheduled (the main simulation plus the memoized collective-phase
simulations), counted from SimPy's event-id counter. The anchor is Vidur's published rate of
about 34 k events per CPU-second on its own model (its events are scheduler/batch events, a
coarser unit than ours, so the comparison is of orders of magnitude, not a like-for-like race).
Prints a table (with each issue-15 row's CPU-s as a multiple of its target); asserts nothing
about timings.

Serving history (issue 15; ``--only-scale``, one core shared with other jobs, so ±20 %): the
10,000-request llama3-70b run on h100-64x-ib took 17.0-18.3 CPU-s before the per-iteration accounting
was folded into running sums and the batch handled in one pass (commit "serving: fold
per-iteration work ..."), 5.6-7.5 CPU-s after, with identical serving metrics (all 50 scalar
metrics of both the h100-64x-ib and pd-h100-64 runs bit-equal at seed 0). Then decode-only runs
computed in bulk (:mod:`tilewright.dataflow_sim.cluster.decode_run`: between two arrivals a
replica's ~19 pure-decode iterations cost one SimPy wake-up instead of one event each, and
~2.6 M sequence-steps become per-run arithmetic): each serving row is now run twice, in bulk and
with the event-level loop (``decode_runs=False``), in the same process, and the two runs'
metrics are compared (bit-equal). Events counted are SimPy events actually scheduled, so the
bulk run's events/CPU-s is not comparable with the event-level loop's or Vidur's.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from rich.console import Console
from rich.table import Table

from tilewright.dataflow_sim.cluster import (ClusterSpec, ServePlan, TrainPlan, load_cluster,
                                             poisson_requests, simulate_serving,
                                             simulate_training)
from tilewright.models.llm_shapes import get_config

VIDUR_EVENTS_PER_CPU_S = 34_000
TARGET_CPU_S = {"train-1k": 5.0, "train-16k": 60.0, "serve-64": 3.0}   # issue 15, item 3


def h100_rail_cluster(nodes: int) -> ClusterSpec:
    """``nodes`` DGX-H100-like nodes: NVSwitch inside (450 GB/s per GPU per direction, H100
    datasheet), 8 rails of 400 Gb/s = 50 GB/s per NIC per direction (DGX H100 user guide), each
    rail a two-level non-blocking fat tree of 32-node leaves (32 spines). Latencies as in the
    h100-64x-ib preset (assumptions: 0.5 µs NVLink, 1 µs per network hop)."""
    return ClusterSpec.from_dict({
        "name": f"h100-{nodes * 8}-rail", "chip": {"kind": "gpu", "preset": "h100-sxm"},
        "nodes": nodes, "chips_per_node": 8,
        "intra_node": {"topology": "switch", "link_gbps": 450.0, "latency_us": 0.5},
        "inter_node": {"topology": "fat_tree", "link_gbps": 50.0, "latency_us": 1.0,
                       "planes": 8, "nodes_per_leaf": min(nodes, 32), "spines": 32}})


def scale_rows(event_baseline: bool) -> list[tuple]:
    """The issue-15 training targets: (run, plan, simulated, wall, cpu, events, target)."""
    rows = []
    plan = TrainPlan(dp=128, tp=8, micro_batches=8, seq_len=4096)
    levels = ["auto", "event"] if event_baseline else ["auto"]
    for level in levels:
        res, wall, cpu = timed(lambda: simulate_training(h100_rail_cluster(128), "llama3-8b",
                                                         plan, network=level))
        rows.append((f"train llama3-8b, 1,024 H100 (128 nodes, 8 rails), network: "
                     f"{res.metrics['network_level']}", plan.label(),
                     f"step {res.step_seconds:.3f} s", wall, cpu, res.events,
                     TARGET_CPU_S["train-1k"] if level == "auto" else None))
    cfg = dataclasses.replace(get_config("llama3-405b"), n_layers=128,
                              name="llama3-405b (128-layer stand-in)")
    plan = TrainPlan(dp=128, tp=8, sp=1, pp=16, micro_batches=16, seq_len=8192, recompute=True)
    res, wall, cpu = timed(lambda: simulate_training(h100_rail_cluster(2048), cfg, plan))
    rows.append((f"train {cfg.name}, 16,384 H100 (2,048 nodes), Llama 3 Table 4 4D, network: "
                 f"{res.metrics['network_level']}", plan.label() + " cp=1, recompute",
                 f"step {res.step_seconds:.2f} s", wall, cpu, res.events,
                 TARGET_CPU_S["train-16k"]))
    return rows


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
    ap.add_argument("--skip-scale", action="store_true",
                    help="skip the issue-15 1,024- and 16,384-GPU training rows")
    ap.add_argument("--only-scale", action="store_true",
                    help="only the issue-15 rows (the two training steps and the llama3-70b "
                         "serving run on 64 GPUs)")
    ap.add_argument("--event-baseline", action="store_true",
                    help="also time the 1,024-GPU step at event level (slow)")
    ap.add_argument("--moe-requests", type=int, default=3000,
                    help="requests of the MoE serving rows")
    ap.add_argument("--skip-moe", action="store_true", help="skip the MoE serving rows")
    ap.add_argument("--only-moe", action="store_true", help="only the MoE serving rows")
    ap.add_argument("--skip-pp", action="store_true",
                    help="skip the pipeline-parallel serving rows")
    ap.add_argument("--only-pp", action="store_true",
                    help="only the pipeline-parallel serving rows")
    args = ap.parse_args()
    rows = []
    if args.only_moe or args.only_pp:
        if args.only_moe:
            moe_rows(rows, args.moe_requests, args.rate)
        if args.only_pp:
            pp_rows(rows, args.requests, args.rate)
        print_table(rows)
        return
    if not args.skip_scale:
        rows += scale_rows(args.event_baseline)
    if args.only_scale:
        args.skip_pd = args.skip_mamba = args.skip_moe = True

    sources = ["compiler", "table"] if args.cost_source == "both" else [args.cost_source]
    modes = ["network", "phase"] if args.inlayer_comm == "both" else [args.inlayer_comm]
    for src in ([] if args.only_scale else sources):  # wall time includes the layer compile
        for mode in modes:
            plan = TrainPlan(dp=16, tp=8, pp=8, micro_batches=16, seq_len=4096,
                             inlayer_comm=mode)
            res, wall, cpu = timed(lambda: simulate_training(load_cluster("torus-1024"),
                                                             "llama3-70b", plan, cost_source=src))
            rows.append((f"train llama3-70b, torus-1024 (1,024 chips), {src} costs, "
                         f"in-layer comm: {mode}", plan.label(),
                         f"step {res.step_seconds:.2f} s", wall, cpu, res.events, None))

    if not args.skip_mamba:
        mplan = TrainPlan(dp=16, tp=8, pp=8, micro_batches=16, seq_len=4096)
        res, wall, cpu = timed(lambda: simulate_training(load_cluster("torus-1024"),
                                                         "mamba-2.8b", mplan))
        rows.append(("train mamba-2.8b, torus-1024 (1,024 chips), compiler costs",
                     mplan.label(), f"step {res.step_seconds:.2f} s", wall, cpu, res.events,
                     None))

    reqs = poisson_requests(args.requests, args.rate, (128, 2048), (16, 512), seed=0)
    runs = [("h100-64x-ib", None)] + ([] if args.skip_pd else [("pd-h100-64", True)])
    # each serving run twice in the same process: decode-only runs computed in bulk (the
    # default) and the event-level loop (one SimPy event per iteration, decode_runs=False);
    # their metrics must be equal, which is checked here
    for preset, disagg in runs:
        splan = ServePlan(tp=8, disaggregated=disagg)
        outs = {}
        for bulk in (True, False):
            out, wall, cpu = timed(lambda: simulate_serving(load_cluster(preset), "llama3-70b",
                                                            splan, reqs, decode_runs=bulk))
            outs[bulk] = out
            m = out.metrics
            rows.append((f"serve llama3-70b, {preset} (64 GPUs), "
                         + ("decode runs in bulk" if bulk else "event-level loop"),
                         f"{args.requests} req @ {args.rate}/s, tp=8" + (", P/D" if disagg else ""),
                         f"{m['makespan_s']:.0f} s, p99 TTFT {m['ttft_p99_s'] * 1e3:.0f} ms",
                         wall, cpu, out.events, None if disagg else TARGET_CPU_S["serve-64"]))
        report_same(preset, outs)

    if not args.skip_mamba:
        splan = ServePlan(tp=8)
        out, wall, cpu = timed(lambda: simulate_serving(load_cluster("h100-64x-ib"),
                                                        "mamba-2.8b", splan, reqs))
        m = out.metrics
        rows.append(("serve mamba-2.8b, h100-64x-ib (64 GPUs)",
                     f"{args.requests} req @ {args.rate}/s, tp=8",
                     f"{m['makespan_s']:.0f} s, p99 TTFT {m['ttft_p99_s'] * 1e3:.0f} ms",
                     wall, cpu, out.events, None))

    if not args.skip_moe:
        moe_rows(rows, args.moe_requests, args.rate)
    if not (args.skip_pp or args.only_scale):
        pp_rows(rows, args.requests, args.rate)
    print_table(rows)


def report_same(name: str, outs: dict) -> None:
    """Print whether the bulk (``outs[True]``) and event-level runs' results are bit-equal (the
    run's ``components``, summed in another order in bulk: equal within 1e-9 of the window)."""
    fast, cost_keys = outs[True].metrics, ("events", "wall_s", "events_per_s", "components")
    same = outs[True].requests.equals(outs[False].requests) and all(
        v == fast[k] or (v != v and fast[k] != fast[k])
        for k, v in outs[False].metrics.items() if k not in cost_keys)
    a, b = fast["components"], outs[False].metrics["components"]
    close = all(abs(x - b["pools"][r][k]) <= 1e-9 * b["window_s"]
                for r, p in a["pools"].items() for k, x in p.items() if not isinstance(x, dict))
    print(f"{name}: bulk and event-level metrics "
          + ("bit-equal" if same else "DIFFER (a bug: tests/test_serving_decode_runs.py)")
          + ", components " + ("equal to rounding" if close else "DIFFER"))


def bulk_vs_event(rows: list, n: int, rate: float, model: str, plan: ServePlan, what: str,
                  layout: str, headline, target: float | None) -> None:
    """One serving workload on h100-64x-ib (``n`` Poisson requests at ``rate``/s), in bulk and
    with the event-level loop, metrics compared (:func:`report_same`); appends two rows.
    ``headline(metrics)`` is the result column; ``target`` the bulk row's CPU-s target."""
    reqs = poisson_requests(n, rate, (128, 2048), (16, 512), seed=0)
    outs = {}
    for bulk in (True, False):
        out, wall, cpu = timed(lambda: simulate_serving(load_cluster("h100-64x-ib"), model, plan,
                                                        reqs, decode_runs=bulk))
        outs[bulk] = out
        rows.append((f"serve {model}, h100-64x-ib (64 GPUs), {what}"
                     + ("decode runs in bulk" if bulk else "event-level loop"),
                     f"{n} req @ {rate}/s, {layout}", headline(out.metrics),
                     wall, cpu, out.events, target if bulk else None))
    report_same(f"{model} {layout}", outs)


def moe_rows(rows: list, n: int, rate: float) -> None:
    """MoE serving, bulk vs event-level loop (module docstring); appends to ``rows``."""
    bulk_vs_event(rows, n, rate, "mixtral-8x7b",
                  ServePlan(ep=8, routing="zipf", redundant_experts=8), "",
                  "ep=8 DP attention, zipf 1.2, 8 redundant experts",
                  lambda m: f"{m['makespan_s']:.0f} s, p99 TPOT {m['tpot_p99_s'] * 1e3:.1f} ms",
                  None)


def pp_rows(rows: list, n: int, rate: float) -> None:
    """Pipeline-parallel serving, bulk vs event-level loop: llama3-70b on h100-64x-ib as 4
    replicas of TP 8 × PP 2 (each stage one 8-GPU node, the stage sends over InfiniBand);
    appends to ``rows``."""
    bulk_vs_event(rows, n, rate, "llama3-70b", ServePlan(tp=8, pp=2), "pipeline stages, ",
                  "tp=8 pp=2",
                  lambda m: f"{m['makespan_s']:.0f} s, p99 TTFT {m['ttft_p99_s'] * 1e3:.0f} ms",
                  TARGET_CPU_S["serve-64"])


def print_table(rows: list) -> None:
    """The speed table (module docstring)."""
    table = Table(title="cluster model speed (SimPy)")
    for col in ("run", "plan", "simulated", "wall s", "CPU s", "target CPU s", "CPU / target",
                "events", "events/CPU-s", "Vidur events/CPU-s"):
        table.add_column(col, justify="left" if col in ("run", "plan", "simulated") else "right")
    for name, label, sim, wall, cpu, ev, target in rows:
        goal = "" if target is None else f"≤ {target:g} ({'met' if cpu <= target else 'MISSED'})"
        ratio = "" if target is None else f"{cpu / target:.2f}×"
        table.add_row(name, label, sim, f"{wall:.1f}", f"{cpu:.1f}", goal, ratio, f"{ev:,}",
                      f"{ev / cpu:,.0f}", f"~{VIDUR_EVENTS_PER_CPU_S:,}")
    Console(width=200).print(table)


if __name__ == "__main__":
    main()
