"""Run a model's int8 GEMMs on the Verilated GEMM core, inside the functional model.

``tilewright sim --model MODEL --arch FILE --rtl [--fast]``, ``MODEL`` in any form the resolver
takes (:func:`sim_module`): a tiny built-in config, a small Hugging Face ``config.json`` (one layer,
seeded weights), ``path/file.py:factory`` or a ``.onnx`` file (the whole module):

1. compile the layer (or user module) for ``arch`` with int8 GEMM operands (torch.export -> Program);
2. run the Program on the functional model, *recording* every int8 x int8 -> int32 matmul it
   performs (projections, the attention cascade's block GEMMs, each expert's rows of a grouped
   GEMM) through :func:`tilewright.dataflow_sim.functional.int8_matmul`;
3. run all of them, as one Program of ``gemm`` tasks, on the RTL core in Verilator (cocotb bench,
   or the C++ fast driver with ``--fast``); a GEMM whose operands do not fit the core's buffers is
   split into column/row blocks that do (exact: output blocks are independent);
4. run the functional model again with every int8 matmul *answered by the RTL's results* and check
   that the layer's outputs are bit-exact with step 2, that every RTL GEMM equals numpy's, and that
   every RTL GEMM's cycle count equals the cycle model's closed form;
5. compare the layer's output with torch's float forward pass (relative L2 error).

What runs where: GEMM arithmetic on the RTL. With ``--vector`` (``--top accel``, an ArchSpec with
a ``vector_unit``) the vector ops the accelerator's vector engine implements — exp, rsqrt, SiLU,
softplus, softmax over the last axis, elementwise add/sub/mul, pow with exponent 2 (``square``: mul
of x by itself), neg (``mul`` by the -1.0 word), last-axis sum/mean/max in the vector
unit's Q8.8 arithmetic (the mean: ``sum`` then ``rescale`` by 1/n), the per-tensor int8
quantize of an activation before an int8 GEMM (``qshift``, then ``requant`` by 1 and that shift:
the scale ``2**(k-8)``), an fp32 ``copy`` (its bits through the vector buffer, ``LOAD_V``
then ``STORE_V``: bit-exact), and the SSM ``scan`` on the scan unit (Q0.16 a, Q16.16 b/c/h;
:mod:`tilewright.dataflow_sim.vector_offload`) — run in that arithmetic: the functional model
computes them on the bit-exact instruction-level model, the same kernels run as
LOAD_V/VECTOR/SCAN/STORE_V code on the Verilated top (results bit-exact, cycles equal to the
cycle model), and the replay answers them with the RTL's results. Everything else — a ``pow``
with another exponent, routing, the quantize steps of channel or block (MX) granularity or of a
tensor larger than the vector buffer — runs on the functional model.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tilewright.arch import ArchSpec, ArchSpecError
from tilewright.compiler.codegen import IMEM_WORDS, CodegenError, codegen, codegen_gemm
from tilewright.compiler.core_timing import gemm_cycles_array
from tilewright.compiler.layout import DoesNotFit, GemmLayout
from tilewright.compiler.operand_formats import arch_for_format
from tilewright.compiler.program import GemmTask, Program, TensorInfo
from tilewright.cosim import tops as registry
from tilewright.cosim.bf16_jobs import Bf16Params, bf16_gemm_words
from tilewright.cosim.program_jobs import (KernelBatch, check_axi_latency,
                                           check_transcendental_passes, timeline_comparison)
from tilewright.cosim.sim import run
from tilewright.dataflow_sim.functional import (bf16_matmul, gemm_int8, int8_matmul, run_program,
                                                vector_unit_ops)
from tilewright.dataflow_sim.matmul_hooks import fp8_matmul, mx_matmul
from tilewright.dataflow_sim.numerics import gemm as numerics_gemm
from tilewright.dataflow_sim.numerics import sequential_fp32_matmul
from tilewright.dataflow_sim.vector_offload import ReplayVectorUnit, VectorUnitOps
from tilewright.formats import MX_BLOCK, QTensor, element_values, get_format

__all__ = ["SimResult", "simulate_model", "run_gemms_on_accel", "imem_batches", "sim_module", "MAX_SIM_LAYER_PARAMS", "gemm_blocks", "gemm_program", "mx_gemm_program", "TORCH_REL_L2_BOUND",
           "TOPS", "TIMELINE_CHECK", "timeline_check"]

#: registry tops (:data:`tilewright.cosim.tops.TOPS`) ``simulate_model`` runs the GEMMs on: the
#: GEMM core driven by the host (cocotb or the C++ fast driver), or the programmable accelerator
#: (ISA, DMA, external-memory model; cocotb or its C++ fast driver), or the same accelerator behind
#: AXI (AXI4-Lite control, AXI4 memory; cocotbext-axi). Each top's drivers come from the registry.
TOPS = ("core", "accel", "axi-accel")
#: the tops whose run the flow can trace (``trace_dir``)
TRACE_TOPS = ("core", "accel")
#: how the flow names the programmable tops' runs in its messages and checks
_ACCEL_WORDING = {
    "accel": ("accel-gemms", "on the accelerator top", "accelerator top (ISA + DMA, {drv})",
              "RTL cycles == accelerator cycle model (every GEMM, DMA included)"),
    "axi-accel": ("axi-accel-gemms", "through the AXI ports",
                  "AXI accelerator top (AXI4-Lite + AXI4, {drv})",
                  "CYCLES register == accelerator cycle model (every GEMM; offchip latency = "
                  "the AxiRam's, checked before the run)"),
}

#: the engine formats `tilewright sim` runs: those the RTL builds (a design in another format is
#: refused, never run as one of these)
SIM_FORMATS = ("int8", "bf16", "fp8-e4m3", "fp8-e5m2", "mxint8", "mxfp8", "mxfp8-e5m2")
#: the fp8 formats: their GEMMs run on the accelerator top's fp8 core (tilewright.rtl.systolic_fp8)
_FP8 = ("fp8-e4m3", "fp8-e5m2")
#: the MX formats: their GEMMs run on the accelerator top's MX core (tilewright.rtl.mx_core)
_MX = ("mxint8", "mxfp8", "mxfp8-e5m2")

#: relative L2 error of an int8 layer against torch's float forward pass accepted by the check
#: (int8 per-channel weights, per-tensor activations; measured 0.42 % tiny-mamba, 0.47 %
#: tiny-llama, 0.67 % tiny-moe at seq 8, seed 0 — the bound leaves 3x headroom for other seeds;
#: for user modules, whose activations int8 may fit less well, measured 0.47 % a 64-wide Llama
#: config.json layer, 1.29 % examples/cnn.py:make, 1.50 % a 4-layer MLP through ONNX: a model
#: further off fails the check, it is not loosened per model)
TORCH_REL_L2_BOUND = 0.02
#: the same bound for the fp8 formats (3 resp. 2 mantissa bits; measured at seq 8, seed 0 on the
#: ws4x4-fp8 / ws4x4-fp8-e5m2 presets: e4m3 1.90 % tiny-llama, 1.85 % tiny-moe, 1.63 %
#: tiny-mamba; e5m2 4.31 %, 4.16 %, 3.53 % — about 3x headroom, as for int8)
FP8_REL_L2_BOUND = {"fp8-e4m3": 0.06, "fp8-e5m2": 0.13}
#: the same bound for the MX formats (block-32 E8M0 scales; measured at seq 8, seed 0 with the
#: ws32x4-mxint8 / ws32x4-mxfp8 presets and ws32x4-mxfp8 with mxfp8-e5m2 formats: mxint8 0.55 %
#: tiny-llama, 0.53 % tiny-moe, 0.51 % tiny-mamba; mxfp8 3.36 %, 3.28 %, 2.70 %; mxfp8-e5m2
#: 4.61 %, 4.47 %, 4.10 % — about 3x headroom, as for int8)
MX_REL_L2_BOUND = {"mxint8": 0.02, "mxfp8": 0.10, "mxfp8-e5m2": 0.14}


#: the most parameters one layer of a config (built-in or config.json) may have to be simulated:
#: its weights are materialized with seeded values and its int8 functional run (and with --rtl
#: every GEMM) scales with them; a real-shape layer (llama3-8b: 218 M) is costed by `compile`
MAX_SIM_LAYER_PARAMS = 4_000_000


@dataclass
class SimResult:
    """What :func:`simulate_model` measured."""

    model: str
    arch: str
    checks: list[tuple[str, bool, str]]
    gemm_rows: list[dict[str, Any]] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    rel_l2_vs_torch: float = float("nan")
    rtl: bool = False
    trace: Any = None          #: path of the VCD waveform when traced
    #: with ``vector``: per offloaded task, its kernel (and with the RTL its cycles)
    vector_rows: list[dict[str, Any]] = field(default_factory=list)
    #: with the RTL's vector engine: each kernel's raw result, in the order of the records
    vector_outputs: list[Any] = field(default_factory=list)
    #: with ``timeline``: per segment run in run order, its task, the cycle
    #: model's and the RTL's timelines and their first difference (None: equal)
    timelines: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c[1] for c in self.checks)


def gemm_blocks(m: int, k: int, n: int, arch: ArchSpec) -> list[tuple[int, int, int, int]]:
    """Split an M x K x N int8 GEMM into (m0, m1, n0, n1) output blocks whose operands fit the
    core's buffers (:class:`~tilewright.compiler.layout.GemmLayout`), widest N blocks first.

    Raises :class:`~tilewright.compiler.layout.DoesNotFit` when even one array-sized block does
    not fit (K alone too long for the buffers)."""

    te = arch.tensor_engine

    def fits(mm: int, nn: int) -> bool:
        try:
            GemmLayout.for_arch(arch, mm, k, nn).check_fits(arch)
            return True
        except DoesNotFit:
            return False

    bm, bn = m, n
    while not fits(bm, bn) and bn > te.cols:
        bn = max(te.cols, ((bn + 1) // 2 + te.cols - 1) // te.cols * te.cols)
    while not fits(bm, bn) and bm > te.rows:
        bm = max(te.rows, ((bm + 1) // 2 + te.rows - 1) // te.rows * te.rows)
    GemmLayout.for_arch(arch, bm, k, bn).check_fits(arch)   # the clear error if nothing fits
    return [(m0, min(m, m0 + bm), n0, min(n, n0 + bn))
            for m0 in range(0, m, bm) for n0 in range(0, n, bn)]


def gemm_program(pairs: list[tuple[np.ndarray, np.ndarray]], arch: ArchSpec, name: str):
    """A Program of ``gemm`` tasks ``c{i} = a{i} @ b{i}`` over int8 constants (one per pair)."""

    tensors, tasks, consts = {}, [], {}
    for i, (a, b) in enumerate(pairs):
        (m, k), n = a.shape, b.shape[1]
        for t, shape, fmt in ((f"a{i}", (m, k), "int8"), (f"b{i}", (k, n), "int8"),
                              (f"c{i}", (m, n), "int32")):
            tensors[t] = TensorInfo(name=t, shape=shape, format=fmt)
        consts[f"a{i}"], consts[f"b{i}"] = np.ascontiguousarray(a), np.ascontiguousarray(b)
        tasks.append(GemmTask(name=f"g{i}", a=f"a{i}", b=f"b{i}", out=f"c{i}", m=m, k=k, n=n))
    return Program(name=name, arch_hash=arch.content_hash(), tensors=tensors, inputs=[],
                   outputs=[f"c{i}" for i in range(len(pairs))], tasks=tasks, constants=consts)


def layer_params(model: str) -> int:
    """Parameters of the one layer :func:`simulate_model` builds for config ``model`` (counted on
    its meta-device build: nothing allocated)."""
    from tilewright.models.llm_configs import build_llm  # noqa: PLC0415  (lazy: pulls in torch)

    module, _ = build_llm(model, device="meta")
    return int(sum(p.numel() for p in module.parameters()))


def sim_module(model: str, *, seed: int = 0, seq: int = 8, batch: int = 1):
    """``(module, example inputs)`` that :func:`simulate_model` runs for ``model``, in any form
    :func:`tilewright.models.resolve.resolve_model` takes:

    * a built-in config or a Hugging Face ``config.json`` (or its folder) — one layer built on
      the CPU with weights seeded by ``seed`` (:func:`~tilewright.models.llm_configs.build_llm`,
      never the meta device), refused when it has more than :data:`MAX_SIM_LAYER_PARAMS`
      parameters;
    * ``path/file.py:factory`` or a ``.onnx`` file — the whole module with its own weights and
      the example inputs its factory/file gives (``seed``, ``seq`` and ``batch`` must keep their
      defaults: they do not apply).

    Raises :class:`~tilewright.models.llm_shapes.ModelInputError` (one line) otherwise."""
    from tilewright.models.llm_configs import build_llm  # noqa: PLC0415  (lazy: pulls in torch)
    from tilewright.models.llm_shapes import ModelInputError  # noqa: PLC0415  (lazy: models)
    from tilewright.models.resolve import resolve_model  # noqa: PLC0415  (lazy: pulls in torch)

    resolved = resolve_model(model)
    if resolved.kind == "mlp":
        raise ModelInputError(f"--model {model}: a demo MLP; run it with `tilewright demo "
                              f"--model {model}` (sim takes an LLM config, a config.json, "
                              f"file.py:factory or .onnx)")
    if resolved.kind == "user":
        if (seed, seq, batch) != (0, 8, 1):
            raise ModelInputError(f"--model {model}: --seed/--seq/--batch apply to configs; a "
                                  f"user model runs with its own weights on the example inputs "
                                  f"its factory/file gives")
        return resolved.module.eval(), resolved.example_inputs
    n = layer_params(model)
    if n > MAX_SIM_LAYER_PARAMS:
        raise ModelInputError(
            f"--model {model}: one layer has {n:,} parameters; tilewright sim builds it with real "
            f"weights and runs it in int8 up to {MAX_SIM_LAYER_PARAMS:,} parameters per layer "
            f"(e.g. tiny-llama, tiny-moe, tiny-mamba; cost a real-shape model with `tilewright "
            f"compile`)")
    return build_llm(model, seed=seed, seq=seq, batch=batch, device="cpu")


def _torch_rel_l2(module, example, outputs: dict[str, np.ndarray], names: list[str]) -> float:
    import torch  # noqa: PLC0415  (lazy: torch is heavy)

    with torch.no_grad():
        ref = module(*example)
    ref = ref if isinstance(ref, (tuple, list)) else (ref,)
    num = den = 0.0
    for r, name in zip(ref, names):
        r = r.detach().double().numpy()
        y = outputs[name].astype(np.float64)
        num += float(((y - r) ** 2).sum())
        den += float((r ** 2).sum())
    return (num / den) ** 0.5 if den else float("inf")


def simulate_model(model: str, arch: ArchSpec, *, rtl: bool = False, driver: str = "cocotb",
                   seq: int = 8, batch: int = 1, seed: int = 0, trace_dir=None,
                   top: str = "core", log=None, vector: bool = False) -> SimResult:
    """Compile ``model`` (one layer of a config, or a user module: :func:`sim_module`) for
    ``arch`` in int8 and run it (module
    docstring). ``rtl`` adds the Verilator run of every int8 GEMM (``driver`` cocotb | fast).
    ``vector`` runs the vector ops the vector engine implements in its Q8.8 arithmetic and the
    scan on the scan unit (and with ``rtl`` and ``top`` accel, on the RTL's vector engine through
    ``driver``).
    ``trace_dir`` (cocotb only; ``top`` core or accel): keep the RTL job folder there with
    ``dump.vcd``, a waveform of every signal of the top over the whole run (``result.trace``)."""
    if top not in TOPS:
        raise ValueError(f"--top {top!r}: accepted: {', '.join(TOPS)}")
    if trace_dir is not None and (not rtl or driver != "cocotb" or top not in TRACE_TOPS):
        raise ValueError("a waveform trace needs the RTL run of the GEMM core or the accelerator "
                         "top with the cocotb driver (--rtl --top core|accel, without --fast)")
    if rtl and not arch.tensor_engine.systolic and top != "accel":
        raise ArchSpecError(f"{arch.name}: tensor_engine.kind = {arch.tensor_engine.kind!r} with "
                         f"--top {top}: the tile-MAC kinds run their GEMMs on the accelerator "
                         f"top; accepted: --top accel")
    if vector and arch.vector_unit is None:
        raise ValueError(f"--vector: {arch.name} has no vector_unit section (the accelerator's "
                         "vector engine is generated from it)")
    if vector and rtl and (top != "accel" or trace_dir is not None):
        raise ValueError("--vector with --rtl runs on the accelerator top's vector engine: "
                         "needs --top accel (cocotb or --fast) and no --trace")
    if driver not in registry.TOPS[top].drivers:
        names = {"cocotb": "cocotb bench", "fast": "C++ fast driver"}
        raise ValueError(f"{registry.TOPS[top].describe(arch)} (--top {top}) runs on the "
                         f"{' or '.join(names[d] for d in registry.TOPS[top].drivers)} only "
                         f"(no --{driver})")
    if rtl and top == "axi-accel":    # never cost the design at the AXI RAM's latency instead
        check_axi_latency(arch)
    if rtl and registry.TOPS[top].compare is not None:   # the accelerator tops' vector engine
        check_transcendental_passes(arch)
    from tilewright.dataflow_sim.compile_flow import \
        compile_module  # noqa: PLC0415  (lazy: pulls in pandas, torch)

    say = log or (lambda _msg: None)
    times: dict[str, float] = {}
    fmt = arch.tensor_engine.input_format
    if fmt not in SIM_FORMATS:        # never run another format than the design's
        raise ArchSpecError(f"{arch.name}: tensor_engine.input_format = {fmt!r}: tilewright sim "
                            f"runs the formats the RTL builds, accepted: "
                            f"{', '.join(SIM_FORMATS)} (cost other formats with `tilewright "
                            f"compile --format {fmt}`)")
    spec = arch_for_format(arch, fmt)
    if fmt == "bf16" and rtl and (top != "core" or spec.tensor_engine.dataflow != "ws"
                                  or driver != "cocotb" or trace_dir is not None):
        raise ValueError("a bf16 ArchSpec runs its GEMMs on the bf16 weight-stationary core "
                         "(tilewright.rtl.systolic_bf16): needs tensor_engine.dataflow = 'ws', "
                         "--top core, the cocotb driver (no --fast) and no --trace")
    if fmt in _FP8 and rtl and (top != "accel" or vector or trace_dir is not None):
        raise ArchSpecError(f"{arch.name}: an {fmt} ArchSpec runs its GEMMs on the accelerator "
                            "top's fp8 core (tilewright.rtl.systolic_fp8): needs --top accel, "
                            "no --vector, no --trace")
    if fmt in _MX and rtl and (top != "accel" or vector or trace_dir is not None):
        raise ArchSpecError(f"{arch.name}: an {fmt} ArchSpec runs its GEMMs on the accelerator "
                            "top's MX core (tilewright.rtl.mx_core): needs --top accel, "
                            "no --vector, no --trace")
    t0 = time.perf_counter()
    module, example = sim_module(model, seed=seed, seq=seq, batch=batch)
    compiled = compile_module(module, example, spec, fmt=fmt, name=model)
    program, inputs = compiled.program, compiled.inputs
    times["compile"] = time.perf_counter() - t0

    say("functional model (recording int8 GEMMs)")
    t0 = time.perf_counter()
    recorded: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def record(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = gemm_int8(a, b)
        recorded.append((a.copy(), b.copy(), out))
        return out


    vec_ops = VectorUnitOps(spec) if vector else None
    with int8_matmul(record), (vector_unit_ops(vec_ops) if vec_ops else nullcontext()):
        func = run_program(program, inputs)
    times["functional"] = time.perf_counter() - t0
    rel = _torch_rel_l2(module, example, func, program.outputs)
    what = "functional (vector ops in Q8.8)" if vector else "functional"
    bound = {**FP8_REL_L2_BOUND, **MX_REL_L2_BOUND}.get(fmt, TORCH_REL_L2_BOUND)
    checks = [(f"{what} vs torch float: rel L2 ≤ {bound:g}",
               rel <= bound, f"{rel:.4f} over {', '.join(program.outputs)}")]
    result = SimResult(model, spec.name, checks, rel_l2_vs_torch=rel, seconds=times, rtl=rtl)
    if vec_ops is not None:
        result.vector_rows = [{"op": r.task, "kernel": r.kernel.op, "shape": r.kernel.shape}
                              for r in vec_ops.records]
    if not rtl:
        return result

    if fmt == "bf16":
        return _run_bf16(result, program, inputs, spec, say)
    if fmt in _FP8:
        return _run_fp8_on_accel(result, program, inputs, spec, say, driver)
    if fmt in _MX:
        return _run_mx_on_accel(result, program, inputs, spec, say, driver)
    if registry.TOPS[top].compare is not None:       # a programmable top: the accelerator model
        return run_gemms_on_accel(result, recorded, program, inputs, func, spec, say, top, driver,
                             trace_dir, vector_records=vec_ops.records if vec_ops else None)
    # the core's buffers hold a bounded GEMM: split each recorded matmul into blocks that fit
    pairs, owner = [], []
    for i, (a, b, _) in enumerate(recorded):
        for m0, m1, n0, n1 in gemm_blocks(a.shape[0], a.shape[1], b.shape[1], spec):
            pairs.append((a[m0:m1], b[:, n0:n1]))
            owner.append((i, m0, m1, n0, n1))
    gprog = gemm_program(pairs, spec, f"{model}-gemms")
    say(f"RTL: {len(recorded)} int8 GEMMs as {len(pairs)} core runs ({driver} driver)")
    from tilewright.dataflow_sim.cycle import gemm_report  # noqa: PLC0415  (lazy: pulls in pandas)

    t0 = time.perf_counter()
    sim = run(top, gprog, spec, driver=driver, log=say, keep_dir=trace_dir,
              waves=trace_dir is not None)
    if trace_dir is not None:
        result.trace = Path(trace_dir) / "dump.vcd"
    times["rtl"] = time.perf_counter() - t0
    rtl_out = [np.zeros_like(c) for _, _, c in recorded]
    for j, (i, m0, m1, n0, n1) in enumerate(owner):
        rtl_out[i][m0:m1, n0:n1] = sim.outputs[f"c{j}"]
    same_gemm = all(np.array_equal(r, c) for r, (_, _, c) in zip(rtl_out, recorded))
    worst = max((int(np.abs(r.astype(np.int64) - c).max()) for r, (_, _, c)
                 in zip(rtl_out, recorded)), default=0)
    checks.append(("RTL GEMMs == numpy int32 (bit-exact)", same_gemm,
                   f"{len(recorded)} GEMMs, max |diff| {worst}"))

    _replay_check(checks, rtl_out, program, inputs, func, say)

    report = gemm_report(gprog, spec)
    rows = []
    for (_, r), rec in zip(report.iterrows(), sim.records):
        rows.append({"op": r["op"], "m": int(r["m"]), "k": int(r["k"]), "n": int(r["n"]),
                     "rtl": int(rec["cycles"]), "model": int(r["cycles"]),
                     "util": float(r["utilization"])})
    checks.append(_cycles_check("RTL cycles == cycle model (every GEMM)", rows,
                                len(sim.records), len(report)))
    result.gemm_rows = rows
    return result


def _cycles_check(label: str, rows, records: int | None = None, gemms: int | None = None
                  ) -> tuple[str, bool, str]:
    """The check that every GEMM's RTL cycles equal the model's (``rows``: dicts with ``rtl``
    and ``model``); given ``records`` and ``gemms``, also that there is one RTL record per GEMM
    (a missing record must not pass by zip)."""
    mism = [x for x in rows if x["rtl"] != x["model"]]
    paired = records == gemms
    return (label, paired and not mism,
            f"total {sum(x['rtl'] for x in rows):,} vs {sum(x['model'] for x in rows):,}"
            + (f"; {len(mism)} differ, first {mism[0]}" if mism else "")
            + ("" if paired else f"; {records} RTL records for {gemms} GEMMs"))


def _accel_rows(comparison: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per GEMM of an accelerator run: its shape, RTL and model cycles, utilization
    (``comparison``: the top's cycle-model comparison, :meth:`SimRun.comparison`)."""
    return [{"op": r["task"], "m": r["m"], "k": r["k"], "n": r["n"], "rtl": r["rtl_cycles"],
             "model": r["model_cycles"], "util": r["utilization"]} for r in comparison]


def _replay_check(checks, rtl_out, program, inputs, func, say, vector_hook=None) -> None:
    """Run the functional model again with every int8 matmul answered, in order, by the RTL's
    results (and, with ``vector_hook``, every offloaded vector task by the RTL's vector engine);
    append the bit-exactness check of the layer outputs."""


    say("functional model with the RTL's results")
    answers = iter(rtl_out)

    def replay(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = next(answers)
        if out.shape != (a.shape[0], b.shape[1]):
            raise RuntimeError("replayed GEMMs out of order: the functional run is not "
                               "deterministic")
        return out

    with int8_matmul(replay), (vector_unit_ops(vector_hook) if vector_hook else nullcontext()):
        again = run_program(program, inputs)
    same_out = all(np.array_equal(again[o], func[o]) for o in program.outputs)
    what = "GEMMs and vector ops" if vector_hook else "GEMMs"
    checks.append((f"layer output with RTL {what} == functional (bit-exact)", same_out,
                   ", ".join(f"{o} {again[o].dtype}{list(again[o].shape)}"
                             for o in program.outputs)))


def imem_batches(shapes: list[tuple[int, int, int]], spec: ArchSpec) -> list[tuple[int, int]]:
    """Consecutive ``(lo, hi)`` ranges of GEMMs ``(m, k, n)`` whose code (one segment each,
    :func:`~tilewright.compiler.codegen.codegen_gemm`) fits the controller's instruction memory
    (:data:`~tilewright.compiler.codegen.IMEM_WORDS`): each range runs as one program."""
    out, lo, used = [], 0, 0
    for i, (m, k, n) in enumerate(shapes):
        words = len(codegen_gemm(spec, m, k, n)[0])
        if used + words > IMEM_WORDS and i > lo:
            out.append((lo, i))
            lo, used = i, 0
        used += words
    if shapes:
        out.append((lo, len(shapes)))
    return out


#: the check that every segment run's RTL timeline equals the cycle model's
TIMELINE_CHECK = ("RTL timeline == accelerator cycle model (every instruction's issue cycle, "
                  "every DMA/array/vector/scan busy interval)")


def timeline_check(rows: list[dict[str, Any]]) -> tuple[str, bool, str]:
    """:data:`TIMELINE_CHECK` over ``rows`` (:attr:`SimResult.timelines`): passes when every
    run's timelines are equal; the detail names the first difference."""
    bad = [r for r in rows if r["difference"] is not None]
    events = sum(len(r["rtl"].issues) + len(r["rtl"].busy) for r in rows)
    return (TIMELINE_CHECK, bool(rows) and not bad,
            f"{len(rows)} runs, {events:,} events" if not bad else
            f"{len(bad)} of {len(rows)} runs differ, first {bad[0]['difference']}")


def run_gemms_on_accel(result: SimResult, recorded, program, inputs, func, spec, say, top: str,
                  driver: str, trace_dir=None, vector_records=None,
                  timeline: bool = False) -> SimResult:
    """The recorded GEMMs as Programs on a programmable top of the registry (one, or as many as
    the instruction memory needs: :func:`imem_batches`): the accelerator
    (ISA, DMA, double-buffered core; cocotb or the C++ fast driver) or the same accelerator behind
    AXI (program loaded and started over AXI4-Lite, operands and results in a cocotbext-axi AxiRam
    on the AXI4 port), through :func:`tilewright.cosim.sim.run`: outputs bit-exact, the layer
    replayed with them, every GEMM's cycles (DMA included) equal to the top's cycle-model
    comparison (:mod:`tilewright.dataflow_sim.accel_timing`; for AXI the ArchSpec's latency
    must be the AxiRam's, :func:`~tilewright.cosim.program_jobs.check_axi_latency`).
    ``vector_records`` (the offloaded vector tasks of the functional run) also run on the top's
    vector engine (:func:`_run_vector_kernels`) and answer the replay. ``timeline`` (top accel,
    either driver): record every run's RTL timeline next to the cycle model's
    (``result.timelines``) and check them equal (:func:`timeline_check`)."""
    name, where, what, check = _ACCEL_WORDING[top]
    drv = "C++ fast driver" if driver == "fast" else "cocotb"
    batches = imem_batches([(a.shape[0], a.shape[1], b.shape[1]) for a, b, _ in recorded], spec)
    if trace_dir is not None and len(batches) > 1:
        raise ValueError(f"the {len(recorded)} GEMMs need {len(batches)} programs (the "
                         f"controller's instruction memory holds {IMEM_WORDS} words); a "
                         f"waveform covers one program")
    say(f"RTL: {len(recorded)} int8 GEMMs on the {what.format(drv=drv)}"
        + (f" as {len(batches)} programs" if len(batches) > 1 else ""))
    t0 = time.perf_counter()
    rtl_out, comparison = [], []
    for lo, hi in batches:
        gprog = gemm_program([(a, b) for a, b, _ in recorded[lo:hi]], spec, name)
        sim = run(top, gprog, spec, driver=driver, log=say, keep_dir=trace_dir,
                  waves=trace_dir is not None, **({"timeline": True} if timeline else {}))
        rtl_out += [sim.outputs[f"c{i}"] for i in range(hi - lo)]
        # gemm_program names its tasks g0, g1, ... per program: renumber them over all
        comparison += [{**r, "task": f"g{lo + int(r['task'][1:])}"}
                       for r in sim.comparison(spec)]
        if timeline:
            result.timelines += [{**r, "task": f"g{lo + int(r['task'][1:])}"}
                                 for r in timeline_comparison(sim, spec)]
    if trace_dir is not None:
        result.trace = Path(trace_dir) / "dump.vcd"
    result.seconds["rtl"] = time.perf_counter() - t0
    same = len(rtl_out) == len(recorded) and all(
        np.array_equal(r, c) for r, (_, _, c) in zip(rtl_out, recorded))
    result.checks.append(("RTL GEMMs == numpy int32 (bit-exact)", same,
                          f"{len(recorded)} GEMMs {where}"))
    hook = (_run_vector_kernels(result, vector_records, spec, say, driver, timeline)
            if vector_records is not None else None)
    if timeline:
        result.checks.append(timeline_check(result.timelines))
    _replay_check(result.checks, rtl_out, program, inputs, func, say, hook)
    rows = _accel_rows(comparison)
    result.checks.append(_cycles_check(check, rows, len(rows), len(recorded)))
    result.gemm_rows = rows
    return result


def _run_vector_kernels(result: SimResult, records, spec, say, driver: str = "cocotb",
                        timeline: bool = False):
    """Run the offloaded vector tasks' kernels on the accelerator top's vector engine (through
    ``driver``: cocotb or the C++ fast driver):
    append the bit-exactness and cycle checks, fill ``result.vector_rows`` and return the replay
    hook answering the tasks with the RTL's results."""

    if not records:
        result.checks.append(("vector ops on the RTL vector engine", False,
                              "the layer has no vector op the vector engine takes"))
        return None
    say(f"RTL: {len(records)} vector/scan kernels on the accelerator's vector engine "
        f"({'C++ fast driver' if driver == 'fast' else 'cocotb'})")
    t0 = time.perf_counter()
    batch = KernelBatch([r.kernel for r in records],
                        {r.kernel.name: list(r.operands) for r in records})
    sim = run("accel", batch, spec, driver=driver, log=say,
              **({"timeline": True} if timeline else {}))
    if timeline:
        result.timelines += timeline_comparison(sim, spec)
    result.seconds["rtl_vector"] = time.perf_counter() - t0
    outs = [sim.outputs[r.kernel.name] for r in records]
    result.vector_outputs = outs
    bad = [r.task for r, o in zip(records, outs) if not r.same_result(o)]
    result.checks.append(("RTL vector engine == instruction-level model (bit-exact)",
                          not bad, f"{len(records)} kernels "
                          f"({', '.join(sorted({r.kernel.op for r in records}))})"
                          + (f"; {len(bad)} differ, first {bad[0]}" if bad else "")))
    comp = sim.comparison(spec)
    result.vector_rows = [{"op": r.task, "kernel": c["op"], "shape": c["shape"],
                           "rtl": c["rtl_cycles"], "model": c["model_cycles"]}
                          for r, c in zip(records, comp)]
    mism = [c for c in comp if not c["equal"]]
    if len(comp) != len(records):                 # a missing record must not pass by zip
        mism.append({"op": f"{len(comp)} RTL records for {len(records)} kernels"})
    result.checks.append((
        "RTL cycles == accelerator cycle model (every vector kernel, DMA included)", not mism,
        f"total {sum(c['rtl_cycles'] for c in comp):,} vs "
        f"{sum(c['model_cycles'] for c in comp):,}"
        + (f"; {len(mism)} differ, first {mism[0]}" if mism else "")))
    return ReplayVectorUnit(list(records), outs)


def _run_bf16(result: SimResult, program, inputs, spec, say) -> SimResult:
    """bf16 ArchSpec: every bf16 GEMM (fp32 accumulate, ``k_block`` = rows) recorded from the
    functional model, run on the Verilated bf16 WS core (the registry's ``bf16-core``),
    compared bit for bit (fp32 patterns), replayed into the layer; cycles vs the WS closed form.
    The core's buffers are the ArchSpec's (:meth:`Bf16Params.for_arch`); a GEMM that does not fit
    them is refused (:class:`DoesNotFit`, naming ``memory.scratchpad_kib`` and
    ``memory.accumulator_kib``) before any build."""

    te = spec.tensor_engine
    recorded, func = _record_fp32_gemms(bf16_matmul, get_format("bf16"), te.rows, program, inputs)
    params = Bf16Params.for_arch(spec)     # the ArchSpec's buffers, never sized to the GEMMs
    for a, b, _ in recorded:
        lay = bf16_gemm_words(te.rows, te.cols, a, b)[0]
        for buf, need, have in zip(("A buffer", "B buffer", "accumulator"),
                                   (lay.a_words, lay.b_words, lay.acc_words),
                                   params.buffer_depths):
            if need > have:
                raise DoesNotFit(
                    f"bf16 GEMM {lay.m}x{lay.k}x{lay.n} on {spec.name}: {buf} needs {need} "
                    f"words, has {have} (memory.scratchpad_kib={spec.memory.scratchpad_kib}, "
                    f"memory.accumulator_kib={spec.memory.accumulator_kib}; bf16 lanes)")
    say(f"RTL: {len(recorded)} bf16 GEMMs on the bf16 WS core (A, B, accumulator buffers of "
        f"{', '.join(map(str, params.buffer_depths))} words)")
    t0 = time.perf_counter()
    runs = run("bf16-core", [(a, b) for a, b, _ in recorded], params, log=say).records
    result.seconds["rtl"] = time.perf_counter() - t0
    _fp32_replay_checks(result, bf16_matmul, "bf16", f"{len(recorded)} GEMMs, k_block {te.rows}",
                        recorded, [r.c for r in runs], program, inputs, func)
    rows = []
    for i, ((a, b, _), r) in enumerate(zip(recorded, runs)):
        (m, k), n = a.shape, b.shape[1]
        model = int(gemm_cycles_array(m, k, n, te.rows, te.cols, "ws")[0])
        rows.append({"op": f"g{i}", "m": m, "k": k, "n": n, "rtl": r.cycles, "model": model,
                     "util": m * k * n / (te.macs_per_cycle * r.cycles)})
    result.checks.append(_cycles_check("RTL cycles == cycle model (every GEMM)", rows,
                                       len(runs), len(recorded)))
    result.gemm_rows = rows
    return result


def fp8_gemm_program(pairs: list[tuple[QTensor, QTensor]], arch: ArchSpec, name: str) -> Program:
    """A Program of fp8 ``gemm`` tasks ``c{i} = a{i} @ b{i}`` (one per pair of QTensors of the
    arch's fp8 format; A with one fp32 scale or none, B with one, one per output column or
    none): the element codes as int8 bytes ``a{i}``/``b{i}``; a pair with a scale gets its
    scales as fp32 constants ``sa{i}`` (one element) and ``sb{i}`` (one or N; 1.0 for an
    operand without one), which become its segment's SCALE/SCALE_COL instructions
    (:func:`~tilewright.compiler.codegen.task_scales`); a pair without scales runs at the
    run's initial 1.0. ``c{i}`` comes back as fp32 bit patterns in int32. ValueError naming
    the GEMM for any other scale (per-row A scales: the top scales A per tensor)."""
    fmt = arch.tensor_engine.input_format
    prog = gemm_program([(a.values.view(np.int8), b.values.view(np.int8)) for a, b in pairs],
                        arch, name)
    tensors, consts, tasks = dict(prog.tensors), dict(prog.constants), []
    for i, (task, (a, b)) in enumerate(zip(prog.tasks, pairs)):
        for q, what in ((a, "a"), (b, "b")):
            if not isinstance(q, QTensor) or q.format != fmt or q.values.ndim != 2:
                raise ValueError(f"fp8 GEMM {i}: operand {what.upper()} must be a 2-D {fmt} "
                                 f"QTensor")
            if not _top_scales(q, what):
                raise ValueError(f"fp8 GEMM {i}: operand {what.upper()} has "
                                 f"{q.scales.size} scales; the accelerator top takes one per "
                                 f"tensor" + (" or one per output column (SCALE_COL)"
                                              if what == "b" else " (SCALE)"))
        if a.scales is None and b.scales is None:
            tasks.append(task)
            continue
        for q, what in ((a, "a"), (b, "b")):
            t = f"s{what}{i}"          # a missing scale is 1.0
            x = np.asarray(1.0 if q.scales is None else q.scales, np.float32).reshape(-1)
            consts[t] = x
            tensors[t] = TensorInfo(name=t, shape=x.shape, format="fp32")
        tasks.append(GemmTask(**{**task.model_dump(), "a_scale": f"sa{i}", "b_scale": f"sb{i}"}))
    return Program(name=name, arch_hash=prog.arch_hash, tensors=tensors, inputs=[],
                   outputs=list(prog.outputs), tasks=tasks, constants=consts)


def _top_scales(q: QTensor, what: str) -> bool:
    """True when the accelerator top applies ``q``'s scales as operand ``what`` ("a"/"b"): none
    or one per tensor (SCALE), or for B one per output column (SCALE_COL)."""
    if q.scales is None or q.scales.size == 1:
        return True
    return what == "b" and q.scales.size == q.values.shape[1] and (
        q.scales.ndim == 1 or q.scales.shape[-1] == q.scales.size)


def _run_fp8_on_accel(result: SimResult, program, inputs, spec, say, driver: str) -> SimResult:
    """fp8 ArchSpec: every fp8 GEMM of the functional model (QTensors with their fp32 scales;
    fp32 accumulate, ``k_block`` = rows) recorded, run as one Program on the accelerator top with
    the fp8 core (ISA, DMA; the fp8 codes travel as bytes, the fp32 results come back as 32-bit
    words), compared bit for bit (fp32 patterns) with numerics (all four steps, the scales
    included) and replayed into the layer; cycles vs the accelerator cycle model. Scales
    (numerics step 4) are applied by the top: per-tensor ones by SCALE, per-output-channel
    weight scales (the weights' default granularity) by SCALE_COL; a GEMM whose scales the top
    cannot take (per-row A) stops the run (ValueError naming it, from
    :func:`fp8_gemm_program`). A check line counts each kind."""
    te = spec.tensor_engine
    fmt = te.input_format
    recorded: list[tuple[QTensor, QTensor, np.ndarray]] = []   # as sent to the top
    channel = []                                                # per recorded GEMM

    def record(qa, qb, kb):
        if kb != te.rows:
            raise RuntimeError(f"{fmt} GEMM with k_block {kb}: the core sums {te.rows} "
                               f"products per tile")
        channel.append(qb.scales is not None and qb.scales.size > 1)
        with fp8_matmul(None):             # numerics' own rule is the reference
            out = numerics_gemm(qa, qb, fmt, acc="fp32", k_block=kb)
        recorded.append((qa, qb, out))
        return out

    with fp8_matmul(record):
        func = run_program(program, inputs)
    gprogs = _programs_that_fit([(a, b) for a, b, _ in recorded], spec, "accel-fp8-gemms")

    def replay(answer):
        return fp8_matmul(lambda qa, qb, kb: answer())

    n_col = sum(channel)
    return _run_float_program_on_accel(
        result, None, recorded, replay, fmt,
        f"k_block {te.rows}; scales applied by the top for all {len(channel)} GEMMs: "
        f"{len(channel) - n_col} per-tensor (SCALE), {n_col} per output channel (SCALE_COL); "
        f"none on the host" + (f"; {len(gprogs)} runs (instruction memory)"
                               if len(gprogs) > 1 else ""),
        program, inputs, func, spec, say, driver, gprogs=gprogs)


def _programs_that_fit(pairs, spec: ArchSpec, name: str) -> list[Program]:
    """:func:`fp8_gemm_program` of ``pairs`` cut, in order, into as few Programs as fit the
    controller's instruction memory each (per-column scales add instructions: SCALE_COL, and
    tiles one array width wide); a single GEMM that does not fit raises the CodegenError."""
    out, start = [], 0
    while start < len(pairs):
        end = start + 1
        codegen(fp8_gemm_program(pairs[start:end], spec, name), spec)   # raises if one does not
        while end < len(pairs):
            try:
                codegen(fp8_gemm_program(pairs[start:end + 1], spec, name), spec)
            except CodegenError:
                break
            end += 1
        out.append(fp8_gemm_program(pairs[start:end], spec, f"{name}-{len(out)}"))
        start = end
    return out


def _run_float_program_on_accel(result: SimResult, gprog, recorded, hook, what: str, unit: str,
                                program, inputs, func, spec, say, driver: str,
                                gprogs: list[Program] | None = None) -> SimResult:
    """Run ``gprog`` (the ``recorded`` GEMMs of format ``what``; or ``gprogs``, the same GEMMs
    cut in order into several runs) on the accelerator top through ``driver``; its outputs come
    back as fp32 bit patterns in int32. Append the bit-pattern and replay checks
    (:func:`_fp32_replay_checks`, the layer replayed through ``hook``) and the cycle check
    against the accelerator cycle model; fill ``result.gemm_rows``."""
    drv = "C++ fast driver" if driver == "fast" else "cocotb"
    say(f"RTL: {len(recorded)} {what} GEMMs on the accelerator top (ISA + DMA, {drv})")
    t0 = time.perf_counter()
    rtl_out, comparison = [], []
    for gp in gprogs or [gprog]:
        sim = run("accel", gp, spec, driver=driver, log=say)
        rtl_out += [np.ascontiguousarray(sim.outputs[f"c{i}"]).view(np.float32)
                    for i in range(len(gp.outputs))]
        comparison += list(sim.comparison(spec))
    result.seconds["rtl"] = time.perf_counter() - t0
    _fp32_replay_checks(result, hook, what,
                        f"{len(recorded)} GEMMs on the accelerator top, {unit}",
                        recorded, rtl_out, program, inputs, func)
    rows = _accel_rows(comparison)
    result.checks.append(_cycles_check(_ACCEL_WORDING["accel"][3], rows, len(rows),
                                       len(recorded)))
    result.gemm_rows = rows
    return result


def _record_fp32_gemms(hook, f, k_block: int, program, inputs):
    """Run ``program`` on the functional model with every GEMM of format ``f`` that ``hook``
    (:func:`~tilewright.dataflow_sim.functional.bf16_matmul` or
    :func:`~tilewright.dataflow_sim.matmul_hooks.fp8_matmul`) intercepts computed as the core
    computes it (fp32 accumulate, ``k_block`` products per tile) and recorded; returns
    ([(a, b, fp32 C)], the functional run's tensors)."""
    recorded: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def record(a, b, kb):
        if kb != k_block:
            raise RuntimeError(f"{f.name} GEMM with k_block {kb}: the core sums {k_block} "
                               f"products per tile")
        out = sequential_fp32_matmul(element_values(a, f), element_values(b, f), kb)
        recorded.append((a.copy(), b.copy(), out))
        return out

    with hook(record):
        func = run_program(program, inputs)
    return recorded, func


def _fp32_replay_checks(result: SimResult, hook, what: str, detail: str, recorded, rtl_out,
                        program, inputs, func) -> None:
    """Append the two checks of a floating-point run: every RTL GEMM equals the recorded one
    (fp32 bit patterns, one RTL result per GEMM), and the layer run again with ``hook`` answering
    each GEMM, in order, with the RTL's result equals the functional run (bit-exact)."""
    same = len(rtl_out) == len(recorded) and all(
        np.array_equal(r.view(np.uint32), c.view(np.uint32))
        for r, (_, _, c) in zip(rtl_out, recorded))
    result.checks.append((f"RTL {what} GEMMs == numerics (fp32 bit patterns)", same, detail))
    answers = iter(rtl_out)
    with hook(lambda *_: next(answers)):        # (a, b, k_block) or MX (qa, qb)
        again = run_program(program, inputs)
    same_out = all(np.array_equal(again[o], func[o]) for o in program.outputs)
    result.checks.append(("layer output with RTL GEMMs == functional (bit-exact)", same_out,
                          ", ".join(program.outputs)))


def mx_gemm_program(pairs: list[tuple[QTensor, QTensor]], arch: ArchSpec, name: str) -> Program:
    """A Program of MX ``gemm`` tasks ``c{i} = a{i} @ b{i}`` (one per pair of QTensors of the
    arch's MX format: ``a`` along K = axis 1, ``b`` along axis 0): the element codes as int8
    bytes ``a{i}``/``b{i}``, their E8M0 block-scale codes ``xa{i}``/``xb{i}``; ``c{i}`` comes
    back as fp32 bit patterns in int32."""
    fmt = arch.tensor_engine.input_format
    tensors, tasks, consts = {}, [], {}
    for i, (a, b) in enumerate(pairs):
        for q, axis, what in ((a, 1, "A"), (b, 0, "B")):
            if (not isinstance(q, QTensor) or q.format != fmt or q.axis != axis
                    or q.values.ndim != 2):
                raise ValueError(f"MX GEMM {i}: operand {what} must be a 2-D {fmt} QTensor "
                                 f"quantized along axis {axis}")
        (m, k), n = a.shape, b.shape[1]
        arrays = {f"a{i}": a.values.view(np.int8), f"b{i}": b.values.view(np.int8),
                  f"xa{i}": a.scales, f"xb{i}": b.scales}
        for t, x in arrays.items():
            consts[t] = np.ascontiguousarray(x)
            tensors[t] = TensorInfo(name=t, shape=x.shape, format="int8" if t[0] in "ab"
                                    else "e8m0")
        tensors[f"c{i}"] = TensorInfo(name=f"c{i}", shape=(m, n), format="int32")
        tasks.append(GemmTask(name=f"g{i}", a=f"a{i}", b=f"b{i}", out=f"c{i}", m=m, k=k, n=n,
                              a_scale=f"xa{i}", b_scale=f"xb{i}"))
    return Program(name=name, arch_hash=arch.content_hash(), tensors=tensors, inputs=[],
                   outputs=[f"c{i}" for i in range(len(pairs))], tasks=tasks, constants=consts)


def _run_mx_on_accel(result: SimResult, program, inputs, spec, say, driver: str) -> SimResult:
    """MX ArchSpec: every MX GEMM of the functional model (QTensors with their E8M0 block scales;
    the fp32 result of numerics' MX rule) recorded, run as one Program on the accelerator top with
    the MX core (ISA, DMA; element codes and scale codes travel together in the A/B words,
    :mod:`tilewright.compiler.layout`; the fp32 results come back as 32-bit words), compared bit
    for bit (fp32 patterns) and replayed into the layer; cycles vs the accelerator cycle model."""
    fmt = spec.tensor_engine.input_format
    recorded: list[tuple[QTensor, QTensor, np.ndarray]] = []

    def record(qa, qb):
        with mx_matmul(None):              # numerics' own MX rule is the reference
            out = numerics_gemm(qa, qb, fmt, k_block=MX_BLOCK)
        recorded.append((qa, qb, out))
        return out

    with mx_matmul(record):
        func = run_program(program, inputs)
    gprog = mx_gemm_program([(a, b) for a, b, _ in recorded], spec, "accel-mx-gemms")
    return _run_float_program_on_accel(result, gprog, recorded, mx_matmul, fmt,
                                       f"block {MX_BLOCK}", program, inputs, func, spec, say,
                                       driver)
