"""LLM inference serving on a cluster, as a SimPy simulation.

Replicas of ``tp·ep·pp`` chips each run an iteration loop (continuous batching, vLLM style):

1. every running request that is decoding gets one token; requests still prefilling get the next
   chunk of their prompt; waiting requests are admitted first-come first-served while the token
   budget (``max_batch_tokens``), ``max_seqs`` and the KV cache allow (chunked prefill: a prompt
   may be split over iterations; without it a prompt enters only whole);
2. the iteration takes the time :class:`IterationCost` computes for that exact batch;
3. a request whose prefill completes emits its first token (TTFT); each decode step emits one.

Pipeline parallelism (``pp > 1``): a replica is ``pp`` stages of ``n_layers/pp`` layers; each
iteration's batch is split into up to ``pp`` micro-batches that flow through the stages with
their activations sent over the shared network (:meth:`_Replica._pipeline`); iterations do not
overlap (no concurrent "virtual engines"), so PP adds capacity for weights and KV, not
throughput.

KV cache: one pool per attention data-parallel rank (``attention_dp`` of the plan; 1 without
DP attention) of ``kv_tokens`` tokens (HBM left after the weights, see
:func:`.plan.serve_memory`), allocated in blocks of ``kv_block_tokens``; a request's KV lives
on the rank it was admitted to. When a decoding request needs a block and its rank has none
free, that rank's most recently admitted request is preempted (vLLM's recompute policy): its
blocks are freed and it re-enters the queue head to prefill its prompt plus the tokens it
produced.

Prefill/decode disaggregation (Splitwise): prefill replicas only prefill; the KV cache of a
finished prompt then travels over the network (one message per chip of the replica, ``prompt ·
kv_bytes_per_token`` bytes each, on shared links) to the least-loaded decode replica.

MoE routing imbalance: each iteration draws every MoE layer's expert loads afresh (distinct
top-k per token: uniform, Zipf(``zipf_s``) over a seeded random ranking per layer, or a cycled
trace of expert ids; :mod:`.moe_serving`), places them on the EP ranks' expert slots (EPLB with
redundant experts) and the EP rank with the most work sets the expert time.

Compute cost source (``cost_source``; default ``"compiler"`` for ArchSpec chips, ``"table"`` for
GPU presets): with ``"compiler"`` the token-linear part of a layer (projections, FFN, router,
shared experts, norms, rotary, residuals, KV write, the routed experts' dispatch/activation/
combine vector work — :meth:`IterationCost._dense_seconds`) comes from the compiler's Report of
the TP/EP-sharded layer compiled for ``T`` tokens as ``T`` one-token sequences
(:func:`.compiled.compiled_layer` with ``batch=T, q_len=ctx_len=1``) minus its routed-expert
grouped GEMMs; those are re-costed every iteration by the same compiled grouped-GEMM tasks at the
drawn per-expert loads (:meth:`IterationCost.expert_seconds`, slowest EP rank). Token
counts are **bucketed**: the layer is compiled at powers of two (and at ``max_batch_tokens``) and
the time of any other ``T`` is **interpolated linearly in tokens** between the two neighbouring
buckets (exact at bucket points; the cycle model's tile padding makes time piecewise linear, so
the error is the padding jitter between buckets). Their one-key attention task is left out (it
is not the sequences' attention). The real attention of the sequences (``q`` new tokens
over ``c`` keys each) is compiled too (:func:`.compiled.compiled_attention`: the layer's score,
causal mask, softmax and value ops fused into one attention task, plus the K/V reads it needs):
sequences of equal (``q``, ``c``) as one batched task of their count (as compile costs a batch),
at powers of two in ``q`` and ``c`` and interpolated bilinearly between them; the embedding lookup
(a compiled row gather, :func:`.compiled.compiled_embedding`) and the LM head
(:func:`.compiled.compiled_head`) are compiled and bucketed in tokens/rows like the layer. Only
the collectives are timed by the network model.

Decode-only runs in bulk (``decode_runs=True``, the default; :mod:`.decode_run`): when a
replica's queue is empty and all its sequences are decoding, its following iterations depend on
nothing but the batch until a request reaches it, so they are computed together (sequences and
keys per iteration, their times by the same floating-point operations as an iteration's,
:meth:`IterationCost.decode_run_seconds`) and the replica sleeps on one SimPy event instead of
one per iteration. A request reaching it (arrival or KV hand-off) reads its load from the run
and stops the run after the iteration in progress; the loop then goes on event by event. The
results are bit-equal to the event-level loop (``decode_runs=False``;
tests/test_serving_decode_runs.py). Used with table costs (GPU presets, Mamba) and no
Perfetto trace: for a dense model the iteration time is a function of the batch's
size and keys alone (:meth:`IterationCost.decode_run_seconds`); for MoE, with any EP and
attention layout, each iteration's routing is drawn and its time computed by :meth:`IterationCost.parts`'
arithmetic over many iterations at once (:meth:`IterationCost.decode_steps_seconds`; one at a
time with a routing trace or a chip without fused attention), each attention-DP rank's KV pool
is its own :class:`.decode_run.DecodeRun`, and the draws made for iterations timed past the
run's end are undone (:meth:`IterationCost.snapshot`). A request landing exactly on a computed
iteration's end, where the two would depend on SimPy's order of same-instant events, makes the
run repeat event by event.

With pipeline stages (``pp > 1``, dense or MoE) a run's iteration is timed as
:meth:`_Replica._pipeline` runs it: the same micro-batches, and the stage sends' arrivals by the
clock additions SimPy makes (:meth:`_Replica._pipeline_times`). That is exact only while a
replica's stage sends are alone on their links, so runs are used only (a) on a replica none of
whose stage-send links carries another replica's stage sends or a KV hand-off
(:meth:`_Sim.private_pipeline`; otherwise another transfer could hold a link at a time the run
cannot know) and (b) while no stage send has to queue behind another of the same iteration
(the FIFO wait is not modelled in bulk; a run that would queue is refused at its start, and the
replica stays event by event; found later, the whole simulation repeats event by event). On
such a replica, prefill and mixed iterations are timed the same way, one SimPy event each
(:meth:`_Replica._timed_pipeline`; on events where a send would queue).

Components (``metrics["components"]``, :func:`run_components`): every iteration's time is split
as :meth:`IterationCost.parts` computes it — the slowest attention rank's token-linear GEMMs,
its attention, its other ops, kernel launches and the per-iteration overhead, the collectives
(TP all-reduces; MoE: what the layers' time, overlapped or not, adds to their compute), the
routed experts of the busiest EP rank — and summed per replica on every path (event loop,
decode runs in bulk, pipeline runs); a pipelined iteration's compute is the mean stage's and
the rest of it ``pipeline_s``. Per pool they sum to the replicas' busy time, and with the idle
time to the simulated clock's end (:data:`COMPONENTS_CONVENTION`).

Mamba models: no attention and no KV cache; each sequence holds a fixed-size recurrent state
(:func:`.plan.mamba_state_bytes`), so a replica admits ``state_slots`` sequences (one slot each,
whatever the context) and a step costs the same at any context length; the compiled token part
is the layer's one-token recurrent step (carried conv/scan state); a P/D hand-off moves the
state, not a per-token cache.
"""

from __future__ import annotations

import io
import math
import time
from bisect import bisect_right
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import pandas as pd
import simpy

from tilewright.models.llm_configs import LlamaConfig, LLMConfig, get_config
from tilewright.models.llm_shapes import DeepSeekConfig
from tilewright.validation import read_user_text

from .cluster_spec import ClusterSpec, ClusterSpecError, PlanError
from .collectives import CollectiveTimer
from .compiled import (LayerReport, compiled_attention, compiled_embedding, compiled_head,
                       compiled_layer)
from .costs import ChipModel, chip_model, with_gemm_format
from .decode_run import DecodeRun
from .energy import (WORK_FIELDS, add_traffic, cluster_energy, power_capped_chip, report_work,
                     serve_work)
from .network import Network, events_scheduled
from .plan import ServePlan, serve_memory, validate_serve
from .serve_slo import SLO, best_split, pd_splits, slo_metrics, with_prefill_chips
from .topology import Topology
from .training import resolve_cost_source
from .trace import Trace
from .moe_serving import (ExpertRouter, SlotMap, a2a_bytes, eplb_placement, max_over_mean,
                          rank_expected_loads, standin_attention)
from .workload import Shard, dims_of, token_gemms, token_vectors

__all__ = ["simulate_serving", "search_pd_split", "ServeResult", "IterationCost",
           "poisson_requests", "load_request_trace", "timeline_summary", "SERVE_COMPONENTS",
           "COMPONENTS_CONVENTION"]

#: a serving iteration's time by component (seconds), in this order (:meth:`IterationCost.parts`
#: accounts them, :attr:`IterationCost.components` sums them over a replica's iterations). GEMM
#: and attention are net of their kernel launches, which are ``overhead_s`` with the fixed
#: per-iteration cost (scheduler, sampling); ``other_compute_s``: norms, activations, rotary,
#: residuals, routing, KV writes, embedding, logits softmax; ``exposed_comm_s``: TP all-reduces
#: and EP dispatch/combine not hidden under compute (with ``overlap_a2a``: the layer's time
#: under the overlap schedule minus its compute)
SERVE_COMPONENTS = ("gemm_s", "attention_s", "other_compute_s", "overhead_s", "exposed_comm_s")
_GEMM, _ATTN, _OTHER, _OVH, _COMM = range(5)
#: compiled task kinds (compiler/program.py) that are the ``gemm_s`` component of a compiled
#: layer's token-linear part (its routed experts' ``grouped_gemm`` are re-costed apart)
COMPILED_GEMM_KINDS = ("gemm", "bgemm")
#: what the ``components`` of a serving run sum to (docs/cluster.md, "Components of a run")
COMPONENTS_CONVENTION = (
    "per pool, means over its replicas (every chip of a replica shares its iterations): "
    "gemm_s + attention_s + other_compute_s + overhead_s + exposed_comm_s + pipeline_s = busy_s "
    "(iteration times summed); busy_s + idle_s = window_s (the simulated clock's end). "
    "pp > 1: the compute components are the mean stage's, pipeline_s the rest of each "
    "iteration (bubbles, exposed stage sends). kv_transfer_s (P/D hand-offs, off the "
    "iterations' critical path) is not part of the sum")


# ---- workloads -------------------------------------------------------------------------------
#: the latest arrival a request trace may give (s; about 31 years): at 1e300 s the makespan of a
#: request rounds to 0 and throughput divided by zero
MAX_ARRIVAL_S = 1e9
#: the largest token count a request trace may give
MAX_TRACE_TOKENS = 2**31 - 1


def poisson_requests(n: int, rate_per_s: float, prompt_tokens: int | Sequence[int],
                     output_tokens: int | Sequence[int], seed: int = 0) -> pd.DataFrame:
    """``n`` requests with exponential inter-arrival times (mean ``1/rate_per_s`` s). Lengths are
    fixed ints, or (lo, hi) pairs drawn uniformly (inclusive)."""
    if n < 1 or not (0 < rate_per_s < math.inf):        # NaN and inf too
        raise ClusterSpecError(f"workload: need n ≥ 1 and a finite rate > 0 requests/s, got "
                               f"n={n}, rate={rate_per_s}")
    rng = np.random.default_rng(seed)

    def lengths(x) -> np.ndarray:
        if isinstance(x, int):
            return np.full(n, x, dtype=np.int64)
        lo, hi = x
        return rng.integers(lo, hi + 1, size=n)

    arrival = np.cumsum(rng.exponential(1.0 / rate_per_s, size=n))
    return pd.DataFrame({"arrival_s": arrival, "prompt_tokens": lengths(prompt_tokens),
                         "output_tokens": lengths(output_tokens)})


def load_request_trace(path: str | Path) -> pd.DataFrame:
    """A CSV with columns ``arrival_s, prompt_tokens, output_tokens`` (one request per row; other
    columns are refused, not ignored), checked column by column: arrivals finite and ≥ 0 s, token
    counts whole numbers ≥ 1. Any bad value raises :class:`ClusterSpecError` naming the file, the
    row (1 = the first row after the header) and the column."""
    need = ["arrival_s", "prompt_tokens", "output_tokens"]
    text = read_user_text(path, ClusterSpecError, what="request-trace CSV")
    try:
        df = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False,
                         skipinitialspace=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise ClusterSpecError(f"{path}: is not a CSV with the header {','.join(need)} "
                               f"({str(exc).strip()})") from None
    df.columns = [c.strip() for c in df.columns]
    missing = [c for c in need if c not in df.columns]
    extra = [c for c in df.columns if c not in need]
    if missing or extra:
        raise ClusterSpecError(f"{path}: request trace columns {list(df.columns)}: needs exactly "
                               f"{need}" + (f" (missing {missing})" if missing else "")
                               + (f" (unknown {extra})" if extra else ""))
    if df.empty:
        raise ClusterSpecError(f"{path}: request trace has no rows")
    out = {}
    for col in need:
        values = pd.to_numeric(df[col].str.strip(), errors="coerce").to_numpy(dtype=float)
        if col == "arrival_s":
            # beyond MAX_ARRIVAL_S a float's resolution is coarser than an iteration's time
            bad = ~np.isfinite(values) | (values < 0) | (values > MAX_ARRIVAL_S)
            accepted = f"a finite number of seconds ≥ 0 and ≤ {MAX_ARRIVAL_S:.0e}"
        else:
            # beyond MAX_TRACE_TOKENS int64 overflowed (1e30 became a negative count)
            bad = (~np.isfinite(values) | (values < 1) | (values != np.round(values))
                   | (values > MAX_TRACE_TOKENS))
            accepted = f"a whole number ≥ 1 and ≤ {MAX_TRACE_TOKENS}"
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise ClusterSpecError(f"{path}: row {row + 1}: {col} = {df[col].iloc[row]!r}: must be "
                                   f"{accepted}")
        out[col] = values if col == "arrival_s" else values.astype(np.int64)
    return (pd.DataFrame(out)[need].sort_values("arrival_s", kind="stable")
            .reset_index(drop=True))


# ---- iteration cost --------------------------------------------------------------------------
def _work(report: pd.DataFrame) -> np.ndarray:
    """Work vector (:data:`.energy.WORK_FIELDS`: MACs, vector ops, off-chip bytes, the
    engine's SRAM traffic) summed over a Report's rows (:func:`.energy.report_work`)."""
    return report_work(report)


def _attention_side(program: Any) -> set[str]:
    """Names of the quantize tasks of ``program`` whose codes are an attention task's q, k or
    v operand: they belong to the attention's cost (a sequence's compiled attention,
    :func:`.compiled.compiled_attention`, quantizes its own operands), not the layer's
    token-linear part."""
    if program is None:
        return set()
    operands = {getattr(t, f) for t in program.tasks if t.kind == "attention"
                for f in ("q", "k", "v")}
    return {t.name for t in program.tasks if t.kind == "quantize" and t.out in operands}


def _pow2_neighbours(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lo, hi, weight of hi) for integers ``x ≥ 1``: the powers of two around ``x`` (lo = hi =
    x at a power of two) and ``(x − lo)/(hi − lo)``."""
    x = np.asarray(x, dtype=np.int64)
    lo = np.left_shift(1, np.floor(np.log2(x)).astype(np.int64))
    lo = np.where(lo * 2 <= x, lo * 2, lo)            # guard float rounding
    hi = np.where(lo == x, x, lo * 2)
    w = np.where(hi > lo, (x - lo) / np.maximum(hi - lo, 1), 0.0)
    return lo, hi, w


#: a last axis at most this long, of an array of at least SMALL_AXIS_MIN_SIZE elements, is
#: summed/maxed by explicit elementwise operations (numpy's reductions over a short last axis
#: cost ~20 ns per output element, these ~2; below that size the calls' fixed cost dominates)
SMALL_AXIS = 8
SMALL_AXIS_MIN_SIZE = 4096


def _small_axis_sum(x: np.ndarray) -> np.ndarray:
    """``x.sum(axis=-1)``, added left to right when the last axis is short (expert slots per
    EP rank: the same values to rounding as numpy's order)."""
    n = x.shape[-1]
    if n > SMALL_AXIS or n == 0 or x.size < SMALL_AXIS_MIN_SIZE:
        return x.sum(axis=-1)
    out = x[..., 0] + 0.0
    for i in range(1, n):
        out += x[..., i]
    return out


def _small_axis_max(x: np.ndarray) -> np.ndarray:
    """``x.max(axis=-1)`` (exact in any order), elementwise when the last axis is short."""
    n = x.shape[-1]
    if n > SMALL_AXIS or n == 0 or x.size < SMALL_AXIS_MIN_SIZE:
        return x.max(axis=-1)
    out = x[..., 0] + 0.0
    for i in range(1, n):
        np.maximum(out, x[..., i], out=out)
    return out


class IterationCost:
    """Seconds of one iteration of a replica for a batch: per sequence ``q`` new tokens attending
    to ``c`` keys (``c`` includes the new ones), plus ``n_logits`` LM-head rows.

    Per layer: GEMMs with M = tokens (:func:`.workload.token_gemms`), per-token non-GEMM ops
    (:func:`.workload.token_vectors`), attention per sequence, TP all-reduces (2 per layer) and,
    for MoE, dispatch/combine all-to-alls and the routed experts; times ``n_layers``; plus
    embedding and LM head. Sequences are spread over the ``attention_dp`` attention
    data-parallel ranks (default ``ep``) and the slowest rank sets each phase.

    Attention apart from the experts (``attn_tp``/``attn_dp`` of :class:`.plan.ServePlan`):
    attention, dense FFN and shared experts are sharded over ``attention_tp`` chips (their TP
    all-reduce on that group), routed experts over EP ``ep`` × expert TP ``tp`` (a second
    all-reduce on the expert-TP group when ``tp > 1``); each chip dispatches
    ``tokens·tp/attention_tp`` of its rank's tokens (an attention-TP group splits its tokens
    over its chips, as DeepSeek's SP; default layout: the rank's tokens).
    """

    def __init__(self, cfg: LLMConfig, plan: ServePlan, chip: ChipModel, timer: CollectiveTimer,
                 replica_chips: Sequence[int], routing_trace: Optional[np.ndarray] = None,
                 seed: int = 0, cost_source: str | None = None) -> None:
        chip = with_gemm_format(chip, plan.gemm_format)    # the plan's GEMM format, always
        self.cfg, self.plan, self.chip = cfg, plan, chip
        self.atp, self.adp = plan.attention_tp, plan.attention_dp
        self.shard = Shard(tp=self.atp, ep=plan.ep)
        dm = self.dm = dims_of(cfg, self.shard)
        self.dm_exp = dims_of(cfg, Shard(tp=plan.tp, ep=plan.ep))   # routed experts
        self.cost_source = serve_cost_source(chip, dm.moe, cost_source)
        if plan.split_attention and self.cost_source == "compiler":
            raise ClusterSpecError(f"serve plan {plan.label()}: attention parallel apart from "
                                   "the experts (attn_tp ≠ tp) is costed with the op table only "
                                   "(--cost-source table), not the compiler")
        self._bucket: dict[int, float] = {}
        self._expert_rep: LayerReport | None = None
        e = self.e = chip.element_bytes
        g = token_gemms(dm)
        self._k = np.array([k for _, k, _ in g])
        self._n = np.array([n for _, _, n in g])
        vec = token_vectors(dm, e)
        self._vec_per_token = float(chip.vector_seconds([f for _, f, _ in vec],
                                                        [b for _, _, b in vec]).sum())
        # parts of the token-linear layer that the two-micro-batch schedules place in their
        # own slots (:meth:`overlap_period`, :meth:`decode_overlap_period`): (indices of its
        # GEMMs, vector seconds per token)
        def subset(names: frozenset) -> tuple[list[int], float]:
            vs = [(f, b) for name, f, b in vec if name in names]
            return ([i for i, (name, _, _) in enumerate(g) if name in names],
                    float(chip.vector_seconds([f for f, _ in vs], [b for _, b in vs]).sum())
                    if vs else 0.0)
        self._shared_part, self._attn1_part = subset(SHARED_OPS), subset(ATTN1_OPS)
        # compute overlapped with the all-to-all runs on the SMs its kernels leave free
        if plan.a2a_sms and (not plan.overlap_a2a or chip.gpu is None
                             or plan.a2a_sms >= chip.gpu.sms):
            raise PlanError(
                f"serve plan {plan.label()}: a2a_sms = {plan.a2a_sms} needs overlap_a2a and a "
                f"GPU preset with more SMs ({chip.name}: "
                f"{chip.gpu.sms if chip.gpu is not None else 'not a GPU'})")
        self.sm_scale = (chip.gpu.sms / (chip.gpu.sms - plan.a2a_sms)) if plan.a2a_sms else 1.0
        tp, ep = plan.tp, plan.ep
        chips = list(replica_chips)
        self._tp_group = [chips[:self.atp]]
        self._etp_group = [chips[:tp]]     # expert TP (split attention only)
        self._ep_group = [chips[t::tp][:ep] for t in range(tp)]
        self.timer = timer
        self._lin: dict[int, float] = {}
        self._lin_parts: dict[int, np.ndarray] = {}     # :meth:`_lin_split`
        self._head_parts: dict[int, np.ndarray] = {}    # :meth:`_head_split`
        self._bucket_gemm: dict[int, float] = {}        # :meth:`_compiled_gemm`
        # components (:data:`SERVE_COMPONENTS`) of the iterations run so far: MoE and bulk
        # runs add theirs at once; a dense iteration is a record (tokens of the slowest
        # attention rank, its attention seconds, the TP tokens, all tokens, logits rows)
        # folded in bulk when read (:attr:`components`)
        self._comp = np.zeros(len(SERVE_COMPONENTS))
        self._iters: list[tuple[int, float, int, int, int]] = []
        self._runs: list[tuple[np.ndarray, np.ndarray]] = []    # :meth:`add_decode_run`
        self._tails: dict[tuple[int, int], np.ndarray] = {}     # :meth:`_tail_comp`
        # an MoE iteration's record (:meth:`_moe_records_components`), folded the same way
        self._moe_iters: list[tuple] = []
        #: the record of the last :meth:`parts` call of an MoE model (account=False callers
        #: keep it and add it with :meth:`add_moe_records` once the iteration runs)
        self.last_rec: tuple = ()
        self._lin_table = np.zeros((0, len(SERVE_COMPONENTS)))   # :meth:`_lin_rows`
        self._tail_table = np.zeros((0, len(SERVE_COMPONENTS)))  # :meth:`_tail_rows`
        #: components of each iteration of the last :meth:`decode_steps_seconds` call, (K, 5)
        self.last_steps_comp = np.zeros((0, len(SERVE_COMPONENTS)))
        self._head: dict[int, float] = {}
        self._emb: dict[int, float] = {}
        self._attn: dict[tuple[int, int, int], np.ndarray] = {}
        self._lines: dict[str, tuple[float, float] | None] = {}
        self._embed_per_token = float(chip.vector_seconds(dm.d, 2 * dm.d * e + 4))
        self._comm: dict[tuple[str, int], float] = {}
        self._tpc: dict[int, float] = {}
        # per batch size T of one-token sequences: (layer token part, TP comm, embedding +
        # iteration overhead, LM head) seconds (:meth:`decode_run_seconds`; NaN: not yet)
        self._decode_table = np.full((0, 4), np.nan)
        self._work = np.zeros(len(WORK_FIELDS))   # work vector of the iterations run so far
        self._link_bytes: dict[int, float] = {}   # bytes per link of the collectives
        # sums over the iterations not yet folded into _work / _link_bytes (serve_work's
        # arguments; the TP all-reduce bytes are linear in tokens): iterations, tokens, Σq·c,
        # Σc, logits, iterations with logits, tokens all-reduced
        self._pending = [0, 0, 0, 0, 0, 0, 0]
        self._rates: dict[str, dict[int, float]] = {}
        self._rng = np.random.default_rng(seed)
        self._slot_seconds = np.zeros(0)   # table costs: an expert slot's seconds by its rows
        self._slot_gemm = np.zeros(0)      # ... its GEMMs' net of their launches
        self._twin: IterationCost | None = None
        self.n_dense = 0
        if dm.moe:
            # the leading n_dense_layers are dense (first_k_dense_replace): timed by a
            # Llama-style twin of the config with the dense FFN width. DeepSeek-V3's MLA has no
            # Llama twin: its 3 dense layers are timed as MoE layers (the same active MACs per
            # token, 18432 = 9 x 2048; its weights memory counts them dense, plan.serve_memory)
            self.n_dense = 0 if isinstance(cfg, DeepSeekConfig) else \
                min(getattr(cfg, "n_dense_layers", 0), cfg.n_layers)
            if self.n_dense:
                self._twin = IterationCost(dense_twin(cfg), plan, chip, timer, replica_chips,
                                           None, seed, cost_source)
            n_moe = self.n_moe = cfg.n_layers - self.n_dense
            self.router = ExpertRouter(dm.n_experts, dm.top_k, n_moe, plan.routing, plan.zipf_s,
                                       self._rng, routing_trace)
            placements = [eplb_placement(pi, plan.ep, plan.redundant_experts)
                          for pi in self.router.pi]
            self.slots = SlotMap(placements) if n_moe else None
            # EP rank load balance (:func:`.moe_serving.max_over_mean`): expected from the
            # placement, and from the plain placement (no redundant experts) for comparison
            self.rank_balance_expected = (max_over_mean(np.stack(
                [rank_expected_loads(p, pi) for p, pi in zip(placements, self.router.pi)]))
                if n_moe else 1.0)
            # (NaN when the experts alone do not split evenly over the EP ranks, e.g.
            # DeepSeek's 256 + 32 redundant over EP 144: there is no such placement)
            self.rank_balance_plain = (max_over_mean(np.stack(
                [rank_expected_loads(eplb_placement(pi, plan.ep), pi) for pi in self.router.pi]))
                if n_moe and dm.n_experts % plan.ep == 0 else 1.0 if not n_moe else math.nan)
            # EP ranks per node (an EP rank is tp chips)
            self._node_ranks = max(1, timer.topology.spec.chips_per_node // plan.tp)
        # rows of the busiest EP rank and of the mean EP rank, summed over the MoE layers of
        # every iteration drawn so far (:meth:`expert_loads`)
        self.rank_rows = [0.0, 0.0]

    def share_memos(self, other: "IterationCost") -> None:
        """Use ``other``'s memoized per-chip costs (token part of a layer, compiled layer and
        attention, embedding, LM head: functions of the batch alone) — ``other`` must have the
        same config, plan, chip and cost source (replicas of one pool). Collective times are
        not shared: they depend on the replica's chips. MoE: nothing is shared (the compiled
        layer a replica first builds also gives it its expert tasks)."""
        if self.dm.moe:
            return
        assert (other.cfg, other.plan, other.chip, other.cost_source) == \
            (self.cfg, self.plan, self.chip, self.cost_source)
        self._lin, self._bucket, self._attn = other._lin, other._bucket, other._attn
        self._lin_parts, self._head_parts = other._lin_parts, other._head_parts
        self._bucket_gemm = other._bucket_gemm
        self._head, self._emb = other._head, other._emb

    def _dense_seconds(self, T: int) -> float:
        """One layer's token-linear part (GEMMs + non-GEMM ops) for T tokens."""
        t = self._lin.get(T)
        if t is None:
            if self.cost_source == "compiler" and T > 0:
                t = self._interpolated(T)
            else:
                t = float(self.chip.gemm_seconds(T, self._k, self._n, positive=True).sum()) \
                    + self._vec_per_token * T
            self._lin[T] = t
        return t

    def _lin_split(self, T: int) -> np.ndarray:
        """:meth:`_dense_seconds` by component (:data:`SERVE_COMPONENTS`; memoized): its GEMMs
        net of their launches (one per GEMM, GPU presets), the launches, and the non-GEMM
        ops. Compiler: the compiled layer's GEMM tasks (:data:`COMPILED_GEMM_KINDS`,
        interpolated like the layer) and the rest; no launches."""
        s = self._lin_parts.get(T)
        if s is None and T <= 0:
            s = self._lin_parts[T] = np.zeros(len(SERVE_COMPONENTS))     # no tokens, no layer
        if s is None:
            total = self._dense_seconds(T)
            s = np.zeros(len(SERVE_COMPONENTS))
            g = launches = 0.0
            if T > 0 and self.cost_source == "compiler":
                g = self._interpolated(T, self._compiled_gemm)
            elif T > 0:
                g = float(self.chip.gemm_seconds(T, self._k, self._n, positive=True).sum())
                launches = len(self._k) * self.chip.launch_s
            s[_GEMM], s[_OVH], s[_OTHER] = g - launches, launches, total - g
            self._lin_parts[T] = s
        return s

    def _lin_splits(self, Ts: Sequence[int]) -> np.ndarray:
        """:meth:`_lin_split` of each of ``Ts``, ``(len, 5)``; table costs: the GEMMs of the
        token counts not yet split timed in one numpy call."""
        memo = self._lin_parts
        try:
            return np.array([memo[t] for t in Ts]).reshape(-1, len(SERVE_COMPONENTS))
        except KeyError:
            pass
        new = sorted({int(t) for t in Ts if int(t) not in memo and int(t) > 0})
        if new and self.cost_source != "compiler":
            g = self.chip.gemm_seconds(np.array(new)[:, None], self._k, self._n,
                                       positive=True).sum(axis=1)
            launches = len(self._k) * self.chip.launch_s
            for t, gt in zip(new, g.tolist()):
                s = np.zeros(len(SERVE_COMPONENTS))
                s[_GEMM], s[_OVH], s[_OTHER] = gt - launches, launches, \
                    self._dense_seconds(t) - gt
                self._lin_parts[t] = s
        return np.array([self._lin_split(int(t)) for t in Ts]).reshape(-1, len(SERVE_COMPONENTS))

    def _table_rows(self, attr: str, Ts: np.ndarray, fill) -> np.ndarray:
        """Rows ``Ts`` (small non-negative token counts) of the per-token-count table held in
        attribute ``attr``, grown on demand (NaN marks a row not yet computed) and filled by
        ``fill(missing token counts) -> (n, len(SERVE_COMPONENTS))``."""
        Ts = np.asarray(Ts, np.int64)
        tab = getattr(self, attr)
        top = int(Ts.max(initial=0))
        if top >= len(tab):
            grow = max(top + 1, 2 * len(tab)) - len(tab)
            tab = np.concatenate((tab, np.full((grow, len(SERVE_COMPONENTS)), np.nan)))
            setattr(self, attr, tab)
        rows = tab[Ts]
        miss = np.isnan(rows[:, 0])
        if miss.any():
            new = np.unique(Ts[miss])
            tab[new] = fill(new.tolist())
            rows = tab[Ts]
        return rows

    def _lin_rows(self, Ts: np.ndarray) -> np.ndarray:
        """:meth:`_lin_splits` of an array of small token counts (decode batches), looked up in
        a table filled on demand."""
        return self._table_rows("_lin_table", Ts, self._lin_splits)

    def _layer_rows(self, Ts: np.ndarray, attn: np.ndarray, table: bool = False) -> np.ndarray:
        """:meth:`layer_comp` of many layers, ``(N, 5)``: ``Ts`` tokens and ``attn`` seconds
        of attention each."""
        Ts = np.asarray(Ts, np.int64)
        launch = self._attn_launch
        if table:       # decode steps: every layer has sequences, so attention (> 0)
            out = self._lin_rows(Ts)
            out[:, _ATTN] += attn - launch
            out[:, _OVH] += launch
            return out
        u, inv = np.unique(Ts, return_inverse=True)
        out = self._lin_splits(u.tolist())[inv.ravel()]
        has = attn > 0
        out[:, _ATTN] += np.where(has, attn - launch, 0.0)
        out[:, _OVH] += np.where(has, launch, 0.0)
        return out

    def _tail_rows(self, Tt: np.ndarray, nl: np.ndarray) -> np.ndarray:
        """:meth:`_tail_comp` of many iterations, ``(N, 5)`` (``nl is Tt``: every sequence
        samples, as in a decode step: looked up in a table by ``Tt``, filled on demand)."""
        if nl is Tt:
            return self._table_rows(
                "_tail_table", Tt,
                lambda ts: np.array([self._tail_comp(t, t) for t in ts]))
        u, inv = np.unique(np.stack([np.asarray(Tt, np.int64), np.asarray(nl, np.int64)]),
                           axis=1, return_inverse=True)
        return np.array([self._tail_comp(t, n) for t, n in u.T.tolist()]
                        ).reshape(-1, len(SERVE_COMPONENTS))[inv.ravel()]

    def _compiled_gemm(self, T: int) -> float:
        """Seconds of the GEMM tasks (:data:`COMPILED_GEMM_KINDS`) of the compiled layer at
        ``T`` tokens (the part of :meth:`_compiled` they make up)."""
        t = self._bucket_gemm.get(T)
        if t is None:
            self._compiled_vec(T)
            rep = self._layer_report(T)
            r = rep.report
            t = self._bucket_gemm[T] = float(
                r.loc[r["kind"].isin(COMPILED_GEMM_KINDS), "time_cycles"].sum()) / rep.hz
        return t

    def _head_split(self, n: int) -> np.ndarray:
        """:meth:`head_seconds` by component (memoized): the LM-head GEMM net of its launch,
        the launch, the norm and logits softmax. Compiler: all of it ``other_compute_s`` (the
        compiled head is not split)."""
        s = self._head_parts.get(n)
        if s is None:
            total = self.head_seconds(n)
            s = np.zeros(len(SERVE_COMPONENTS))
            if n > 0 and self.cost_source != "compiler":
                g = float(self.chip.gemm_seconds(n, self.dm.d, self.dm.vocab)[()])
                s[_GEMM], s[_OVH], s[_OTHER] = g - self.chip.launch_s, self.chip.launch_s, \
                    total - g
            else:
                s[_OTHER] = total
            self._head_parts[n] = s
        return s

    @property
    def _attn_launch(self) -> float:
        """The launch inside one layer's attention seconds (the fused kernel's, table costs)."""
        return (self.chip.launch_s if self.chip.fused_attention and self.cost_source != "compiler"
                and not self.dm.ssm else 0.0)

    def layer_comp(self, T: int, attn: float) -> np.ndarray:
        """One layer's compute by component (without its collectives): the token-linear part of
        ``T`` tokens and ``attn`` seconds of attention (a new array)."""
        s = self._lin_split(T) + 0.0
        if attn > 0:
            launch = self._attn_launch
            s[_ATTN] += attn - launch
            s[_OVH] += launch
        return s

    def _tail_comp(self, T_total: int, n_logits: int) -> np.ndarray:
        """Embedding, the per-iteration overhead and the LM head by component (memoized: do
        not modify the array returned)."""
        s = self._tails.get((T_total, n_logits))
        if s is None:
            s = self._head_split(n_logits) + 0.0
            s[_OTHER] += self.embed_seconds(T_total)
            s[_OVH] += self.chip.iteration_overhead_s
            self._tails[(T_total, n_logits)] = s
        return s

    def moe_layers_comp(self, layer_comp: np.ndarray, expert_parts: np.ndarray, layers: int,
                        period_s, scale) -> np.ndarray:
        """Components of an iteration's MoE layers: each layer's compute but the routed experts
        ``layer_comp`` (one layer, :meth:`layer_comp`) and the routed experts ``expert_parts``
        (summed over the layers, the busiest EP rank's, :meth:`expert_seconds`), scaled by
        ``scale`` (the SM share the overlapped compute runs on, :attr:`sm_scale`, in an
        overlapped prefill; else 1); ``exposed_comm_s`` is what the ``layers`` layers' time
        ``period_s`` (summed: compute + TP all-reduces + dispatch + combine, or the overlap
        schedule's periods) adds to that compute. The same split for the simulation and
        ``benchmarks/serving_validation.py --components``. Leading axes (iterations)
        broadcast: ``layer_comp`` and ``expert_parts`` ``(..., 5)``, ``period_s`` and
        ``scale`` ``(...)``."""
        scale = np.asarray(scale, dtype=np.float64)[..., None]
        comp = scale * (layers * layer_comp + expert_parts)
        comp[..., _COMM] = period_s - comp.sum(axis=-1)
        return comp

    def _moe_records_components(self, recs: Sequence[tuple]) -> np.ndarray:
        """Components, summed, of MoE iterations' records (:meth:`parts`: the slowest
        attention rank's tokens and attention seconds, all tokens, logits rows, the dense
        twin's slowest rank's tokens and attention, the routed experts' GEMM, launches and
        activation seconds over the MoE layers, the MoE layers' seconds, the SM scale, the TP
        all-reduce seconds of a layer)."""
        r = np.array(recs, dtype=np.float64).reshape(-1, 12)
        Ts, a, Tt, nl, Td, ad, eg, eo, ev, per, scale, tp = r.T
        comp = self._tail_rows(Tt, nl)
        if self.n_dense:
            assert self._twin is not None
            comp += self.n_dense * self._twin._layer_rows(Td, ad)
            comp[:, _COMM] += self.n_dense * tp
        if self.n_moe:
            ex = np.zeros_like(comp)
            ex[:, _GEMM], ex[:, _OVH], ex[:, _OTHER] = eg, eo, ev
            comp += self.moe_layers_comp(self._layer_rows(Ts, a), ex, self.n_moe, per, scale)
        return comp.sum(axis=0)

    def add_moe_records(self, recs: Sequence[tuple]) -> None:
        """Add MoE iterations' records (:attr:`last_rec` of :meth:`parts`) to the totals."""
        self._moe_iters.extend(recs)

    def add_components(self, comp: np.ndarray) -> None:
        """Add iterations' components (:data:`SERVE_COMPONENTS`) to the replica's totals."""
        self._comp = self._comp + comp

    @property
    def components(self) -> np.ndarray:
        """Seconds by component (:data:`SERVE_COMPONENTS`) of the iterations run so far (as
        :meth:`parts` sums them: every stage's share when ``pp > 1``)."""
        if self._moe_iters:
            recs, self._moe_iters = self._moe_iters, []
            self._comp = self._comp + self._moe_records_components(recs)
        if self._runs:
            n, keys = (np.concatenate(x) for x in zip(*self._runs))
            self._runs = []
            self._comp = self._comp + self.decode_run_components(n, keys)
        if self._iters:
            rec = np.array(self._iters, dtype=np.float64)
            self._iters = []
            Ts, attn, Tp, Tt, nl = rec.T
            L, launch = self.cfg.n_layers, self._attn_launch
            u, k = np.unique(Ts.astype(np.int64), return_counts=True)
            comp = L * (k @ self._lin_splits(u.tolist()))
            has = attn > 0
            comp[_ATTN] += L * float(np.sum(np.where(has, attn - launch, 0.0)))
            comp[_OVH] += L * launch * int(has.sum())
            u, k = np.unique(Tp.astype(np.int64), return_counts=True)
            comp[_COMM] += L * float(k @ np.array([self._tp_comm(int(t)) for t in u]))
            u, k = np.unique(np.stack([Tt, nl]).astype(np.int64), axis=1, return_counts=True)
            comp += k @ np.array([self._tail_comp(int(t), int(n)) for t, n in u.T])
            self._comp = self._comp + comp
        return self._comp + 0.0

    def _layer_report(self, T: int) -> LayerReport:
        assert self.chip.arch is not None
        # Mamba: one-token steps continuing a sequence (carried conv/scan state, ctx_len > 1)
        return compiled_layer(self.cfg, self.shard, self.chip.arch, batch=T, q_len=1,
                              ctx_len=2 if self.dm.ssm else 1)

    def _compiled(self, T: int) -> float:
        """Compiled layer time at T tokens without the routed experts' grouped GEMMs (those
        follow each iteration's routing draw, :meth:`expert_seconds`) and without its attention
        task (each sequence's attention is :meth:`attention_seconds`)."""
        return float(self._compiled_vec(T)[0])

    def _compiled_vec(self, T: int) -> np.ndarray:
        """(seconds, MACs, vector ops, off-chip bytes) of the compiled layer at T tokens without
        the routed experts' grouped GEMMs and the attention task (see :meth:`_compiled`)."""
        t = self._bucket.get(T)
        if t is None:
            rep = self._layer_report(T)
            if self._expert_rep is None and self.dm.moe:
                self._expert_rep = rep
            # the one-key attention of the T one-token sequences is not the sequences' real
            # attention, which :meth:`attention_seconds` adds: left out here, with the
            # quantization of its q/k/v operands (each sequence's compiled attention has its own)
            dense = rep.report[~rep.report["task"].isin(_attention_side(rep.program))
                               & ~rep.report["kind"].isin(("grouped_gemm", "attention"))]
            t = self._bucket[T] = np.concatenate(
                ([float(dense["time_cycles"].sum()) / rep.hz], _work(dense)))
        return t

    def expert_seconds(self, loads: np.ndarray, parts: bool = False):
        """Seconds of the routed experts of each MoE layer, ``(L,)``: the slowest EP rank, its
        slots receiving ``loads`` rows (``(L, ep, slots)``, :meth:`.moe_serving.SlotMap.rank_loads`).
        Compiler: the compiled layer's grouped GEMMs re-costed at those counts; table: per-expert
        GEMMs + activation by roofline. ``parts=True``: also that rank's seconds by component
        summed over the layers, ``(..., 5)`` for leading (iteration) axes ``...``
        (:data:`SERVE_COMPONENTS`: GEMMs net of their launches, two launches per slot with
        rows, the activation; compiler: all GEMM); for one iteration (``loads`` ``(L, ep,
        slots)``) the tuple (GEMM, launches, activation) of floats."""
        dm, chip, e = self.dm, self.chip, self.e
        loads = np.asarray(loads)
        if self.cost_source == "compiler":
            if self._expert_rep is None:
                self._expert_rep = self._layer_report(1)
            out = np.array([max(self._expert_rep.expert_seconds(r) for r in layer)
                            for layer in loads])
            if not parts:
                return out
            return out, (float(out.sum()), 0.0, 0.0)      # (compiler: one iteration only)
        # one slot's seconds are a function of its rows alone (elementwise numpy): looked up
        # in a table by row count, filled on demand (the same values as computed in place)
        table = self._slot_seconds
        top = int(loads.max(initial=0))
        if top >= len(table):
            x = np.arange(len(table), max(2 * len(table), top + 1), dtype=np.int64)
            f = self.dm_exp.f_exp
            g = chip.gemm_seconds(x, dm.d, 2 * f) + chip.gemm_seconds(x, f, dm.d)
            v = np.where(x > 0, chip.vector_seconds(np.maximum(5 * f * x, 1), 3 * f * e * x),
                         0.0)
            new = g + v
            table = self._slot_seconds = np.concatenate((table, new))
            launches = np.where(x > 0, 2 * chip.launch_s, 0.0)      # a GEMM of 0 rows: none
            self._slot_gemm = np.concatenate((self._slot_gemm, g - launches))
        per_rank = _small_axis_sum(table[loads])
        out = _small_axis_max(per_rank)
        if not parts:
            return out
        ep, slots = loads.shape[-2:]
        lead = loads.shape[:-3]
        idx = per_rank.reshape(-1, ep).argmax(axis=1)
        busiest = loads.reshape(-1, ep, slots)[np.arange(len(idx)), idx].reshape(*lead, -1)
        g = self._slot_gemm[busiest].sum(axis=-1)        # the busiest rank's slots, all layers
        o = (2 * chip.launch_s) * np.count_nonzero(busiest, axis=-1)
        if not lead:       # one iteration: (GEMM, launches, activation) as floats
            t = float(out.sum())
            return out, (float(g), float(o), t - float(g) - float(o))
        split = np.zeros((*lead, len(SERVE_COMPONENTS)))
        split[..., _GEMM], split[..., _OVH] = g, o
        split[..., _OTHER] = out.sum(axis=-1) - g - o
        return out, split

    def a2a_seconds(self, tokens: float) -> float:
        """Dispatch + combine seconds of one MoE layer for the busiest EP rank's ``tokens``
        (:meth:`a2a_parts`)."""
        d, c = self.a2a_parts(tokens)
        return d + c

    def a2a_parts(self, tokens: float) -> tuple[float, float]:
        """(dispatch, combine) seconds of one MoE layer for the busiest EP rank's ``tokens``
        (:func:`.moe_serving.a2a_bytes`): ``flat`` on the network's all-to-all (dispatch at
        ``dispatch_bytes``, combine at the chip's element size); ``deepep`` by its closed form on
        one NIC and the NVLink fabric, each plus one latency."""
        dm, plan, e = self.dm, self.plan, self.e
        if plan.ep <= 1 or tokens <= 0:
            return 0.0, 0.0
        out = []
        for b in (plan.dispatch_bytes or e, e):
            if plan.a2a == "flat":
                out.append(self.comm_seconds("all_to_all", tokens * dm.top_k * dm.d * b))
                continue
            inter, intra = a2a_bytes(tokens, dm.d, b, dm.n_experts, dm.top_k, plan.ep,
                                     self._node_ranks, "deepep")
            spec = self.timer.topology.spec
            t = max(inter / (spec.inter_node.link_gbps * 1e9),
                    intra / (spec.intra_node.link_gbps * 1e9))
            out.append(t + (spec.inter_node.latency_us if inter
                            else spec.intra_node.latency_us) * 1e-6)
        return out[0], out[1]

    def _part_seconds(self, part: tuple[list[int], float], T: int) -> float:
        """Seconds of a part of :meth:`_dense_seconds` (its GEMMs and vector ops) for ``T``
        tokens; 0 for the compiler source (its layer is not split)."""
        i, vec = part
        if T <= 0 or self.cost_source == "compiler" or not (i or vec):
            return 0.0
        return float(self.chip.gemm_seconds(T, self._k[i], self._n[i], positive=True).sum()) \
            + vec * T

    def shared_seconds(self, T: int) -> float:
        """Seconds of the shared experts (:data:`SHARED_OPS`) for ``T`` tokens on one chip."""
        return self._part_seconds(self._shared_part, T)

    def attn1_linear_seconds(self, T: int) -> float:
        """Seconds of the token-linear ops of DeepSeek's decode ATTN-1 stage
        (:data:`ATTN1_OPS`: the attention output projection and the routing gate) for ``T``
        tokens; its core attention is added by the caller."""
        return self._part_seconds(self._attn1_part, T)

    @staticmethod
    def decode_overlap_period(compute, attn1, experts, dispatch, combine):
        """Seconds of one MoE layer of a decode iteration under DeepSeek's two-micro-batch
        overlap (decode schedule, open-infra-index Day 6 "Communication-Computation
        Overlapping during Decoding Phase"; profile-data README "Decoding"): the compute
        stream runs SHARED₀ ATTN-0₁ | MLP₀ | ATTN-1₁ | SHARED₁ ATTN-0₀ | MLP₁ | ATTN-1₀ with
        each micro-batch's DISPATCH under the SHARED + ATTN-0 slot and its COMBINE under the
        ATTN-1 slot; the MLP slots overlap nothing. With ``compute`` the layer's compute but
        the routed experts, ``attn1`` its ATTN-1 part (core attention, output projection,
        gate), ``experts`` the routed experts and ``dispatch``/``combine`` per micro-batch
        (half the tokens): ``max(C − A1, 2d) + E + max(A1, 2b)``. The low-latency kernels hold
        no SMs ("Communication 0 SMs"): ``a2a_sms`` does not apply. Elementwise."""
        return (np.maximum(compute - attn1, 2 * dispatch) + experts
                + np.maximum(attn1, 2 * combine))

    def overlap_period(self, compute, shared, experts, dispatch, combine):
        """Seconds of one MoE layer under DeepSeek's two-micro-batch overlap (prefill schedule,
        github.com/deepseek-ai/profile-data, README "Prefilling" and its figure), in steady
        state across layers: each micro-batch carries half of the layer's ``compute`` (all of
        its compute but the routed experts: attention side ``a`` and the ``shared`` experts
        ``s``), half of the routed ``experts`` (``m``), and its own ``dispatch`` (``d``) and
        ``combine`` (``b``, seconds for half the tokens). The compute stream runs
        ATTN₁ SHARED₀ | ATTN₀ | MLP₁ | MLP₀ SHARED₁ while the communication stream runs
        COMBINE₀ | DISPATCH₁ | DISPATCH₀ | COMBINE₁, so the layer takes
        ``max(a+s, b) + max(a, d) + max(m, d) + max(m+s, b)`` with a, s, m the per-micro-batch
        compute times scaled by ``sm_scale`` (the SMs the all-to-all kernels hold, ``a2a_sms``).
        The per-layer pipeline fill is not paid: the overlap runs across layer boundaries.
        Elementwise over numpy arrays."""
        k = self.sm_scale / 2
        a, s, m = (compute - shared) * k, shared * k, experts * k
        return (np.maximum(a + s, combine) + np.maximum(a, dispatch)
                + np.maximum(m, dispatch) + np.maximum(m + s, combine))

    def _interpolated(self, T: int, f: Any = None, cap: int | None = None) -> float:
        """Compiled time ``f(T)`` (default: the layer's) at T tokens: exact at powers of two and
        ``cap`` (default ``max_batch_tokens``), linear in tokens between them."""
        f = f or self._compiled
        cap = cap or self.plan.max_batch_tokens
        hi = 1 << (T - 1).bit_length()
        lo = hi >> 1 if hi > 1 else 1
        if T <= cap < hi:
            hi = cap
        if T == lo or T == hi:
            return f(T)
        a, b = f(lo), f(hi)
        return a + (b - a) * (T - lo) / (hi - lo)

    def _compiled_attention(self, q: int, c: int, n: int = 1) -> np.ndarray:
        """Compiled (seconds, work vector) of the attention of ``n`` sequences of ``q`` new
        tokens over ``c`` keys in one layer, as one batched task
        (:func:`.compiled.compiled_attention`, the compiler's path for the whole layer's
        attention; ``q`` clamped to ``c``). Cached per (n, q, c)."""
        key = (n, min(q, c), c)
        t = self._attn.get(key)
        if t is None:
            assert self.chip.arch is not None
            rep = compiled_attention(self.cfg, self.shard, self.chip.arch, q_len=key[1],
                                     ctx_len=c, batch=n)
            t = self._attn[key] = np.concatenate(([rep.forward_seconds], _work(rep.report)))
        return t

    def _attention_compiled(self, q: np.ndarray, c: np.ndarray) -> float:
        """Σ over sequences of the compiled attention's seconds (:meth:`_attention_vec`)."""
        return float(self._attention_vec(q, c)[0])

    def _attention_vec(self, q: np.ndarray, c: np.ndarray) -> np.ndarray:
        """The compiled attention of a batch (seconds and its work vector): the sequences
        grouped by equal (q, c), each group one batched task of its size n (as compile costs a
        batch of equal sequences), summed over groups. Between powers of two a group is
        bilinear in (q, c) over the batched tasks at the powers of two around them (exact at
        powers of two; attention work grows like q·c, which bilinear interpolation
        reproduces)."""
        q, c = np.asarray(q, np.int64), np.asarray(c, np.int64)
        groups, counts = np.unique(np.stack([np.minimum(q, c), c]), axis=1, return_counts=True)
        ql, qh, wq = _pow2_neighbours(groups[0])
        cl, ch, wc = _pow2_neighbours(groups[1])
        total = np.zeros(1 + len(WORK_FIELDS))
        for i, n in enumerate(counts.tolist()):
            for qb, cb, w in ((ql[i], cl[i], (1 - wq[i]) * (1 - wc[i])),
                              (qh[i], cl[i], wq[i] * (1 - wc[i])),
                              (ql[i], ch[i], (1 - wq[i]) * wc[i]), (qh[i], ch[i], wq[i] * wc[i])):
                if w > 0:
                    total += w * self._compiled_attention(int(qb), int(cb), n)
        return total

    def embed_seconds(self, T: int) -> float:
        """Embedding lookup of ``T`` tokens: the compiled row gather (bucketed like the layer)
        or the table's gather roofline."""
        if T <= 0:
            return 0.0
        t = self._emb.get(T)
        if t is None:
            if self.cost_source == "compiler":
                assert self.chip.arch is not None

                t = float(self._embed_vec(T)[0])
            else:
                t = self._embed_per_token * T
            self._emb[T] = t
        return t

    def _embed_vec(self, T: int) -> np.ndarray:
        """Compiled (seconds, MACs, vector ops, bytes) of the embedding lookup of ``T`` tokens,
        bucketed like the layer."""
        assert self.chip.arch is not None

        def f(n: int) -> np.ndarray:
            rep = compiled_embedding(self.cfg, self.shard, self.chip.arch, tokens=n,
                                     element_bytes=self.e)
            return np.concatenate(([rep.forward_seconds], _work(rep.report)))

        return self._interpolated(T, f) if T > 0 else np.zeros(1 + len(WORK_FIELDS))

    def _head_vec(self, n: int) -> np.ndarray:
        """Compiled (seconds, MACs, vector ops, bytes) of the LM head for ``n`` rows, bucketed
        like the layer (cap ``max_seqs``)."""
        assert self.chip.arch is not None

        def f(rows: int) -> np.ndarray:
            rep = compiled_head(self.cfg, self.shard, self.chip.arch, tokens=rows)
            return np.concatenate(([rep.forward_seconds], _work(rep.report)))

        if n <= 0:
            return np.zeros(1 + len(WORK_FIELDS))
        return self._interpolated(n, f, max(self.plan.max_seqs, n))

    def comm_seconds(self, kind: str, nbytes: float) -> float:
        """One collective of the replica's attention-TP (all_reduce), expert-TP
        (all_reduce_expert) or EP (all_to_all) groups."""
        line = self._lines.get(kind, False)
        groups = {"all_reduce": self._tp_group, "all_reduce_expert": self._etp_group}.get(
            kind, self._ep_group)
        how = "all_reduce" if kind == "all_reduce_expert" else kind
        if line is False:
            line = self._lines[kind] = self.timer.affine(how, groups)
        if line is not None:
            return line[0] + line[1] * nbytes if nbytes > 0 else 0.0
        return self.timer.seconds(how, groups, nbytes)

    @staticmethod
    def _batch_sums(q: np.ndarray, c: np.ndarray) -> tuple[int, int, int, int]:
        """(Σq, Σc, Σq·c, Σ causal pairs) of a batch, in integers. The causal pairs of ``q``
        queries at the end of ``c`` keys (:func:`.costs.causal_pairs`) are
        ``q·c − q(q − 1)/2``, so their sum is ``Σq·c − (Σq² − Σq)/2`` (exact: each
        ``q(q − 1)`` is even)."""
        T, qc = int(q.sum()), int(q @ c)
        return T, int(c.sum()), qc, qc - (int(q @ q) - T) // 2

    def _fused_attention_seconds(self, pairs, tokens, keys):
        """Seconds of one fused (FlashAttention varlen, causal) kernel over ``pairs`` query–key
        pairs, ``tokens`` queries and ``keys`` cached keys read once each (MLA: the latent once)
        — Python floats or float64 arrays, elementwise (the same operations, in the same order,
        for both, so the bulk decode paths stay bit-equal to the event loop)."""
        dm = self.dm
        hv = dm.hd_v or dm.hd               # MLA: values r wide, keys r + dr
        kv_read = dm.kv * keys * (dm.hd if dm.hd_v else 2 * dm.hd)
        return self.chip.attention_seconds(2.0 * (dm.hd + hv) * dm.h * pairs,
                                           self.e * (dm.h * tokens * (dm.hd + hv) + kv_read))

    def attention_seconds(self, q: np.ndarray, c: np.ndarray,
                          sums: tuple[int, int, int, int] | None = None) -> float:
        """Scores and values GEMMs per sequence and KV head, and the batch's softmax (table), or
        the compiled fused attention per sequence (compiler, :meth:`_attention_compiled`); 0 for
        a Mamba model (no attention: its per-token cost is all in the token-linear part)."""
        dm, chip = self.dm, self.chip
        if dm.ssm:
            return 0.0
        if self.cost_source == "compiler":
            return self._attention_compiled(q, c)
        if chip.fused_attention:    # GPU preset: one FlashAttention (varlen) kernel, causal
            T, C, _, pairs = sums or self._batch_sums(q, c)     # (:meth:`_batch_sums`)
            return float(self._fused_attention_seconds(float(pairs), float(T), float(C)))
        if chip.arch is None and not dm.hd_v:   # roofline: both GEMMs have equal FLOPs, bytes
            s = 2 * chip.gemm_seconds(dm.g * q, dm.hd, c, dm.kv, positive=True).sum()
        else:
            s = chip.gemm_seconds(dm.g * q, dm.hd, c, dm.kv, positive=True).sum() \
                + chip.gemm_seconds(dm.g * q, c, dm.hd_v or dm.hd, dm.kv, positive=True).sum()
        qc = float(np.dot(q, c))
        return float(s) + chip.vector_seconds(5 * dm.h * qc, 2 * dm.h * qc * self.e)

    def expert_loads(self, tokens: int) -> np.ndarray:
        """Tokens per expert slot of each MoE layer, ``(L, ep, slots)``, for ``tokens`` tokens
        (a fresh distinct top-k draw per layer, :class:`.moe_serving.ExpertRouter`)."""
        if self.slots is None:                  # every layer dense
            return np.zeros((0, self.plan.ep, 0), dtype=np.int64)
        out = self.slots.rank_loads(self.router.loads(tokens))
        rows = out.sum(axis=-1)                 # (L, ep) rows per rank
        self.rank_rows[0] += float(rows.max(axis=-1).sum())
        self.rank_rows[1] += float(rows.sum()) / rows.shape[-1]
        return out

    def seconds(self, q: np.ndarray, c: np.ndarray, n_logits: int,
                ranks: np.ndarray | None = None) -> float:
        """Seconds of the iteration (see class docstring)."""
        return sum(self.parts(q, c, n_logits, ranks))

    def parts(self, q: np.ndarray, c: np.ndarray, n_logits: int,
              ranks: np.ndarray | None = None, account: bool = True
              ) -> tuple[float, float, float]:
        """(all layers, embedding, LM head) seconds of the iteration; a pipeline stage runs
        ``n_layers/pp`` of the layers, the first stage the embedding, the last the head.
        ``ranks``: the EP (attention data-parallel) rank of each sequence (default round-robin);
        the slowest rank sets each phase. MoE: ``n_dense_layers`` dense layers, the rest MoE
        layers with their own routing draw, all-to-all and (``overlap_a2a``) two-micro-batch
        overlap of communication and compute (:meth:`overlap_period` for an iteration with
        prefill, its SM share ``a2a_sms``; :meth:`decode_overlap_period` for a decode-only one;
        without overlap the layer is compute + dispatch + combine).
        ``account=False``: time only (the work and link bytes are added later by
        :meth:`_account`; decode-only runs, :meth:`decode_step_seconds`).

        Components (:data:`SERVE_COMPONENTS`): with ``account`` the iteration's are added to
        :attr:`components` (an MoE model's record is also left in :attr:`last_rec`). The slowest
        attention rank's layer is split (its token-linear part, :meth:`_lin_split`, and its
        attention)."""
        cfg, dm, ep, e = self.cfg, self.dm, self.adp, self.e
        sums = self._batch_sums(q, c)         # computed once for the whole batch
        T_total = sums[0]
        if ep == 1:                           # one rank: no split (the common case, fast)
            groups = [(q, c)] if len(q) else []
            T = T_total
            attn = [self.attention_seconds(q, c, sums)] if groups else []
            layer = self._dense_seconds(T) + attn[0] if groups else 0.0
            sel = (T, attn[0] if groups else 0.0)
        else:
            if ranks is None:
                groups = [(q[r::ep], c[r::ep]) for r in range(ep)]
            else:
                groups = [(q[ranks == r], c[ranks == r]) for r in range(ep)]
            groups = [(pq, pc) for pq, pc in groups if len(pq)]
            T = max((int(pq.sum()) for pq, _ in groups), default=0)
            attn = [self.attention_seconds(pq, pc) for pq, pc in groups]
            vals = [self._dense_seconds(int(pq.sum())) + a for (pq, _), a in zip(groups, attn)]
            layer = max(vals, default=0.0)
            i = vals.index(layer) if vals else 0
            sel = (int(groups[i][0].sum()), attn[i]) if vals else (0, 0.0)
        tp_comm = self._tp_comm(T)
        if account:
            self._account(q, c, n_logits, sums)
        # the fixed per-iteration cost (scheduler, sampling; GPU presets) rides on the first
        # stage's part, once per iteration
        tail = (self.embed_seconds(T_total) + self.chip.iteration_overhead_s,
                self.head_seconds(n_logits))
        if not dm.moe:
            if account:                       # folded in bulk (:attr:`components`)
                self._iters.append((sel[0], sel[1], T, T_total, n_logits))
            return (cfg.n_layers * (layer + tp_comm), *tail)
        dense, twin_sel, ex, per_s, scale = 0.0, (0, 0.0), (0.0, 0.0, 0.0), 0.0, 1.0
        if self.n_dense:
            assert self._twin is not None
            tw = [self._twin._dense_seconds(int(pq.sum())) + a for (pq, _), a in zip(groups, attn)]
            dense = self.n_dense * (max(tw, default=0.0) + tp_comm)
            if tw:
                i = tw.index(max(tw))
                twin_sel = (int(groups[i][0].sum()), attn[i])
        if self.n_moe:
            experts, eparts = self.expert_seconds(self.expert_loads(T_total), parts=True)
            toks = T * self.plan.tp / self.atp if self.plan.split_attention else T
            if self.plan.overlap_a2a and int(q.max(initial=0)) <= 1:       # a decode iteration
                per = self.decode_overlap_period(
                    layer + tp_comm, self.attn1_linear_seconds(T) + max(attn, default=0.0),
                    experts, *self.a2a_parts(toks / 2))
            elif self.plan.overlap_a2a:
                per = self.overlap_period(layer + tp_comm, self.shared_seconds(T), experts,
                                          *self.a2a_parts(toks / 2))
                scale = self.sm_scale
            else:
                per = layer + tp_comm + experts + self.a2a_seconds(toks)
            per_s = float(per.sum())
            dense = dense + per_s
            ex = eparts
        # folded in bulk (:meth:`_moe_records_components`)
        self.last_rec = (*sel, T_total, n_logits, *twin_sel, *ex, per_s, scale, tp_comm)
        if account:
            self._moe_iters.append(self.last_rec)
        return (dense, *tail)

    def _tp_comm(self, T: int) -> float:
        """Seconds of one layer's TP all-reduces for ``T`` tokens (memoized): two of ``T·d``
        elements (Mamba: one of ``T·d`` and one of ``T·(dt_rank + 2·n_state)``); 0 at TP 1."""
        t = self._tpc.get(T)
        if t is None:
            dm, e = self.dm, self.e
            t = 0.0
            if self.plan.split_attention:   # attention-TP all-reduce + expert-TP all-reduce
                t = (self.comm_seconds("all_reduce", T * dm.d * e) if self.atp > 1 else 0.0) \
                    + (self.comm_seconds("all_reduce_expert", T * dm.d * e) if self.plan.tp > 1
                       else 0.0)
            elif self.plan.tp > 1:
                t = 2 * self.comm_seconds("all_reduce", T * dm.d * e) if not dm.ssm else (
                    self.comm_seconds("all_reduce", T * dm.d * e)
                    + self.comm_seconds("all_reduce", T * (dm.dt_rank + 2 * dm.n_state) * e))
            self._tpc[T] = t
        return t

    @property
    def decode_runs(self) -> bool:
        """Whether decode-only runs can be computed ahead: table costs (not the compiler) and
        either an MoE model (any EP and attention layout: each iteration timed by
        :meth:`decode_step_seconds`, the routing draws rolled back past the run's end,
        :meth:`snapshot`) or a dense one whose iteration costs a function of its sequence count
        and summed keys alone (:meth:`decode_run_seconds`: fused attention, GPU presets, or no
        attention, Mamba)."""
        if self.cost_source == "compiler":
            return False
        return bool(self.dm.moe) or (self.plan.ep == 1 and self.adp == 1
                                     and (self.chip.fused_attention or bool(self.dm.ssm)))

    @property
    def exact_decode_steps(self) -> bool:
        """Decode-only runs are timed iteration by iteration (:meth:`decode_step_seconds`): MoE
        (a fresh routing draw per iteration)."""
        return bool(self.dm.moe)

    def decode_step_seconds(self, c: np.ndarray, ranks: np.ndarray | None) -> float:
        """Seconds of one decode-only iteration of sequences with ``c`` keys each (one new token
        each, every one sampling) on attention ranks ``ranks`` — :meth:`seconds` on that batch,
        without adding its work (:meth:`account_decode_step` does, once the iteration runs)."""
        return sum(self.parts(np.ones(len(c), np.int64), c, len(c), ranks, account=False))

    @property
    def vector_decode_steps(self) -> bool:
        """MoE decode steps are timed for many iterations at once
        (:meth:`decode_steps_seconds`): fused attention (GPU presets) and drawn routing (no
        trace); otherwise one at a time (:meth:`decode_step_seconds`)."""
        return (bool(self.dm.moe) and self.chip.fused_attention and self.cost_source == "table"
                and getattr(self, "router", None) is not None and self.router._trace is None)

    def decode_steps_seconds(self, s: np.ndarray, r: np.ndarray, ranks: np.ndarray | None,
                             a: int, m: int) -> np.ndarray:
        """Seconds of iterations ``a … m − 1`` of an MoE decode-only run (sequences of contexts
        ``s`` at the run's start, ``r`` tokens left, attention ranks ``ranks`` or None for one
        rank; iteration j holds the sequences with ``r > j``, each at ``s + j`` keys): the
        floating-point operations of :meth:`parts` on each iteration's batch, in its order,
        elementwise over the iterations; the routing draws are made for all of them at once
        (numpy draws a broadcast binomial element by element in C order, so the generator
        advances exactly as by one call per iteration) and the EP rank row sums are added
        iteration by iteration. Only when :attr:`vector_decode_steps`."""
        dm, chip, plan = self.dm, self.chip, self.plan
        j = np.arange(a, m, dtype=np.int64)
        live = r[None, :] > j[:, None]                               # (K, N)
        if ranks is None or self.adp == 1:
            members = [np.ones(len(s), bool)]
        else:
            members = [ranks == k for k in range(self.adp)]
        n_g = np.stack([(live & mk).sum(axis=1) for mk in members])  # (G, K) sequences
        c_g = np.stack([(live & mk) @ s for mk in members]) + j * n_g  # (G, K) Σ keys
        T_total = live.sum(axis=1)
        T = n_g.max(axis=0)
        C = c_g.astype(np.float64)
        attn = self._fused_attention_seconds(C, n_g.astype(np.float64), C)   # q = 1: pairs = keys
        empty = n_g == 0

        cols = np.arange(len(j))

        def per_group(src: "IterationCost") -> tuple[np.ndarray, np.ndarray]:
            """The slowest rank's layer (token-linear part + attention) per iteration, and its
            components (:meth:`layer_comp`)."""
            vals = np.array([[src._dense_seconds(int(t)) if t else 0.0 for t in row]
                             for row in n_g])
            full = np.where(empty, -np.inf, vals + attn)
            i = full.argmax(axis=0)
            return full.max(axis=0), src._layer_rows(n_g[i, cols], attn[i, cols], table=True)

        layer, layer_comp = per_group(self)
        tp_comm = np.array([self._tp_comm(int(t)) for t in T])
        first = np.array([self.embed_seconds(int(t)) for t in T_total]) \
            + chip.iteration_overhead_s
        head = np.array([self.head_seconds(int(t)) for t in T_total])
        comp = self._tail_rows(T_total, T_total)
        dense = np.zeros(len(j))
        if self.n_dense:
            assert self._twin is not None
            twin_layer, twin_comp = per_group(self._twin)
            dense = self.n_dense * (twin_layer + tp_comm)
            comp += self.n_dense * twin_comp
            comp[:, _COMM] += self.n_dense * tp_comm
        layers = dense
        if self.n_moe:
            rows = self.slots.rank_loads(self.router.loads(T_total[:, None, None]))
            per_rank = rows.sum(axis=-1)                             # (K, L, ep)
            busiest = per_rank.max(axis=-1).sum(axis=-1)
            total = per_rank.sum(axis=(1, 2))
            for b, t in zip(busiest.tolist(), total.tolist()):
                self.rank_rows[0] += float(b)
                self.rank_rows[1] += float(t) / per_rank.shape[-1]
            experts, eparts = self.expert_seconds(rows, parts=True)
            a2a: dict = {}
            toks = T * plan.tp / self.atp if plan.split_attention else T
            if plan.overlap_a2a:        # decode iterations (:meth:`decode_overlap_period`)
                halves = np.array([a2a[x] if x in a2a else a2a.setdefault(x, self.a2a_parts(x))
                                   for x in (toks / 2).tolist()])
                attn_max = np.where(empty, -np.inf, attn).max(axis=0)
                attn1 = np.array([self.attn1_linear_seconds(int(t)) for t in T]) + attn_max
                per = self.decode_overlap_period((layer + tp_comm)[:, None], attn1[:, None],
                                                 experts, halves[:, 0:1], halves[:, 1:2])
            else:
                comm = np.array([a2a[x] if x in a2a else a2a.setdefault(x, self.a2a_seconds(x))
                                 for x in toks.tolist()])[:, None]
                per = (layer + tp_comm)[:, None] + experts + comm
            # row sums in C order: each row is then summed as :meth:`parts` sums its (L,) array
            layers = dense + np.ascontiguousarray(per).sum(axis=1)
            comp += self.moe_layers_comp(layer_comp, eparts, per.shape[1],
                                         np.ascontiguousarray(per).sum(axis=1), 1.0)
        self.last_steps_comp = comp
        return (layers + first) + head

    def account_decode_steps(self, s: np.ndarray, r: np.ndarray, stop: int) -> None:
        """Add the work and link bytes of iterations ``0 … stop − 1`` of an MoE decode-only run
        (:meth:`decode_steps_seconds`'s sequences) as :meth:`_account` adds them iteration by
        iteration: the integer sums at once, each link's bytes as the same sequence of
        additions (``np.cumsum`` adds in order)."""
        assert self.cost_source != "compiler"
        j = np.arange(stop, dtype=np.int64)
        live = r[None, :] > j[:, None]
        T = live.sum(axis=1)                       # sequences = new tokens = logits rows
        C = live @ s + j * T                       # Σ keys = Σ q·c (q = 1)
        pend = self._pending
        for i, v in enumerate((stop, int(T.sum()), int(C.sum()), int(C.sum()),
                               int(T.sum()), stop)):
            pend[i] += v
        if self.plan.tp > 1 or self.atp > 1:
            pend[6] += int(T.sum())
        dm, e, ep = self.dm, self.e, self.plan.ep
        if not (dm.moe and ep > 1):
            return
        memo: dict[int, float] = {}
        for t in T.tolist():
            if t not in memo:
                sent = sum(sum(a2a_bytes(t / ep, dm.d, b, dm.n_experts, dm.top_k, ep,
                                         self._node_ranks, self.plan.a2a))
                           for b in (self.plan.dispatch_bytes or e, e))
                memo[t] = (self.cfg.n_layers - self.n_dense) * sent / (1 - 1 / ep)
        nbytes = np.array([memo[t] for t in T.tolist()])
        rates = self._rates.get("all_to_all")
        if rates is None:
            rates = self._rates["all_to_all"] = self.timer.traffic("all_to_all", self._ep_group)
        acc = self._link_bytes
        for link, rate in rates.items():
            acc[link] = float(np.cumsum(np.concatenate(([acc.get(link, 0.0)],
                                                        rate * nbytes)))[-1])

    def snapshot(self) -> tuple:
        """The state an iteration's timing changes: the routing generator, a routing trace's
        position and the EP rank row sums (:meth:`restore` puts it back)."""
        router = getattr(self, "router", None)
        return (self._rng.bit_generator.state, router._pos if router is not None else 0,
                tuple(self.rank_rows))

    def restore(self, state: tuple) -> None:
        """Undo the timing of iterations that did not run (:meth:`snapshot`)."""
        self._rng.bit_generator.state = state[0]
        router = getattr(self, "router", None)
        if router is not None:
            router._pos = state[1]
        self.rank_rows = list(state[2])

    def decode_run_seconds(self, n: np.ndarray, keys: np.ndarray) -> np.ndarray:
        """Seconds of each iteration of a decode-only run (:mod:`.decode_run`): iteration j has
        ``n[j]`` sequences of one new token each attending to ``keys[j]`` keys in all. The same
        floating-point operations, in the same order, as :meth:`seconds` on that batch (only
        when :attr:`decode_runs`); the run's work is added by :meth:`account_decode_run`."""
        layers, first, head = self.decode_run_parts(n, keys)
        return (layers + first) + head

    def decode_run_parts(self, n: np.ndarray, keys: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`parts` (all layers, embedding + iteration overhead, LM head; s) of each batch
        of ``n[j]`` decoding sequences with ``keys[j]`` keys in all, by the same floating-point
        operations (only when :attr:`decode_runs` and the model is dense): an iteration's
        parts, or a pipeline micro-batch's (:meth:`_Replica._pipeline`)."""
        dm, chip = self.dm, self.chip
        table = self._decode_table
        top = int(n.max())
        if top >= len(table):
            table = np.concatenate((table, np.full((top + 1 - len(table), 4), np.nan)))
            self._decode_table = table
        per = table[n]
        if np.isnan(per[:, 0]).any():
            for t in np.unique(n[np.isnan(per[:, 0])]).tolist():
                table[t] = (self._dense_seconds(t), self._tp_comm(t),
                            self.embed_seconds(t) + chip.iteration_overhead_s,
                            self.head_seconds(t))
            per = table[n]
        dense, tp_comm, first, head = per.T
        if dm.ssm:
            layer = dense + 0.0
        else:       # attention_seconds' fused branch with q = 1: causal pairs = keys
            C = keys.astype(np.float64)
            attn = self._fused_attention_seconds(C, n.astype(np.float64), C)
            layer = dense + attn
        return self.cfg.n_layers * (layer + tp_comm), first, head

    def add_decode_run(self, n: np.ndarray, keys: np.ndarray) -> None:
        """Add the components of dense decode-only batches (:meth:`decode_run_components`),
        folded in bulk when :attr:`components` is read."""
        self._runs.append((n, keys))

    def decode_run_components(self, n: np.ndarray, keys: np.ndarray) -> np.ndarray:
        """Components (:data:`SERVE_COMPONENTS`), summed, of the dense decode-only batches of
        :meth:`decode_run_parts` (``n[j]`` sequences, ``keys[j]`` keys in all): the same
        arithmetic split as :meth:`parts` splits an iteration."""
        n = np.asarray(n, np.int64)
        if not len(n):
            return np.zeros(len(SERVE_COMPONENTS))
        u, k = np.unique(n, return_counts=True)
        L = self.cfg.n_layers
        comp = L * (k @ self._lin_splits(u.tolist()))
        comp[_COMM] += L * float(k @ np.array([self._tp_comm(int(t)) for t in u]))
        comp += k @ np.array([self._tail_comp(int(t), int(t)) for t in u])
        if not self.dm.ssm:
            C = np.asarray(keys).astype(np.float64)
            attn = self._fused_attention_seconds(C, n.astype(np.float64), C)
            launch = self._attn_launch
            comp[_ATTN] += L * float(np.sum(attn - launch))
            comp[_OVH] += L * launch * len(n)
        return comp

    def account_decode_run(self, tokens: int, keys: int, iterations: int) -> None:
        """Add the work of decode-only iterations with ``tokens`` sequences and ``keys`` keys in
        all (as in :meth:`decode_run_seconds`) to the pending sums, as :meth:`_account` does per
        iteration (a decode step's keys are its q·c and its causal pairs)."""
        pend = self._pending
        pend[0] += iterations
        pend[1] += tokens
        pend[2] += keys
        pend[3] += keys
        pend[4] += tokens
        pend[5] += iterations
        if self.plan.tp > 1:
            pend[6] += tokens

    @property
    def work(self) -> np.ndarray:
        """The work vector (:data:`.energy.WORK_FIELDS`) of the iterations run so far, all chips."""
        self._flush()
        return self._work

    @property
    def comm_link_bytes(self) -> dict[int, float]:
        """Bytes carried per link by the collectives of the iterations run so far."""
        self._flush()
        return self._link_bytes

    def _flush(self) -> None:
        """Fold the pending iteration sums into the totals (:func:`.energy.serve_work`; the TP
        all-reduces' bytes, ``n_layers`` × per layer, linear in tokens)."""
        it, T, qc, ctx, n, n_it, T_ar = self._pending
        if not (it or T_ar):
            return
        dm, e, tp, ep, L = self.dm, self.e, self.atp, self.adp, self.cfg.n_layers
        if it:
            self._work = self._work + serve_work(dm, e, tp, ep, L, iterations=it, tokens=T,
                                                 qc=qc, ctx=ctx, logits=n,
                                                 logit_iterations=n_it)
        if T_ar:
            per_token = (2 * dm.d * e if not dm.ssm
                         else (dm.d + dm.dt_rank + 2 * dm.n_state) * e)
            if self.plan.split_attention:
                if self.atp > 1:
                    self._carry("all_reduce", self._tp_group, L * dm.d * e * T_ar)
                if self.plan.tp > 1:
                    self._carry("all_reduce_expert", self._etp_group, L * dm.d * e * T_ar)
            else:
                self._carry("all_reduce", self._tp_group, L * per_token * T_ar)
        self._pending = [0, 0, 0, 0, 0, 0, 0]

    def _account(self, q: np.ndarray, c: np.ndarray, n_logits: int,
                 sums: tuple[int, int, int, int] | None = None) -> None:
        """Add one iteration's work (:func:`.energy.serve_work`, through the pending sums) and
        its collectives' link bytes (TP all-reduces of every EP rank's tokens, EP all-to-alls)
        to the totals."""
        dm, e, tp, ep, L = self.dm, self.e, self.plan.tp, self.plan.ep, self.cfg.n_layers
        T, C, QC, _ = sums or self._batch_sums(q, c)
        pend = self._pending
        if self.cost_source == "compiler" and not dm.moe and ep == 1:
            # the same compiled Reports that time the iteration (one cost path)
            layer = (self._interpolated(int(T), self._compiled_vec)[1:] if T
                     else np.zeros(len(WORK_FIELDS)))
            if not dm.ssm and T:
                layer = layer + self._attention_vec(q, c)[1:]
            self._work = self._work + tp * (L * layer + self._embed_vec(int(T))[1:]
                                            + self._head_vec(n_logits)[1:])
        else:
            pend[0] += 1
            pend[1] += T
            pend[2] += QC
            pend[3] += C
            pend[4] += n_logits
            pend[5] += 1 if n_logits else 0
        if tp > 1 or self.atp > 1:
            pend[6] += T
        if dm.moe and ep > 1:
            # per rank and MoE layer: dispatch (at dispatch_bytes) + combine, as an all-to-all
            # send buffer S whose (1 - 1/ep)·S leaves the rank (the volumes of a2a_seconds)
            sent = sum(sum(a2a_bytes(T / ep, dm.d, b, dm.n_experts, dm.top_k, ep,
                                     self._node_ranks, self.plan.a2a))
                       for b in (self.plan.dispatch_bytes or e, e))
            self._carry("all_to_all", self._ep_group, (L - self.n_dense) * sent / (1 - 1 / ep))

    def _carry(self, kind: str, groups: list[list[int]], nbytes: float) -> None:
        rates = self._rates.get(kind)
        if rates is None:
            rates = self._rates[kind] = self.timer.traffic(
                "all_reduce" if kind == "all_reduce_expert" else kind, groups)
        add_traffic(self._link_bytes, rates, nbytes)

    def head_seconds(self, n: int) -> float:
        """Final norm, LM head GEMM and logits softmax for ``n`` rows (memoized): compiled
        (:func:`.compiled.compiled_head`, bucketed like the layer, cap ``max_seqs``) or by the
        table."""
        t = self._head.get(n)
        if t is None and n == 0:
            t = self._head[0] = 0.0          # no sequence needs logits this iteration
        if t is None and self.cost_source == "compiler":
            assert self.chip.arch is not None

            t = self._head[n] = float(self._head_vec(n)[0])
        if t is None:
            dm, chip, e = self.dm, self.chip, self.e
            t = self._head[n] = float(
                chip.vector_seconds(4 * n * dm.d, 2 * n * dm.d * e)
                + chip.gemm_seconds(n, dm.d, dm.vocab)[()]
                + chip.vector_seconds(5 * n * dm.vocab, 2 * n * dm.vocab * e))
        return t


#: ops of the token-linear layer (:func:`.workload.token_gemms`/``token_vectors``) that are
#: the shared experts (the SHARED slots of DeepSeek's overlap schedules)
SHARED_OPS = frozenset({"shared_gate_up", "shared_down", "shared_act"})
#: ops of the token-linear layer in DeepSeek's decode ATTN-1 stage ("core attention, attention
#: output projection and MoE routing gate"; the core attention is timed apart): the absorbed
#: value up-projection, the output projection and its residual add, the router and its top-k
ATTN1_OPS = frozenset({"v_absorb", "o_proj", "attn_residual", "router", "router_topk"})


def dense_twin(cfg: LLMConfig) -> LlamaConfig:
    """A Llama-style config with an MoE config's attention and its dense FFN
    (``d_dense_ffn``): the cost of its ``n_dense_layers`` leading dense layers."""
    return LlamaConfig(f"{cfg.name}-dense-layers", d_model=cfg.d_model, n_layers=cfg.n_layers,
                       n_heads=cfg.n_heads, n_kv_heads=cfg.n_kv_heads,
                       d_ffn=cfg.d_dense_ffn, vocab_size=cfg.vocab_size or 1,
                       rope_theta=cfg.rope_theta, norm_eps=cfg.norm_eps,
                       max_seq_len=cfg.max_seq_len)


def serve_cost_source(chip: ChipModel, moe: bool, cost_source: str | None) -> str:
    """``None`` -> ``"compiler"`` for ArchSpec chips, ``"table"`` for GPU presets (``moe`` is
    accepted for compatibility: MoE serving is compiled too)."""
    return resolve_cost_source(chip, cost_source)


# ---- simulation --------------------------------------------------------------------------------
@dataclass(eq=False)
class _Req:
    """A request. ``todo`` prompt tokens must be prefilled before the next token (the prompt, or
    after a preemption the prompt plus every token produced); ``done`` of them are."""

    rid: int
    arrival: float
    prompt: int
    output: int
    todo: int = 0
    done: int = 0
    generated: int = 0
    first_token: float = math.nan
    finish: float = math.nan
    blocks: int = 0
    active: bool = False
    preemptions: int = 0
    decode_replica: int = -1
    rank: int = 0                 # EP (attention data-parallel) rank holding its KV

    @property
    def decoding(self) -> bool:
        return self.done >= self.todo


class _Replica:
    """One model replica: its queue, KV blocks and iteration loop."""

    def __init__(self, sim: "_Sim", idx: int, chips: list[int], role: str,
                 cost: IterationCost) -> None:
        self.sim, self.idx, self.chips, self.role, self.cost = sim, idx, chips, role, cost
        self.waiting: deque[_Req] = deque()
        self.running: list[_Req] = []
        # one KV pool per attention data-parallel rank (each rank holds its own requests' KV)
        dp = 1 if sim.state_slots is not None else sim.plan.attention_dp
        self.rank_blocks = (sim.state_slots if sim.state_slots is not None
                            else sim.kv_tokens_per_replica // dp // sim.plan.kv_block_tokens)
        self.free = [self.rank_blocks] * dp
        self.total_blocks = self.rank_blocks * dp
        self.wake: simpy.Event | None = None
        self.run: _Run | None = None   # a decode-only run computed ahead (:meth:`_start_run`)
        self.contended = False         # a pipelined run's stage sends queued: no more runs
        self.run_end = 0.0             # end of the last run committed (s)
        self.timed_end = -math.inf     # end of the last iteration timed without events (s)
        self._sends_memo: tuple | None = None   # :meth:`_stage_sends`
        #: sizes (bytes per chip) of committed stage sends not yet on the links' counters, one
        #: per micro-batch in time order (:meth:`_commit_sends`, :meth:`flush_sends`)
        self._unsent: list[float] = []
        self.busy = 0.0
        self.busy_chip_s = 0.0     # chip-seconds of compute (energy model)
        self.iterations = 0
        sim.env.process(self.loop())

    @property
    def free_blocks(self) -> int:
        """Free KV blocks over all attention-DP ranks of the replica."""
        return sum(self.free)

    @property
    def load(self) -> int:
        self._check_timed_end()
        if self.run is not None:       # the sequences of the run's iteration in progress
            j = self._run_iteration()
            return len(self.waiting) + (self.run.n[j] if j < self.run.stop else 0)
        return len(self.waiting) + len(self.running)

    def poke(self) -> None:
        if self.wake is not None and not self.wake.triggered:
            self.wake.succeed()

    def submit(self, req: _Req) -> None:
        self._check_timed_end()
        run = self.run
        if run is not None:
            j = self._run_iteration()
            if j >= run.stop:              # the run ended before now: the replica was idle
                self._commit_run()
            else:                          # the run stops after the iteration in progress
                run.stop = j + 1
        self.waiting.append(req)
        self.poke()

    # ---- decode-only runs computed ahead (:mod:`.decode_run`) -----------------------------
    def _run_iteration(self) -> int:
        """Index of the run's iteration in progress now (its length once the run is over).
        Raises :class:`_SameInstant` when now is exactly an iteration's end: whether the
        event-level loop would have seen this replica before or after that iteration's end
        depends on SimPy's event order, which a run computed in bulk does not keep."""
        run, now = self.run, self.sim.env.now
        assert run is not None
        while run.t[-1] <= now and len(run.n) < run.stop:
            if not run.exact:
                self._extend_run(2 * len(run.n))
            elif not run.chunks:      # one at a time (MoE without vectorized steps)
                self._extend_run(len(run.n) + 1)
            else:     # MoE: at least as many as reach now at the last step's time, and
                # at least doubling (a call's fixed numpy cost dominates a few iterations'; the
                # draws past the run's end are undone and the run's own drawn again)
                ahead = (now - run.t[-1]) / run.dts[-1] if run.dts[-1] > 0 else 1.0
                self._extend_run(max(2 * len(run.n),
                                     len(run.n) + 1 + int(min(ahead * 1.05, 1e6))))
        j = bisect_right(run.t, now) - 1
        if j >= 1 and run.t[j] == now:
            raise _SameInstant(now)
        return j

    def _extend_run(self, m: int) -> None:
        """Time the run's iterations up to ``m`` (at most all of them)."""
        run = self.run
        assert run is not None
        a, m = len(run.n), min(m, run.plan.iterations)
        n, keys = run.plan.counts(a, m)
        cost = self.cost
        if run.pipeline:
            self._extend_pipeline_run(a, m, n)
            run.n += n.tolist()
            run.keys += keys.tolist()
            return
        if run.exact and cost.vector_decode_steps:   # MoE, all at once; undone past the end
            run.chunks.append((a, m, cost.snapshot()))
            dts = cost.decode_steps_seconds(run.s_arr, run.r_arr, run.ranks, a, m)
            run.comp.append(cost.last_steps_comp)
        elif run.exact:      # MoE: each iteration as the event-level loop times it
            dts = np.empty(m - a)
            for j in range(a, m):
                run.states.append(cost.snapshot())
                live = run.r_arr > j
                dts[j - a] = cost.decode_step_seconds(
                    run.s_arr[live] + j, run.ranks[live] if run.ranks is not None else None)
                run.recs.append([cost.last_rec])
        else:
            dts = cost.decode_run_seconds(n, keys)
        # SimPy's clock after each iteration: now + dt, added one at a time (cumsum is sequential)
        run.t += np.cumsum(np.concatenate(([run.t[-1]], dts)))[1:].tolist()
        run.dts += dts.tolist()
        run.n += n.tolist()
        run.keys += keys.tolist()

    def _run_micro_batches(self, j: int, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """(contexts, attention ranks) of each micro-batch of a decode-only run's iteration
        ``j`` (``n`` live sequences), as :meth:`_pipeline_stages` splits the batch (live
        sequences in running order, ``np.array_split`` into ``min(pp, n)``)."""
        return [(s + j, r) for s, r, _ in self._run_split(j, n)]

    def _run_split(self, j: int, n: int) -> list[tuple[np.ndarray, int, int]]:
        """The micro-batches of a decode-only run's iterations with ``n`` live sequences (the
        live sequences are those with the most tokens left, so ``n`` fixes them; ``j`` is any
        such iteration): (their contexts at the run's start, attention ranks, Σ contexts)
        each, cut as ``np.array_split`` cuts ``n`` into ``min(pp, n)`` (the first ``n mod M``
        one longer). Memoized per ``n``."""
        run = self.run
        assert run is not None
        split = run.splits.get(n)
        if split is None:
            live = np.flatnonzero(run.r_arr > j)
            M = min(self.sim.plan.pp, n)
            size, extra = divmod(n, M)
            cuts = [0]
            for i in range(M):
                cuts.append(cuts[-1] + size + (1 if i < extra else 0))
            ranks = run.ranks if run.ranks is not None else np.zeros(len(run.r_arr), np.int64)
            s_live, r_live = run.s_arr[live], ranks[live]
            sums = np.add.reduceat(s_live, cuts[:-1]).tolist()
            split = run.splits[n] = [(s_live[lo:hi], r_live[lo:hi], total)
                                     for lo, hi, total in zip(cuts, cuts[1:], sums)]
        return split

    def _extend_pipeline_run(self, a: int, m: int, n: np.ndarray) -> None:
        """Time iterations ``a … m − 1`` (``n[j − a]`` sequences each) of a decode-only run
        through ``pp`` stages, as :meth:`_pipeline_stages` and :meth:`_pipeline` time each: the
        live sequences (running order) split into the same micro-batches, each micro-batch's
        parts (dense: by :meth:`IterationCost.decode_run_parts`, all of the chunk's
        micro-batches at once; MoE: by :meth:`IterationCost.parts`, micro-batch by micro-batch
        with its routing draw, the cost's state kept before each iteration to undo the
        iterations that do not run), the stage times by the same operations elementwise, then
        the stages and stage sends by :meth:`_pipeline_times` from the iteration's start."""
        run, sim, cost = self.run, self.sim, self.cost
        assert run is not None
        pp, width = sim.plan.pp, sim.plan.tp * sim.plan.ep
        per_it, gn, gk, layers, first, head = [], [], [], [], [], []
        for j, nj in zip(range(a, m), n.tolist()):
            if run.exact:
                run.states.append(cost.snapshot())
                mbs = self._run_micro_batches(j, nj)
                per_it.append(len(mbs))
                recs = []
                for c, ranks in mbs:
                    gn.append(len(c))
                    x, y, z = cost.parts(np.ones(len(c), np.int64), c, len(c), ranks,
                                         account=False)
                    recs.append(cost.last_rec)
                    layers.append(x)
                    first.append(y)
                    head.append(z)
                run.recs.append(recs)
            else:
                split = run.splits.get(nj) or self._run_split(j, nj)
                per_it.append(len(split))
                gn += [len(s) for s, _, _ in split]
                gk += [total + j * len(s) for s, _, total in split]   # Σ (s_i + j)
        if not run.exact:
            layers, first, head = cost.decode_run_parts(np.array(gn, np.int64),
                                                        np.array(gk, np.int64))
            run.mb_n += gn
            run.mb_keys += gk
        else:
            layers, first, head = (np.array(x, np.float64) for x in (layers, first, head))
        # times[k][s] = layers/pp + (first if s == 0) + (head if s == pp − 1), as _pipeline_stages
        # adds them (0.0 elsewhere), elementwise; send sizes as it computes them
        times_all = np.stack([layers / pp + (first if s == 0 else 0.0)
                              + (head if s == pp - 1 else 0.0) for s in range(pp)],
                             axis=1).tolist()
        d, e = sim.cfg.d_model, sim.chip.element_bytes
        nbytes_all = (np.array(gn, np.float64) * d * e / width).tolist()
        t, i = run.t[-1], 0
        ts, dts, chip_s, sends = run.t, run.dts, run.chip_s, run.sends
        for M in per_it:
            times, nbytes = times_all[i:i + M], nbytes_all[i:i + M]
            i += M
            end, starts = self._pipeline_times(t, times, nbytes)
            dts.append(end - t)
            ts.append(end)
            chip_s.append(width * sum(map(sum, times)))
            sends.append((starts, nbytes))
            t = end
        run.groups += per_it

    def _stage_pairs(self) -> list[list[tuple[int, int]]]:
        """Per stage ``s < pp − 1``: (chip i of stage s, chip i of stage s + 1) pairs, the
        stage sends' endpoints."""
        width = self.sim.plan.tp * self.sim.plan.ep
        st = [self.chips[s * width:(s + 1) * width] for s in range(self.sim.plan.pp)]
        return [list(zip(st[s], st[s + 1])) for s in range(len(st) - 1)]

    def _stage_sends(self) -> tuple[list, bool, list]:
        """The messages of each stage's send as :meth:`.network.Network.send_many` makes them
        (pairs of one route merged): per stage, (pairs merged, stripes: (fraction of the
        message or None for a lone stripe, links in lock order, bandwidth, latency)); whether
        every link is on one stripe alone (then a stripe can only queue behind its own previous
        micro-batch); and per stage its distinct stripe kinds (pairs merged, fraction,
        bandwidth, latency), stripes of one kind being timed alike. Memoized."""
        memo = self._sends_memo
        if memo is None:
            net = self.sim.net
            stages, owner, kinds = [], {}, []
            for s, pairs in enumerate(self._stage_pairs()):
                merged: dict[tuple, list] = {}
                for a, b in pairs:
                    if a != b:
                        merged.setdefault(net.topology.route(a, b), []).append(a)
                msgs = []
                for route, srcs in merged.items():
                    stripes = []
                    for path, frac in route:
                        order, bw, lat = net.path_facts(path)
                        for link in order:
                            owner.setdefault(link, set()).add((s, len(msgs), len(stripes)))
                        stripes.append((None if len(route) == 1 else frac, order, bw, lat))
                    msgs.append((len(srcs), stripes))
                stages.append(msgs)
                kinds.append(list(dict.fromkeys((k, frac, bw, lat) for k, stripes in msgs
                                                for frac, _, bw, lat in stripes)))
            memo = self._sends_memo = (stages, all(len(v) == 1 for v in owner.values()), kinds)
        return memo

    def _pipeline_times(self, t0: float, times: list[list[float]], nbytes: list[float]
                        ) -> tuple[float, list[list[float]]]:
        """The end (s) of a decode-only run's pipelined iteration started at ``t0``, and its
        sends' starts: :meth:`_stage_clock`."""
        return self._stage_clock(t0, times, nbytes)

    def _stage_clock(self, t0: float, times: list[list[float]], nbytes: list[float]
                     ) -> tuple[float, list[list[float]]]:
        """The end (s) of one :meth:`_pipeline` iteration started at ``t0`` with stage times
        ``times[j][s]`` and stage-send sizes ``nbytes[j]`` per micro-batch, by the clock
        additions SimPy makes: stage ``s`` starts micro-batch ``j`` at ``max(its previous end,
        the send's arrival)``; each stripe of a send holds its links from the send's start for
        ``bytes/bandwidth``, then arrives after its latency. Exact only when no stripe has to
        queue for a link (each link's holds in the iteration do not overlap) and no one else
        uses the links (:meth:`_Sim.private_pipeline`); :class:`_Contended` otherwise. Also
        returns each send's start, per stage and micro-batch (:meth:`_commit_sends`). When
        every link is on one stripe alone, each distinct stripe kind is timed once (stripes
        of one kind give the same release and arrival)."""
        stages, exclusive, kinds = self._stage_sends()
        pp, M = len(times[0]), len(times)
        arrive: list[float] = []
        starts: list[list[float]] = []
        holds: list[tuple[float, float, int]] = []        # (start, release, link) if shared
        end = t0
        for s in range(pp):
            f, nxt, st, free = t0, [], [], -math.inf
            for j in range(M):
                if s and arrive[j] > f:
                    f = arrive[j]
                f = f + times[j][s]
                if s == pp - 1:
                    continue
                if f < free:          # a stripe's previous micro-batch still holds its links
                    raise _Contended(f)
                last = rel_max = f
                if exclusive:
                    for k, frac, bw, lat in kinds[s]:
                        size = nbytes[j]
                        for _ in range(k - 1):     # send_many's merged size, pair by pair
                            size += nbytes[j]
                        rel = f + (size if frac is None else frac * size) / bw
                        arr = rel + lat if lat > 0 else rel
                        if arr > last:
                            last = arr
                        if rel > rel_max:
                            rel_max = rel
                else:
                    for k, stripes in stages[s]:
                        size = nbytes[j]
                        for _ in range(k - 1):
                            size += nbytes[j]
                        for frac, order, bw, lat in stripes:
                            rel = f + (size if frac is None else frac * size) / bw
                            arr = rel + lat if lat > 0 else rel
                            if arr > last:
                                last = arr
                            holds += [(f, rel, link) for link in order]
                free = rel_max
                nxt.append(last)
                st.append(f)
            arrive = nxt
            starts.append(st)
            end = f if f > end else end
        if holds:
            last_rel: dict[int, float] = {}
            for acq, rel, link in sorted(holds):
                if acq < last_rel.get(link, -math.inf):
                    raise _Contended(acq)
                last_rel[link] = rel
        return end, starts

    def _timed_pipeline(self, t0: float, times: list[list[float]], nbytes: list[float]
                        ) -> float | None:
        """The end (s) of a pipelined iteration started at ``t0`` (:meth:`_pipeline_stages`),
        timed without SimPy events by :meth:`_stage_clock`, its stage sends added to the
        network's counters (:meth:`_commit_sends`); None (nothing changed) when a stage send
        would queue or one SimPy timeout from ``t0`` cannot end exactly there
        (:func:`_exact_delay`): then :meth:`_pipeline` times it on events. Used only on a
        replica whose stage links carry nothing else (:meth:`_Sim.private_pipeline`), whose
        previous iteration's sends all arrived before that iteration ended: the links are free
        at ``t0``, and the result is :meth:`_pipeline`'s to the bit. A request reaching the
        replica exactly at the end is refused (:meth:`_check_timed_end`)."""
        try:
            end, starts = self._stage_clock(t0, times, nbytes)
        except _Contended:
            return None
        if _exact_delay(t0, end) is None:     # one timeout cannot land on it: on events
            return None
        self._commit_sends([(starts, nbytes)])
        return end

    def _check_timed_end(self) -> None:
        """Raise :class:`_SameInstant` when now is exactly the end of an iteration timed by
        :meth:`_timed_pipeline`: on events that end is a chain of same-instant events, and
        whether a request reaching the replica then is seen before or after it depends on
        SimPy's event order, which one timeout does not keep."""
        if self.sim.env.now == self.timed_end:
            raise _SameInstant(self.timed_end)

    def _start_run(self) -> bool:
        """Start a decode-only run of the running sequences (queue empty, every sequence
        decoding); False (nothing changed) when the batch is not of that kind or the run would
        preempt (in any attention-DP rank's KV pool)."""
        if self.waiting or not self.running:
            return False
        running = self.running
        if any(x.done < x.todo for x in running):
            return False
        s = [x.prompt + x.generated for x in running]
        r = [x.output - x.generated for x in running]
        b = [x.blocks for x in running]
        sim = self.sim
        bt, slots = sim.plan.kv_block_tokens, sim.state_slots is not None
        plan = DecodeRun(s, r, b, self.free_blocks, bt, slots)
        if len(self.free) == 1:
            pools = [(0, list(range(len(s))), plan)]
        else:                     # one DecodeRun per attention-DP rank's KV pool
            pools = []
            for k in range(len(self.free)):
                idx = [i for i, x in enumerate(self.running) if x.rank == k]
                if idx:
                    pools.append((k, idx, DecodeRun([s[i] for i in idx], [r[i] for i in idx],
                                                    [b[i] for i in idx], self.free[k], bt,
                                                    slots)))
        if not all(p.feasible for _, _, p in pools):
            return False
        exact = self.cost.exact_decode_steps
        ranks = (np.array([x.rank for x in self.running], np.int64)
                 if exact and (len(self.free) > 1 or sim.plan.pp > 1) else None)
        self.run = _Run(plan, list(self.running), [sim.env.now], [], [], [], plan.iterations,
                        pools, exact, np.array(s, np.int64), np.array(r, np.int64), ranks, [],
                        [], pipeline=sim.plan.pp > 1)
        try:
            self._extend_run(1 if exact else RUN_CHUNK_PP if sim.plan.pp > 1 else RUN_CHUNK)
        except _Contended:     # stage sends queue at this batch: the event-level loop times it
            if self.run.states:            # (MoE: undo the routing draws of the timed ones)
                self.cost.restore(self.run.states[0])
            self.run = None
            self.contended = True
            return False
        return True

    def _commit_run(self) -> None:
        """Apply the run's first ``stop`` iterations to the replica and its requests: tokens,
        finishes (at their iteration's end), KV blocks, busy time, timeline and work. Iterations
        timed beyond ``stop`` did not run: their routing draws are undone."""
        run, sim = self.run, self.sim
        assert run is not None
        stop, plan = run.stop, run.plan
        if len(run.n) < stop:
            self._extend_run(stop)
        if run.exact and len(run.states) > stop:
            self.cost.restore(run.states[stop])
        if run.exact and len(run.n) > stop and run.chunks:
            # iterations timed ahead that did not run: back to the start of the chunk holding
            # iteration ``stop`` and redo the draws of its iterations that ran
            a, _, state = next(x for x in run.chunks if x[0] <= stop < x[1])
            self.cost.restore(state)
            if stop > a:
                self.cost.decode_steps_seconds(run.s_arr, run.r_arr, run.ranks, a, stop)
        t = run.t
        held = [0] * len(run.reqs)
        # free blocks of all pools after each iteration's takes (the ranks without sequences in
        # the run keep theirs), as the event-level loop's timeline reads them
        touched = {k for k, _, _ in run.pools}
        after = [sum(f for k, f in enumerate(self.free) if k not in touched)] * stop
        for k, idx, p in run.pools:
            for i, h in zip(idx, p.blocks_held(stop)):
                held[i] = h
            free, grow = p.blocks(stop)
            self.free[k] = free[stop]
            after = [a + f - g for a, f, g in zip(after, free, grow)]
        for x, r, h in zip(run.reqs, plan.r, held):
            if r <= stop:
                x.generated = x.output
                x.blocks = 0
                x.active = False
                x.finish = t[r]
                sim.finished.append(x)
            else:
                x.generated += stop
                x.blocks = h
        self.running = [x for x in self.running if x.active]
        total = self.total_blocks
        kv = [1.0 - a / total for a in after] if total else [0.0] * stop
        n = run.n[:stop]
        sim.timeline.extend(zip(t[:stop], [self.idx] * stop, [self.role] * stop, n, n, kv))
        width = len(self.chips)
        if run.pipeline:                   # chip-seconds at each iteration's start, then busy
            for cs, dt in zip(run.chip_s[:stop], run.dts[:stop]):
                self.busy_chip_s += cs
                self.busy += dt
            self._commit_sends(run.sends[:stop])
        else:
            for dt in run.dts[:stop]:      # one at a time, as the event-level loop adds them
                self.busy_chip_s += dt * width
                self.busy += dt
        self.iterations += stop
        # components of the iterations that ran (:data:`SERVE_COMPONENTS`)
        if run.exact and run.recs:
            self.cost.add_moe_records([x for it in run.recs[:stop] for x in it])
        elif run.exact:
            self.cost.add_components(np.concatenate(run.comp)[:stop].sum(axis=0))
        elif run.pipeline:
            mbs = sum(run.groups[:stop])
            self.cost.add_decode_run(np.array(run.mb_n[:mbs], np.int64),
                                     np.array(run.mb_keys[:mbs], np.int64))
        else:
            self.cost.add_decode_run(np.array(run.n[:stop], np.int64),
                                     np.array(run.keys[:stop], np.int64))
        if run.exact and run.pipeline:   # each micro-batch as _pipeline's parts accounts it
            for j, nj in enumerate(run.n[:stop]):
                for c, _ in self._run_micro_batches(j, nj):
                    self.cost._account(np.ones(len(c), np.int64), c, len(c))
        elif run.exact:
            self.cost.account_decode_steps(run.s_arr, run.r_arr, stop)
        else:   # (pipeline: one accounted batch per micro-batch, as _pipeline's parts calls)
            self.cost.account_decode_run(sum(n), sum(run.keys[:stop]),
                                         sum(run.groups[:stop]) if run.pipeline else stop)
        self.run_end = t[stop]
        self.run = None

    def _commit_sends(self, sends: list[tuple]) -> None:
        """Add the stage sends of committed pipeline iterations ((send starts per stage and
        micro-batch, sizes per micro-batch) each) to the network's counters as its stripes add
        them: each link's hold and bytes at each release, in time order. When every link is on
        one stripe alone, a link's counters take only its stripe's sends, in micro-batch order:
        their sizes are kept and added in bulk later (:meth:`flush_sends`)."""
        net = self.sim.net
        stages, exclusive, _ = self._stage_sends()
        if exclusive:
            per_mb = sum(len(msgs) for msgs in stages)
            for _, nbytes in sends:
                self._unsent += nbytes
                net.messages += per_mb * len(nbytes)
            return
        busy, carried = net.busy_seconds, net.link_bytes
        for starts, nbytes in sends:
            released: list = []
            for msgs, st in zip(stages, starts):
                for j, f in enumerate(st):
                    for k, stripes in msgs:
                        size = nbytes[j]
                        for _ in range(k - 1):
                            size += nbytes[j]
                        net.messages += 1
                        net.bytes_sent += size
                        for frac, order, bw, _ in stripes:
                            sb = size if frac is None else frac * size
                            released += [(f + sb / bw, link, sb / bw, sb) for link in order]
            released.sort(key=lambda x: x[0])
            for _, link, hold, sb in released:
                busy[link] = busy.get(link, 0.0) + hold
                carried[link] = carried.get(link, 0.0) + sb

    def flush_sends(self) -> None:
        """Add the stage sends kept by :meth:`_commit_sends` to the network's counters: per
        stripe, its sizes and holds (the same operations as :meth:`.network.Network._stripe`'s,
        elementwise) summed onto each of its links one after another (``np.cumsum`` adds
        sequentially, as the sends' releases would). Called before anything else adds to
        those links (an iteration on events) and at the end of the simulation."""
        if not self._unsent:
            return
        net = self.sim.net
        stages, _, _ = self._stage_sends()
        busy, carried = net.busy_seconds, net.link_bytes
        nb = np.array(self._unsent, np.float64)
        self._unsent = []

        def summed(start: float, xs: np.ndarray) -> float:
            return float(np.cumsum(np.concatenate(([start], xs)))[-1])
        for msgs in stages:
            for k, stripes in msgs:
                size = nb
                for _ in range(k - 1):        # send_many's merged size, added pair by pair
                    size = size + nb
                net.bytes_sent = summed(net.bytes_sent, size)
                for frac, order, bw, _ in stripes:
                    sb = size if frac is None else frac * size
                    hold = sb / bw
                    for link in order:
                        busy[link] = summed(busy.get(link, 0.0), hold)
                        carried[link] = summed(carried.get(link, 0.0), sb)

    def _blocks(self, tokens: int) -> int:
        """KV blocks for ``tokens`` tokens; a Mamba model's one state slot per sequence."""
        if self.sim.state_slots is not None:
            return 1
        return -(-tokens // self.sim.plan.kv_block_tokens)

    def _grow(self, r: _Req, need: int) -> None:
        self.free[r.rank] -= need - r.blocks
        r.blocks = need

    def release(self, r: _Req) -> None:
        """Return ``r``'s KV blocks to its rank's pool."""
        self.free[r.rank] += r.blocks
        r.blocks = 0

    def _schedule(self) -> list[tuple[_Req, int]]:
        """This iteration's batch: (request, new tokens). With ``ep > 1`` every EP rank is an
        attention data-parallel rank with its own token budget ``max_batch_tokens // ep`` (as
        SGLang's DP attention divides ``chunked_prefill_size`` by the DP size,
        sglang/srt/server_args.py); a request is pinned at admission to the rank with the most
        budget left, and a long prompt is chunked to its rank's budget. Ranks are the
        ``attention_dp`` attention data-parallel ranks (default ``ep``), each with its own KV pool:
        a request is admitted to the rank with the most budget among those whose pool holds it;
        a decode step that needs a block its rank lacks preempts that rank's most recently
        admitted request."""
        plan = self.sim.plan
        ep = len(self.free)
        budgets = [max(1, plan.max_batch_tokens // ep)] * ep
        decode: list[_Req] = []
        prefilling: list[_Req] = []           # running, mid-prefill (in running order)
        bt, slots = plan.kv_block_tokens, self.sim.state_slots
        for r in list(self.running):          # decode steps first; preempt when KV runs out
            if not r.active:
                continue
            if r.done < r.todo:
                prefilling.append(r)
                continue
            # self._blocks(r.prompt + r.generated), inlined: this loop runs per sequence and
            # iteration
            need = 1 if slots is not None else -(-(r.prompt + r.generated) // bt)
            if need == r.blocks:              # no new block this step
                decode.append(r)
                continue
            while need > r.blocks + self.free[r.rank] and r.active:
                self._preempt(next(x for x in reversed(self.running) if x.rank == r.rank))
            if r.active:
                self._grow(r, need)
                decode.append(r)
        batch = [(r, 1) for r in decode if r.active]
        if ep == 1:
            budgets[0] -= len(batch)
        else:
            for r, _ in batch:
                budgets[r.rank] -= 1
        for r in prefilling:                  # continue chunked prefills
            budget = budgets[r.rank]
            if r.active and budget > 0:       # (a preemption above may have dropped it)
                rest = r.todo - r.done
                if not plan.chunked_prefill and rest > budget and batch:
                    continue
                q = min(rest, budget) if plan.chunked_prefill else rest
                batch.append((r, q))
                budgets[r.rank] -= q
        while self.waiting and max(budgets) > 0 and len(self.running) < plan.max_seqs:
            r = self.waiting[0]               # admit first-come first-served
            need = self._blocks(r.prompt + r.generated if r.decoding else r.todo)
            if need > self.rank_blocks:       # more than one rank's whole pool
                self.waiting.popleft()
                self.sim.rejected.append(r)
                continue
            fits = [i for i in range(ep) if budgets[i] > 0 and need <= self.free[i]]
            if not fits:
                break
            rank = max(fits, key=lambda i: budgets[i])
            budget = budgets[rank]
            rest = 1 if r.decoding else r.todo - r.done
            if not plan.chunked_prefill and rest > budget and batch:
                break
            q = rest if not plan.chunked_prefill else min(rest, budget)
            self.waiting.popleft()
            r.rank = rank
            self._grow(r, need)
            r.active = True
            self.running.append(r)
            batch.append((r, q))
            budgets[rank] -= q
        return batch

    def _pipeline_stages(self, q: np.ndarray, c: np.ndarray, last: list[bool],
                         ranks: np.ndarray | None) -> tuple[list[list[float]], list[float]]:
        """One iteration's micro-batches through ``pp`` stages: the batch's sequences split into
        ``M = min(pp, len)`` contiguous micro-batches (as ``np.array_split`` cuts them: the
        first ``len mod M`` one longer); per micro-batch ``j`` the seconds ``times[j][s]`` of
        stage ``s`` (``n_layers/pp`` layers, + embedding on stage 0, + LM head on the last)
        and the bytes ``nbytes[j]`` of its stage send (``tokens·D·e/(tp·ep)`` per chip, chip i
        of stage s to chip i of stage s+1). ``last``: whether each sequence samples a token;
        ``ranks``: attention ranks (None: one rank). Adds the iteration's work
        (:meth:`IterationCost.parts`) and chip-seconds."""
        plan = self.sim.plan
        pp, width, n = plan.pp, plan.tp * plan.ep, len(q)
        M = min(pp, n)
        size, extra = divmod(n, M)
        times, nbytes, hi = [], [], 0
        for j in range(M):
            lo, hi = hi, hi + size + (1 if j < extra else 0)
            qg = q[lo:hi]
            layers, emb, head = self.cost.parts(qg, c[lo:hi], sum(last[lo:hi]),
                                                None if ranks is None else ranks[lo:hi])
            times.append([layers / pp + (emb if s == 0 else 0.0) + (head if s == pp - 1 else 0.0)
                          for s in range(pp)])
            # float(tokens)·D·e/width, as the send's size always was computed
            nbytes.append(float(qg.sum()) * self.sim.cfg.d_model * self.sim.chip.element_bytes
                          / width)
        self.busy_chip_s += width * sum(map(sum, times))
        return times, nbytes

    def _pipeline(self, times: list[list[float]], nbytes: list[float]):
        """One iteration through ``pp`` stages (:meth:`_pipeline_stages`) on SimPy events:
        stage ``s`` runs micro-batch ``j`` once it has arrived, then sends its activations over
        the shared network. Ends when the last stage is done (the sampled tokens' return to
        stage 0 is not modelled)."""
        env, sim, plan = self.sim.env, self.sim, self.sim.plan
        pp, width, M = plan.pp, plan.tp * plan.ep, len(times)
        stage_chips = [self.chips[s * width:(s + 1) * width] for s in range(pp)]
        arrive = {(s, j): env.event() for s in range(1, pp) for j in range(M)}

        def stage(s: int):
            for j in range(M):
                if s:
                    yield arrive[(s, j)]
                yield env.timeout(times[j][s])
                if s < pp - 1:
                    ev = sim.net.send_many(list(zip(stage_chips[s], stage_chips[s + 1])),
                                           nbytes[j])
                    ev.callbacks.append(lambda _e, k=(s + 1, j): arrive[k].succeed())

        yield env.all_of([env.process(stage(s)) for s in range(pp)])

    def _preempt(self, r: _Req) -> None:
        self._drop(r)
        r.preemptions += 1
        r.todo, r.done = r.prompt + r.generated, 0     # recompute all it had (vLLM recompute)
        self.waiting.appendleft(r)
        self.sim.preemptions += 1

    def _drop(self, r: _Req) -> None:
        self.running.remove(r)
        r.active = False
        self.release(r)

    def loop(self):
        env, sim = self.sim.env, self.sim
        # pipelined iterations timed in closed form (:meth:`_timed_pipeline`) and
        # decode-only runs: only where nothing else shares the stage sends' links
        timed = (sim.decode_runs and self.role != "prefill" and sim.plan.pp > 1
                 and sim.private_pipeline(self))
        runs = (sim.decode_runs and self.role != "prefill" and self.cost.decode_runs
                and (sim.plan.pp == 1 or timed))
        while True:
            if runs and not self.waiting and not self.contended and self._start_run():
                # the run proceeds without events until a request reaches this replica
                # (:meth:`submit`); then the iteration in progress completes and the loop
                # goes on from there
                self.wake = env.event()
                yield self.wake
                self.wake = None
                run = self.run
                if run is not None:
                    yield env.timeout(_delay_to(env.now, run.t[run.stop]))
                    self._commit_run()
                continue
            batch = self._schedule() if (self.waiting or self.running) else []
            if not batch:                     # idle, or waiting for KV held by transfers
                self.wake = env.event()
                yield self.wake
                self.wake = None
                continue
            # per sequence: new tokens, keys attended (new ones included), whether it samples
            # a token (its prefill completes, or a decode step); one pass over the batch
            # (a decoding request has done ≥ todo, so done + n ≥ todo marks it too)
            qs = [n for _, n in batch]
            cs = [r.prompt + r.generated if r.done >= r.todo else r.done + n for r, n in batch]
            lasts = [r.done + n >= r.todo for r, n in batch]
            q, c = np.array(qs, np.int64), np.array(cs, np.int64)
            n_logits = sum(lasts)
            ranks = (np.array([r.rank for r, _ in batch], np.int64) if len(self.free) > 1
                     or (sim.plan.pp > 1 and self.cost.adp > 1) else None)
            t0 = env.now
            sim.record(self, t0, len(batch), sum(qs))
            if sim.plan.pp == 1:
                dt = self.cost.seconds(q, c, n_logits, ranks)
                self.busy_chip_s += dt * len(self.chips)
                yield env.timeout(dt)
            else:
                times, nbytes = self._pipeline_stages(q, c, lasts, ranks)
                end = self._timed_pipeline(t0, times, nbytes) if timed else None
                if end is None:               # on SimPy events, link by link
                    self.flush_sends()
                    yield env.process(self._pipeline(times, nbytes))
                else:                         # by the same clock additions, one event
                    self.timed_end = end
                    yield env.timeout(_exact_delay(t0, end))
                dt = env.now - t0
            self.busy += dt
            self.iterations += 1
            if sim.trace is not None:
                sim.trace.span("iteration", "compute", t0, dt, f"{self.role}{self.idx}", "replica",
                               tokens=sum(qs), seqs=len(batch))
            prefill_pool = self.role == "prefill"
            for r, n in batch:                # (r.decoding inlined: per sequence and iteration)
                if not r.active:
                    continue
                if r.done < r.todo:
                    r.done += n
                    if r.done < r.todo:
                        continue
                    if math.isnan(r.first_token):
                        r.first_token = env.now
                r.generated += 1              # a decode step, or the prefill's first token
                if r.generated >= r.output:
                    self._drop(r)
                    sim.finish(r)
                elif prefill_pool:
                    self.running.remove(r)
                    r.active = False
                    env.process(sim.hand_off(r, self))


@dataclass(eq=False)
class _Run:
    """A decode-only run in progress: its arithmetic, its sequences (running order), and for
    the iterations timed so far their boundaries ``t`` (s; ``t[0]`` the start), times ``dts``,
    sequences ``n`` and Σ keys; ``stop``: the iterations that will run (all of them, or fewer
    once a request arrives)."""

    plan: DecodeRun
    reqs: list[_Req]
    t: list[float]
    dts: list[float]
    n: list[int]
    keys: list[int]
    stop: int
    #: (attention-DP rank, indices into ``reqs``, that pool's DecodeRun) per rank with sequences
    pools: list[tuple[int, list[int], DecodeRun]]
    #: iterations timed one by one (MoE, :meth:`IterationCost.decode_step_seconds`), with the
    #: sequences' contexts ``s_arr``, tokens left ``r_arr``, ranks (None: one rank) and the
    #: cost's state before each timed iteration (:meth:`IterationCost.snapshot`)
    exact: bool
    s_arr: np.ndarray
    r_arr: np.ndarray
    ranks: Optional[np.ndarray]
    states: list[tuple]
    #: MoE iterations timed together: (first, end, the cost's state before them)
    chunks: list[tuple[int, int, tuple]]
    #: pipeline stages (dense, pp > 1): per iteration timed, its chip-seconds, its stage sends'
    #: network accounting (:meth:`_Replica._pipeline_times`) and its micro-batches
    pipeline: bool = False
    chip_s: list[float] = field(default_factory=list)
    sends: list[tuple] = field(default_factory=list)
    groups: list[int] = field(default_factory=list)
    #: the micro-batches of the iterations with n live sequences: (their contexts at the run's
    #: start, attention ranks, Σ contexts) each (:meth:`_Replica._run_micro_batches`)
    splits: dict[int, list] = field(default_factory=dict)
    #: components (:data:`SERVE_COMPONENTS`) of each iteration timed, ``(k, 5)`` arrays in
    #: order (MoE runs timed together), or each iteration's records (MoE runs timed one
    #: by one or through pipeline stages, :meth:`IterationCost.add_moe_records`); the
    #: micro-batches' sequences and Σ keys (dense pipeline runs)
    comp: list[np.ndarray] = field(default_factory=list)
    recs: list[list[tuple]] = field(default_factory=list)
    mb_n: list[int] = field(default_factory=list)
    mb_keys: list[int] = field(default_factory=list)


#: iterations of a decode-only run timed at its start (more are timed when the run lasts; an
#: MoE run times one, then as many as the clock needs)
RUN_CHUNK = 32
#: the same with pipeline stages, whose iterations are timed one by one in Python
#: (:meth:`_Replica._pipeline_times`): fewer timed ahead in vain when a request soon arrives
RUN_CHUNK_PP = 8


class _SameInstant(Exception):
    """A request reached a replica exactly at the end of an iteration of a decode-only run
    computed ahead (:meth:`_Replica._run_iteration`); the run is redone event by event."""


class _Contended(_SameInstant):
    """A stage send of a pipelined decode-only run would queue for a link held by another
    (:meth:`_Replica._pipeline_times` does not model FIFO link waits); the run is redone event
    by event."""


def _exact_delay(now: float, t: float) -> float | None:
    """A delay ``d`` with ``now + d == t`` exactly in floating point (SimPy's clock adds the
    delay to now), so the clock lands on the boundary the event-level loop would reach; None
    when no such ``d`` exists (``now`` has bits below ``t``'s last place, and every sum rounds
    past ``t``)."""
    d = t - now
    while now + d < t:
        d = math.nextafter(d, math.inf)
    while now + d > t:
        d = math.nextafter(d, -math.inf)
    return d if now + d == t else None


def _delay_to(now: float, t: float) -> float:
    """:func:`_exact_delay`; :class:`_SameInstant` (the simulation repeats event by event) when
    ``t`` cannot be reached from ``now`` in one step."""
    d = _exact_delay(now, t)
    if d is None:
        raise _SameInstant(t)
    return d


class _Sim:
    def __init__(self, spec: ClusterSpec, cfg: LLMConfig, plan: ServePlan, chip: ChipModel,
                 kv_tokens_per_replica: int, kv_bytes_per_token_chip: float, trace: bool,
                 state_slots: int | None = None, state_bytes_chip: float = 0.0,
                 decode_runs: bool = False) -> None:
        self.env = simpy.Environment()
        # decode-only runs computed ahead (:mod:`.decode_run`): not with a trace (it spans
        # every iteration) or pipeline stages (their micro-batches use the network)
        self.decode_runs = decode_runs and not trace
        self.spec, self.cfg, self.plan, self.chip = spec, cfg, plan, chip
        self.topology = Topology(spec)
        self.net = Network(self.env, self.topology)
        self.timer = CollectiveTimer(self.topology)
        self.kv_tokens_per_replica = kv_tokens_per_replica
        self.kv_bytes = kv_bytes_per_token_chip
        self.state_slots = state_slots          # Mamba: sequences per replica (no KV cache)
        self.state_bytes = state_bytes_chip     # Mamba: recurrent state per sequence per chip
        self.trace = Trace() if trace else None
        self.finished: list[_Req] = []
        self.rejected: list[_Req] = []
        self.preemptions = 0
        self.front: list[_Replica] = []
        self.decode: list[_Replica] = []
        self.kv_transfers = 0
        self.kv_transfer_s = 0.0      # seconds of the KV hand-offs, summed (P/D)
        self.timeline: list[tuple[float, int, str, int, int, float]] = []
        #: link → users (replica index; −1: KV hand-offs) (:meth:`private_pipeline`)
        self._link_users: dict[int, set[int]] | None = None

    def private_pipeline(self, rep: "_Replica") -> bool:
        """Whether no link of ``rep``'s stage sends carries anything else: another replica's
        stage sends or a KV hand-off (any prefill replica to any decode replica). Only then is
        a pipelined decode-only run's timing a function of its own batch (memoized)."""
        users = self._link_users
        if users is None:
            users = self._link_users = {}

            def add(who: int, pairs) -> None:
                for a, b in pairs:
                    if a != b:
                        for path, _ in self.topology.route(a, b):
                            for link in path:
                                users.setdefault(link, set()).add(who)
            for x in self.front + self.decode:
                for pairs in x._stage_pairs():
                    add(x.idx, pairs)
            if self.decode:
                for src in self.front:
                    for dst in self.decode:
                        add(-1, zip(src.chips, dst.chips))
        return all(users[link] == {rep.idx} for pairs in rep._stage_pairs()
                   for a, b in pairs for path, _ in self.topology.route(a, b) for link in path)

    def record(self, rep: "_Replica", t: float, seqs: int, tokens: int) -> None:
        """One timeline point at an iteration's start: the batch (sequences, new tokens) and the
        replica's KV occupancy (allocated blocks / all blocks; Mamba: state slots)."""
        kv = 1.0 - rep.free_blocks / rep.total_blocks if rep.total_blocks else 0.0
        self.timeline.append((t, rep.idx, rep.role, seqs, tokens, kv))
        if self.trace is not None:
            pid = f"{rep.role}{rep.idx}"
            self.trace.events += [
                {"name": "batch", "cat": "timeline", "ph": "C", "ts": t * 1e6, "pid": pid,
                 "args": {"seqs": seqs, "tokens": tokens}},
                {"name": "kv occupancy", "cat": "timeline", "ph": "C", "ts": t * 1e6, "pid": pid,
                 "args": {"fraction": kv}}]

    def finish(self, r: _Req) -> None:
        r.finish = self.env.now
        self.finished.append(r)

    def hand_off(self, r: _Req, src: _Replica):
        """Move a prefilled request's KV cache to the least-loaded decode replica."""
        dst = min(self.decode, key=lambda x: (x.load, x.idx))
        t0 = self.env.now
        nbytes = r.prompt * self.kv_bytes if self.state_slots is None else self.state_bytes
        yield self.net.send_many(list(zip(src.chips, dst.chips)), nbytes)
        src.release(r)
        self.kv_transfers += 1
        self.kv_transfer_s += self.env.now - t0
        if self.trace is not None:
            self.trace.span(f"kv r{r.rid}", "comm", t0, self.env.now - t0, "kv-transfer",
                            f"{src.idx}->{dst.idx}", bytes=nbytes * len(src.chips))
        src.poke()
        r.decode_replica = dst.idx
        dst.submit(r)

    def arrivals(self, reqs: list[_Req]):
        for r in reqs:
            if r.arrival > self.env.now:
                yield self.env.timeout(r.arrival - self.env.now)
            min(self.front, key=lambda x: (x.load, x.idx)).submit(r)


@dataclass
class ServeResult:
    """Outcome of :func:`simulate_serving` (seconds)."""

    requests: pd.DataFrame        # per request: arrival, ttft, tpot, e2e, preemptions, ...
    metrics: dict[str, Any]
    replicas: pd.DataFrame        # per replica: role, chips, iterations, busy_s, utilization
    trace: Trace | None = None
    events: int = 0
    timeline: pd.DataFrame | None = None   # per iteration: t_s, replica, role, seqs, tokens, kv


    def report(self) -> pd.DataFrame:
        """One Report row of the run's metrics; ``attrs['convention']`` states the timing rules."""
        df = pd.DataFrame([self.metrics])
        df.attrs["convention"] = CONVENTION
        return df


CONVENTION = ("cluster/serve: seconds of simulated time; TTFT = first token (end of the "
              "prefill iteration) - arrival; TPOT = (finish - first token)/(output - 1); "
              "e2e = finish - arrival; percentiles over finished requests (numpy linear)")


def timeline_summary(timeline: pd.DataFrame, bins: int = 50) -> list[dict[str, Any]]:
    """The per-iteration timeline folded into ``bins`` equal time bins per pool role: each row
    ``t_s`` (bin start, s), ``role``, ``iterations`` started in the bin, mean and max batch
    ``seqs``, mean new ``tokens`` per iteration, mean and max ``kv_occupancy`` (fraction of the
    replica's KV blocks allocated at an iteration's start). Empty bins are left out."""
    if timeline is None or timeline.empty:
        return []
    end = float(timeline.t_s.max())
    width = end / bins if end > 0 else 1.0
    b = np.minimum((timeline.t_s.to_numpy() / width).astype(np.int64), bins - 1)
    g = timeline.assign(bin=b).groupby(["role", "bin"], sort=True)
    out = g.agg(iterations=("seqs", "size"), seqs_mean=("seqs", "mean"),
                seqs_max=("seqs", "max"), tokens_mean=("tokens", "mean"),
                kv_occupancy_mean=("kv", "mean"), kv_occupancy_max=("kv", "max")).reset_index()
    out.insert(0, "t_s", out.pop("bin") * width)
    return [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()}
            for r in out.to_dict("records")]


def _pct(x: pd.Series, q: float) -> float:
    x = x.dropna()
    return float(np.percentile(x, q)) if len(x) else math.nan


def simulate_serving(spec: ClusterSpec, model: str | LLMConfig, plan: ServePlan,
                     requests: pd.DataFrame, *, seed: int = 0, trace: bool = False,
                     expert_trace: Optional[np.ndarray] = None,
                     cost_source: str | None = None, tech: str | None = None,
                     slo: SLO | None = None, power_caps: Mapping[str, float] | None = None,
                     prefill_chips: int | None = None, decode_runs: bool = True) -> ServeResult:
    """Serve ``requests`` (columns ``arrival_s, prompt_tokens, output_tokens``) on ``spec``;
    ``cost_source`` as in the module docstring; ``tech``: technology table for an ArchSpec
    chip's energy (:mod:`.energy`; default 7nm). ``slo``: add SLO attainment and goodput to the
    metrics (:mod:`.serve_slo`). ``power_caps``: board power cap (W) per pool role
    (``prefill``, ``decode``, or ``both`` for colocated replicas; :func:`.energy.capped_clock_ratio`).
    ``prefill_chips``: the P/D split to use instead of the cluster's ``pools`` (disaggregated).
    ``decode_runs``: compute a replica's decode-only runs ahead (:mod:`.decode_run`) instead of
    iteration by iteration — the same results to the last bit (the event-level loop is
    ``decode_runs=False``); a request reaching a replica exactly at the end of a computed
    iteration makes the whole run repeat event by event."""
    args = (spec, model, plan, requests, seed, trace, expert_trace, cost_source, tech, slo,
            power_caps, prefill_chips)
    if decode_runs:
        try:
            return _simulate(*args, decode_runs=True)
        except _SameInstant:
            pass
    return _simulate(*args, decode_runs=False)


def _simulate(spec: ClusterSpec, model: str | LLMConfig, plan: ServePlan,
              requests: pd.DataFrame, seed: int, trace: bool,
              expert_trace: Optional[np.ndarray], cost_source: str | None, tech: str | None,
              slo: SLO | None, power_caps: Mapping[str, float] | None,
              prefill_chips: int | None, decode_runs: bool) -> ServeResult:
    """:func:`simulate_serving` with ``decode_runs`` fixed."""
    wall0 = time.perf_counter()
    if prefill_chips is not None:
        if plan.disaggregated is False:
            raise ClusterSpecError("serve plan: a prefill/decode split (--pd) was given for a "
                                   "colocated run (--colocated)")
        spec = with_prefill_chips(spec, prefill_chips)
    chip = with_gemm_format(chip_model(spec), plan.gemm_format)
    disagg = plan.disaggregated if plan.disaggregated is not None else spec.pools is not None
    if disagg and spec.pools is None:
        raise ClusterSpecError(f"serve plan: disaggregated=True but cluster {spec.name} has no "
                               "`pools:` section (pools.prefill_chips)")
    if plan.routing == "trace" and expert_trace is None:
        raise ClusterSpecError("serve plan: routing 'trace' needs an expert-id trace")
    n_pre = spec.pools.prefill_chips if disagg else spec.n_chips
    pools = [n_pre, spec.n_chips - n_pre] if disagg else [spec.n_chips]
    if isinstance(model, str):
        try:
            model = get_config(model)
        except ValueError as exc:
            raise ClusterSpecError(f"model: {exc}") from None
    model, standin = standin_attention(model)
    cfg = validate_serve(plan, spec, model, pools)
    mem = serve_memory(plan, chip, cfg)
    size = plan.tp * plan.ep * plan.pp
    slots = mem.get("state_slots")
    sim = _Sim(spec, cfg, plan, chip, mem["kv_tokens"] * plan.attention_dp,
               mem["kv_bytes_per_token"],
               trace, slots, mem.get("state_bytes_per_seq", 0.0), decode_runs)
    roles = ("prefill", "decode") if disagg else ("both",)
    chips_of = {r: chip for r in roles}
    clock = {}
    for role, cap in (power_caps or {}).items():
        if role not in roles:
            raise ClusterSpecError(f"power cap for the {role!r} pool: this run's pools are "
                                   f"{', '.join(roles)} ({'disaggregated' if disagg else 'colocated'})")
        flag = "--decode-power-cap" if role in ("decode", "both") else "--prefill-power-cap"
        chips_of[role], clock[role] = power_capped_chip(spec, chip, cap,
                                                        f"{flag} (the {role} pool's power cap)")
    pool_cost: dict[str, IterationCost] = {}
    for i, start in enumerate(range(0, spec.n_chips, size)):
        chips = list(range(start, start + size))
        role = "both" if not disagg else ("prefill" if start < n_pre else "decode")
        cost = IterationCost(cfg, plan, chips_of[role], sim.timer, chips[:plan.tp * plan.ep],
                             expert_trace, seed + 1 + i, cost_source)
        if role in pool_cost:       # replicas of a pool: one memo of the chip's costs
            cost.share_memos(pool_cost[role])
        pool_cost.setdefault(role, cost)
        rep = _Replica(sim, i, chips, role, cost)
        (sim.decode if role == "decode" else sim.front).append(rep)
    reqs = [_Req(i, float(a), int(p), int(o), todo=int(p))
            for i, (a, p, o) in enumerate(requests[["arrival_s", "prompt_tokens",
                                                    "output_tokens"]].itertuples(index=False))]
    sim.env.process(sim.arrivals(reqs))
    sim.env.run()
    for rep in sim.front + sim.decode:     # runs that ended with nothing more arriving
        if rep.run is not None:
            rep._commit_run()
        rep.flush_sends()
    # the event-level clock's end: computed runs' last iterations have no events of their own
    end = max([sim.env.now] + [rep.run_end for rep in sim.front + sim.decode])
    unfinished = [r for r in reqs if math.isnan(r.finish) and r not in sim.rejected]
    if unfinished:
        raise RuntimeError(f"serving simulation stalled with {len(unfinished)} requests unfinished")
    df = pd.DataFrame({"rid": [r.rid for r in reqs], "arrival_s": [r.arrival for r in reqs],
                       "prompt_tokens": [r.prompt for r in reqs],
                       "output_tokens": [r.output for r in reqs],
                       "first_token_s": [r.first_token for r in reqs],
                       "finish_s": [r.finish for r in reqs],
                       "preemptions": [r.preemptions for r in reqs],
                       "decode_replica": [r.decode_replica for r in reqs]})
    df["ttft_s"] = df.first_token_s - df.arrival_s
    df["e2e_s"] = df.finish_s - df.arrival_s
    df["tpot_s"] = np.where(df.output_tokens > 1, (df.finish_s - df.first_token_s)
                            / (df.output_tokens - 1).clip(lower=1), np.nan)
    span = float(df.finish_s.max() - df.arrival_s.min()) if len(sim.finished) else math.nan
    reps = sim.front + sim.decode
    rep_df = pd.DataFrame({"replica": [r.idx for r in reps], "role": [r.role for r in reps],
                           "chips": [len(r.chips) for r in reps],
                           "iterations": [r.iterations for r in reps],
                           "busy_s": [r.busy for r in reps]})
    rep_df["utilization"] = rep_df.busy_s / end if end else 0.0
    done = df.dropna(subset=["finish_s"])
    metrics: dict[str, Any] = {
        "mode": "serve", "model": cfg.name, **({"attention": standin} if standin else {}), "cluster": spec.name, "chips": spec.n_chips,
        "plan": plan.label(), "disaggregated": bool(disagg), "replicas": len(reps),
        "cost_source": reps[0].cost.cost_source if reps else "table",
        "requests": len(reqs), "finished": len(sim.finished), "rejected": len(sim.rejected),
        "makespan_s": span, "throughput_tokens_per_s": float(done.output_tokens.sum() / span),
        "throughput_requests_per_s": len(done) / span, "preemptions": sim.preemptions,
        "kv_tokens_per_replica": sim.kv_tokens_per_replica, "kv_transfers": sim.kv_transfers,
        "state_slots_per_replica": slots if slots is not None else 0,
        "state_bytes_per_seq_chip": mem.get("state_bytes_per_seq", 0.0),
        "utilization": float(rep_df.utilization.mean()),
    }
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        for q in (50, 90, 99):
            metrics[f"{name[:-2]}_p{q}_s"] = _pct(done[name], q)
    if disagg:
        metrics.update(prefill_chips=n_pre, decode_chips=spec.n_chips - n_pre)
    for role, cap in (power_caps or {}).items():
        metrics[f"power_cap_{role}_w"] = float(cap)
        metrics[f"clock_ratio_{role}"] = clock[role]
    if slo is not None:
        metrics.update(slo_metrics(df, slo, span))
    moe_costs = [r.cost for r in reps if r.cost.dm.moe and r.cost.slots is not None]
    if moe_costs and plan.ep > 1:
        # EP rank balance (EPLB): rows of the busiest rank over the mean rank's, per MoE layer
        # and iteration (drawn), and expected from the placement with and without redundancy
        busiest, mean = (sum(c.rank_rows[i] for c in moe_costs) for i in (0, 1))
        metrics.update(
            moe_rank_load_max_over_mean=busiest / mean if mean else math.nan,
            moe_rank_load_expected_max_over_mean=float(
                np.mean([c.rank_balance_expected for c in moe_costs])),
            moe_rank_load_expected_max_over_mean_without_redundant=float(
                np.mean([c.rank_balance_plain for c in moe_costs])))
    # links in id order: the energy is summed over them, and the order in which links were
    # first used is the event order, which iterations timed without events do not keep
    carried = dict(sorted(sim.net.link_bytes.items()))
    for r in reps:
        for link, b in r.cost.comm_link_bytes.items():
            carried[link] = carried.get(link, 0.0) + b
    carried = dict(sorted(carried.items()))
    capped = tuple((sum(r.busy_chip_s for r in reps if r.role == role), float(cap))
                   for role, cap in (power_caps or {}).items())
    energy = cluster_energy(spec, chip, busy_chip_s=sum(r.busy_chip_s for r in reps),
                            window_s=span if math.isfinite(span) else end,
                            work=sum((r.cost.work for r in reps), np.zeros(len(WORK_FIELDS))),
                            link_bytes=carried, topology=sim.topology, tech=tech,
                            capped_busy=capped)
    metrics.update(energy, tokens_per_j=float(done.output_tokens.sum()) / energy["energy_j"]
                   if energy["energy_j"] > 0 else math.nan)
    metrics["components"] = run_components(reps, end, plan, chip, mem, timeline=sim.timeline,
                                           kv_transfer_s=sim.kv_transfer_s)
    events = events_scheduled(sim.env) + sim.timer.events
    wall = time.perf_counter() - wall0
    metrics.update(events=events, wall_s=wall, events_per_s=events / wall)
    # in time order (computed runs add their iterations when committed), replicas in order
    # at equal times
    timeline = (pd.DataFrame(sim.timeline, columns=["t_s", "replica", "role", "seqs", "tokens",
                                                    "kv"])
                .sort_values(["t_s", "replica"], kind="stable").reset_index(drop=True))
    return ServeResult(df, metrics, rep_df, sim.trace, events, timeline)


def run_components(reps: Sequence[_Replica], window_s: float, plan: ServePlan, chip: ChipModel,
                   mem: Mapping[str, float], timeline: Sequence[tuple],
                   kv_transfer_s: float) -> dict[str, Any]:
    """A serving run's time and memory by component, per pool (:data:`COMPONENTS_CONVENTION`):
    per replica its iterations' :data:`SERVE_COMPONENTS` (divided by ``pp``: the mean stage),
    ``pipeline_s`` (``pp > 1``: busy time minus those), ``idle_s`` (``window_s`` minus busy),
    ``busy_s`` and ``sum_s``, averaged over the pool's replicas; memory per chip in GiB:
    weights, the KV cache's capacity (Mamba: the state slots'), its peak occupancy (the
    largest share of a replica's KV blocks allocated at an iteration's start, times the
    capacity), and the HBM held back from both (``1 − memory_fraction``: activations and
    workspace, not modelled apart)."""
    gib = float(2**30)
    cap = (mem["kv_tokens"] * mem["kv_bytes_per_token"] if "state_slots" not in mem
           else mem["state_slots"] * mem["state_bytes_per_seq"])
    pools: dict[str, Any] = {}
    for role in dict.fromkeys(r.role for r in reps):
        mine = [r for r in reps if r.role == role]
        rows = []
        for r in mine:
            comp = r.cost.components / plan.pp
            row = dict(zip(SERVE_COMPONENTS, comp.tolist()))
            row["pipeline_s"] = r.busy - float(comp.sum()) if plan.pp > 1 else 0.0
            row["idle_s"] = window_s - r.busy
            row["busy_s"] = r.busy
            rows.append(row)
        out: dict[str, Any] = {"replicas": len(mine), "chips_per_replica": len(mine[0].chips)}
        out.update({k: float(np.mean([x[k] for x in rows])) for k in rows[0]})
        out["sum_s"] = sum(out[k] for k in (*SERVE_COMPONENTS, "pipeline_s", "idle_s"))
        idx = {r.idx for r in mine}
        peak = max((x[5] for x in timeline if x[1] in idx), default=0.0)
        out["memory_per_chip_gib"] = {
            "weights": mem["weight_bytes"] / gib, "kv_capacity": cap / gib,
            "kv_peak": peak * cap / gib, "kv_peak_fraction": peak,
            "reserved": chip.hbm_bytes * (1 - plan.memory_fraction) / gib,
            "hbm": chip.hbm_bytes / gib}
        pools[role] = out
    return {"window_s": window_s, "pools": pools, "kv_transfer_s": kv_transfer_s,
            "convention": COMPONENTS_CONVENTION}


def search_pd_split(spec: ClusterSpec, model: str | LLMConfig, plan: ServePlan,
                    requests: pd.DataFrame, *, slo: SLO, **kw: Any
                    ) -> tuple[ServeResult, list[dict[str, Any]]]:
    """``--pd auto``: simulate every prefill/decode split of ``spec``'s chips that whole replicas
    of ``tp·ep·pp`` chips tile (:func:`.serve_slo.pd_splits`) on the same requests and return the
    run of the split with the highest goodput (:func:`.serve_slo.best_split`) and one row per
    split tried (prefill/decode chips, goodput, attainment, throughput, p90 TTFT and TPOT)."""
    if plan.disaggregated is False:
        raise ClusterSpecError("--pd auto: searches prefill/decode splits, but the run is "
                               "colocated (--colocated)")
    size = plan.tp * plan.ep * plan.pp
    rows, runs = [], {}
    for p in pd_splits(spec.n_chips, size):
        res = simulate_serving(spec, model, plan, requests, slo=slo, prefill_chips=p, **kw)
        m = res.metrics
        rows.append({"prefill_chips": p, "decode_chips": spec.n_chips - p,
                     "goodput_requests_per_s": m["goodput_requests_per_s"],
                     "slo_attainment": m["slo_attainment"],
                     "throughput_requests_per_s": m["throughput_requests_per_s"],
                     "ttft_p90_s": m["ttft_p90_s"], "tpot_p90_s": m["tpot_p90_s"]})
        runs[p] = res
    best = runs[best_split(rows)["prefill_chips"]]
    best.metrics["pd_auto_splits_tried"] = len(rows)
    return best, rows
