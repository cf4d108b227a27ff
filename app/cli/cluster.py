"""``tilewright cluster``: simulate training or serving of a model on a cluster (SimPy).

Registered in :mod:`tilewright.app.cli.main`; user errors are
:class:`tilewright.dataflow_sim.cluster.ClusterSpecError` (a ValueError; plans that cannot run
raise its subclass ``PlanError``), printed by the CLI as one ``error: ...`` line, exit status 2.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.console import Console

from tilewright import __version__
from tilewright.app.cli import deprecated
from tilewright.app.cli.tables import print_table
from tilewright.progress import LOGGER, progress

if TYPE_CHECKING:
    import numpy as np

__all__ = ["cluster"]

#: the most Poisson requests ``--requests`` generates (a million takes minutes to simulate)
MAX_REQUESTS = 1_000_000
#: most sequences a replica batches (``--max-seqs``): 2**20, beyond any KV cache a chip holds
MAX_SEQS = 1 << 20

console = Console()


def _lengths(text: str, option: str) -> int | tuple[int, int]:
    """'512' -> 512; '128-2048' -> (128, 2048) drawn uniformly."""
    from tilewright.dataflow_sim.cluster import \
        ClusterSpecError  # noqa: PLC0415  (lazy: pulls in pandas, simpy, torch)
    try:
        parts = [int(x) for x in text.split("-")]
    except ValueError:
        parts = []
    if len(parts) == 1 and parts[0] >= 1:
        return parts[0]
    if len(parts) == 2 and 1 <= parts[0] <= parts[1]:
        return parts[0], parts[1]
    raise ClusterSpecError(f"{option} = {text!r}: must be a token count N or a range LO-HI "
                           "with 1 <= LO <= HI")


def _expert_ids(path: Path) -> np.ndarray:
    """The expert ids of ``--expert-trace`` (whitespace-separated whole numbers ≥ 0); a bad file
    or value raises ClusterSpecError naming the file and line."""
    from tilewright.dataflow_sim.cluster import \
        ClusterSpecError  # noqa: PLC0415  (lazy: pulls in pandas, simpy, torch)
    from tilewright.validation import \
        read_user_text  # noqa: PLC0415  (lazy: only this path reads an expert trace)
    import numpy as np  # noqa: PLC0415  (lazy: start-up of the CLI stays light)
    text = read_user_text(path, ClusterSpecError, what="expert-id trace")
    ids = []
    for line_no, line in enumerate(text.splitlines(), 1):
        for word in line.split():
            if not (word.isascii() and word.isdigit()):
                raise ClusterSpecError(f"--expert-trace {path}: line {line_no}: {word!r}: expert "
                                       "ids are whole numbers ≥ 0")
            ids.append(int(word))
    if not ids:
        raise ClusterSpecError(f"--expert-trace {path}: holds no expert ids")
    if max(ids) >= 2**62:
        raise ClusterSpecError(f"--expert-trace {path}: expert id {max(ids)} is out of range")
    return np.asarray(ids, dtype=np.int64)


def _check_context(model: str, prompt: int, output: int, where: str) -> None:
    """Refuse requests of ``prompt + output`` tokens beyond the model's context (``max_seq_len``)
    — the simulation would serve them (a 1e14-token output ran for ever)."""
    from tilewright.dataflow_sim.cluster import \
        ClusterSpecError  # noqa: PLC0415  (lazy: pulls in pandas, simpy, torch)
    from tilewright.models.llm_configs import get_config  # noqa: PLC0415  (lazy: pulls in torch)
    context = getattr(get_config(model), "max_seq_len", None)
    if context is not None and prompt + output > context:
        raise ClusterSpecError(f"{where}: prompt + output = {prompt} + {output} = "
                               f"{prompt + output} tokens; {model}'s context is max_seq_len = "
                               f"{context}")


def _store(db: Path, spec, plan, metrics: dict) -> None:
    """Append one run to the results store at ``db`` (sweep ``cluster``, a fresh key per run)."""

    from tilewright.app.sweep.store import ResultsStore  # noqa: PLC0415  (lazy: pulls in pandas)

    arch = spec.arch()
    with ResultsStore(db) as store:
        store.add({"key": f"cluster:{uuid.uuid4().hex}", "sweep": "cluster",
                   "params": {"cluster": spec.name, "mode": metrics["mode"],
                              "model": metrics["model"], **plan.model_dump(mode="json")},
                   "arch_hash": arch.content_hash() if arch is not None else None,
                   "arch_json": arch.model_dump(mode="json", exclude_none=True) if arch else None,
                   "workloads": [metrics["model"]], "tech": spec.name, "status": "ok",
                   "feasible": 1, "metrics": metrics, "tool_version": __version__,
                   "wall_s": metrics.get("wall_s"), "finished_at": time.time()})


def cluster(
    cluster: str = typer.Option(..., "--cluster", help="cluster YAML file or preset "
                                "(h100-8x-nvlink, h100-64x-ib, pd-h100-64, torus-1024)"),
    model: str = typer.Option(..., "--model", help="LLM config name, e.g. llama3-70b, or a "
                              "Hugging Face config.json (or a folder holding one)"),
    mode: Optional[str] = typer.Option(None, "--mode", help="train | serve (default: serve on a "
                                       "cluster with prefill/decode pools, else train)"),
    dp: str = typer.Option("auto", help="train: data-parallel degree, a whole number ≥ 1 or "
                           "auto = chips / (tp·pp·sp)"),
    tp: int = typer.Option(1, min=1, help="tensor-parallel degree"),
    pp: int = typer.Option(1, min=1, help="pipeline stages (serve: per replica)"),
    cp: Optional[int] = typer.Option(None, "--cp", min=1, help="train: context-parallel degree "
                                     "(the sequence split over ranks, K/V all-gathered)"),
    sp: Optional[int] = typer.Option(None, "--sp", min=1, help="train: DEPRECATED name of --cp "
                                     "(context parallelism; Megatron sequence parallelism is "
                                     "--seq-parallel)"),
    seq_parallel: bool = typer.Option(False, "--seq-parallel/--no-seq-parallel",
                                      help="train: Megatron sequence parallelism over the TP "
                                      "ranks (needs --tp ≥ 2)"),
    gemm_format: str = typer.Option(
        "bf16", "--gemm-format", help="bf16 | fp8: GEMMs at the GPU's FP8 tensor peak with "
        "1-byte operands (H100; serve: FP8 weights unless --weight-bytes)"),
    tp_comm_overlap: bool = typer.Option(
        False, "--tp-comm-overlap", help="train: pipeline the sequence-parallel TP all-gathers "
        "and reduce-scatters with their GEMMs (Megatron --tp-comm-overlap; needs "
        "--seq-parallel)"),
    zero: int = typer.Option(1, "--zero", min=0, max=3, help="train: ZeRO stage over the "
                             "data-parallel ranks (0 none, 1 optimizer, 2 + gradients, "
                             "3 + parameters = FSDP)"),
    fsdp: bool = typer.Option(False, "--fsdp", help="train: FSDP full sharding (= --zero 3)"),
    global_batch: Optional[int] = typer.Option(
        None, "--global-batch", min=1, help="train: sequences per step held fixed; "
        "micro-batches = global batch / (dp · micro-batch size)"),
    ep: int = typer.Option(1, min=1, help="expert-parallel degree"),
    micro_batches: Optional[int] = typer.Option(None, min=1, help="train: micro-batches per "
                                                "step (default 8, or from --global-batch)"),
    micro_batch_size: int = typer.Option(1, min=1, help="train: sequences per micro-batch"),
    seq_len: int = typer.Option(4096, "--seq", min=1, help="train: tokens per sequence "
                                "(--seq-len is deprecated)"),
    schedule: str = typer.Option("1f1b", help="train: 1f1b | interleaved"),
    virtual_stages: int = typer.Option(1, min=1, help="train: chunks per device (interleaved)"),
    recompute: str = typer.Option("none", help="train: activation recomputation: none | "
                                  "selective (the attention core) | full (each layer)"),
    recompute_layers: Optional[int] = typer.Option(
        None, min=1, help="train, with --recompute full: layers per model chunk recomputed "
        "(Megatron --recompute-num-layers); default all"),
    grad_bucket_mb: float = typer.Option(
        25.0, help="train: DP gradient all-reduce bucket in MiB, overlapped with the backward "
        "(PyTorch DDP's default 25); 0 = one all-reduce after the backward"),
    inlayer_comm: Optional[str] = typer.Option(
        None, help="train: network (TP/SP/EP collectives share the links with pipeline and "
        "gradient traffic) | phase (timed apart); default: network at event level, phase at "
        "flow level"),
    network: str = typer.Option(
        "auto", help="train: event (every message on the links) | flow (collectives at flow "
        "level, cost linear in chips) | auto (flow above 64 chips)"),
    requests: int = typer.Option(1000, min=1, max=MAX_REQUESTS,
                                 help="serve: Poisson requests to generate"),
    rate: float = typer.Option(10.0, help="serve: arrival rate, requests/s"),
    prompt_tokens: str = typer.Option("512", help="serve: N or LO-HI prompt tokens"),
    output_tokens: str = typer.Option("128", help="serve: N or LO-HI output tokens"),
    request_trace: Optional[Path] = typer.Option(
        None, help="serve: CSV of arrival_s,prompt_tokens,output_tokens (replaces --requests)"),
    max_batch_tokens: int = typer.Option(8192, min=1, help="serve: token budget per iteration"),
    max_seqs: int = typer.Option(256, min=1, max=MAX_SEQS,
                                  help="serve: sequences per replica batch"),
    chunked_prefill: bool = typer.Option(True, help="serve: chunked prefill"),
    disaggregated: Optional[bool] = typer.Option(
        None, "--disaggregated/--colocated", help="serve: P/D pools (default: the cluster's)"),
    slo_ttft: Optional[float] = typer.Option(
        None, "--slo-ttft", help="serve: time-to-first-token SLO, seconds (with --slo-tpot: "
        "reports SLO attainment and goodput, requests/s meeting both)"),
    slo_tpot: Optional[float] = typer.Option(
        None, "--slo-tpot", help="serve: time-per-output-token SLO, seconds"),
    pd: Optional[str] = typer.Option(
        None, "--pd", help="serve: prefill/decode split, P:D chips, or auto = the split with "
        "the highest goodput (needs --slo-ttft/--slo-tpot; one simulation per split)"),
    prefill_power_cap: Optional[float] = typer.Option(
        None, "--prefill-power-cap", help="serve, GPU: board power cap (W) of the prefill pool"),
    decode_power_cap: Optional[float] = typer.Option(
        None, "--decode-power-cap", help="serve, GPU: board power cap (W) of the decode pool "
        "(colocated runs: of every replica)"),
    routing: str = typer.Option("uniform", help="serve, MoE: uniform | zipf | trace"),
    zipf_s: float = typer.Option(1.2, "--zipf-s", help="serve, MoE: Zipf exponent of expert "
                                 "popularity (--routing zipf)"),
    a2a: str = typer.Option("flat", "--a2a", help="serve, MoE: flat (one copy per routed "
                            "expert) | deepep (per-node dedup over RDMA + NVLink)"),
    dispatch_bytes: Optional[int] = typer.Option(
        None, "--dispatch-bytes", help="serve, MoE: bytes per dispatched element (1 = FP8)"),
    weight_bytes: Optional[int] = typer.Option(
        None, "--weight-bytes", help="serve: bytes per weight in HBM (1 = an FP8 checkpoint)"),
    kv_bytes: Optional[int] = typer.Option(
        None, "--kv-bytes", help="serve: bytes per KV-cache element"),
    redundant_experts: int = typer.Option(
        0, "--redundant-experts", help="serve, MoE: extra expert replicas (EPLB placement)"),
    overlap_a2a: bool = typer.Option(
        False, "--overlap-a2a", help="serve, MoE: overlap all-to-all with compute (two "
        "micro-batches)"),
    a2a_sms: int = typer.Option(
        0, "--a2a-sms", help="serve, MoE with --overlap-a2a: GPU SMs the all-to-all kernels "
        "hold in prefill iterations (DeepSeek's prefill: 24 of 132)"),
    attn_tp: Optional[int] = typer.Option(
        None, "--attn-tp", min=1, help="serve, MoE: attention tensor-parallel degree apart "
        "from the experts' (attn-tp·attn-dp = tp·ep; default tp)"),
    attn_dp: Optional[int] = typer.Option(
        None, "--attn-dp", min=1, help="serve, MoE: attention data-parallel ranks, each with "
        "its own KV pool (default ep)"),
    expert_trace: Optional[Path] = typer.Option(None, help="serve, MoE: file of expert ids"),
    seed: int = typer.Option(0, help="seed of arrivals and routing"),
    cost_source: Optional[str] = typer.Option(
        None, "--cost-source", help="compiler | table: per-chip compute from the compiler's "
        "Report of the sharded layer, or from the op table (default: compiler for ArchSpec "
        "chips, table/roofline for GPU presets)"),
    tech: Optional[str] = typer.Option(
        None, "--tech", help="technology table (45nm | 7nm | YAML path) for an ArchSpec chip's "
        "energy (default 7nm; GPU presets use their board power)"),
    as_json: bool = typer.Option(False, "--json", help="print the metrics as one JSON object"),
    trace: Optional[Path] = typer.Option(None, help="write a Chrome/Perfetto trace JSON here"),
    db: Optional[Path] = typer.Option(
        None, "--db", help="append this run's metrics to a SQLite results store (the sweep "
        "store's format; sweep name 'cluster')"),
) -> None:
    """Simulate a training step or a serving run of MODEL on a cluster (SimPy discrete events)."""
    from pydantic import ValidationError  # noqa: PLC0415  (lazy: pydantic only on this path)

    from tilewright.dataflow_sim.cluster import (  # noqa: PLC0415  (lazy: pulls in simpy, torch)
        SLO, ClusterSpecError, ServePlan, TrainPlan, auto_dp, load_cluster, load_request_trace,
        parse_pd, poisson_requests, search_pd_split, simulate_serving, simulate_training,
        timeline_summary)
    from tilewright.dataflow_sim.cluster.plan import \
        micro_batches_for  # noqa: PLC0415  (lazy: pulls in pydantic models)
    from tilewright.models.llm_shapes import (  # noqa: PLC0415  (lazy: models layer)
        get_config, unmodeled_fields)
    from tilewright.models.resolve import refuse_user_model  # noqa: PLC0415  (lazy: models)
    refuse_user_model(model, "--model", "a cluster run needs a decoder LLM's shapes (layers, "
                      "width, heads, KV cache)")
    if mode not in (None, "train", "serve"):
        raise ClusterSpecError(f"--mode = {mode!r}: must be one of 'train', 'serve'")
    left = unmodeled_fields(get_config(model))     # never ignore a field the config sets
    if left:
        raise ClusterSpecError(f"--model {model}: the cluster model does not model "
                               f"{', '.join(left)} (accepted: configs without them; "
                               f"`tilewright compile` models them)")
    spec = load_cluster(cluster)
    if mode is None:          # a cluster with P/D pools is a serving cluster
        mode = "serve" if spec.pools is not None else "train"
        LOGGER.info("cluster: --mode %s (%s)", mode, "the cluster has prefill/decode pools"
                    if spec.pools is not None else "no prefill/decode pools")
    try:
        if mode == "train":
            if sp is not None:
                if cp is not None and cp != sp:
                    raise ClusterSpecError(f"--sp = {sp} contradicts --cp = {cp}: --sp is the "
                                           "deprecated name of --cp; give only --cp")
                deprecated("--sp (context parallelism)",
                           "--cp (Megatron sequence parallelism is --seq-parallel)")
            sp = cp if cp is not None else (sp if sp is not None else 1)
            if fsdp and zero not in (1, 3):
                raise ClusterSpecError(f"--fsdp contradicts --zero = {zero}: FSDP full "
                                       "sharding is ZeRO stage 3; give one of them")
            if dp == "auto":
                dp_n = auto_dp(spec, tp, pp, sp)
                LOGGER.info("cluster: --dp auto = %d chips / (tp·pp·sp = %d) = %d",
                            spec.n_chips, tp * pp * sp, dp_n)
            elif dp.isascii() and dp.isdigit() and int(dp) >= 1:
                dp_n = int(dp)
            else:
                raise ClusterSpecError(f"--dp = {dp!r}: must be a whole number ≥ 1 or auto")
            if global_batch is not None:
                m_n = micro_batches_for(global_batch, dp_n, micro_batch_size)
                if micro_batches is not None and micro_batches != m_n:
                    raise ClusterSpecError(
                        f"--micro-batches = {micro_batches} contradicts --global-batch = "
                        f"{global_batch}: dp·micro-batch size = {dp_n}·{micro_batch_size} "
                        f"gives {m_n} micro-batches; give one of them")
            else:
                m_n = micro_batches if micro_batches is not None else 8
            plan = TrainPlan(dp=dp_n, tp=tp, pp=pp, sp=sp, ep=ep, micro_batches=m_n,
                             micro_batch_size=micro_batch_size, seq_len=seq_len,
                             schedule=schedule, virtual_stages=virtual_stages,
                             recompute=recompute, grad_bucket_mb=grad_bucket_mb or None,
                             seq_parallel=seq_parallel, tp_comm_overlap=tp_comm_overlap,
                             gemm_format=gemm_format,
                             zero=3 if fsdp else zero, global_batch=global_batch,
                             recompute_layers=recompute_layers,
                             **({"inlayer_comm": inlayer_comm} if inlayer_comm else {}))
        else:
            splan = ServePlan(tp=tp, ep=ep, pp=pp, max_batch_tokens=max_batch_tokens,
                              max_seqs=max_seqs,
                              chunked_prefill=chunked_prefill, disaggregated=disaggregated,
                              routing=routing, zipf_s=zipf_s, a2a=a2a,
                              dispatch_bytes=dispatch_bytes, weight_bytes=weight_bytes,
                              kv_bytes=kv_bytes, redundant_experts=redundant_experts,
                              overlap_a2a=overlap_a2a, a2a_sms=a2a_sms,
                              attn_tp=attn_tp, attn_dp=attn_dp,
                              gemm_format=gemm_format)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        flag = {"seq_len": "seq"}.get(str(err["loc"][0]), str(err["loc"][0]))   # its CLI name
        raise ClusterSpecError(f"--{flag.replace('_', '-')} = {err.get('input')!r}: "
                               f"{err['msg'].lower()}") from None
    serve_flags = {"--slo-ttft": slo_ttft, "--slo-tpot": slo_tpot, "--pd": pd,
                   "--prefill-power-cap": prefill_power_cap,
                   "--decode-power-cap": decode_power_cap,
                   "--a2a": None if a2a == "flat" else a2a, "--dispatch-bytes": dispatch_bytes,
                   "--weight-bytes": weight_bytes, "--kv-bytes": kv_bytes,
                   "--redundant-experts": redundant_experts or None,
                   "--overlap-a2a": overlap_a2a or None, "--a2a-sms": a2a_sms or None,
                   "--attn-tp": attn_tp, "--attn-dp": attn_dp,
                   "--zipf-s": None if zipf_s == 1.2 else zipf_s}
    splits = None
    if mode == "train":
        given = [k for k, v in serve_flags.items() if v is not None]
        if given:
            raise ClusterSpecError(f"{given[0]}: a serving option, but --mode is train")
        with progress(f"simulating a training step of {model} on {spec.name}"):
            res = simulate_training(spec, model, plan, trace=trace is not None,
                                    cost_source=cost_source, tech=tech, network=network)
        metrics, tr = res.metrics, res.trace
    else:
        if tp_comm_overlap:
            raise ClusterSpecError("--tp-comm-overlap: a training option, but --mode is serve")
        if request_trace is not None:
            reqs = load_request_trace(request_trace)
            longest = int((reqs.prompt_tokens + reqs.output_tokens).to_numpy().argmax())
            _check_context(model, int(reqs.prompt_tokens[longest]),
                           int(reqs.output_tokens[longest]),
                           f"{request_trace}: request {longest + 1} (by arrival)")
        else:
            if not 0 < rate < math.inf:
                raise ClusterSpecError(f"--rate = {rate}: must be a finite number of requests/s "
                                       "above 0")
            pl = _lengths(prompt_tokens, "--prompt-tokens")
            ol = _lengths(output_tokens, "--output-tokens")
            _check_context(model, pl if isinstance(pl, int) else pl[1],
                           ol if isinstance(ol, int) else ol[1],
                           "--prompt-tokens, --output-tokens (the longest request)")
            reqs = poisson_requests(requests, rate, pl, ol, seed=seed)
        slo = None
        if (slo_ttft is None) != (slo_tpot is None):
            raise ClusterSpecError("--slo-ttft and --slo-tpot: give both (goodput counts requests "
                                   "meeting both SLOs) or neither")
        if slo_ttft is not None and slo_tpot is not None:
            slo = SLO(slo_ttft, slo_tpot)
        prefill_chips = parse_pd(pd, spec.n_chips) if pd is not None else None
        if pd == "auto" and slo is None:
            raise ClusterSpecError("--pd auto: chooses the split with the highest goodput, which "
                                   "needs --slo-ttft and --slo-tpot")
        disagg = (disaggregated if disaggregated is not None
                  else spec.pools is not None or pd is not None)
        caps = {}
        if prefill_power_cap is not None:
            if not disagg:
                raise ClusterSpecError("--prefill-power-cap: this run is colocated (no prefill "
                                       "pool); use --decode-power-cap for every replica, or --pd")
            caps["prefill"] = prefill_power_cap
        if decode_power_cap is not None:
            caps["decode" if disagg else "both"] = decode_power_cap
        if pd is not None and disaggregated is None:
            splan = splan.model_copy(update={"disaggregated": True})
        ids = None
        if expert_trace is not None:
            if not expert_trace.exists():
                raise ClusterSpecError(f"--expert-trace {expert_trace}: no such file")
            ids = _expert_ids(expert_trace)
        kw = dict(seed=seed, trace=trace is not None, expert_trace=ids,
                  cost_source=cost_source, tech=tech, slo=slo, power_caps=caps or None)
        if pd == "auto":
            with progress(f"--pd auto: simulating {len(reqs)} requests of {model} on each "
                          f"prefill/decode split of {spec.name}"):
                sres, splits = search_pd_split(spec, model, splan, reqs,
                                               **kw)
        else:
            with progress(f"simulating {len(reqs)} requests of {model} on {spec.name}"):
                sres = simulate_serving(spec, model, splan, reqs, prefill_chips=prefill_chips,
                                        **kw)
        metrics, tr = sres.metrics, sres.trace
    if trace is not None and tr is not None:
        tr.save(trace)
        metrics["trace_file"] = str(trace)
    clean = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in metrics.items()}
    if db is not None:
        _store(db, spec, plan if mode == "train" else splan, clean)
    if as_json:
        if mode == "serve":
            clean["timeline"] = timeline_summary(sres.timeline)
            if splits is not None:
                clean["pd_search"] = [{k: (None if isinstance(v, float) and math.isnan(v) else v)
                                       for k, v in r.items()} for r in splits]
        print(json.dumps(clean))
        return
    comps = clean.pop("components", None) if mode == "serve" else None
    print_table(f"{metrics['mode']}: {metrics['model']} on {metrics['cluster']}",
                ["metric", "value"], [[k, v] for k, v in _flat(clean).items()], console)
    if comps is not None:
        _print_components(comps, console)
    if mode == "serve" and splits:
        cols = list(splits[0])
        print_table("--pd auto: prefill/decode splits tried (highest goodput chosen)", cols,
                    [[r[c] for c in cols] for r in splits], console)


def _print_components(comps: dict, console) -> None:
    """A serving run's components (``--json``'s ``components``) as one short table: a column
    per pool, seconds per chip and GiB per chip."""
    pools = comps["pools"]
    roles = list(pools)
    keys = [k for k, v in pools[roles[0]].items() if not isinstance(v, dict)]
    rows = [[k, *(pools[r][k] for r in roles)] for k in keys]
    rows += [[f"memory {k}" + ("" if k.endswith("fraction") else " (GiB)"),
              *(pools[r]["memory_per_chip_gib"][k] for r in roles)]
             for k in pools[roles[0]]["memory_per_chip_gib"]]
    print_table(f"components per chip of each pool (s; means over its replicas; window "
                f"{comps['window_s']:.3f} s; KV hand-offs {comps['kv_transfer_s']:.3f} s, "
                "not in the sum)", ["component", *roles], rows, console)


def _flat(d: dict, prefix: str = "") -> dict:
    """Nested metric dicts (``components``) as dotted rows for the table view."""
    out: dict = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out
