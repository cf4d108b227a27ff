"""One training step of a Llama/Mixtral-style or Mamba model on a cluster, as a SimPy simulation.

What is simulated event by event (the network is shared, contention is modelled):

* every pipeline device of every data-parallel replica runs its 1F1B or interleaved schedule
  (Megatron-LM's task order) as a SimPy process, waiting on the arrival of its inputs;
* activations (forward) and gradients (backward) between stages are point-to-point messages on
  the network, one per TP·SP rank carrying ``b·(s/sp)·D·e/tp`` bytes (Megatron's scatter/gather);
* the data-parallel gradient all-reduce is bucketed like PyTorch DDP (``grad_bucket_mb``, default
  25 MiB): during the last micro-batch's backward each finished layer adds its gradients to the
  open bucket; a full bucket's all-reduce (over the dp·sp ranks; expert gradients over the ranks
  holding the same experts) starts once every replica has filled it and the previous bucket's
  all-reduce is done, so it overlaps the remaining backward. ``grad_bucket_mb=None``: one
  all-reduce after the backward. The exposed part is what runs after the last bucket is ready.

Inside a layer, TP all-reduces, SP all-gathers and EP all-to-alls block the layer. With
``inlayer_comm="network"`` (default) they run in the same SimPy environment on the same links as
the pipeline and gradient traffic, so they contend with it: per task (all layers of a chunk for
one micro-batch; per layer in the last backward) each kind is one collective of the summed bytes
over the device's groups, plus (count − 1) × that collective's latency part; an EP all-to-all is
each member's own pairwise sends (symmetric replicas send theirs at the same time). With
``inlayer_comm="phase"`` every group of that kind runs the collective at once in a separate SimPy
simulation on the same topology (:class:`~.collectives.CollectiveTimer`, memoized), captured as a
timed block (contention between in-layer groups only).

Per-chip layer compute time (``cost_source``): ``"compiler"`` (the default for ArchSpec chips)
compiles the sharded layer (Llama, Mixtral-style MoE or Mamba), the embedding lookup (a row
gather, ``aten.embedding`` -> ``take_rows``) and the LM head and uses their Reports' total
times (:mod:`.compiled`: the backward GEMMs dX = dY·Wᵀ and dW = Xᵀ·dY are compiled too;
non-GEMM backward = 2 × forward); ``"table"`` costs the op table of :mod:`.workload` per op
with :mod:`.costs` (cycle model for ArchSpec GEMMs, roofline otherwise). GPU presets are not
ArchSpecs and always use the table + roofline.

Network level (``network``): ``"event"`` is the above — every message of every collective and
pipeline transfer on the shared SimPy links. ``"flow"`` costs each collective and each pipeline
transfer at flow level (:class:`~.collectives.FlowTimer`: the NCCL-like algorithm's closed form
on the link loads of all groups running it at once) and waits that long: contention *within* a
phase (all TP groups, all DP rings of a stage, all ranks of a transfer) is modelled, contention
*between* phases (a pipeline transfer against a gradient bucket) is not; in-layer collectives
are timed blocks (``inlayer_comm="phase"``). The simulation then costs a few events per task
instead of ~n² messages per all-reduce, so it grows about linearly in chips. ``"auto"`` (the
default): flow above :data:`AUTO_FLOW_CHIPS` chips, unless the plan sets
``inlayer_comm="network"`` explicitly; the level used is ``metrics["network_level"]``.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import simpy

from tilewright.models.llm_configs import LLMConfig

from .cluster_spec import ClusterSpec, ClusterSpecError, PlanError
from .collectives import (COLLECTIVES, CollectiveTimer, FlowTimer, all_gather, all_reduce,
                          reduce_scatter)
from .compiled import COST_SOURCES, cache_info, compiled_embedding, compiled_head, compiled_layer
from .costs import ChipModel, chip_model, with_gemm_format
from .energy import WORK_FIELDS, add_traffic, cluster_energy, ops_work, report_work
from .network import Network, events_scheduled
from .plan import TrainPlan, check_train_memory, chunk_layers, layer_params, validate_train
from .topology import Topology
from .trace import Trace
from .workload import (Shard, backward_ops, dims_of, embedding_ops, head_ops, layer_ops,
                       tp_comm_overlap)

__all__ = ["simulate_training", "TrainResult", "schedule_order", "stage_costs", "CONVENTION",
           "resolve_cost_source", "COMPONENTS", "model_flops_per_token", "component_of",
           "NETWORK_LEVELS", "AUTO_FLOW_CHIPS"]

NETWORK_LEVELS = ("auto", "event", "flow")
AUTO_FLOW_CHIPS = 64
"""``network="auto"`` simulates clusters of more chips than this at flow level."""

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
    # seconds of one micro-batch's forward + backward compute by component (COMPONENTS)
    parts: dict[str, float] = field(default_factory=dict)
    # (MACs, vector ops, off-chip bytes) one micro-batch executes, recompute included
    work: np.ndarray = field(default_factory=lambda: np.zeros(len(WORK_FIELDS)))


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
                    element_bytes=e, fused_attention=chip.fused_attention,
                    balanced_context=plan.sp > 1, seq_parallel=plan.seq_parallel)
    table = pd.concat([fwd.assign(phase="forward"), backward_ops(fwd).assign(phase="backward")],
                      ignore_index=True)
    table["seconds"] = chip.op_seconds(table)
    table["source"] = "table"
    fw, bw = ops_work(table[table.phase == "forward"]), ops_work(table[table.phase == "backward"])
    if cost_source == "compiler":
        assert chip.arch is not None
        rep = compiled_layer(cfg, plan.shard, chip.arch, batch=plan.micro_batch_size, q_len=s_l,
                             ctx_len=plan.seq_len)
        table = pd.concat([rep.op_table(), table[table.kind == "comm"]], ignore_index=True)
        fw, bw = report_work(rep.report), report_work(rep.backward)
    algo = {"all_reduce": plan.allreduce_algo, "all_to_all": plan.alltoall_algo}
    comm = table["kind"] == "comm"
    table.loc[comm, "seconds"] = [timer.seconds(r.collective, groups[r.group], r.comm_bytes,
                                                algo.get(r.collective))
                                  for r in table[comm].itertuples()]
    table["overlapped_s"] = 0.0
    if plan.tp_comm_overlap:            # seconds left are the exposed part (.workload)
        try:
            hidden = tp_comm_overlap(table, plan.tp)
        except ValueError as exc:
            raise PlanError(f"plan {plan.label()}: {exc}") from None
        table["overlapped_s"] = hidden
        table["seconds"] = table["seconds"] - hidden

    def sums(df: pd.DataFrame) -> tuple[float, float]:
        c = df["kind"] == "comm"
        return float(df.loc[~c, "seconds"].sum()), float(df.loc[c, "seconds"].sum())

    table["component"] = component_of(table)
    table["overhead_s"] = np.where(table["kind"] == "comm", 0.0,
                                   chip.launch_s if cost_source == "table" else 0.0)
    fc, fm = sums(table[table.phase == "forward"])
    bc, bm = sums(table[table.phase == "backward"])
    layer_parts = _parts(table)
    frac = recompute_fraction(plan, cfg)
    if plan.recompute == "full":       # the recomputed layers' forward again in backward
        bc, bm, bw = bc + frac * fc, bm + frac * fm, bw + frac * fw
        layer_parts = _add(layer_parts, {k: frac * x for k, x in
                                         _parts(table[table.phase == "forward"]).items()})
    elif plan.recompute == "selective" and not chip.fused_attention:
        # the attention core's forward again in backward (fused attention already recomputes
        # its scores inside its backward kernel: nothing to add)
        core = table[(table.phase == "forward") & (table.component == "attention")]
        bc += float(core["seconds"].sum())
        layer_parts = _add(layer_parts, _parts(core))
    gflops = float(table.loc[table.kind == "gemm", "flops"].sum())
    layers = chunk_layers(plan, cfg.n_layers)
    V = plan.pp * plan.virtual_stages
    out = {}
    for vs in range(V):
        n_chunk = layers[vs]
        sc = _StageCost(n_chunk * fc, n_chunk * fm, n_chunk * bc, n_chunk * bm, n_chunk * gflops,
                        work=n_chunk * (fw + bw),
                        parts={k: n_chunk * v for k, v in layer_parts.items()})
        if plan.embedding_and_head and vs == 0 and cost_source == "compiler":
            assert chip.arch is not None
            er = compiled_embedding(cfg, plan.shard, chip.arch, tokens=tokens, element_bytes=e)
            sc.f_comp += er.forward_seconds
            sc.b_comp += er.backward_seconds
            sc.parts = _add(sc.parts, {"other_compute_s": er.forward_seconds
                                       + er.backward_seconds})
            sc.work = sc.work + report_work(er.report) + report_work(er.backward)
        elif plan.embedding_and_head and vs == 0:
            emb = embedding_ops(cfg, plan.shard, tokens, e)
            t = float(chip.op_seconds(emb).sum())
            sc.f_comp += t
            eb = backward_ops(emb)
            sc.b_comp += float(chip.op_seconds(eb).sum())
            sc.parts = _add(sc.parts, _ops_parts(pd.concat([emb, eb]), chip))
            sc.work = sc.work + ops_work(emb) + ops_work(eb)
        if plan.embedding_and_head and vs == V - 1 and cost_source == "compiler":
            assert chip.arch is not None
            hr = compiled_head(cfg, plan.shard, chip.arch, tokens=tokens)
            sc.f_comp += hr.forward_seconds
            sc.b_comp += hr.backward_seconds
            sc.parts = _add(sc.parts, {"gemm_s": hr.forward_seconds + hr.backward_seconds})
            sc.gemm_flops += 2.0 * (hr.gemm_macs + hr.backward_gemm_macs)
            sc.work = sc.work + report_work(hr.report) + report_work(hr.backward)
        elif plan.embedding_and_head and vs == V - 1:
            head = head_ops(cfg, plan.shard, tokens, e)
            sc.f_comp += float(chip.op_seconds(head).sum())
            hb = backward_ops(head)
            sc.b_comp += float(chip.op_seconds(hb).sum())
            sc.parts = _add(sc.parts, _ops_parts(pd.concat([head, hb]), chip))
            sc.gemm_flops += float(head.loc[head.kind == "gemm", "flops"].sum()
                                   + hb.loc[hb.kind == "gemm", "flops"].sum())
            sc.work = sc.work + ops_work(head) + ops_work(hb)
        out[vs] = sc
    return out, table


#: compute components of a training step (seconds); with exposed_comm_s, bubble_s and idle_s
#: they sum to step_s
COMPONENTS = ("gemm_s", "attention_s", "other_compute_s", "overhead_s")


def component_of(table: pd.DataFrame) -> np.ndarray:
    """Each op row's component: ``comm``; ``attention`` (the fused kernel, or the unfused
    scores/softmax/values ops, or a compiled task so named); ``gemm``; ``other`` (norms,
    activations, residuals, rotary, routing, embedding, loss)."""
    name = table["name"].astype(str).str.lower()
    attn = (table["kind"] == "attention") | name.str.contains(
        r"attn_scores|attn_values|softmax|attention|scores", regex=True) & ~name.str.contains(
        "logits")
    return np.select([table["kind"] == "comm", attn, table["kind"] == "gemm"],
                     ["comm", "attention", "gemm"], "other")


def _parts(table: pd.DataFrame) -> dict[str, float]:
    """Seconds by compute component of the non-comm rows of a costed op table (launch costs in
    ``overhead_s``)."""
    t = table[table["component"] != "comm"]
    net = t["seconds"] - t["overhead_s"]
    out = {f"{k if k != 'other' else 'other_compute'}_s": float(net[t["component"] == k].sum())
           for k in ("gemm", "attention", "other")}
    out["overhead_s"] = float(t["overhead_s"].sum())
    return out


def _ops_parts(ops: pd.DataFrame, chip: ChipModel) -> dict[str, float]:
    ops = ops.assign(seconds=chip.op_seconds(ops))
    ops["component"] = component_of(ops)
    ops["overhead_s"] = np.where(ops["kind"] == "comm", 0.0, chip.launch_s)
    return _parts(ops)


def _add(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {k: a.get(k, 0.0) + b.get(k, 0.0) for k in COMPONENTS}


def model_flops_per_token(cfg: LLMConfig, seq_len: int) -> tuple[float, str]:
    """(FLOPs per token, the formula) of MFU: ``6·N + 12·L·H·hd·s`` — N the parameters of the
    matmuls (every layer's weights, routed experts at top_k/n_experts, and the LM head; not the
    input embedding), the attention term over the full (non-causal) s×s scores, as PaLM
    (Chowdhery et al. 2022, App. B) and torchtitan count it. Mamba: no attention term."""
    dense, expert = layer_params(cfg, Shard())
    dm = dims_of(cfg, Shard())
    active = dense + (expert * dm.top_k / dm.n_experts if dm.moe else 0.0)
    n = cfg.n_layers * active + dm.vocab * cfg.d_model
    attn = 0.0 if dm.ssm else 12.0 * cfg.n_layers * dm.h * dm.hd * seq_len
    return 6.0 * n + attn, ("MFU = tokens · (6·N + 12·L·H·hd·s) with N = " f"{n:.4g} matmul "
                            "parameters (no input embedding), L layers, H heads, hd head dim, "
                            f"s = {seq_len}")


def recompute_fraction(plan: TrainPlan, cfg: LLMConfig) -> float:
    """Share of the layers whose forward runs again in backward: 1 for full recompute of every
    layer, ``recompute_layers / layers per chunk`` for a partial one, else 0 (selective
    recompute is costed per op in :func:`stage_costs`)."""
    if plan.recompute != "full":
        return 0.0
    if plan.recompute_layers is None:
        return 1.0
    return plan.recompute_layers / max(chunk_layers(plan, cfg.n_layers))


def _per_layer_comm(table: pd.DataFrame, fwd: bool, recompute: float
                    ) -> dict[tuple[str, str], tuple[float, int]]:
    """(collective, group) -> (bytes per layer, collectives per layer) of one direction; the
    backward carries ``recompute`` (a share of the layers) times the forward's collectives
    again, their count rounded."""
    comm = table[table.kind == "comm"]
    phases = [("forward", 1.0)] if fwd else [("backward", 1.0), ("forward", float(recompute))]
    out: dict[tuple[str, str], tuple[float, int]] = {}
    for ph, w in phases:
        if w <= 0:
            continue
        for r in comm[comm.phase == ph].itertuples():
            nb, cnt = out.get((r.collective, r.group), (0.0, 0))
            out[(r.collective, r.group)] = (nb + w * r.comm_bytes, cnt + max(1, round(w)))
    return out


def _all_to_all_out(net: Network, group: list[int], i: int, nbytes: float) -> simpy.Event:
    """Member ``i``'s side of a pairwise all-to-all: it sends ``nbytes/n`` to ``i+1, i+2, …``
    in turn (the peers, symmetric replicas, send theirs at the same time)."""
    env, n = net.env, len(group)

    def run():
        for k in range(1, n):
            yield from net.transmit(group[i], group[(i + k) % n], nbytes / n)

    return env.process(run())


def _bubble(bwd_end: float, compute: float, comm: float) -> float:
    """A rank's pipeline bubble in seconds: its backward end minus its busy time. Waiting cannot
    be negative, and when there is no bubble the subtraction of float sums leaves rounding
    residue (-2.66e-15 s seen): a difference within 1e-12 of ``bwd_end`` (far above float64
    rounding, far below any modelled wait) is 0."""
    b = bwd_end - compute - comm
    return b if b > 1e-12 * abs(bwd_end) else 0.0


def _network_level(network: str, plan: TrainPlan, spec: ClusterSpec) -> str:
    """The level ``network`` asks for ("event" | "flow"); PlanError for an unknown level or a
    flow-level run of a plan that explicitly puts in-layer collectives on the shared network."""
    if network not in NETWORK_LEVELS:
        raise ClusterSpecError(f"network = {network!r}: must be one of {', '.join(NETWORK_LEVELS)}")
    explicit_net = "inlayer_comm" in plan.model_fields_set and plan.inlayer_comm == "network"
    if network == "flow" and explicit_net:
        raise PlanError("plan inlayer_comm='network' needs network='event' (at flow level the "
                        "in-layer collectives are timed phases: inlayer_comm='phase')")
    if network == "auto":
        return "flow" if spec.n_chips > AUTO_FLOW_CHIPS and not explicit_net else "event"
    return network


def simulate_training(spec: ClusterSpec, model: str | LLMConfig, plan: TrainPlan, *,
                      trace: bool = False, cost_source: str | None = None,
                      tech: str | None = None, network: str = "auto") -> TrainResult:
    """Simulate one training step; raises :class:`~.cluster_spec.PlanError` for plans that do
    not divide or do not fit in memory. ``cost_source``: ``"compiler"`` | ``"table"`` | None
    (compiler for ArchSpec chips, table/roofline for GPU presets); see the module docstring.
    ``tech``: technology table for an ArchSpec chip's energy (:mod:`.energy`; default 7nm).
    ``network``: ``"auto"`` | ``"event"`` | ``"flow"`` (module docstring)."""
    wall0 = time.perf_counter()
    cfg = validate_train(plan, spec, model)
    chip = with_gemm_format(chip_model(spec), plan.gemm_format)
    cost_source = resolve_cost_source(chip, cost_source)
    compiles0 = cache_info()["misses"]
    mem = check_train_memory(plan, spec, chip, cfg)
    level = _network_level(network, plan, spec)
    flow = level == "flow"
    topo = Topology(spec)
    timer = FlowTimer(topo) if flow else CollectiveTimer(topo)
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
    layers = chunk_layers(plan, cfg.n_layers)      # layers of each virtual stage
    vs_full = layers.index(max(layers))             # a fullest chunk: its per-layer cost
    n_layer = layers[vs_full]
    # ZeRO-3 / FSDP: each layer's parameters are all-gathered over the data-parallel ranks
    # before its forward and again before its backward, prefetched during the previous
    # layer's compute: only the excess over that compute is exposed (per layer, per task)
    fsdp_exposed = {True: 0.0, False: 0.0}
    fsdp_gather_s = 0.0
    if plan.zero == 3 and dp * sp > 1:
        dense_p, expert_p = layer_params(cfg, plan.shard)
        dgroups = [[chip_id(t, s, d, 0) for d in range(dp) for s in range(sp)] for t in range(tp)]
        fsdp_gather_s = timer.seconds("all_gather", dgroups,
                                      (dense_p + expert_p) * chip.element_bytes)
        per_layer_fwd = costs[vs_full].f_comp / n_layer if n_layer else 0.0
        per_layer_bwd = costs[vs_full].b_comp / n_layer if n_layer else 0.0
        fsdp_exposed = {True: max(0.0, fsdp_gather_s - per_layer_fwd),
                        False: max(0.0, fsdp_gather_s - per_layer_bwd)}

    env = simpy.Environment()
    net = Network(env, topo)
    tr = Trace() if trace else None
    e = chip.element_bytes
    act_bytes = plan.micro_batch_size * (plan.seq_len // sp) * cfg.d_model * e / tp
    ready = defaultdict(env.event)          # (d, is_fwd, vs, mb) -> inputs have arrived
    stats = defaultdict(float)              # (d, r, key) -> seconds
    on_net = plan.inlayer_comm == "network" and not flow
    frac = recompute_fraction(plan, cfg)
    # TP communication overlap: the TP collectives' exposed part is a timed block, not sent
    # on the links (its overlapped part ran under the GEMMs)
    tp_rows = (table.kind == "comm") & (table.group == "tp") if plan.tp_comm_overlap else \
        np.zeros(len(table), bool)
    per_layer = {f: _per_layer_comm(table[~tp_rows], f, frac) for f in (True, False)}

    def _tp_secs(col: str) -> dict[bool, float]:
        fw = float(table.loc[tp_rows & (table.phase == "forward"), col].sum())
        bw = float(table.loc[tp_rows & (table.phase == "backward"), col].sum())
        return {True: fw, False: bw + frac * fw}
    tp_exposed, tp_hidden = _tp_secs("seconds"), _tp_secs("overlapped_s")
    algo = {"all_reduce": plan.allreduce_algo, "all_to_all": plan.alltoall_algo}
    intercepts: dict[tuple, float] = {}

    def dev_groups(d: int, r: int, gk: str) -> list[tuple[list[int], int | None]]:
        """(group, index of the sending member or None = whole group) of device (d, r)."""
        if gk == "tp":
            return [([chip_id(t, s, d, r) for t in range(tp)], None) for s in range(sp)]
        if gk == "sp":
            return [([chip_id(t, s, d, r) for s in range(sp)], None) for t in range(tp)]
        out = []                            # ep: this replica's members of each EP group
        for t in range(tp):
            for blk in range(0, dp * sp, ep):
                g = [chip_id(t, *ds[j], r) for j in range(blk, blk + ep)]
                out += [(g, i) for i, j in enumerate(range(blk, blk + ep)) if ds[j][1] == d]
        return out

    def intercept(kind: str, gs: list[list[int]]) -> float:
        """Latency part of one collective on groups ``gs`` (affine intercept, or 1 byte)."""
        key = (kind, tuple(map(tuple, gs)))
        if key not in intercepts:
            line = timer.affine(kind, gs, algo.get(kind))
            intercepts[key] = line[0] if line else timer.seconds(kind, gs, 1.0, algo.get(kind))
        return intercepts[key]

    def inlayer(d: int, r: int, fwd: bool, layers: int):
        """The in-layer collectives of ``layers`` layers on the shared network: per kind, one
        collective of the summed bytes, plus (count − 1) × its latency part."""
        for (kind, gk), (nbytes, count) in per_layer[fwd].items():
            members = dev_groups(d, r, gk)
            evs = [_all_to_all_out(net, g, i, layers * nbytes) if i is not None
                   else COLLECTIVES[kind](net, g, layers * nbytes, algo.get(kind))
                   for g, i in members]
            yield env.all_of(evs)
            extra = (layers * count - 1) * intercept(kind, [g for g, _ in members])
            if extra > 0:
                yield env.timeout(extra)

    def n_units(vs: int) -> int:
        """Gradient units of virtual stage ``vs``: its layers, or one (the embedding or the LM
        head alone) for a chunk of 0 layers that holds one of them."""
        alone = plan.embedding_and_head and vs in (0, V - 1)
        return max(layers[vs], int(alone))

    # DP gradient buckets (PyTorch DDP style): per pipeline rank, in the order the last
    # micro-batch's backward finishes its layers
    dense, expert = layer_params(cfg, plan.shard)
    vocab = -(-cfg.vocab_size // tp) * cfg.d_model
    cap = plan.grad_bucket_mb * 2**20 if plan.grad_bucket_mb else math.inf
    units: dict[int, list[tuple[float, float]]] = {}
    buckets: dict[tuple[int, str], list[tuple[int, float]]] = {}   # (r, kind) -> (unit, bytes)
    for r in range(pp):
        u = []
        for fwd, c, mb in schedule_order(pp, m, v, r):
            if fwd or mb != m - 1:
                continue
            vs = c * pp + r
            n_chunk = n_units(vs)
            for i in range(n_chunk):
                extra_p = vocab * ((vs == V - 1 and i == 0) + (vs == 0 and i == n_chunk - 1)) \
                    if plan.embedding_and_head else 0
                body = i < layers[vs]               # a layer, or the embedding/head alone
                u.append(((dense * body + extra_p) * e, expert * body * e))
        units[r] = u
        for kind, col in (("dense", 0), ("expert", 1)):
            acc, out = 0.0, []
            for idx, x in enumerate(u):
                acc += x[col]
                if acc >= cap or (idx == len(u) - 1 and acc > 0):
                    out.append((idx, acc))
                    acc = 0.0
            buckets[(r, kind)] = out
    sync_expert = bool(expert) and dp * sp > ep
    grad_ready = defaultdict(env.event)     # (r, kind, k, d) -> bucket k of replica d is ready
    closes = {(r, kind): {idx: k for k, (idx, _) in enumerate(buckets[(r, kind)])}
              for r in range(pp) for kind in ("dense", "expert")}

    carried_flow: dict[int, float] = {}     # flow level: bytes per link of transfers, buckets

    def transfer(d: int, r_src: int, r_dst: int, key: tuple) -> None:
        if r_src == r_dst:
            ready[key].succeed()
            return
        pairs = [(chip_id(t, s, d, r_src), chip_id(t, s, d, r_dst))
                 for t in range(tp) for s in range(sp)]
        if flow:            # the tp·sp sends of one transfer at once, at flow level
            t_s = timer.seconds("send", pairs, act_bytes)
            add_traffic(carried_flow, timer.traffic("send", pairs), act_bytes)
            ev = env.timeout(t_s)
        else:
            ev = net.send_many(pairs, act_bytes)
        ev.callbacks.append(lambda _ev: ready[key].succeed())

    def device(d: int, r: int):
        unit = 0
        for fwd, c, mb in schedule_order(pp, m, v, r):
            vs = c * pp + r
            if (fwd and vs > 0) or (not fwd and vs < V - 1):
                t0 = env.now
                yield ready[(d, fwd, vs, mb)]
                stats[(d, r, "wait")] += env.now - t0
            sc = costs[vs]
            comp, comm = (sc.f_comp, sc.f_comm) if fwd else (sc.b_comp, sc.b_comm)
            n_chunk = layers[vs]
            pieces = max(1, n_units(vs)) if (not fwd and mb == m - 1) else 1
            t_task = env.now
            for piece in range(pieces):
                yield env.timeout(comp / pieces)
                t0 = env.now
                # the layers of this piece: all of the chunk, or one (0 for the embedding or
                # head alone)
                n_piece = n_chunk if pieces == 1 else int(piece < n_chunk)
                if fsdp_exposed[fwd] > 0:       # ZeRO-3 parameter all-gather not hidden
                    yield env.timeout(fsdp_exposed[fwd] * n_piece)
                if on_net:
                    if n_piece:
                        yield env.process(inlayer(d, r, fwd, n_piece))
                    if tp_exposed[fwd] > 0:
                        yield env.timeout(tp_exposed[fwd] * n_piece)
                elif comm > 0:
                    yield env.timeout(comm / pieces)
                stats[(d, r, "comm")] += env.now - t0
                if not fwd and mb == m - 1 and piece < n_units(vs):   # a unit's gradients
                    # are final
                    for kind in ("dense", "expert"):
                        k = closes[(r, kind)].get(unit)
                        if k is not None:
                            grad_ready[(r, kind, k, d)].succeed()
                    unit += 1
            stats[(d, r, "compute")] += comp
            if tr is not None:
                tr.span(f"{'F' if fwd else 'B'}{mb}.c{c}", "compute", t_task, env.now - t_task,
                        f"replica{d}", f"stage{r}", comm_s=env.now - t_task - comp)
            if fwd and vs < V - 1:
                transfer(d, r, (vs + 1) % pp, (d, True, vs + 1, mb))
            elif fwd:                               # last virtual stage: its backward may start
                ready[(d, False, vs, mb)].succeed()
            elif vs > 0:
                transfer(d, r, (vs - 1) % pp, (d, False, vs - 1, mb))
        stats[(d, r, "bwd_end")] = env.now

    def grad_sync(r: int, kind: str):
        """Bucket k's all-reduce starts once every replica has finished it and bucket k−1's
        all-reduce is done (one stream of buckets, as DDP/NCCL run them)."""
        for k, (_, nbytes) in enumerate(buckets[(r, kind)]):
            yield env.all_of([grad_ready[(r, kind, k, d)] for d in range(dp)])
            start = env.now
            if kind == "dense":
                gs = [[chip_id(t, s, d, r) for d in range(dp) for s in range(sp)]
                      for t in range(tp)]
            else:
                gs = [[chip_id(t, *ds[j], r) for j in range(q, dp * sp, ep)]
                      for t in range(tp) for q in range(ep)]
            # DDP / ZeRO-1: all-reduce of the gradients; ZeRO-2/3: reduce-scatter them, and
            # ZeRO-2 all-gathers the updated parameter shards
            steps = [("all_reduce", plan.allreduce_algo)] if plan.zero <= 1 else \
                [("reduce_scatter", "ring")] + ([("all_gather", "ring")] if plan.zero == 2 else [])
            for kind_c, algo_c in steps:
                if flow:
                    yield env.timeout(timer.seconds(kind_c, gs, nbytes, algo_c))
                    add_traffic(carried_flow, timer.traffic(kind_c, gs, algo_c), nbytes)
                else:
                    fn = {"all_reduce": all_reduce, "reduce_scatter": reduce_scatter,
                          "all_gather": all_gather}[kind_c]
                    yield env.all_of([fn(net, g, nbytes, algo_c) for g in gs])
            stats[("sync", r, "busy")] += env.now - start
            if tr is not None:
                tr.span(f"grad all-reduce {kind} b{k}", "comm", start, env.now - start,
                        "data-parallel", f"stage{r}")
        stats[("sync", r, "end")] = max(stats[("sync", r, "end")], env.now)

    for d in range(dp):
        for r in range(pp):
            env.process(device(d, r))
    for r in range(pp):
        env.process(grad_sync(r, "dense"))
        if sync_expert:
            env.process(grad_sync(r, "expert"))
    env.run()
    step = env.now

    rows = []
    for r in range(pp):
        comp = np.mean([stats[(d, r, "compute")] for d in range(dp)])
        comm = np.mean([stats[(d, r, "comm")] for d in range(dp)])
        bwd_end = np.mean([stats[(d, r, "bwd_end")] for d in range(dp)])
        # the last bucket is ready when the slowest replica ends its backward
        s0 = max(stats[(d, r, "bwd_end")] for d in range(dp))
        s1 = max(stats[("sync", r, "end")], s0)
        parts = {k: m * sum(costs[c * pp + r].parts.get(k, 0.0) for c in range(v))
                 for k in COMPONENTS}
        rows.append({"rank": r, "compute_s": comp, **parts, "exposed_comm_s": comm + (s1 - s0),
                     "inlayer_comm_s": comm, "grad_sync_s": stats[("sync", r, "busy")],
                     "grad_sync_exposed_s": s1 - s0,
                     "bubble_s": _bubble(bwd_end, comp, comm),
                     "idle_s": step - s1 + (s0 - bwd_end), "step_s": step})
    breakdown = pd.DataFrame(rows)
    tokens = dp * m * plan.micro_batch_size * plan.seq_len
    flops_per_token, mfu_formula = model_flops_per_token(cfg, plan.seq_len)
    mean = {k: float(breakdown[k].mean()) for k in (*COMPONENTS, "exposed_comm_s", "bubble_s",
                                                     "idle_s")}
    # communication the step ran but hid under compute: gradient buckets that finished before
    # the backward did, and ZeRO-3 parameter all-gathers prefetched under a layer's compute
    grad_overlapped = float((breakdown.grad_sync_s - breakdown.grad_sync_exposed_s).mean())
    fsdp_hidden = m * cfg.n_layers / pp * (2 * fsdp_gather_s - fsdp_exposed[True]
                                           - fsdp_exposed[False]) if fsdp_gather_s else 0.0
    # TP collectives hidden under their GEMMs (tp_comm_overlap), per rank over the step
    tp_overlapped = m * cfg.n_layers / pp * (tp_hidden[True] + tp_hidden[False])
    worst = max(mem, key=lambda x: x["total_bytes"])
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
        "mfu": tokens * flops_per_token / (step * spec.n_chips * chip.peak_gemm_flops_per_s),
        "mfu_formula": mfu_formula + " / (step_s · chips · peak_gemm_flops_per_s)",
        "model_flops_per_token": flops_per_token,
        "components": {**mean, "sum_s": sum(mean.values()), "step_s": step,
                       "overlapped_comm_s": grad_overlapped + fsdp_hidden + tp_overlapped,
                       "memory_per_chip_gib": {
                           "states": worst["states_bytes"] / 2**30,
                           "activations": worst["activation_bytes"] / 2**30,
                           "total": worst["total_bytes"] / 2**30},
                       "convention": "gemm_s + attention_s + other_compute_s + overhead_s "
                                     "+ exposed_comm_s + bubble_s + idle_s = step_s (means "
                                     "over pipeline ranks; each rank's parts sum to step_s)"},
        "overlapped_comm_s": grad_overlapped + fsdp_hidden + tp_overlapped,
        "tp_comm_overlapped_s": tp_overlapped, "tp_comm_overlap": plan.tp_comm_overlap,
        "zero": plan.zero, "recompute": plan.recompute,
        "recompute_layers": plan.recompute_layers, "seq_parallel": plan.seq_parallel,
        "memory_peak_gib": max(x["total_bytes"] for x in mem) / 2**30,
        "memory_capacity_gib": chip.hbm_bytes / 2**30,
        "network_level": level,
        "network_messages": net.messages, "collective_phase_runs": timer.runs,
    }
    carried = dict(net.link_bytes)
    for link, b in carried_flow.items():
        carried[link] = carried.get(link, 0.0) + b
    link_busy = (net.busy_seconds if not flow
                 else {k: b / topo.bandwidth[k] for k, b in carried.items()})
    metrics["busiest_link_utilization"] = max(link_busy.values(), default=0.0) / step
    if not on_net:      # in-layer collectives ran in the timer's phase simulations: each phase
        per_dev = m * cfg.n_layers / pp     # is one layer on every device; a device runs these
        for fwd in (True, False):
            for (kind, gk), (nbytes, _) in per_layer[fwd].items():
                add_traffic(carried, timer.traffic(kind, groups[gk], algo.get(kind)),
                            per_dev * nbytes)
    busy = tp * sp * sum(stats[(d, r, "compute")] for d in range(dp) for r in range(pp))
    energy = cluster_energy(spec, chip, busy_chip_s=busy, window_s=step, topology=topo,
                            work=m * tp * sp * dp * sum(costs[vs].work for vs in range(V)),
                            link_bytes=carried, tech=tech)
    metrics.update(energy, tokens_per_j=tokens / energy["energy_j"] if energy["energy_j"] > 0
                   else math.nan)
    events = events_scheduled(env) + timer.events
    wall = time.perf_counter() - wall0
    metrics.update(events=events, wall_s=wall, events_per_s=events / wall)
    return TrainResult(step, breakdown, metrics, pd.DataFrame(mem), table, tr, events, wall)
