"""``tilewright generate``: a whole small language model decoding greedily on the functional
model of an ArchSpec, costed step by step by the cycle model.

1. The model (a tiny built-in config or a small ``config.json``: every layer, seeded weights) is
   wrapped as one step module (:class:`tilewright.models.lm_step.LMStep`: embedding, every layer
   with its KV cache or Mamba state, final norm, LM head of the last position).
2. The prefill (the prompt) and each decode step (one token, the states the previous step
   returned) are compiled for the ArchSpec in its tensor engine's format — the same
   ``compile_module`` path (torch.export -> Program -> Report) ``compile`` and ``sim`` use — and
   run on the functional model; the next token is the argmax of the step's logits. ``--tokens N``
   generates N tokens: the prefill gives the first, N - 1 decode steps the rest.
3. Checks (:class:`GenerateResult.checks`, enforced: exit 1 when one fails): every step's
   logits within :data:`LOGITS_REL_L2_BOUND` (relative L2) of torch fp32 greedy decoding of the
   same weights (:func:`~tilewright.models.lm_step.greedy_tokens_torch`: the whole sequence
   recomputed each step, no cache); the token sequence equal to torch's, or its first divergence
   within what that bound allows (torch's margin between its token and ours at most
   ``2 * LOGITS_REL_L2_BOUND * ||torch logits||_2``, the largest swap an error within the
   bound can cause); the memory the run needs (the Program's constants plus the states at the
   whole context) within ``offchip.capacity_gib`` when the ArchSpec states it.
4. Cycles per step are the step Report's total (tasks added with no overlap, as ``compile``
   reports them); busy shares and, without ``--rtl``, the ``--trace`` timeline (op level: the
   Report's tasks) come from :mod:`tilewright.dataflow_sim.timeline`.

With ``--rtl --trace FILE`` the trace is the accelerator's own, instruction level: every
segment run of every step (its GEMM programs, then its vector kernels, in the order they ran)
recorded cycle by cycle from the RTL by the driver — the C++ fast driver or the cocotb bench, the
same events (each instruction's issue, the top's ``dma_busy``/``gemm_busy``/``vec_busy``;
:mod:`tilewright.cosim.accel_commands`) — and the same runs
from the cycle model (:func:`~tilewright.dataflow_sim.accel_timing.segment_timeline`), as two
processes "RTL" and "cycle model" with the tracks issue, dma, array, vector, scan
(:func:`~tilewright.dataflow_sim.timeline.accel_chrome_trace`); a check that the two are equal
event for event (:data:`~tilewright.app.flows.sim_rtl.TIMELINE_CHECK`) is enforced like the
others; each step's ``rtl.timeline_busy`` (``--json``) gives its RTL runs' cycles and the cycles
the DMA, array, vector engine (VECTOR) and scan were busy in them, from the RTL's timeline. The file is written atomically (a temporary file renamed).

With ``rtl`` (``--rtl [--fast]``, an int8 ArchSpec) every step's int8 GEMMs — projections, the
attention cascade's block GEMMs, each expert's rows, the LM head — run on the Verilated
accelerator top (ISA, DMA, external-memory model; cocotb or the C++ fast driver) through the
machinery of ``sim --rtl --top accel``
(:func:`tilewright.app.flows.sim_rtl.run_gemms_on_accel`): every RTL GEMM bit-exact with numpy,
the step replayed with the RTL's results bit-exact with the functional model (logits and states,
so the tokens too), and every GEMM's RTL cycles equal to the accelerator's cycle model
(:mod:`tilewright.dataflow_sim.accel_timing`, DMA included). Everything else of a step runs on the
host's functional model and is listed by name (:func:`host_ops`): the embedding gather (with
``vector`` it runs on the top, the table in external memory, each row checked bit for bit
against the table's row: a decode step's row is fetched by ``LOAD_VI`` from the token id in the
top's index register; the prefill's rows by a ``LOAD_IDX`` of each prompt token id, which the
host writes to external memory, and a ``LOAD_VI`` after it), the
norms (with ``vector`` a norm runs on the vector engine — its square, ``pow`` with exponent 2, as
``mul`` of x by itself; its mean, ``+ eps``, rsqrt, the products), RoPE,
the attention's online softmax, quantize steps (with ``vector`` a per-tensor int8 quantize runs
on the vector engine: ``qshift`` over the tensor, then ``requant`` by 1 and that shift, the scale
a power of two; channel and block granularities and tensors larger than the vector buffer stay
here; with ``vector`` tiny-mamba's ``neg`` runs on the vector engine as ``mul`` by -1.0 and its
conv state's ``copy`` as ``LOAD_V`` + ``STORE_V`` of the fp32 bits), the GEMMs' int32 -> fp32
scaling, routing, the KV append, the argmax.
With ``vector`` (``--vector``, an ArchSpec with a ``vector_unit``) the ops the vector engine
implements run in its Q8.8 arithmetic (``sim --vector``'s hook), and with ``rtl`` on the
accelerator top's vector engine, bit-exact and cycle-exact against its model like the GEMMs.
The next token is then the vector engine's ``argmax`` too
(:func:`~tilewright.dataflow_sim.vector_offload.argmax_record`): the unit compares int32 lanes,
so the host turns the fp32 logits into int32 order keys
(:func:`~tilewright.dataflow_sim.vector_numerics.order_keys`: same order, equal keys for equal
logits, so ties go to the lowest index as in ``torch.argmax``) and one ``row`` ``argmax`` kernel
picks the index — on the instruction-level model, and with ``rtl`` on the accelerator top in the
same kernel batch as the step's other vector kernels (bit-exact and cycles == model like them;
its operand is the functional logits, which the replay check proves equal to the logits of the
step's RTL GEMMs and vector kernels bit for bit). A check compares every step's token with
numpy's argmax of the fp32 logits.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tilewright.arch import ArchSpec, ArchSpecError
from tilewright.compiler.operand_formats import arch_for_format
from tilewright.dataflow_sim.timeline import accel_chrome_trace, busy_cycles, chrome_trace
from tilewright.errors import UserError

__all__ = ["GenerateResult", "StepResult", "generate", "parse_prompt_ids", "host_ops",
           "LOGITS_REL_L2_BOUND", "MAX_GENERATE_PARAMS", "GENERATE_FORMATS", "HOST_OPS",
           "ARGMAX_CHECK", "GATHER_CHECK"]

#: relative L2 error of a step's int8 logits against torch fp32 greedy decoding accepted (int8
#: per-channel weights, per-tensor activations; measured over 4 prompt + 8 generated tokens,
#: seed 0, ws8x8v, on torch's prefix: at most 0.99 % tiny-llama, 1.07 % tiny-moe, 0.84 %
#: tiny-mamba — the bound leaves about 3x headroom, as `sim`'s TORCH_REL_L2_BOUND does for one
#: layer; a model further off fails the check, it is not loosened per model)
LOGITS_REL_L2_BOUND = 0.03
#: the most parameters a whole model may have to be generated with (it is materialized with
#: seeded weights and every step runs on the functional model in numpy)
MAX_GENERATE_PARAMS = 16_000_000
#: the engine formats whose functional model generate runs (those `sim` runs: the RTL builds them)
GENERATE_FORMATS = ("int8", "bf16", "fp8-e4m3", "fp8-e5m2")
#: what a generation step does outside the compiled Program, on the host (named in the output)
HOST_OPS = ("argmax of the logits (the next token)", "feeding the token id and the states "
            "returned by one step into the next")
#: with --vector the argmax runs on the vector engine; what stays on the host for it
VECTOR_ARGMAX_HOST_OP = ("the logits' fp32 -> int32 order keys for the vector engine's argmax "
                         "(sign-magnitude bits as two's complement)")
#: with --rtl: the int8 GEMMs' results leave the accelerator as int32; the host scales them
GEMM_SCALING_HOST_OP = ("scaling of every int8 GEMM's int32 results to fp32 (activation scale "
                        "x weight scales)")
#: the token check's name (with --vector)
ARGMAX_CHECK = ("next token: vector engine argmax == numpy argmax of the fp32 logits (lowest "
                "index on ties)")
#: the embedding check's name (with --rtl --vector: every step's rows fetched by LOAD_VI — a
#: decode step's token id in the index register, the prefill's loaded by LOAD_IDX from memory)
GATHER_CHECK = ("embedding rows fetched by LOAD_VI (token ids from the index register or "
                "LOAD_IDX) == the table's rows (bit-exact)")
#: the most tokens one run generates (docs/design.md: tokens at most 2**20)
MAX_TOKENS = 1 << 20


class GenerateInputError(UserError, ValueError):
    """A prompt, token count or model that ``generate`` cannot run (one line, exit 2)."""


@dataclass
class StepResult:
    """One step: the prefill (``phase`` prefill, the whole prompt) or one decode step."""

    phase: str
    tokens_in: int            #: tokens this step processes (prompt length, or 1)
    context: int              #: positions in the context after this step
    token: int                #: the token it chose (argmax of its logits)
    cycles: int               #: the step Report's total cycles
    busy: dict[str, int]      #: busy cycles per resource track (dataflow_sim.timeline)
    rel_l2: float = float("nan")   #: logits vs torch fp32 (nan after a divergence)
    torch_token: int | None = None
    report: Any = None        #: the step's Report (pandas), for the trace
    #: with --rtl: the step's GEMMs on the accelerator top (count, RTL and model cycles, checks)
    rtl: dict[str, Any] | None = None

    def row(self, clock_mhz: float) -> dict[str, Any]:
        """The step as a plain dict (``--json``)."""
        t = self.busy["time"] or 1
        return {"phase": self.phase, "tokens_in": self.tokens_in, "context": self.context,
                "token": self.token, "torch_token": self.torch_token, "cycles": self.cycles,
                "us": self.cycles / clock_mhz, "busy_cycles": dict(self.busy),
                "array_share": self.busy["array"] / t, "vector_share": self.busy["vector"] / t,
                "scan_share": self.busy["scan"] / t, "dma_share": self.busy["dma"] / t,
                "logits_rel_l2": None if np.isnan(self.rel_l2) else self.rel_l2,
                "rtl": None if self.rtl is None else {k: v for k, v in self.rtl.items()
                                                      if k not in ("checks", "timelines")}}


@dataclass
class GenerateResult:
    """What :func:`generate` produced."""

    model: str
    arch: str
    clock_mhz: float
    prompt: list[int]
    tokens: list[int]
    torch_tokens: list[int]
    steps: list[StepResult]
    checks: list[tuple[str, bool, str]]
    memory: dict[str, Any]
    host_ops: tuple[str, ...] = HOST_OPS
    seconds: dict[str, float] = field(default_factory=dict)
    trace: Path | None = None

    @property
    def ok(self) -> bool:
        return all(ok for _, ok, _ in self.checks)

    def summary(self) -> dict[str, Any]:
        """Cycles of the prefill and per decode token, tokens/s at the clock, busy shares."""
        pre, dec = self.steps[0], self.steps[1:]
        total = sum(s.cycles for s in self.steps)
        busy = {k: sum(s.busy[k] for s in self.steps) for k in ("array", "vector", "scan", "dma")}
        hz = self.clock_mhz * 1e6
        per_tok = sum(s.cycles for s in dec) / len(dec) if dec else None
        return {"prefill_cycles": pre.cycles, "prompt_tokens": pre.tokens_in,
                "decode_cycles_per_token": per_tok,
                "decode_tokens_per_s": hz / per_tok if per_tok else None,
                "tokens_per_s": len(self.steps) * hz / total,
                "total_cycles": total,
                **{f"{k}_busy_share": v / total for k, v in busy.items()}}

    def as_json(self) -> dict[str, Any]:
        return {"model": self.model, "arch": self.arch, "clock_mhz": self.clock_mhz,
                "ok": self.ok, "prompt_ids": self.prompt, "tokens": self.tokens,
                "torch_tokens": self.torch_tokens, "summary": self.summary(),
                "steps": [s.row(self.clock_mhz) for s in self.steps],
                "checks": [{"check": c, "ok": ok, "detail": d} for c, ok, d in self.checks],
                "memory": self.memory, "on_the_host": list(self.host_ops),
                "trace": None if self.trace is None else str(self.trace),
                "seconds": self.seconds}


def parse_prompt_ids(text: str) -> list[int]:
    """``"1,2,3"`` -> ``[1, 2, 3]``; one line naming ``--prompt-ids`` otherwise."""
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p.lstrip("-").isdigit() for p in parts):
        raise GenerateInputError(f"--prompt-ids {text!r}: give token ids as integers separated "
                                 f"by commas, e.g. 1,2,3")
    return [int(p) for p in parts]


def _config(model: str):
    """The LLM config ``model`` names (built-in or config.json) of a family generate runs."""
    from tilewright.models.llm_configs import (  # noqa: PLC0415  (lazy: pulls in torch)
        LlamaConfig, MambaConfig, MoEConfig, count_params)
    from tilewright.models.resolve import resolve_model  # noqa: PLC0415  (lazy: pulls in torch)

    resolved = resolve_model(model)
    if resolved.kind != "llm":
        raise GenerateInputError(f"--model {model}: generate runs a language model config "
                                 f"(tiny-llama, tiny-moe, tiny-mamba or a small config.json); "
                                 f"this is a {'demo MLP' if resolved.kind == 'mlp' else 'user module'}")
    from tilewright.models.llm_configs import get_config  # noqa: PLC0415  (lazy: torch)

    cfg = get_config(model)
    ok = (type(cfg) is LlamaConfig or type(cfg) is MambaConfig
          or (type(cfg) is MoEConfig and cfg.n_heads is not None))
    if not ok:
        raise GenerateInputError(f"--model {model}: a {cfg.family} config; generate runs "
                                 f"Llama-style, MoE with attention (Mixtral-style) and Mamba "
                                 f"configs")
    n = count_params(model)["total"]
    if n > MAX_GENERATE_PARAMS:
        raise GenerateInputError(f"--model {model}: {n:,} parameters; generate materializes "
                                 f"the whole model and runs it on the functional model up to "
                                 f"{MAX_GENERATE_PARAMS:,} (e.g. tiny-llama, tiny-moe, "
                                 f"tiny-mamba)")
    return cfg


def _check_request(model: str, cfg, prompt: list[int], tokens: int) -> int:
    """Refuse a prompt id outside the vocabulary, a token count outside 1..2**20 and a context
    beyond the config's positions; return the vocabulary size."""
    vocab = cfg.vocab_size        # a Mamba table's padding rows (padded_vocab) are no tokens
    if not 1 <= tokens <= MAX_TOKENS:
        raise GenerateInputError(f"--tokens {tokens}: the number of tokens to generate must be "
                                 f"from 1 to {MAX_TOKENS:,}")
    bad = [t for t in prompt if not 0 <= t < vocab]
    if bad:
        raise GenerateInputError(f"--prompt-ids: token id {bad[0]} is outside {model}'s "
                                 f"vocabulary (accepted: 0 to {vocab - 1})")
    limit = getattr(cfg, "max_seq_len", None)
    if limit is not None and len(prompt) + tokens > limit:
        raise GenerateInputError(f"--prompt-ids/--tokens: a context of {len(prompt)} prompt + "
                                 f"{tokens} generated = {len(prompt) + tokens} tokens; {model}'s "
                                 f"max_seq_len is {limit}")
    return vocab


def _memory(program, outputs: dict[str, np.ndarray], prompt_len: int, context: int,
            spec: ArchSpec, attention: bool) -> dict[str, Any]:
    """Bytes the run keeps in memory — the Program's constants (weights as the Program stores
    them, scales, tables) and the states at the whole context (an attention layer's KV cache
    grows with the tokens, a Mamba state does not; bytes as the Program holds them) — against
    ``offchip.capacity_gib``; refuses (one line) what does not fit."""
    weights = int(sum(np.asarray(v).nbytes for v in program.constants.values()))
    states = sum(outputs[o].nbytes for o in program.outputs[1:])
    if attention:
        states = states * context // prompt_len
    cap = spec.offchip.capacity_gib
    out = {"weights_bytes": weights, "states_bytes": int(states), "context": context,
           "capacity_bytes": None if cap is None else int(cap * 2**30)}
    if cap is None:
        return out
    have = int(cap * 2**30)
    if weights > have:
        raise ArchSpecError(f"{spec.name}: the model's weights take {weights:,} bytes; "
                            f"offchip.capacity_gib = {cap:g} holds {have:,}")
    if weights + states > have:
        what = "KV cache" if attention else "state"
        raise ArchSpecError(f"{spec.name}: a context of {context} tokens needs a {what} of "
                            f"{int(states):,} bytes beside {weights:,} bytes of weights; "
                            f"offchip.capacity_gib = {cap:g} holds {have:,} (shorten "
                            f"--prompt-ids/--tokens)")
    return out


def host_ops(program, offloaded: tuple[str, ...] = ()) -> list[str]:
    """What of ``program`` runs on the host when its GEMMs run on the RTL: every task that is not
    a GEMM, by op name with its count (the ops the compiler emitted: pow, reduce_mean, rsqrt,
    mul, ...), and the attention cascade's softmax between its GEMMs; the tasks named in
    ``offloaded`` (those the RTL's vector engine ran) are left out."""
    from tilewright.compiler.program import (  # noqa: PLC0415  (lazy: pulls in pydantic models)
        AttentionTask, BgemmTask, GemmTask, GroupedGemmTask, QuantizeTask, ScanTask, VectorTask)

    counts: dict[str, int] = {}
    for t in program.tasks:
        if isinstance(t, (GemmTask, BgemmTask, GroupedGemmTask)):
            continue
        if t.name in offloaded:
            continue
        if isinstance(t, AttentionTask):
            name = "attention online softmax (between its block GEMMs)"
        elif isinstance(t, QuantizeTask):
            name = "quantize"
        elif isinstance(t, ScanTask):
            name = "scan"
        elif isinstance(t, VectorTask):
            name = {"take_rows": "row gather (take_rows)",
                    "concat": "concat (KV append)"}.get(t.op, t.op)
            if t.op == "take_rows" and t.attrs.get("lookup") == "embedding":
                name = "embedding gather (take_rows)"
        else:
            name = type(t).__name__
        counts[name] = counts.get(name, 0) + 1
    return [f"{k} x{v}" for k, v in sorted(counts.items())]


def generate(model: str, arch: ArchSpec, prompt: list[int], tokens: int, *, seed: int = 0,
             trace: Path | None = None, log: Callable[[str], None] | None = None,
             rtl: bool = False, driver: str = "cocotb", vector: bool = False) -> GenerateResult:
    """Greedy generation of ``tokens`` tokens after ``prompt`` (module docstring); ``rtl`` runs
    every step's int8 GEMMs on the accelerator top through ``driver`` (cocotb | fast).
    ``vector`` runs the ops the vector engine implements (exp, rsqrt, SiLU, softplus, softmax,
    add/sub/mul, x ** 2 (a norm's square: ``mul`` of x by itself), neg (``mul`` by -1.0), an fp32
    copy (its bits by ``LOAD_V`` + ``STORE_V``), sum/mean/max — a norm's mean as
    ``sum`` then ``rescale`` by 1/n; a per-tensor int8 quantize of an activation as ``qshift``
    then ``requant``, scale ``2**(k-8)``; the scan) in its
    Q8.8 arithmetic, as ``sim --vector`` does
    (:class:`~tilewright.dataflow_sim.vector_offload.VectorUnitOps`), and with ``rtl`` on the
    accelerator top's vector engine (bit-exact, cycles == its cycle model)."""
    say = log or (lambda _msg: None)
    fmt = arch.tensor_engine.input_format
    if fmt not in GENERATE_FORMATS:
        raise ArchSpecError(f"{arch.name}: tensor_engine.input_format = {fmt!r}: generate runs "
                            f"the formats the RTL builds, accepted: {', '.join(GENERATE_FORMATS)}")
    if rtl and fmt != "int8":
        raise ArchSpecError(f"{arch.name}: tensor_engine.input_format = {fmt!r}: generate --rtl "
                            f"runs int8 GEMMs on the accelerator top; accepted: int8 (drop --rtl "
                            f"for the functional model in {fmt})")
    if vector and arch.vector_unit is None:
        raise ArchSpecError(f"{arch.name}: --vector runs the vector ops in the vector unit's "
                            f"arithmetic; this ArchSpec has no vector_unit section")
    if rtl:
        from tilewright.cosim.program_jobs import \
            check_transcendental_passes  # noqa: PLC0415  (lazy: pulls in amaranth)
        check_transcendental_passes(arch)
    cfg = _config(model)
    _check_request(model, cfg, prompt, tokens)
    import torch  # noqa: PLC0415  (lazy: torch is heavy)

    from tilewright.dataflow_sim.compile_flow import \
        compile_module  # noqa: PLC0415  (lazy: pulls in pandas, torch)
    from tilewright.models.llm_configs import (  # noqa: PLC0415  (lazy: pulls in torch)
        build_lm, has_attention)
    from tilewright.models.lm_step import LMStep, greedy_tokens_torch  # noqa: PLC0415  (lazy: torch)

    spec = arch_for_format(arch, fmt)
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    lm = build_lm(model, seed=seed, device="cpu")
    step = LMStep(lm).eval()
    say("torch fp32 greedy decoding (reference)")
    ref_tokens, ref_logits = greedy_tokens_torch(lm, prompt, tokens)
    times["torch"] = time.perf_counter() - t0

    steps: list[StepResult] = []
    ids = torch.tensor([prompt])
    states: tuple = ()
    memory: dict[str, Any] = {}
    argmax_off: list[tuple[int, int, int]] = []      # (step, vector unit's token, numpy's)
    t0 = time.perf_counter()
    for i in range(tokens):
        phase = "prefill" if i == 0 else "decode"
        say(f"{phase} step {i}: compile and run on the functional model")
        with _vector_hook(spec, vector):
            c = compile_module(step, (ids, *states), spec, fmt=fmt, name=f"{model}.{phase}{i}")
        out = c.program.outputs
        logits32 = c.outputs[out[0]].reshape(-1)
        pick = _argmax_on_vector_unit(logits32, spec, vector)
        rtl_step = (_step_on_rtl(c, spec, say, driver, f"{phase} step {i}", vector, pick,
                                 timeline=trace is not None) if rtl else None)
        logits = logits32.astype(np.float64)
        if i == 0:
            prefill_program = c.program
            memory = _memory(c.program, c.outputs, len(prompt), len(prompt) + tokens, spec,
                             has_attention(cfg))
        numpy_tok = int(np.argmax(logits32))
        tok = (numpy_tok if pick is None else rtl_step["token"] if rtl_step is not None
               else int(pick.result[0]))
        if tok != numpy_tok:
            argmax_off.append((i, tok, numpy_tok))
        busy = busy_cycles(c.report)
        steps.append(StepResult(phase, ids.shape[1], len(prompt) + i, tok, busy["time"], busy,
                                torch_token=ref_tokens[i], report=c.report, rtl=rtl_step))
        steps[-1].rel_l2 = _rel_l2(logits, ref_logits[i].double().numpy())
        states = tuple(torch.from_numpy(np.ascontiguousarray(c.outputs[o])) for o in out[1:])
        ids = torch.tensor([[tok]])
    times["functional"] = time.perf_counter() - t0
    gen = [s.token for s in steps]
    checks = _checks(steps, gen, ref_tokens, ref_logits)
    on_host = HOST_OPS if not vector else (VECTOR_ARGMAX_HOST_OP, *HOST_OPS[1:])
    if vector:
        where = "the RTL vector engine" if rtl else "the instruction-level model"
        checks.append((ARGMAX_CHECK, not argmax_off,
                       f"{tokens} steps on {where}" if not argmax_off else
                       f"{len(argmax_off)} steps differ, first step {argmax_off[0][0]}: "
                       f"{argmax_off[0][1]} vs numpy {argmax_off[0][2]}"))
    if rtl:
        last = host_ops(c.program, tuple(steps[-1].rtl["offloaded"]))
        # the prefill's lookup of its prompt (LOAD_IDX + LOAD_VI per token) stays on the host
        # only when its code does not fit the instruction memory
        prefill = [f"{h} of the prefill ({len(prompt)} prompt rows: more LOAD_IDX/LOAD_VI "
                   f"pairs than the instruction memory holds)"
                   for h in host_ops(prefill_program, tuple(steps[0].rtl["offloaded"]))
                   if h.startswith("embedding gather") and h not in last]
        checks += _rtl_checks(steps, without_gather=1 if prefill else 0)
        on_host = (*last, *prefill, GEMM_SCALING_HOST_OP, *on_host)
        times["rtl"] = sum(s.rtl["seconds"] for s in steps)
    res = GenerateResult(model, spec.name, spec.clock_mhz, list(prompt), gen, ref_tokens,
                         steps, checks, memory, host_ops=tuple(on_host), seconds=times)
    if trace is not None:
        labels = ["prefill"] + [f"token {i + 1}" for i in range(1, tokens)]
        if rtl:
            runs = [(f"{label} {r['task']}", r) for label, st in zip(labels, steps)
                    for r in st.rtl["timelines"]]
            doc = accel_chrome_trace([("RTL", [(n, r["rtl"]) for n, r in runs]),
                                      ("cycle model", [(n, r["model"]) for n, r in runs])],
                                     spec.clock_mhz)
        else:
            doc = chrome_trace(zip(labels, (s.report for s in steps)), spec.clock_mhz,
                               name=f"{spec.name} (cycle model): {model}")
        from tilewright.rtl.emit import write_atomic  # noqa: PLC0415  (lazy: the trace only)
        write_atomic(Path(trace), json.dumps(doc))
        res.trace = Path(trace)
    return res


def _vector_hook(spec: ArchSpec, vector: bool):
    """The vector unit's arithmetic for the ``with`` block (``vector``), or nothing; the hook
    (its ``records``) is what the block yields."""
    from contextlib import contextmanager, nullcontext  # noqa: PLC0415  (lazy: rtl/vector only)

    if not vector:
        return nullcontext()
    from tilewright.dataflow_sim.functional import \
        vector_unit_ops  # noqa: PLC0415  (lazy: numerics)
    from tilewright.dataflow_sim.vector_offload import \
        VectorUnitOps  # noqa: PLC0415  (lazy: numerics)

    @contextmanager
    def hook():
        ops = VectorUnitOps(spec)
        with vector_unit_ops(ops):
            yield ops
    return hook()


def _argmax_on_vector_unit(logits: np.ndarray, spec: ArchSpec, vector: bool):
    """The argmax record of the step's fp32 logits on the vector unit (``vector``), or None."""
    if not vector:
        return None
    from tilewright.dataflow_sim.vector_offload import \
        argmax_record  # noqa: PLC0415  (lazy: numerics)

    if logits.dtype != np.float32:
        raise ValueError(f"the step's logits are {logits.dtype}; the vector engine's argmax "
                         f"takes fp32 logits as int32 order keys")
    return argmax_record(logits, spec, "lm_head.argmax")


def _step_on_rtl(c, spec: ArchSpec, say, driver: str, label: str, vector: bool = False,
                 pick=None, timeline: bool = False) -> dict[str, Any]:
    """One step's int8 GEMMs on the accelerator top: the step's Program run again on the
    functional model recording every int8 matmul, then
    :func:`~tilewright.app.flows.sim_rtl.run_gemms_on_accel` (bit-exact GEMMs, the step replayed
    with them bit-exact, every GEMM's cycles == the accelerator cycle model). ``pick`` (the
    logits' argmax record, with ``vector``) runs last in the step's vector kernel batch; the
    returned ``token`` is the RTL's index. ``timeline``: every run's RTL and model timelines
    (``timelines``) and the check that they are equal."""
    from tilewright.app.flows.sim_rtl import (  # noqa: PLC0415  (lazy: pulls in amaranth)
        SimResult, run_gemms_on_accel)
    from tilewright.dataflow_sim.functional import (  # noqa: PLC0415  (lazy: numerics)
        gemm_int8, int8_matmul, run_program)

    recorded: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def record(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        res = gemm_int8(a, b)
        recorded.append((a.copy(), b.copy(), res))
        return res

    with int8_matmul(record), _vector_hook(spec, vector) as ops:
        func = run_program(c.program, c.inputs)
    same = all(np.array_equal(func[o], c.outputs[o]) for o in c.program.outputs)
    say(f"{label}: {len(recorded)} int8 GEMMs on the accelerator top")
    sr = SimResult(c.name, spec.name, [("recorded run == the step's functional run", same,
                                        f"{len(recorded)} GEMMs recorded")])
    run_gemms_on_accel(sr, recorded, c.program, c.inputs, func, spec, say, "accel", driver,
                       vector_records=[*ops.records, *([] if pick is None else [pick])] if vector
                       else None, timeline=timeline)
    gathers = [(r, o) for r, o in zip(ops.records, sr.vector_outputs or [])
               if r.kernel.kind in ("gather", "lookup")] if vector else []
    if gathers:          # independent of the model: the table's rows, bit for bit
        wrong = [r.task for r, o in gathers
                 if not np.array_equal(np.asarray(o).reshape(-1, r.operands[0].shape[1]),
                                       r.operands[0][np.asarray(r.operands[1]).reshape(-1)])]
        sr.checks.append((GATHER_CHECK, not wrong,
                          f"{sum(np.asarray(r.operands[1]).size for r, _ in gathers)} row(s)"
                          + (f"; {wrong[0]} differs" if wrong else "")))
    picked = {}
    if pick is not None:
        row = sr.vector_rows[-1] if len(sr.vector_rows) == len(ops.records) + 1 else None
        picked = {"token": int(np.asarray(sr.vector_outputs[-1]).reshape(-1)[0]),
                  "argmax_rtl_cycles": None if row is None else row["rtl"],
                  "argmax_model_cycles": None if row is None else row["model"]}
    return {**picked, "gemms": len(recorded),
            "rtl_cycles": int(sum(r["rtl"] for r in sr.gemm_rows)),
            "model_cycles": int(sum(r["model"] for r in sr.gemm_rows)),
            "seconds": sum(sr.seconds.values()), "checks": sr.checks,
            "vector_kernels": len(sr.vector_rows),
            "vector_rtl_cycles": int(sum(r["rtl"] for r in sr.vector_rows)),
            "vector_model_cycles": int(sum(r["model"] for r in sr.vector_rows)),
            "offloaded": [r.task for r in ops.records] if vector else [],
            "timelines": sr.timelines, "timeline_runs": len(sr.timelines),
            "timeline_busy": _rtl_busy(sr.timelines) if timeline else None}


def _rtl_busy(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Cycles of a step's RTL runs (``cycles``: their sum) and the cycles each unit was busy in
    them, from the RTL's timelines."""
    from tilewright.dataflow_sim.accel_timing import UNITS  # noqa: PLC0415  (lazy: --rtl only)

    return {"cycles": sum(r["rtl"].cycles for r in rows),
            **{u: sum(r["rtl"].busy_cycles(u) for r in rows) for u in UNITS}}


def _rtl_checks(steps: list[StepResult], without_gather: int = 0
                ) -> list[tuple[str, bool, str]]:
    """Each RTL check over every step: passes when it passed at every step (the embedding
    check: at every step but the ``without_gather`` whose lookup is listed on the host)."""
    names = list(dict.fromkeys(n for s in steps for n, _, _ in s.rtl["checks"]))
    out = []
    for name in names:
        per = [(i, ok, d) for i, s in enumerate(steps) for n, ok, d in s.rtl["checks"]
               if n == name]
        bad = [(i, d) for i, ok, d in per if not ok]
        detail = (f"all {len(per)} steps" if not bad
                  else f"{len(bad)} of {len(per)} steps fail, first step {bad[0][0]}: {bad[0][1]}")
        expected = len(steps) - (without_gather if name == GATHER_CHECK else 0)
        out.append((name, len(per) == expected and not bad, detail))
    rtl = sum(s.rtl["rtl_cycles"] for s in steps)
    model = sum(s.rtl["model_cycles"] for s in steps)
    out.append(("RTL cycles == accelerator cycle model (every step's GEMMs, DMA included)",
                rtl == model and all(s.rtl["rtl_cycles"] == s.rtl["model_cycles"]
                                     for s in steps),
                f"{rtl:,} vs {model:,} over {sum(s.rtl['gemms'] for s in steps)} GEMMs"))
    return out


def _rel_l2(y: np.ndarray, ref: np.ndarray) -> float:
    den = float(np.linalg.norm(ref))
    return float(np.linalg.norm(y - ref)) / den if den else float("inf")


def _checks(steps: list[StepResult], gen: list[int], ref: list[int], ref_logits
            ) -> list[tuple[str, bool, str]]:
    """The token and logit checks against torch (module docstring, 3.)."""
    div = next((i for i, (a, b) in enumerate(zip(gen, ref)) if a != b), None)
    upto = len(gen) if div is None else div + 1       # steps with the same prefix as torch
    for s in steps[upto:]:
        s.rel_l2 = float("nan")                        # a different prefix: not comparable
    worst = max(steps[:upto], key=lambda s: s.rel_l2)
    checks = [(f"logits vs torch fp32: rel L2 ≤ {LOGITS_REL_L2_BOUND:g} (every step on "
               f"torch's prefix)", all(s.rel_l2 <= LOGITS_REL_L2_BOUND for s in steps[:upto]),
               f"worst {worst.rel_l2:.4f} ({worst.phase}, context {worst.context}) over "
               f"{upto} step(s)")]
    if div is None:
        checks.append(("tokens == torch fp32 greedy decoding", True,
                       f"all {len(gen)} tokens equal"))
        return checks
    z = ref_logits[div].double().numpy()
    margin = float(z[ref[div]] - z[gen[div]])
    allowed = 2 * LOGITS_REL_L2_BOUND * float(np.linalg.norm(z))
    checks.append(("tokens vs torch fp32: first divergence within the quantization bound",
                   margin <= allowed,
                   f"token {div + 1}: {gen[div]} vs torch {ref[div]}, torch logit margin "
                   f"{margin:.4f} ≤ 2·{LOGITS_REL_L2_BOUND:g}·‖logits‖₂ = {allowed:.4f}"
                   + ("" if margin <= allowed else " FAILS")
                   + f"; {len(gen) - div - 1} later token(s) not compared (another prefix)"))
    return checks
