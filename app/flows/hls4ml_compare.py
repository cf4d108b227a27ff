"""hls4ml side by side with tilewright: one torch module through both routes, both against torch.

* **hls4ml route** — ``hls4ml.utils.config_from_pytorch_model`` + ``hls4ml.converters.
  convert_from_pytorch_model`` write an HLS C++ project (``<out_dir>/firmware/myproject.cpp``);
  ``compile()`` builds its bit-accurate C simulation with g++ and ``predict()`` runs it, one sample
  at a time. Every type of the model is ``precision`` (hls4ml's ``'model'`` granularity; the
  default ``ap_fixed<16,6>`` truncates and wraps). Latency and resources come only from the
  vendor's HLS synthesis (Vitis/Vivado ``csynth`` reports), which is not run here: those cells say
  so instead of holding a number.
* **tilewright route** — a plain ``Linear``+``ReLU`` module goes through the demo's int8 flow
  (:func:`tilewright.compiler.compile_model`: per-channel int8 weights, int32 accumulation,
  requantization; input ``clamp(round(x / input_scale))``, output ``y_q * output_scale``); any
  other module through :func:`tilewright.dataflow_sim.compile_flow.compile_module` in ``arch``'s input format.
  The Program runs on the functional model (:mod:`tilewright.dataflow_sim.functional`); latency
  is the Report's ``total_cycles`` (:mod:`tilewright.dataflow_sim.report`: every task costed,
  tasks serialized, roofline per task) for the whole example batch.

Numerics of each route against the torch float32 output (the module's first output when it
returns a tuple): max |error|, relative L2 error ``||y - y_ref|| / ||y_ref||`` and, for a
classifier (2-D output with more than one column), the fraction of rows whose argmax agrees.
A route the tool cannot take is a row with ``status="unsupported"`` and the tool's own message.
"""

from __future__ import annotations

import contextlib
import io
import re
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tilewright.arch import ArchSpec
from tilewright.compiler import compile_model
from tilewright.compiler.layout import DoesNotFit
from tilewright.extras import require
from tilewright.dataflow_sim.compile_flow import compile_module
from tilewright.dataflow_sim.cycle import gemm_report
from tilewright.dataflow_sim.functional import run_program
from tilewright.dataflow_sim.report import program_report, report_totals

__all__ = ["RouteResult", "Comparison", "compare_hls4ml", "run_hls4ml", "run_tilewright",
           "numerics", "score_route", "torch_reference", "fixed_lsb", "small_cnn",
           "SIDE_BY_SIDE_MODELS", "build_side_by_side", "HLS4ML_CSIM_BACKENDS",
           "HLS4ML_NO_REPORT"]

#: hls4ml backends whose ``compile()``/``predict()`` need only g++ (shared/TOOLCHAIN.md)
HLS4ML_CSIM_BACKENDS = ("Vivado", "Vitis", "VivadoAccelerator", "Catapult", "Quartus")
#: what the latency/resource cells of the hls4ml route say: hls4ml has no estimate of its own
HLS4ML_NO_REPORT = "needs vendor HLS synthesis (csynth), not run"
_PRECISION = re.compile(r"^(ap_)?u?(fixed<\s*\d+\s*,\s*-?\d+\s*(,\s*\w+\s*)*>|int<\s*\d+\s*>)$")


@dataclass
class RouteResult:
    """One route's outcome for one model. Errors are in the output's float units; ``wall_s`` in
    seconds (conversion + build + run of that route); ``latency_cycles`` in accelerator clock
    cycles (``None`` where the tool gives none, ``latency_source`` says why)."""

    model: str
    route: str
    status: str
    """``"ok"``; ``"unsupported"`` (the tool refused the model) or ``"error"`` (hls4ml's g++
    build or C simulation failed); ``message`` then holds the tool's own error"""
    config: str
    wall_s: float
    max_abs_err: float | None = None
    rel_l2: float | None = None
    argmax_agree: float | None = None
    latency_cycles: int | None = None
    latency_source: str = ""
    resources: str = ""
    message: str = ""
    outputs: np.ndarray | None = field(default=None, repr=False)
    """the route's output as float64, shaped like the torch reference"""
    project_dir: Path | None = None
    """hls4ml's generated project (HLS C++ under ``firmware/``)"""
    stage_s: dict[str, float] = field(default_factory=dict)
    """wall seconds of the route's stages (hls4ml: convert, build, run; tilewright: compile,
    run, report — or compile+run for the general flow)"""
    output_lsb: float | None = None
    """the output's quantization step in float units (hls4ml: ``2**-(W-I)`` of the type;
    tilewright int8 flow: the output scale); ``None`` for float-output flows"""

    def row(self) -> dict[str, Any]:
        """The table row (no arrays)."""
        return {k: getattr(self, k) for k in ("model", "route", "status", "config", "max_abs_err",
                                              "rel_l2", "argmax_agree", "latency_cycles",
                                              "latency_source", "resources", "wall_s",
                                              "output_lsb", "message")}


@dataclass
class Comparison:
    """Both routes for one model, and the torch float32 reference they were measured against."""

    model: str
    reference: np.ndarray = field(repr=False)
    routes: list[RouteResult]

    def route(self, name: str) -> RouteResult:
        """The result of route ``name`` (``"hls4ml"`` or ``"tilewright"``)."""
        for r in self.routes:
            if r.route == name:
                return r
        raise KeyError(f"no route {name!r}; have {[r.route for r in self.routes]}")

    def to_frame(self) -> pd.DataFrame:
        """One row per route (:meth:`RouteResult.row`)."""
        return pd.DataFrame([r.row() for r in self.routes])


# ---- numerics -----------------------------------------------------------------------------------
def numerics(y: np.ndarray, ref: np.ndarray) -> dict[str, float | None]:
    """Max |y - ref|, ``||y - ref||_2 / ||ref||_2`` and, for a classifier output ([batch,
    classes], classes > 1), the fraction of rows whose argmax agrees (else ``None``)."""
    y, ref = np.asarray(y, np.float64), np.asarray(ref, np.float64)
    if y.shape != ref.shape:
        raise ValueError(f"output shape {y.shape} differs from the torch reference's {ref.shape}")
    diff = y - ref
    agree = None
    if ref.ndim == 2 and ref.shape[1] > 1:
        agree = float(np.mean(np.argmax(y, axis=1) == np.argmax(ref, axis=1)))
    return {"max_abs_err": float(np.abs(diff).max()),
            "rel_l2": float(np.linalg.norm(diff) / max(np.linalg.norm(ref), 1e-300)),
            "argmax_agree": agree}


def _inputs(example_input: Any) -> tuple:
    return tuple(example_input) if isinstance(example_input, (tuple, list)) else (example_input,)


def _torch_reference(module: Any, inputs: tuple) -> np.ndarray:
    import torch  # noqa: PLC0415  (lazy: torch is heavy)

    with torch.no_grad():
        out = module(*inputs)
    out = out[0] if isinstance(out, (tuple, list)) else out
    return out.detach().double().cpu().numpy()


def _short(exc: BaseException, *, where: bool = False) -> str:
    """One line: the exception's class and message, without the compiler's list of supported
    ops; with ``where``, the innermost traceback line outside site-packages (the model's own
    line that a tracer tripped on)."""
    text = " ".join(str(exc).split())
    msg = f"{type(exc).__name__}: {text.split(' (supported:')[0]}"
    if where:
        frames = [f for f in traceback.extract_tb(exc.__traceback__)
                  if "site-packages" not in f.filename and f.filename != __file__]
        if frames:
            f = frames[-1]
            msg += f" (at {Path(f.filename).name}:{f.lineno}: {(f.line or '').strip()})"
    return msg


def fixed_lsb(precision: str) -> float:
    """The quantization step (float units) of an hls4ml fixed-point type: ``2**-(W - I)`` for
    ``ap_fixed<W,I,...>``, 1 for integer types."""
    m = re.search(r"fixed<\s*(\d+)\s*,\s*(-?\d+)", precision)
    return 2.0 ** -(int(m[1]) - int(m[2])) if m else 1.0


# ---- hls4ml route -------------------------------------------------------------------------------
def _check_hls4ml_args(precision: str, reuse_factor: int, backend: str) -> None:
    if not isinstance(precision, str) or not _PRECISION.match(precision.strip()):
        raise ValueError(f"precision {precision!r} is not an hls4ml fixed-point type; accepted: "
                         "ap_fixed<W,I[,rounding,saturation]>, fixed<W,I>, ap_int<W>, "
                         "ap_uint<W>")
    if not isinstance(reuse_factor, int) or isinstance(reuse_factor, bool) or reuse_factor < 1:
        raise ValueError(f"reuse_factor must be an integer >= 1, got {reuse_factor!r}")
    if backend not in HLS4ML_CSIM_BACKENDS:
        raise ValueError(f"backend {backend!r} cannot build a C simulation with g++ alone; "
                         f"accepted: {', '.join(HLS4ML_CSIM_BACKENDS)}")


def run_hls4ml(module: Any, example_input: Any, *, out_dir: str | Path,
               precision: str = "ap_fixed<16,6>", reuse_factor: int = 1, backend: str = "Vitis",
               name: str = "model") -> RouteResult:
    """Convert ``module`` with hls4ml into an HLS project in ``out_dir``, build its C simulation
    with g++ and run it on ``example_input`` (batch first). hls4ml's own errors (unsupported
    layer, torch.fx trace failure) give ``status="unsupported"``, a failed g++ build or
    ``predict`` ``status="error"``, with hls4ml's message;
    ``outputs`` are not compared here (see :func:`compare_hls4ml`)."""
    _check_hls4ml_args(precision, reuse_factor, backend)
    out_dir = Path(out_dir)
    inputs = _inputs(example_input)
    cfg_text = f"{precision}, reuse {reuse_factor}, {backend}, io_parallel"
    # a missing tool is an error (ExtraMissing, an ImportError), never an "unsupported" row
    hls4ml = require("hls4ml")
    t0 = time.perf_counter()
    stages: dict[str, float] = {}
    chatter = io.StringIO()  # hls4ml prints its topology while converting
    try:
        shapes = [tuple(int(d) for d in x.shape[1:]) for x in inputs]
        with contextlib.redirect_stdout(chatter):
            cfg = hls4ml.utils.config_from_pytorch_model(
                module, shapes[0] if len(shapes) == 1 else shapes, backend=backend,
                default_precision=precision, default_reuse_factor=reuse_factor,
                transpose_outputs=True)
            hmodel = hls4ml.converters.convert_from_pytorch_model(
                module, output_dir=str(out_dir), backend=backend, hls_config=cfg,
                io_type="io_parallel")
            stages["convert"] = time.perf_counter() - t0
            hmodel.compile()
            stages["build"] = time.perf_counter() - t0 - stages["convert"]
            data = [np.ascontiguousarray(x.detach().cpu().numpy(), dtype=np.float32)
                    for x in inputs]
            t1 = time.perf_counter()
            y = hmodel.predict(data[0] if len(data) == 1 else data)
            stages["run"] = time.perf_counter() - t1
    except Exception as exc:  # noqa: BLE001 - hls4ml raises plain Exception for unsupported layers
        status = "error" if "convert" in stages else "unsupported"  # g++ or predict failed
        return RouteResult(name, "hls4ml", status, cfg_text, time.perf_counter() - t0,
                           latency_source=HLS4ML_NO_REPORT, resources=HLS4ML_NO_REPORT,
                           message=_short(exc, where=True), output_lsb=fixed_lsb(precision),
                           stage_s=stages,
                           project_dir=out_dir if out_dir.exists() else None)
    y = np.asarray(y[0] if isinstance(y, (list, tuple)) else y, np.float64)
    return RouteResult(name, "hls4ml", "ok", cfg_text, time.perf_counter() - t0,
                       latency_source=HLS4ML_NO_REPORT, resources=HLS4ML_NO_REPORT,
                       outputs=y, project_dir=out_dir, output_lsb=fixed_lsb(precision),
                       stage_s=stages)


# ---- tilewright route ---------------------------------------------------------------------------
def _arch_resources(arch: ArchSpec) -> str:
    te = arch.tensor_engine
    return (f"{te.rows}x{te.cols} {te.dataflow} {te.kind} = {te.macs_per_cycle} "
            f"{te.input_format} MACs; scratchpad {arch.memory.scratchpad_kib:g} KiB, "
            f"accumulator {arch.memory.accumulator_kib:g} KiB")


def _run_int8_mlp(module: Any, x: Any, arch: ArchSpec, stages: dict[str, float]
                  ) -> tuple[np.ndarray, int, str, float | None]:
    """The demo's flow: int8 Program -> functional model -> dequantized output."""

    t0 = time.perf_counter()
    program = compile_model(module, x, arch)
    stages["compile"] = time.perf_counter() - t0
    x_int8 = np.clip(np.round(x.detach().cpu().numpy() / program.meta["input_scale"]),
                     -128, 127).astype(np.int8)
    t0 = time.perf_counter()
    env = run_program(program, {"x": x_int8})
    stages["run"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    y = env[program.outputs[0]].astype(np.float64) * program.meta["output_scale"]
    total = report_totals(program_report(program, arch))["total_cycles"]
    gemm = int(gemm_report(program, arch)["cycles"].sum())
    stages["report"] = time.perf_counter() - t0
    how = f"Report total (tasks serialized); GEMMs {gemm} on the RTL-exact cycle model"
    return y, int(total), how, float(program.meta["output_scale"])


def _run_llm_flow(module: Any, inputs: tuple, arch: ArchSpec, fmt: str,
                  stages: dict[str, float]) -> tuple[np.ndarray, int, str, float | None]:

    t0 = time.perf_counter()
    comp = compile_module(module, inputs, arch, fmt=fmt)
    stages["compile+run+report"] = time.perf_counter() - t0
    y = np.asarray(comp.outputs[comp.program.outputs[0]], np.float64)
    tot = comp.totals()
    how = f"Report total (tasks serialized); compute {tot['compute_cycles']}"
    return y, int(tot["total_cycles"]), how, None


def _is_linear_relu(module: Any) -> bool:
    """True for a module built only of ``nn.Linear`` leaves (ReLU applied functionally or as
    ``nn.ReLU``): the demo's int8 flow takes exactly those."""
    from torch import nn  # noqa: PLC0415  (lazy: torch is heavy)

    leaves = [m for m in module.modules() if not list(m.children())]
    return bool(leaves) and all(isinstance(m, (nn.Linear, nn.ReLU)) for m in leaves)


def run_tilewright(module: Any, example_input: Any, arch: ArchSpec, *, name: str = "model",
                   fmt: str | None = None) -> RouteResult:
    """Compile ``module`` for ``arch`` and run the Program on the functional model.

    A ``Linear``/``ReLU`` module with one 2-D input takes the demo's int8 flow; anything else
    (and such a module the int8 flow refuses, e.g. for a functional op)
    :func:`~tilewright.dataflow_sim.compile_flow.compile_module` in format ``fmt`` (default: the arch's
    tensor-engine input format). The compiler's :class:`UnsupportedOp` / :class:`DoesNotFit`
    give ``status="unsupported"`` with its message."""
    from tilewright.compiler.frontend import UnsupportedOp  # noqa: PLC0415  (lazy: pulls in torch)

    inputs = _inputs(example_input)
    mlp_flow = fmt is None and len(inputs) == 1 and inputs[0].dim() == 2 and \
        _is_linear_relu(module)
    fmt = fmt or arch.tensor_engine.input_format
    config = (f"int8 flow (per-channel weights, int32 acc) on {arch.name}" if mlp_flow
              else f"{fmt} on {arch.name}")
    t0 = time.perf_counter()
    stages: dict[str, float] = {}
    try:
        try:
            y, cycles, how, lsb = (_run_int8_mlp(module, inputs[0], arch, stages) if mlp_flow
                                   else _run_llm_flow(module, inputs, arch, fmt, stages))
        except UnsupportedOp:
            if not mlp_flow:
                raise
            config = f"{fmt} on {arch.name}"  # e.g. a functional op the int8 flow lacks
            y, cycles, how, lsb = _run_llm_flow(module, inputs, arch, fmt, stages)
    except (UnsupportedOp, DoesNotFit) as exc:
        return RouteResult(name, "tilewright", "unsupported", config, time.perf_counter() - t0,
                           resources=_arch_resources(arch), message=_short(exc),
                           stage_s=stages)
    return RouteResult(name, "tilewright", "ok", config, time.perf_counter() - t0,
                       latency_cycles=cycles, latency_source=how,
                       resources=_arch_resources(arch), outputs=y, output_lsb=lsb,
                       stage_s=stages)


# ---- both ---------------------------------------------------------------------------------------
def compare_hls4ml(module: Any, example_input: Any, arch: ArchSpec, *,
                   precision: str = "ap_fixed<16,6>", reuse_factor: int = 1,
                   backend: str = "Vitis", out_dir: str | Path, name: str | None = None,
                   tilewright_format: str | None = None) -> Comparison:
    """Run ``module`` (eval mode, float32) on ``example_input`` (a tensor or a tuple, batch
    first) through torch, hls4ml (project in ``out_dir``) and tilewright (``arch``), and measure
    both routes against torch (see the module docstring). Bad ``precision``/``reuse_factor``/
    ``backend`` raise ValueError naming the field and what is accepted."""
    _check_hls4ml_args(precision, reuse_factor, backend)
    name = name or getattr(module, "config_name", None) or type(module).__name__
    inputs = _inputs(example_input)
    ref = _torch_reference(module, inputs)
    routes = [run_hls4ml(module, inputs, out_dir=out_dir, precision=precision,
                         reuse_factor=reuse_factor, backend=backend, name=name),
              run_tilewright(module, inputs, arch, name=name, fmt=tilewright_format)]
    for r in routes:
        score_route(r, ref)
    return Comparison(name, ref, routes)


def score_route(result: RouteResult, reference: np.ndarray) -> RouteResult:
    """Fill ``result``'s error columns against the torch ``reference`` (in place; also
    returned); its outputs are reshaped to the reference's shape. A route whose output has a
    different element count becomes ``"unsupported"`` with a message saying so."""
    if result.status != "ok" or result.outputs is None:
        return result
    if result.outputs.size != reference.size:
        result.status = "unsupported"
        result.message = (f"output has {result.outputs.size} elements, torch {reference.size}: "
                          "not comparable")
        return result
    result.outputs = result.outputs.reshape(reference.shape)
    for k, v in numerics(result.outputs, reference).items():
        setattr(result, k, v)
    return result


def torch_reference(module: Any, example_input: Any) -> np.ndarray:
    """The module's float32 output (its first output if it returns a tuple), as float64."""
    return _torch_reference(module, _inputs(example_input))


# ---- the side-by-side models --------------------------------------------------------------------
def small_cnn(seed: int = 0) -> tuple[Any, Any]:
    """A small image classifier, Conv2d(1->4, 3x3) + ReLU + MaxPool2d(2) + Flatten +
    Linear(36 -> 10), parameters from ``seed`` (torch's default init), eval mode; and a float32
    example batch [4, 1, 8, 8] from N(0, 1) (generator seeded ``seed + 1``)."""
    import torch  # noqa: PLC0415  (lazy: torch is heavy)
    from torch import nn  # noqa: PLC0415  (lazy: torch is heavy)

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                               nn.Linear(4 * 3 * 3, 10)).eval()
    module.config_name = "cnn-small"
    x = torch.randn((4, 1, 8, 8), generator=torch.Generator().manual_seed(seed + 1))
    return module, x


def _mlp_tiny(seed: int) -> tuple[Any, Any]:
    from tilewright.models.configs import build  # noqa: PLC0415  (lazy: pulls in torch)
    return build("mlp-tiny", seed=seed)


def _tiny_llama(seed: int) -> tuple[Any, Any]:
    from tilewright.models.llm_configs import build_llm  # noqa: PLC0415  (lazy: pulls in torch)
    return build_llm("tiny-llama", seed=seed, seq=8)


#: name -> builder(seed) -> (module, example input): the models of the side-by-side table
SIDE_BY_SIDE_MODELS: dict[str, Callable[[int], tuple[Any, Any]]] = {
    "mlp-tiny": _mlp_tiny, "cnn-small": small_cnn, "tiny-llama": _tiny_llama}


def build_side_by_side(name: str, seed: int = 0) -> tuple[Any, Any]:
    """``(module, example_input)`` of side-by-side model ``name``; ValueError lists the names."""
    if name not in SIDE_BY_SIDE_MODELS:
        raise ValueError(f"unknown side-by-side model {name!r}; known: "
                         f"{', '.join(SIDE_BY_SIDE_MODELS)}")
    return SIDE_BY_SIDE_MODELS[name](seed)
