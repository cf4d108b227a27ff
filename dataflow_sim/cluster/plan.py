"""Parallelism plans (training and serving), their validation and per-chip memory.

Chip placement (Megatron order, TP fastest): chip = tp_rank + tp·(sp_rank + sp·(dp_rank +
dp·pp_rank)). EP groups are carved out of the data/context ranks (ep | dp·sp), as in Megatron
and DeepSpeed-MoE.

Mamba models: TP must divide ``d_inner``; SP and EP are refused. Serving memory holds a
recurrent state per sequence (:func:`mamba_state_bytes`) instead of a KV cache.

Training memory per chip (bytes), ``e`` = the chip's element size, Ψ = this chip's parameters
(this stage's layers, experts sharded by EP, all by TP; embedding on the first stage, LM head on
the last), N = the data-parallel ranks sharing them (dp·cp; dp·cp/ep for experts), K =
``optimizer_bytes_per_param`` (12: fp32 master + Adam m, v — ZeRO paper, Rajbhandari et al.
2020, §3.1), :func:`zero_state_bytes`:

* ZeRO-0 (plain DDP): ``Ψ·e + Ψ·e + K·Ψ``; ZeRO-1: ``2Ψ·e + K·Ψ/N``; ZeRO-2:
  ``Ψ·e + (Ψ·e + K·Ψ)/N``; ZeRO-3 = FSDP FULL_SHARD: ``(2Ψ·e + K·Ψ)/N`` plus the gathered
  working set (the current and the prefetched layer's full weights, ``2·layer·e``).
  Gradient traffic: ZeRO-0/1 all-reduce the gradients; ZeRO-2 reduce-scatters them and
  all-gathers the updated parameters (the same ring volume); ZeRO-3 also all-gathers each
  layer's parameters before its forward and its backward (prefetched: only what exceeds the
  layer's compute is exposed).
* activations per layer per in-flight micro-batch, Korthikanti et al. 2022 ("Reducing
  Activation Recomputation in Large Transformer Models", arXiv:2205.05198, Table 2), written
  for 16-bit elements and scaled by ``e/2`` (:func:`activation_bytes_per_layer`); s the local
  sequence (seq/cp), b the micro-batch, h = D, a heads, t = tp, s_ctx the full sequence:
  no recompute ``s·b·h·(10 + 24/t + 5·a·s_ctx/(h·t))``; with Megatron sequence parallelism
  ``s·b·h/t·(34 + 5·a·s_ctx/h)``; selective recompute drops the ``5·a·s_ctx/h`` term (and so
  does fused FlashAttention-style attention, which never stores the scores); full
  recompute keeps only each layer's input ``2·s·b·h`` (``/t`` with sequence parallelism) plus
  one layer's full activations as the working set; with ``recompute_layers = k`` only k layers
  of each chunk are recomputed, the others keep the no-recompute activations. Mamba layers keep
  ``s·b·(2·D + 6·d_inner/t + R + 2N)·e`` (:func:`mamba_activation_elems`; scan states
  recomputed).
* in-flight micro-batches on pipeline rank r: ``min(m, p − r)`` for 1F1B; for the interleaved
  schedule the warm-up depth + 1 in chunks: ``min(m·v, 2(p − r − 1) + (v − 1)·p + 1)``.

Naming: ``sp`` is context parallelism (the sequence split over ranks, K/V all-gathered; ``cp``
in Megatron and torchtitan); ``seq_parallel`` is Megatron's sequence parallelism (norms and
dropouts split over the TP ranks, TP all-reduces become reduce-scatter + all-gather).
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tilewright.models.llm_configs import (DeepSeekConfig, LlamaConfig, LLMConfig, MambaConfig,
                                           MoEConfig, get_config)

from .cluster_spec import ClusterSpec, ClusterSpecError, PlanError
from .costs import ChipModel
from .workload import Shard, dims_of

__all__ = ["TrainPlan", "ServePlan", "auto_dp", "validate_train", "train_memory", "validate_serve",
           "serve_memory", "kv_bytes_per_token", "layer_params", "mamba_state_bytes",
           "mamba_activation_elems", "GIB", "zero_state_bytes", "activation_bytes_per_layer",
           "micro_batches_for"]

GIB = 2**30


class TrainPlan(BaseModel):
    """How one training step is split over the chips."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    dp: int = Field(1, ge=1, description="data-parallel replicas")
    tp: int = Field(1, ge=1, description="tensor-parallel degree (heads, FFN width)")
    pp: int = Field(1, ge=1, description="pipeline stages (devices per pipeline)")
    sp: int = Field(1, ge=1, description="sequence (context) parallel degree")
    ep: int = Field(1, ge=1, description="expert-parallel degree (divides dp·sp)")
    micro_batches: int = Field(8, ge=1, description="micro-batches per step per replica (m)")
    micro_batch_size: int = Field(1, ge=1, description="sequences per micro-batch (b)")
    seq_len: int = Field(4096, ge=1, description="tokens per sequence (s)")
    schedule: Literal["1f1b", "interleaved"] = "1f1b"
    virtual_stages: int = Field(1, ge=1, description="model chunks per device (interleaved: v ≥ 2)")
    stage_layers: Optional[tuple[int, ...]] = Field(
        None, description="Transformer layers of each model chunk in pipeline order (chunk "
        "c·pp + r runs on rank r): pp·virtual_stages whole numbers ≥ 0 summing to n_layers; "
        "None: n_layers/(pp·virtual_stages) each. Llama 3 balances its pipeline by removing "
        "one layer each from the first and the last stage, which hold the embedding and the "
        "LM head (arXiv:2407.21783 §3.3.2)")
    recompute: Literal["none", "selective", "full"] = Field(
        "none", description="activation recomputation in backward: none, selective (the "
        "attention core, Korthikanti et al. 2022) or full (each layer); true = full, false = none")
    recompute_layers: Optional[int] = Field(
        None, ge=1, description="with recompute full: layers of each model chunk (a pipeline "
        "stage when not interleaved) that are recomputed, the others keep their activations "
        "(Megatron --recompute-num-layers, block method; torchtitan's selective layer AC is "
        "every other layer); None: all")
    zero: Literal[0, 1, 2, 3] = Field(
        1, description="ZeRO stage over the data-parallel ranks: 0 none, 1 optimizer state, "
        "2 + gradients, 3 + parameters (= FSDP FULL_SHARD)")
    zero1: Optional[bool] = Field(
        None, description="DEPRECATED: true = zero 1, false = zero 0; use zero")
    seq_parallel: bool = Field(
        False, description="Megatron sequence parallelism over the TP ranks (needs tp > 1): "
        "activations and norms split by tp, TP all-reduces become reduce-scatter + all-gather")
    gemm_format: Literal["bf16", "fp8"] = Field(
        "bf16", description="GEMM format: fp8 = GEMMs at the GPU's FP8 tensor peak with 1-byte "
        "operands (H100; .costs.with_gemm_format); memory, attention and MFU's peak stay BF16")
    tp_comm_overlap: bool = Field(
        False, description="Megatron --tp-comm-overlap: each sequence-parallel TP all-gather/"
        "reduce-scatter pipelined with its GEMM in tp chunks (needs seq_parallel; "
        ":func:`.workload.tp_comm_overlap`)")
    global_batch: Optional[int] = Field(
        None, ge=1, description="sequences per step held fixed: without micro_batches, "
        "micro_batches = global_batch / (dp·micro_batch_size) (sweeps over dp keep the batch); "
        "with it, dp·micro_batches·micro_batch_size must equal it")
    optimizer_bytes_per_param: float = Field(12.0, ge=0, description="bytes/param of optimizer state")
    embedding_and_head: bool = Field(True, description="cost the embedding and LM head")
    allreduce_algo: Literal["ring", "tree"] = "ring"
    alltoall_algo: Literal["pairwise", "direct"] = "pairwise"
    grad_bucket_mb: Optional[float] = Field(
        25.0, gt=0, description="DP gradient all-reduce bucket, MiB (PyTorch DDP's bucket_cap_mb "
        "default 25), overlapped with the last micro-batch's backward; None: one all-reduce "
        "after the backward")
    inlayer_comm: Literal["network", "phase"] = Field(
        "network", description="TP/SP/EP collectives on the shared network with pipeline and "
        "gradient traffic ('network'), or as separately simulated phases ('phase')")

    @field_validator("recompute", mode="before")
    @classmethod
    def _recompute_bool(cls, v: Any) -> Any:
        return {True: "full", False: "none"}.get(v, v) if isinstance(v, bool) else v

    @model_validator(mode="before")
    @classmethod
    def _micro_batches_from_global(cls, data: Any) -> Any:
        """``global_batch`` without ``micro_batches`` (a plan or a sweep point that holds the
        global batch fixed while dp changes): micro_batches = global_batch / (dp·b)."""
        if isinstance(data, dict) and data.get("global_batch") is not None \
                and data.get("micro_batches") is None:
            try:
                gb, dp = int(data["global_batch"]), int(data.get("dp", 1))
                b = int(data.get("micro_batch_size", 1))
            except (TypeError, ValueError):
                return data         # the field validators name the bad value
            if gb >= 1 and dp >= 1 and b >= 1:
                if gb % (dp * b):
                    raise ValueError(f"global_batch = {gb} is not a multiple of dp·"
                                     f"micro_batch_size = {dp}·{b} = {dp * b}")
                data = {**data, "micro_batches": gb // (dp * b)}
        return data

    @model_validator(mode="before")
    @classmethod
    def _zero1_alias(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("zero1") is not None:
            old = 1 if data["zero1"] else 0
            if "zero" in data and data["zero"] != old:
                raise ValueError(f"zero1 = {data['zero1']} contradicts zero = {data['zero']}; "
                                 "drop the deprecated zero1")
            data = {**data, "zero": old, "zero1": None}
        return data

    @property
    def shard(self) -> Shard:
        return Shard(tp=self.tp, sp=self.sp, ep=self.ep)

    def label(self) -> str:
        return (f"dp={self.dp} tp={self.tp} pp={self.pp} sp={self.sp} ep={self.ep} "
                f"m={self.micro_batches}" + (" seq-parallel" if self.seq_parallel else "")
                + (" tp-comm-overlap" if self.tp_comm_overlap else "")
                + (f" zero={self.zero}" if self.zero != 1 else ""))


class ServePlan(BaseModel):
    """How the chips serve requests: replicas of ``tp·ep`` chips, continuous batching."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    tp: int = Field(1, ge=1, description="tensor-parallel degree inside a replica")
    ep: int = Field(1, ge=1, description="expert-parallel degree inside a replica (MoE)")
    pp: int = Field(1, ge=1, description="pipeline stages of a replica (n_layers/pp layers "
                                         "each); an iteration's batch is split into up to pp "
                                         "micro-batches")
    max_batch_tokens: int = Field(8192, ge=1, description="token budget of one iteration")
    max_seqs: int = Field(256, ge=1, description="sequences batched at once per replica")
    chunked_prefill: bool = Field(True, description="split long prompts over iterations")
    kv_block_tokens: int = Field(16, ge=1, description="KV-cache allocation granule (tokens)")
    memory_fraction: float = Field(0.9, gt=0, le=1, description="HBM share usable by weights+KV")
    disaggregated: Optional[bool] = Field(
        None, description="prefill/decode pools; None: use the cluster's `pools` if it has one")
    routing: Literal["uniform", "zipf", "trace"] = "uniform"
    zipf_s: float = Field(1.2, gt=0, description="Zipf exponent of expert popularity")
    # MoE at scale (.moe_serving)
    a2a: Literal["flat", "deepep"] = Field(
        "flat", description="MoE dispatch/combine: flat = one copy per routed expert on the "
        "network's all-to-all; deepep = per-node dedup over RDMA + NVLink (closed form)")
    dispatch_bytes: Optional[int] = Field(
        None, ge=1, le=4, description="bytes per element of the MoE dispatch (1 = FP8, as "
        "DeepSeek-V3); None = the chip's element size; combine stays at the chip's")
    weight_bytes: Optional[int] = Field(
        None, ge=1, le=4, description="bytes per weight in HBM (1 = an FP8 checkpoint); None = "
        "1 with gemm_format fp8, else the chip's element size")
    gemm_format: Literal["bf16", "fp8"] = Field(
        "bf16", description="GEMM format: fp8 = GEMMs at the GPU's FP8 tensor peak with 1-byte "
        "operands (H100; .costs.with_gemm_format)")
    kv_bytes: Optional[int] = Field(
        None, ge=1, le=4, description="bytes per KV-cache element; None = the chip's")
    redundant_experts: int = Field(0, ge=0, description="extra expert replicas per replica "
                                   "(EPLB: hot experts duplicated, slots balanced over EP ranks)")
    overlap_a2a: bool = Field(False, description="overlap MoE all-to-all with compute (two "
                              "micro-batches, DeepSeek's dual-batch overlap)")
    a2a_sms: int = Field(0, ge=0, description="GPU SMs the overlapped all-to-all kernels hold "
                         "(DeepEP normal kernels: 24 of 132 in DeepSeek's prefill profile); the "
                         "compute overlapped with them runs on the rest. 0: none (DeepEP "
                         "low-latency kernels, decode)")
    # attention parallelism apart from the experts' (MoE; SGLang's DP attention, DeepSeek-V3
    # report §3.4: prefill attention TP4 × DP8 with MoE EP32)
    attn_tp: Optional[int] = Field(
        None, ge=1, description="MoE: tensor-parallel degree of attention (and the dense "
        "FFN/shared experts) inside a replica stage; None: tp (or tp·ep/attn_dp)")
    attn_dp: Optional[int] = Field(
        None, ge=1, description="MoE: attention data-parallel ranks of a replica stage, each "
        "holding its own requests' KV cache; None: ep (or tp·ep/attn_tp). attn_tp·attn_dp must "
        "equal tp·ep, the chips of a replica stage (the experts take EP ep × expert TP tp)")

    @property
    def attention_tp(self) -> int:
        """Attention TP degree: ``attn_tp``, else ``tp·ep/attn_dp``, else ``tp``."""
        if self.attn_tp is not None:
            return self.attn_tp
        return self.tp * self.ep // self.attn_dp if self.attn_dp else self.tp

    @property
    def attention_dp(self) -> int:
        """Attention data-parallel ranks (each its own KV pool): ``attn_dp``, else
        ``tp·ep/attn_tp``, else ``ep``."""
        if self.attn_dp is not None:
            return self.attn_dp
        return self.tp * self.ep // self.attn_tp if self.attn_tp else self.ep

    @property
    def split_attention(self) -> bool:
        """Attention sharded differently from the experts (attention TP ≠ expert TP)."""
        return self.attention_tp != self.tp

    def label(self) -> str:
        return (f"tp={self.tp} ep={self.ep}" + (f" pp={self.pp}" if self.pp > 1 else "")
                + (f" attn_tp={self.attention_tp} attn_dp={self.attention_dp}"
                   if self.attn_tp is not None or self.attn_dp is not None else ""))


def _cfg(model: str | LLMConfig, *, mla: bool = True) -> LLMConfig:
    """The config of ``model``; ``mla=False`` (training) refuses DeepSeek MLA models too."""
    try:
        cfg = get_config(model) if isinstance(model, str) else model
    except ValueError as exc:
        raise ClusterSpecError(f"model: {exc}") from None
    if not (isinstance(cfg, (LlamaConfig, MambaConfig))
            or (isinstance(cfg, MoEConfig) and cfg.n_heads)
            or (mla and isinstance(cfg, DeepSeekConfig))):
        what = "an MoE model with MLA attention" if cfg.family == "moe" else f"a {cfg.family} model"
        ds = isinstance(cfg, DeepSeekConfig)
        raise PlanError(f"model {cfg.name}: {what} is not modelled{' in training' if ds else ''}"
                        "; the cluster model covers Llama-style (llama3-*), Mixtral-style "
                        "(mixtral-8x7b) and Mamba (mamba-*) decoders"
                        f"{' (and serves DeepSeek MLA models)' if ds else ''}")
    return cfg


def _check_shard(cfg: LLMConfig, tp: int, ep: int, where: str) -> None:
    if isinstance(cfg, MambaConfig):
        if cfg.d_inner % tp:
            raise PlanError(f"{where}: tp={tp} does not divide d_inner = {cfg.d_inner} of "
                            f"{cfg.name} (Mamba TP splits the scan channels)")
        if ep > 1:
            raise PlanError(f"{where}: ep={ep} but {cfg.name} has no experts (use ep=1)")
        return
    if isinstance(cfg, DeepSeekConfig):
        if cfg.n_attn_heads % tp:
            raise PlanError(f"{where}: tp={tp} does not divide the {cfg.n_attn_heads} MLA heads "
                            f"of {cfg.name}")
        if cfg.d_expert_ffn % tp or cfg.d_dense_ffn % tp:
            raise PlanError(f"{where}: tp={tp} does not divide the FFN widths "
                            f"{cfg.d_expert_ffn}/{cfg.d_dense_ffn} of {cfg.name}")
        if cfg.n_experts % ep:
            raise PlanError(f"{where}: ep={ep} does not divide n_experts = {cfg.n_experts} of "
                            f"{cfg.name}")
        return
    if cfg.n_heads % tp:
        raise PlanError(f"{where}: tp={tp} does not divide n_heads = {cfg.n_heads} of {cfg.name}")
    if cfg.n_kv_heads % tp and tp % cfg.n_kv_heads:
        raise PlanError(f"{where}: tp={tp} and n_kv_heads = {cfg.n_kv_heads} of {cfg.name}: one "
                        "must divide the other")
    ffn = cfg.d_ffn if isinstance(cfg, LlamaConfig) else cfg.d_expert_ffn
    if ffn % tp:
        raise PlanError(f"{where}: tp={tp} does not divide the FFN width {ffn} of {cfg.name}")
    if ep > 1 and not isinstance(cfg, MoEConfig):
        raise PlanError(f"{where}: ep={ep} but {cfg.name} has no experts (use ep=1)")
    if isinstance(cfg, MoEConfig) and cfg.n_experts % ep:
        raise PlanError(f"{where}: ep={ep} does not divide n_experts = {cfg.n_experts} of {cfg.name}")


def layer_params(cfg: LLMConfig, shard: Shard) -> tuple[float, float]:
    """(non-expert, expert) parameters of one layer on one chip."""
    dm = dims_of(cfg, shard)
    if dm.ssm:      # in_proj, conv (+bias), x_proj, dt_proj (+bias), A, D, out_proj, norm
        di, n, r = dm.di, dm.n_state, dm.dt_rank
        return (2 * dm.d * di + di * (dm.d_conv + 1) + di * (r + 2 * n) + (r + 1) * di
                + di * n + di + di * dm.d + dm.d), 0.0
    attn = dm.d * (dm.h + 2 * dm.kv) * dm.hd + dm.h * dm.hd * dm.d + 2 * dm.d
    if dm.mla:      # q_a, q_norm, kv_a, kv_norm replicated; q_b, kv_b, o split by heads
        q = (dm.d * dm.q_rank + dm.q_rank + dm.q_rank * dm.h * (dm.dn + dm.dr)) if dm.q_rank \
            else dm.d * dm.h * (dm.dn + dm.dr)
        attn = (q + dm.d * (dm.kv_rank + dm.dr) + dm.kv_rank
                + dm.kv_rank * dm.h * (dm.dn + dm.dv) + dm.h * dm.dv * dm.d + 2 * dm.d)
    if not dm.moe:
        return attn + 3 * dm.d * dm.f, 0.0
    return attn + dm.d * dm.n_experts + 3 * dm.d * dm.f_shared, 3.0 * dm.d * dm.f_exp * dm.experts


def auto_dp(spec: ClusterSpec, tp: int = 1, pp: int = 1, sp: int = 1) -> int:
    """``dp: auto`` of a training plan: the data-parallel degree that uses every chip,
    ``n_chips / (tp·pp·sp)``. Raises PlanError when tp·pp·sp does not divide the chips."""
    per = tp * pp * sp
    if spec.n_chips % per:
        raise PlanError(f"plan dp=auto: tp·pp·sp = {tp}·{pp}·{sp} = {per} does not divide the "
                        f"{spec.n_chips} chips of cluster {spec.name}")
    return spec.n_chips // per


def validate_train(plan: TrainPlan, spec: ClusterSpec, model: str | LLMConfig) -> LLMConfig:
    """Raise :class:`PlanError` (one line, with the numbers) if ``plan`` cannot run, and
    :class:`ClusterSpecError` for a cluster field training would ignore (``pools``)."""
    if spec.pools is not None:      # P/D pools split serving; a training step uses every chip
        raise ClusterSpecError(f"{spec.name}: pools.prefill_chips = {spec.pools.prefill_chips}: "
                               f"pools split a serving run into prefill and decode chips; a "
                               f"training step does not take them; accepted: --mode serve, or "
                               f"a cluster file without pools")
    cfg = _cfg(model, mla=False)
    where = f"plan {plan.label()}"
    _check_shard(cfg, plan.tp, plan.ep, where)
    if plan.pp > cfg.n_layers:
        raise PlanError(f"{where}: pp={plan.pp} pipeline stages > n_layers = {cfg.n_layers} of "
                        f"{cfg.name}")
    v = plan.virtual_stages
    if plan.schedule == "1f1b" and v != 1:
        raise PlanError(f"{where}: virtual_stages={v} needs schedule 'interleaved'")
    if plan.schedule == "interleaved":
        if v < 2:
            raise PlanError(f"{where}: the interleaved schedule needs virtual_stages ≥ 2, got {v}")
        if plan.micro_batches % plan.pp:
            raise PlanError(f"{where}: the interleaved schedule needs micro_batches "
                            f"({plan.micro_batches}) to be a multiple of pp={plan.pp}")
    if plan.stage_layers is not None:
        sl = plan.stage_layers
        if len(sl) != plan.pp * v or min(sl) < 0 or sum(sl) != cfg.n_layers:
            raise PlanError(f"{where}: stage_layers = {list(sl)}: needs pp·virtual_stages = "
                            f"{plan.pp}·{v} = {plan.pp * v} counts ≥ 0 summing to n_layers = "
                            f"{cfg.n_layers} of {cfg.name} (got {len(sl)} counts summing to "
                            f"{sum(sl)})")
    elif cfg.n_layers % (plan.pp * v):
        raise PlanError(f"{where}: n_layers = {cfg.n_layers} of {cfg.name} is not divisible by "
                        f"pp·virtual_stages = {plan.pp}·{v}; accepted: a divisor, or "
                        f"stage_layers (layers of each chunk)")
    if isinstance(cfg, MambaConfig) and plan.sp > 1:
        raise PlanError(f"{where}: sp={plan.sp} but sequence parallelism over the Mamba "
                        f"recurrence of {cfg.name} is not modelled (use sp=1)")
    if plan.seq_len % plan.sp:
        raise PlanError(f"{where}: sp={plan.sp} does not divide seq_len = {plan.seq_len}")
    if (plan.dp * plan.sp) % plan.ep:
        raise PlanError(f"{where}: ep={plan.ep} must divide dp·sp = {plan.dp * plan.sp}")
    if plan.seq_parallel and plan.tp == 1:
        raise PlanError(f"{where}: seq_parallel splits activations over the TP ranks and needs "
                        "tp > 1 (got tp=1); accepted: tp ≥ 2 or no seq_parallel")
    if plan.recompute_layers is not None:
        chunk = max(plan.stage_layers) if plan.stage_layers is not None else \
            cfg.n_layers // (plan.pp * plan.virtual_stages) if cfg.n_layers % (
                plan.pp * plan.virtual_stages) == 0 else None
        if plan.recompute != "full":
            raise PlanError(f"{where}: recompute_layers = {plan.recompute_layers} needs "
                            f"recompute = full (got {plan.recompute})")
        if chunk is not None and plan.recompute_layers > chunk:
            raise PlanError(f"{where}: recompute_layers = {plan.recompute_layers} > the "
                            f"{chunk} layers of a model chunk")
    if plan.recompute == "selective" and isinstance(cfg, MambaConfig):
        raise PlanError(f"{where}: recompute = selective recomputes the attention core; the "
                        f"Mamba model {cfg.name} has none (accepted: none, full)")
    if plan.seq_parallel and isinstance(cfg, MambaConfig):
        raise PlanError(f"{where}: seq_parallel is modelled for attention decoders only, not "
                        f"the Mamba model {cfg.name}")
    if plan.tp_comm_overlap and not plan.seq_parallel:
        raise PlanError(f"{where}: tp_comm_overlap pipelines the sequence-parallel all-gathers "
                        "and reduce-scatters with their GEMMs and needs seq_parallel (as "
                        "Megatron's --tp-comm-overlap needs --sequence-parallel)")
    if plan.tp_comm_overlap and not isinstance(cfg, LlamaConfig):
        raise PlanError(f"{where}: tp_comm_overlap is modelled for Llama-style dense decoders, "
                        f"not {cfg.name}")
    if plan.global_batch is not None:
        got = plan.dp * plan.micro_batches * plan.micro_batch_size
        if got != plan.global_batch:
            raise PlanError(f"{where}: global_batch = {plan.global_batch} sequences but "
                            f"dp·micro_batches·micro_batch_size = {plan.dp}·"
                            f"{plan.micro_batches}·{plan.micro_batch_size} = {got}")
    used = plan.dp * plan.tp * plan.pp * plan.sp
    if used != spec.n_chips:
        raise PlanError(f"{where}: dp·tp·pp·sp = {plan.dp}·{plan.tp}·{plan.pp}·{plan.sp} = {used} "
                        f"chips but cluster {spec.name} has {spec.n_chips}")
    return cfg


def micro_batches_for(global_batch: int, dp: int, micro_batch_size: int) -> int:
    """Micro-batches per replica that hold the global batch fixed:
    ``global_batch / (dp·micro_batch_size)``; PlanError when that is not a whole number ≥ 1."""
    per = dp * micro_batch_size
    if global_batch < per or global_batch % per:
        raise PlanError(f"global_batch = {global_batch}: must be a multiple of dp·"
                        f"micro_batch_size = {dp}·{micro_batch_size} = {per} (sequences per "
                        "step split evenly over the replicas' micro-batches)")
    return global_batch // per


def zero_state_bytes(params: float, element_bytes: float, optimizer_bytes_per_param: float,
                     ranks: int, stage: int) -> float:
    """Bytes per chip of weights + gradients + optimizer state for ``params`` parameters shared
    by ``ranks`` data-parallel ranks under ZeRO ``stage`` (0–3; 3 = FSDP FULL_SHARD), without
    ZeRO-3's gathered working set (module docstring; Rajbhandari et al. 2020, Figure 1)."""
    w = g = params * element_bytes
    opt = params * optimizer_bytes_per_param
    if stage == 0:
        return w + g + opt
    if stage == 1:
        return w + g + opt / ranks
    if stage == 2:
        return w + (g + opt) / ranks
    if stage == 3:
        return (w + g + opt) / ranks
    raise ValueError(f"ZeRO stage {stage}: accepted 0, 1, 2, 3")


def activation_bytes_per_layer(s: int, b: int, h: int, a: int, t: int, s_ctx: int, *,
                               element_bytes: float = 2, seq_parallel: bool = False,
                               recompute: str = "none", fused_attention: bool = False) -> float:
    """Activation bytes one transformer layer keeps for backward, per micro-batch
    (Korthikanti et al. 2022, Table 2; module docstring): ``s`` local tokens per sequence,
    ``b`` sequences, hidden ``h``, ``a`` heads, TP degree ``t``, attention context ``s_ctx``.
    ``recompute="full"`` gives only the stored layer input."""
    scale = element_bytes / 2
    if recompute == "full":
        return 2.0 * s * b * h / (t if seq_parallel else 1) * scale
    attn = 0.0 if (recompute == "selective" or fused_attention) else 5.0 * a * s_ctx / h
    if seq_parallel:
        return s * b * h / t * (34 + attn) * scale
    return s * b * h * (10 + 24 / t + attn / t) * scale


def mamba_activation_elems(cfg: MambaConfig, tp: int) -> float:
    """Activation elements one Mamba layer keeps per token for backward (the fused-kernel
    convention of the Mamba paper: the scan states h are recomputed, not stored): layer input
    and norm output (2·D), x and z (2·di/t), conv output (di/t), x_proj output (R + 2N,
    replicated), delta (di/t), y and the gated y (2·di/t) — ``2·D + 6·di/t + R + 2N``."""
    return 2 * cfg.d_model + 6 * cfg.d_inner / tp + cfg.rank + 2 * cfg.d_state


def mamba_state_bytes(cfg: MambaConfig, tp: int, layers: int, element_bytes: int) -> float:
    """Recurrent state of one sequence on one chip (bytes): per layer the scan state
    ``di/tp × N`` and the conv state ``di/tp × d_conv`` (``models/ssm.py``), in the chip's
    element size. Independent of the context length."""
    return layers * (cfg.d_inner // tp) * (cfg.d_state + cfg.d_conv) * element_bytes


def chunk_layers(plan: TrainPlan, n_layers: int) -> list[int]:
    """Layers of each model chunk, indexed by virtual stage ``c·pp + r`` (rank ``r``'s chunk
    ``c``): ``plan.stage_layers`` or ``n_layers/(pp·virtual_stages)`` each."""
    if plan.stage_layers is not None:
        return list(plan.stage_layers)
    V = plan.pp * plan.virtual_stages
    return [n_layers // V] * V


def in_flight(plan: TrainPlan, rank: int) -> int:
    """Micro-batch chunks whose activations pipeline rank ``rank`` holds at its peak."""
    p, m, v = plan.pp, plan.micro_batches, plan.virtual_stages
    if plan.schedule == "1f1b":
        return min(m, p - rank)
    return min(m * v, 2 * (p - rank - 1) + (v - 1) * p + 1)


def train_memory(plan: TrainPlan, spec: ClusterSpec, chip: ChipModel,
                 model: str | LLMConfig) -> list[dict[str, float]]:
    """Per pipeline rank: bytes of parameters+gradients+optimizer, activations, total, capacity."""
    cfg = _cfg(model)
    e = chip.element_bytes
    dense, expert = layer_params(cfg, plan.shard)
    layers = chunk_layers(plan, cfg.n_layers)
    vocab = dims_of(cfg, plan.shard).vocab * cfg.d_model
    tied = int(plan.pp == 1 and getattr(cfg, "tie_embeddings", False))   # one shared matrix
    s_l, b, D, t = plan.seq_len // plan.sp, plan.micro_batch_size, cfg.d_model, plan.tp
    fused = chip.fused_attention
    if isinstance(cfg, MambaConfig):
        full = s_l * b * mamba_activation_elems(cfg, t) * e
        stored = s_l * b * D * e
    else:
        full = activation_bytes_per_layer(s_l, b, D, cfg.n_heads, t, plan.seq_len,
                                          element_bytes=e, seq_parallel=plan.seq_parallel,
                                          recompute="none", fused_attention=fused)
        kept = activation_bytes_per_layer(s_l, b, D, cfg.n_heads, t, plan.seq_len,
                                          element_bytes=e, seq_parallel=plan.seq_parallel,
                                          recompute=plan.recompute, fused_attention=fused)
        stored = kept
    out = []
    n_ranks = plan.dp * plan.sp
    for r in range(plan.pp):
        mine = layers[r::plan.pp]                    # this rank's chunks
        L_rank = sum(mine)                           # layers on this device
        L_chunk = max(mine)                          # its largest chunk (activations bound)
        p_dense = L_rank * dense
        if plan.embedding_and_head:
            p_dense += vocab * ((r == 0) + (r == plan.pp - 1) - tied)
        p_exp = L_rank * expert
        k = plan.optimizer_bytes_per_param
        states = (zero_state_bytes(p_dense, e, k, n_ranks, plan.zero)
                  + zero_state_bytes(p_exp, e, k, max(1, n_ranks // plan.ep), plan.zero))
        gathered = 2.0 * (dense + expert) * e if plan.zero == 3 else 0.0
        chunks = in_flight(plan, r)
        if plan.recompute == "full" or isinstance(cfg, MambaConfig):
            per = s_l * b * D * e * (1 / t if plan.seq_parallel else 1) \
                if plan.recompute == "full" else full
            n_rc = L_chunk if plan.recompute_layers is None else min(plan.recompute_layers,
                                                                     L_chunk)
            if plan.recompute != "full":
                n_rc = L_chunk
            acts = chunks * (n_rc * per + (L_chunk - n_rc) * full) \
                + (full if plan.recompute == "full" else 0.0)
        else:
            acts = chunks * L_chunk * stored
        out.append({"rank": r, "params": p_dense + p_exp, "states_bytes": states + gathered,
                    "activation_bytes": acts, "total_bytes": states + gathered + acts,
                    "capacity_bytes": chip.hbm_bytes})
    return out


def check_train_memory(plan: TrainPlan, spec: ClusterSpec, chip: ChipModel,
                       model: str | LLMConfig) -> list[dict[str, float]]:
    """:func:`train_memory`, raising :class:`PlanError` if any rank does not fit."""
    mem = train_memory(plan, spec, chip, model)
    worst = max(mem, key=lambda x: x["total_bytes"])
    if worst["total_bytes"] > chip.hbm_bytes:
        name = model if isinstance(model, str) else model.name
        raise PlanError(
            f"plan {plan.label()}: {name} does not fit: pipeline rank {worst['rank']} needs "
            f"{worst['total_bytes'] / GIB:.1f} GiB per chip (weights+grads+optimizer "
            f"{worst['states_bytes'] / GIB:.1f} GiB, activations "
            f"{worst['activation_bytes'] / GIB:.1f} GiB) but {chip.name} has "
            f"{chip.hbm_bytes / GIB:.1f} GiB"
            f"{'' if plan.recompute == 'full' else '; try recompute, zero 3 or seq_parallel'}")
    return mem


def validate_serve(plan: ServePlan, spec: ClusterSpec, model: str | LLMConfig,
                   pool_chips: list[int]) -> LLMConfig:
    """Raise :class:`PlanError` if replicas of ``tp·ep·pp`` chips cannot tile each pool or the
    layers do not split into ``pp`` equal stages."""
    cfg = _cfg(model)
    where = f"serve plan {plan.label()}"
    _check_shard(cfg, plan.tp, plan.ep, where)
    if cfg.n_layers % plan.pp:
        raise PlanError(f"{where}: pp={plan.pp} does not divide n_layers = {cfg.n_layers} of "
                        f"{cfg.name}")
    moe = isinstance(cfg, MoEConfig)
    moe_opts = {"a2a": plan.a2a != "flat", "dispatch_bytes": plan.dispatch_bytes is not None,
                "redundant_experts": plan.redundant_experts > 0,
                "overlap_a2a": plan.overlap_a2a, "a2a_sms": plan.a2a_sms > 0}
    if not moe and any(moe_opts.values()):
        raise PlanError(f"{where}: {[k for k, v in moe_opts.items() if v][0]} is an MoE option; "
                        f"{cfg.name} has no experts")
    if moe and plan.redundant_experts and (plan.ep == 1
                                           or (cfg.n_experts + plan.redundant_experts) % plan.ep):
        raise PlanError(f"{where}: redundant_experts = {plan.redundant_experts}: n_experts + "
                        f"redundant = {cfg.n_experts + plan.redundant_experts} must split evenly "
                        f"over ep = {plan.ep} > 1 ranks")
    _check_attention(plan, cfg, where)
    size = plan.tp * plan.ep * plan.pp
    for n in pool_chips:
        if n % size:
            raise PlanError(f"{where}: a replica takes tp·ep·pp = {size} chips, which does not "
                            f"divide a pool of {n} chips of cluster {spec.name}")
    return cfg


def _check_attention(plan: ServePlan, cfg: LLMConfig, where: str) -> None:
    """Attention parallelism apart from the experts' (``attn_tp``/``attn_dp``): an MoE option;
    ``attn_tp·attn_dp`` = ``tp·ep`` (the chips of a replica stage); attention TP divides the
    heads (and the dense FFN widths)."""
    if plan.attn_tp is None and plan.attn_dp is None:
        return
    given = "attn_tp" if plan.attn_tp is not None else "attn_dp"
    if not isinstance(cfg, MoEConfig):
        raise PlanError(f"{where}: {given} is an MoE option (attention parallel apart from the "
                        f"experts); {cfg.name} has no experts (use tp)")
    width = plan.tp * plan.ep
    for name, v in (("attn_tp", plan.attn_tp), ("attn_dp", plan.attn_dp)):
        if v is not None and width % v:
            raise PlanError(f"{where}: {name} = {v} does not divide the tp·ep = {width} chips of "
                            "a replica stage (attn_tp·attn_dp must equal tp·ep)")
    if plan.attention_tp * plan.attention_dp != width:
        raise PlanError(f"{where}: attn_tp·attn_dp = {plan.attention_tp}·{plan.attention_dp} = "
                        f"{plan.attention_tp * plan.attention_dp}, but a replica stage has tp·ep "
                        f"= {width} chips (they must be equal)")
    _check_shard(cfg, plan.attention_tp, plan.ep, f"{where} (attention)")


def kv_bytes_per_token(cfg: LLMConfig, tp: int, layers: int, element_bytes: int) -> float:
    """KV-cache bytes one token takes on one chip holding ``layers`` layers: K and V of the
    chip's KV heads (``2 · kv · hd``), or for DeepSeek MLA the latent cache ``kv_lora_rank +
    qk_rope_head_dim`` (576 for V3), the same on every TP rank."""
    if isinstance(cfg, DeepSeekConfig):
        return float(cfg.kv_cache_elems_per_token * element_bytes * layers)
    dm = dims_of(cfg, Shard(tp=tp))
    return float(2 * dm.kv * dm.hd * element_bytes * layers)


def serve_memory(plan: ServePlan, chip: ChipModel, model: str | LLMConfig) -> dict[str, float]:
    """Per chip (the fullest pipeline stage: n_layers/pp layers plus the embedding and the LM
    head when pp = 1, one of them when pp > 1): weight bytes, KV bytes per token, KV capacity in
    tokens (PlanError if the weights alone do not fit). Mamba models hold a recurrent state per
    sequence instead of a KV cache: ``state_bytes_per_seq`` (:func:`mamba_state_bytes`) and
    ``state_slots`` (sequences that fit), ``kv_tokens = 0``. Attention, dense FFN and shared
    experts are sharded over the attention TP degree (:attr:`ServePlan.attention_tp`), routed
    experts over EP × expert TP (``ep``, ``tp``); ``kv_tokens`` is then the KV pool of one
    attention data-parallel rank (its chips each hold a KV-head shard of those tokens)."""
    cfg = _cfg(model)
    shard = Shard(tp=plan.attention_tp, ep=plan.ep)     # attention, dense FFN, shared experts
    dense = layer_params(cfg, shard)[0]
    expert = layer_params(cfg, Shard(tp=plan.tp, ep=plan.ep))[1]     # routed: EP × expert TP
    dm = dims_of(cfg, shard)
    e = chip.element_bytes
    we = plan.weight_bytes or (1 if plan.gemm_format == "fp8" else e)
    ke = plan.kv_bytes or e
    layers = cfg.n_layers // plan.pp
    tied = getattr(cfg, "tie_embeddings", False)
    vocab_mats = 1 if plan.pp > 1 or tied else 2
    # MoE: the leading n_dense_layers have a dense FFN (on the first stage; the fullest stage
    # when pp > 1 is a later, all-MoE one); redundant experts add slots per EP rank
    n_dense = getattr(cfg, "n_dense_layers", 0) if plan.pp == 1 else 0
    if dm.moe and plan.redundant_experts:
        expert *= (cfg.n_experts + plan.redundant_experts) / cfg.n_experts
    dense_ffn = (3 * dm.d * dm.f - dm.d * dm.n_experts - 3 * dm.d * dm.f_shared) if dm.moe else 0
    weights = ((layers * (dense + expert) + n_dense * (dense_ffn - expert)
                + vocab_mats * dm.vocab * cfg.d_model) * we)
    usable = chip.hbm_bytes * plan.memory_fraction
    # per chip of an attention-DP rank (attention TP shards the KV heads); MLA: the latent cache
    kv_per_token = kv_bytes_per_token(cfg, plan.attention_tp, layers, ke)
    if weights < usable and isinstance(cfg, MambaConfig):
        state = mamba_state_bytes(cfg, plan.tp, layers, e)
        return {"weight_bytes": weights, "kv_bytes_per_token": 0.0, "state_bytes_per_seq": state,
                "state_slots": int((usable - weights) // state), "kv_tokens": 0}
    if weights >= usable:
        raise PlanError(f"serve plan {plan.label()}: {cfg.name} weights need "
                        f"{weights / GIB:.1f} GiB per chip but {chip.name} offers "
                        f"{usable / GIB:.1f} GiB ({plan.memory_fraction:.0%} of "
                        f"{chip.hbm_bytes / GIB:.1f} GiB); raise tp, ep or pp")
    return {"weight_bytes": weights, "kv_bytes_per_token": kv_per_token,
            "kv_tokens": int((usable - weights) // kv_per_token)}
