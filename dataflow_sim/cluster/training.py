"""One training step of a Llama/Mixtral-style model on a cluster, as a SimPy simulation.

What is simulated event by event (the network is shared, contention is modelled):

* every pipeline device of every data-parallel replica runs its 1F1B or interleaved schedule
  (Megatron-LM's task order) as a SimPy process, waiting on the arrival of its inputs;
* activations (forward) and gradients (backward) between stages are point-to-point messages on
  the network, one per TP·SP rank carrying ``b·(s/sp)·D·e/tp`` bytes (Megatron's scatter/gather);
* each pipeline rank's gradient all-reduce (over dp·sp ranks; expert gradients over the ranks
  holding the same experts) starts once every replica has finished that rank's backward, and
  overlaps the other ranks' remaining work.

Inside a layer, TP all-reduces, SP all-gathers and EP all-to-alls block the layer. Their time is
a *phase*: every group of that kind in the cluster runs the same collective at once in a separate
SimPy simulation on the same topology (:class:`~.collectives.CollectiveTimer`, memoized), which
captures contention between concurrent groups, then enters the step as a timed block.

Per-chip layer compute time (``cost_source``): ``"compiler"`` (the default for ArchSpec chips)
compiles the sharded layer and uses its Report's total time (:mod:`.compiled`, backward = 2 ×
forward GEMM + 2 × forward non-GEMM time); ``"table"`` costs the op table of :mod:`.workload` per
op with :mod:`.costs` (cycle model for ArchSpec GEMMs, roofline otherwise). GPU presets are not
ArchSpecs and always use the table + roofline. Embedding and LM head use the table in both.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import simpy

from tilewright.models.llm_configs import LLMConfig

from .cluster_spec import ClusterSpec, ClusterSpecError
from .collectives import CollectiveTimer, all_reduce
from .compiled import COST_SOURCES, cache_info, compiled_layer
from .costs import ChipModel, chip_model
from .network import Network, events_scheduled
from .plan import TrainPlan, check_train_memory, layer_params, validate_train
from .topology import Topology
from .trace import Trace
from .workload import backward_ops, embedding_ops, head_ops, layer_ops

__all__ = ["simulate_training", "TrainResult", "schedule_order", "stage_costs", "CONVENTION",
           "resolve_cost_source"]

CONVENTION = ("cluster/train: seconds of simulated time; step = last gradient all-reduce end; "
              "per rank compute + exposed_comm (in-layer collectives + its gradient all-reduce) "
              "+ bubble (waiting for pipeline inputs) + idle (waiting for other ranks) = step")


@dataclass
class TrainResult:
    """Outcome of :func:`simulate_training` (seconds, bytes)."""

    step_seconds: float
    breakdown: pd.DataFrame      # per pipeline rank: compute / exposed_comm / bubble / idle (s)
    metrics: dict[str, Any]
    memory: pd.DataFrame         # per pipeline rank: states / activations / capacity (bytes)
    ops: pd.DataFrame            # forward+backward op table of one layer on one chip, with seconds
    trace: Trace | None = None
    events: int = 0
    wall_seconds: float = 0.0

    def report(self) -> pd.DataFrame:
        """Report rows (one per pipeline rank): the breakdown with the run's metrics repeated,
        ``attrs['convention']`` stating how times are counted."""
        df = self.breakdown.assign(**{k: v for k, v in self.metrics.items()
                                      if not isinstance(v, (list, dict))})
        df.attrs["convention"] = CONVENTION
        return df


def schedule_order(p: int, m: int, v: int, rank: int) -> list[tuple[bool, int, int]]:
    """Megatron-LM's task order for pipeline ``rank``: (is_forward, chunk, micro-batch).

    v = 1 is 1F1B (warm-up ``min(p − rank − 1, m)`` forwards); v > 1 is the interleaved schedule
    (warm-up ``2(p − rank − 1) + (v − 1)·p``; needs m % p == 0)."""
    total = m * v
    if v == 1:
        warm = min(p - rank - 1, m)
    else:
        warm = min(2 * (p - rank - 1) + (v - 1) * p, total)

    def chunk_mb(k: int, fwd: bool) -> tuple[int, int]:
        if v == 1:
            return 0, k
        c = (k % (p * v)) // p
        return (c if fwd else v - 1 - c), (k // (p * v)) * p + k % p

    order = [(True, *chunk_mb(k, True)) for k in range(warm)]
    for i in range(total - warm):
        order.append((True, *chunk_mb(warm + i, True)))
        order.append((False, *chunk_mb(i, False)))
    order += [(False, *chunk_mb(k, False)) for k in range(total - warm, total)]
    return order


@dataclass
class _StageCost:
    f_comp: float
    f_comm: float
    b_comp: float
    b_comm: float
    gemm_flops: float = 0.0   # forward+backward GEMM FLOPs of one micro-batch (no recompute)


def resolve_cost_source(chip: ChipModel, cost_source: str | None) -> str:
    """``None`` -> ``"compiler"`` for ArchSpec chips, ``"table"`` for GPU presets."""
    if cost_source is None:
        return "compiler" if chip.arch is not None else "table"
    if cost_source not in COST_SOURCES:
        raise ClusterSpecError(f"cost_source = {cost_source!r}: must be one of "
                               f"{', '.join(COST_SOURCES)}")
    if cost_source == "compiler" and chip.arch is None:
        raise ClusterSpecError(f"cost_source = 'compiler' needs an ArchSpec chip; {chip.name} is "
                               "a GPU preset (costed by its roofline: use cost_source='table')")
    return cost_source


def stage_costs(plan: TrainPlan, cfg: LLMConfig, chip: ChipModel, timer: CollectiveTimer,
                groups: dict[str, list[list[int]]], cost_source: str = "table"
                ) -> tuple[dict[int, _StageCost], pd.DataFrame]:
    """Seconds of one micro-batch through each virtual stage (chunk): forward/backward compute
    and blocking in-layer communication; and the costed op table of one layer."""
    e = chip.element_bytes
    s_l = plan.seq_len // plan.sp
    tokens = plan.micro_batch_size * s_l
    fwd = layer_ops(cfg, plan.shard, batch=plan.micro_batch_size, q_len=s_l, ctx_len=plan.seq_len,
                    element_bytes=e)
    table = pd.concat([fwd.assign(phase="forward"), backward_ops(fwd).assign(phase="backward")],
                      ignore_index=True)
    table["seconds"] = chip.op_seconds(table)
    table["source"] = "table"
    if cost_source == "compiler":
        assert chip.arch is not None
        rep = compiled_layer(cfg, plan.shard, chip.arch, batch=plan.micro_batch_size, q_len=s_l,
                             ctx_len=plan.seq_len)
        table = pd.concat([rep.op_table(), table[table.kind == "comm"]], ignore_index=True)
    algo = {"all_reduce": plan.allreduce_algo, "all_to_all": plan.alltoall_algo}
    comm = table["kind"] == "comm"
    table.loc[comm, "seconds"] = [timer.seconds(r.collective, groups[r.group], r.comm_bytes,
                                                algo.get(r.collective))
                                  for r in table[comm].itertuples()]

    def sums(df: pd.DataFrame) -> tuple[float, float]:
        c = df["kind"] == "comm"
        return float(df.loc[~c, "seconds"].sum()), float(df.loc[c, "seconds"].sum())

    fc, fm = sums(table[table.phase == "forward"])
    bc, bm = sums(table[table.phase == "backward"])
    if plan.recompute:
        bc, bm = bc + fc, bm + fm
    gflops = float(table.loc[table.kind == "gemm", "flops"].sum())
    n_chunk = cfg.n_layers // (plan.pp * plan.virtual_stages)
    V = plan.pp * plan.virtual_stages
    out = {}
    for vs in range(V):
        sc = _StageCost(n_chunk * fc, n_chunk * fm, n_chunk * bc, n_chunk * bm, n_chunk * gflops)
        if plan.embedding_and_head and vs == 0:
            emb = embedding_ops(cfg, plan.shard, tokens, e)
            t = float(chip.op_seconds(emb).sum())
            sc.f_comp += t
            sc.b_comp += float(chip.op_seconds(backward_ops(emb)).sum())
        if plan.embedding_and_head and vs == V - 1:
            head = head_ops(cfg, plan.shard, tokens, e)
            sc.f_comp += float(chip.op_seconds(head).sum())
            hb = backward_ops(head)
            sc.b_comp += float(chip.op_seconds(hb).sum())
            sc.gemm_flops += float(head.loc[head.kind == "gemm", "flops"].sum()
                                   + hb.loc[hb.kind == "gemm", "flops"].sum())
        out[vs] = sc
    return out, table


def simulate_training(spec: ClusterSpec, model: str | LLMConfig, plan: TrainPlan, *,
                      trace: bool = False, cost_source: str | None = None) -> TrainResult:
    """Simulate one training step; raises :class:`~.cluster_spec.PlanError` for plans that do
    not divide or do not fit in memory. ``cost_source``: ``"compiler"`` | ``"table"`` | None
    (compiler for ArchSpec chips, table/roofline for GPU presets); see the module docstring."""
    wall0 = time.perf_counter()
    cfg = validate_train(plan, spec, model)
    chip = chip_model(spec)
    cost_source = resolve_cost_source(chip, cost_source)
    compiles0 = cache_info()["misses"]
    mem = check_train_memory(plan, spec, chip, cfg)
    topo = Topology(spec)
    timer = CollectiveTimer(topo)
    tp, sp, dp, pp, ep = plan.tp, plan.sp, plan.dp, plan.pp, plan.ep
    v, m = plan.virtual_stages, plan.micro_batches
    V = pp * v

    def chip_id(t: int, s: int, d: int, p: int) -> int:
        return t + tp * (s + sp * (d + dp * p))

    groups: dict[str, list[list[int]]] = {
        "tp": [[chip_id(t, s, d, p) for t in range(tp)]
               for s in range(sp) for d in range(dp) for p in range(pp)],
        "sp": [[chip_id(t, s, d, p) for s in range(sp)]
               for t in range(tp) for d in range(dp) for p in range(pp)],
    }
    ds = [(s, d) for d in range(dp) for s in range(sp)]          # data/context ranks, j order
    groups["ep"] = [[chip_id(t, *ds[j], p) for j in range(blk, blk + ep)]
                    for t in range(tp) for p in range(pp) for blk in range(0, dp * sp, ep)]
    costs, table = stage_costs(plan, cfg, chip, timer, groups, cost_source)

    env = simpy.Environment()
    net = Network(env, topo)
    tr = Trace() if trace else None
    e = chip.element_bytes
    act_bytes = plan.micro_batch_size * (plan.seq_len // sp) * cfg.d_model * e / tp
    ready = defaultdict(env.event)          # (d, is_fwd, vs, mb) -> inputs have arrived
    stats = defaultdict(float)              # (d, r, key) -> seconds
    done_bwd: dict[int, list[simpy.Event]] = {r: [] for r in range(pp)}

    def transfer(d: int, r_src: int, r_dst: int, key: tuple) -> None:
        if r_src == r_dst:
            ready[key].succeed()
            return
        pairs = [(chip_id(t, s, d, r_src), chip_id(t, s, d, r_dst))
                 for t in range(tp) for s in range(sp)]
        net.send_many(pairs, act_bytes).callbacks.append(lambda _ev: ready[key].succeed())

    def device(d: int, r: int, finished: simpy.Event):
        for fwd, c, mb in schedule_order(pp, m, v, r):
            vs = c * pp + r
            if (fwd and vs > 0) or (not fwd and vs < V - 1):
                t0 = env.now
                yield ready[(d, fwd, vs, mb)]
                stats[(d, r, "wait")] += env.now - t0
            sc = costs[vs]
            comp, comm = (sc.f_comp, sc.f_comm) if fwd else (sc.b_comp, sc.b_comm)
            if tr is not None:
                tr.span(f"{'F' if fwd else 'B'}{mb}.c{c}", "compute", env.now, comp + comm,
                        f"replica{d}", f"stage{r}", comm_s=comm)
            yield env.timeout(comp + comm)
            stats[(d, r, "compute")] += comp
            stats[(d, r, "comm")] += comm
            if fwd and vs < V - 1:
                transfer(d, r, (vs + 1) % pp, (d, True, vs + 1, mb))
            elif fwd:                               # last virtual stage: its backward may start
                ready[(d, False, vs, mb)].succeed()
            elif vs > 0:
                transfer(d, r, (vs - 1) % pp, (d, False, vs - 1, mb))
        stats[(d, r, "bwd_end")] = env.now
        finished.succeed()

    dense, expert = layer_params(cfg, plan.shard)
    n_rank = cfg.n_layers // pp
    vocab = -(-cfg.vocab_size // tp) * cfg.d_model

    def grad_sync(r: int):
        yield env.all_of(done_bwd[r])
        start = env.now
        p_dense = n_rank * dense + (vocab * ((r == 0) + (r == pp - 1))
                                    if plan.embedding_and_head else 0)
        syncs = [all_reduce(net, [chip_id(t, s, d, r) for d in range(dp) for s in range(sp)],
                            p_dense * e, plan.allreduce_algo) for t in range(tp)]
        if expert and dp * sp > ep:
            syncs += [all_reduce(net, [chip_id(t, *ds[j], r) for j in range(k, dp * sp, ep)],
                                 n_rank * expert * e, plan.allreduce_algo)
                      for t in range(tp) for k in range(ep)]
        yield env.all_of(syncs)
        stats[("sync", r, "start")], stats[("sync", r, "end")] = start, env.now
        if tr is not None:
            tr.span("grad all-reduce", "comm", start, env.now - start, "data-parallel", f"stage{r}")

    for d in range(dp):
        for r in range(pp):
            ev = env.event()
            done_bwd[r].append(ev)
            env.process(device(d, r, ev))
    for r in range(pp):
        env.process(grad_sync(r))
    env.run()
    step = env.now

    rows = []
    for r in range(pp):
        comp = np.mean([stats[(d, r, "compute")] for d in range(dp)])
        comm = np.mean([stats[(d, r, "comm")] for d in range(dp)])
        bwd_end = np.mean([stats[(d, r, "bwd_end")] for d in range(dp)])
        s0, s1 = stats[("sync", r, "start")], stats[("sync", r, "end")]
        rows.append({"rank": r, "compute_s": comp, "exposed_comm_s": comm + (s1 - s0),
                     "inlayer_comm_s": comm, "grad_sync_s": s1 - s0,
                     "bubble_s": bwd_end - comp - comm,
                     "idle_s": step - s1 + (s0 - bwd_end), "step_s": step})
    breakdown = pd.DataFrame(rows)
    tokens = dp * m * plan.micro_batch_size * plan.seq_len
    gemm_flops = m * sum(costs[vs].gemm_flops for vs in range(V)) * tp * sp * dp
    metrics = {
        "mode": "train", "model": cfg.name, "cluster": spec.name, "chips": spec.n_chips,
        "plan": plan.label(), "schedule": plan.schedule, "cost_source": cost_source,
        "layer_compiles": cache_info()["misses"] - compiles0, "step_s": step,
        "tokens_per_s": tokens / step,
        "compute_s": float(breakdown.compute_s.mean()),
        "exposed_comm_s": float(breakdown.exposed_comm_s.mean()),
        "bubble_s": float(breakdown.bubble_s.mean()), "idle_s": float(breakdown.idle_s.mean()),
        "bubble_fraction_rank0": float(breakdown.bubble_s.iloc[0] / step),
        "gemm_utilization": gemm_flops / (step * spec.n_chips * chip.peak_gemm_flops_per_s),
        "memory_peak_gib": max(x["total_bytes"] for x in mem) / 2**30,
        "memory_capacity_gib": chip.hbm_bytes / 2**30,
        "network_messages": net.messages, "collective_phase_runs": timer.runs,
        "busiest_link_utilization": max(net.busy_seconds.values(), default=0.0) / step,
    }
    events = events_scheduled(env) + timer.events
    wall = time.perf_counter() - wall0
    metrics.update(events=events, wall_s=wall, events_per_s=events / wall)
    return TrainResult(step, breakdown, metrics, pd.DataFrame(mem), table, tr, events, wall)
