"""Sweep file schema: what to vary, on which workloads, what to optimise and what to forbid.

A sweep file (YAML)::

    name: ws-size-sweep
    base: ws16x16                 # ArchSpec preset, YAML path (relative to the sweep file) or mapping
    tech: 45nm                    # technology table (configs/tech/<name>.yaml or a path)
    axes:                         # dotted ArchSpec paths -> values
      tensor_engine.rows,tensor_engine.cols: [8, 16, 32]   # comma-joined paths take one value
      tensor_engine.kind,tensor_engine.rows,tensor_engine.depth: [[systolic, 8, 1], [cube, 4, 4]]
                                  # ... or one list per point with a value per path (zipped)
      tensor_engine.dataflow: [ws, os]
      memory.scratchpad_kib: {low: 32, high: 512, log: true}   # a range (int unless a bound is float)
      clock_mhz: {low: 250, high: 1000, step: 250}             # grid needs a step (or values)
    workloads:
      - {model: llama3-8b, seq: 512, batch: 1, phase: prefill}
      - {gemm: [512, 4096, 4096]}                              # M, K, N
      - {mesh_gemv: [4096, 4096], algo: mesh}                  # K, N on the base's mesh
      - {mesh_gemm: [512, 512, 512], algo: summa}
      - {cluster: h100-8x-nvlink, model: llama3-8b, mode: train,
         plan: {tp: 2, dp: 4, micro_batches: 4, seq_len: 1024}}
    objectives: [latency, energy]  # or {metric: area_mm2, direction: minimize}
    constraints: ["area_mm2 <= 4", {metric: sram_kib, max: 512}]
    # per workload: {metric: latency_s, workload: decode} or "decode:latency_s <= 0.02"
    search: {method: grid}         # grid | random | tpe | nsga2 (trials, seed, population)

A comma-joined axis whose value is a list with one entry per path sets the paths pairwise (grid
and random search; Optuna's samplers need scalar values), e.g. to compare engine families
(``tensor_engine.kind``) at equal MACs/cycle; a systolic base's ``dataflow`` is ignored by the
other kinds (:class:`tilewright.arch.TensorEngineSpec`).

The static metrics ``fpga_luts_ice40``, ``fpga_ffs_ice40``, ``fpga_dsps_ice40`` and
``fpga_brams_ice40`` (and ``fpga_*_ecp5`` with ``fpga_fmax_mhz_ecp5``, the Fmax nextpnr would
reach) are the GEMM core's iCE40 (ECP5) resources predicted
in about a millisecond by :mod:`tilewright.app.sweep.resource_model` (fitted on real Yosys
syntheses), so a constraint such as ``"fpga_luts_ice40 <= 5000"`` replaces a synthesis per
point (NaN, never feasible, for designs the predictor does not cover: non-systolic, non-int8,
banked SRAMs, meshes).

Setting ``tensor_engine.input_format`` (alone or linked with ``weight_format``) also sets
``weight_format`` and the accumulator format the operand format requires, unless an axis sets them.

A point is one design: every workload runs in the point's own ``tensor_engine.input_format`` (the
LLM layer is compiled in it, the GEMM and mesh operands have its size), so a workload ``format``
is accepted only when it equals the design's and no axis varies it. A field a workload kind does
not read (``seq`` on a GEMM, ``batch`` on a cluster run, ...) is refused, and so are ArchSpec axes
when no workload uses the ArchSpec (cluster workloads on the cluster file's chip).

Workload kinds (:attr:`Workload.kind`): ``llm`` (one or more layers of a model compiled for the
chip; ``model`` is any form the resolver :mod:`tilewright.models.resolve` takes: a built-in name,
a config.json or a folder holding one, or a user module ``path/file.py:factory`` / ``.onnx``,
found beside the sweep file and compiled whole on its example inputs as ``compile`` does;
``seq``/``batch``/``phase``/``layers`` are refused on it), ``gemm`` (mapper's best mapping),
``mesh`` (``mesh_gemv``/``mesh_gemm`` on the ArchSpec's ``mesh`` section,
:mod:`tilewright.dataflow_sim.mesh`) and ``cluster`` (a SimPy training step or serving run of
``model`` on the cluster file ``cluster``, :mod:`tilewright.dataflow_sim.cluster`).
Axes named ``cluster.<field path>`` set a field of every cluster workload's cluster description
(e.g. ``cluster.nodes``, ``cluster.inter_node.link_gbps``) and ``plan.<field>`` a field of its
parallelism plan (``TrainPlan``/``ServePlan``: ``plan.dp``, ``plan.tp``...); they can be linked
with each other and with ArchSpec paths (``cluster.nodes,plan.dp: [1, 2, 4]``). A cluster workload
with ``chip: sweep`` runs the design point's ArchSpec as the cluster's chip. A training plan's
``dp: auto`` fills the cluster: dp = chips / (tp·pp·sp). A plan the cluster cannot run (TP not
dividing the heads, not fitting in memory...) is stored as that point's error.

Per-workload metrics: every point also reports :data:`PER_WORKLOAD_METRICS` of each workload on
its own (unweighted), named ``<tag>:<metric>`` with the workload's tag its ``name`` or, without
one, ``w<index>`` (``decode:latency_s``, ``w0:j_per_token``): they are columns of the results
frame and exports, and objectives and constraints take them — ``{metric: latency_s, workload:
decode}`` (the workload's name or index) or the joined name. Workload names are unique and have
no ``:``.

Every error is a :class:`SweepError` with one line naming the file, the field, the value and what
is accepted.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import (BaseModel, ConfigDict, Field, ValidationError, ValidationError as VErr,
                      model_validator)

from tilewright.arch import ArchSpec, ArchSpecError, MeshSpec, VectorUnitSpec, load_arch
from tilewright.dataflow_sim.energy_area import TechError, load_tech
from tilewright.dataflow_sim.mesh import GEMM_ALGOS, GEMV_ALGOS
from tilewright.errors import UserError
from tilewright.extras import ExtraMissing
from tilewright.formats import FORMATS
from tilewright.validation import load_user_yaml

__all__ = ["SweepSpec", "SweepError", "Axis", "Workload", "Objective", "Constraint", "SearchSpec",
           "load_sweep", "axis_assignments", "METRICS", "OBJECTIVE_ALIASES", "set_path", "apply_point",
           "WORKLOAD_AXIS_PREFIXES", "PER_WORKLOAD_METRICS", "metric_info", "workload_tag"]

#: axis path prefixes that address cluster workloads instead of the ArchSpec
WORKLOAD_AXIS_PREFIXES = ("cluster.", "plan.")
#: Workload fields added after the first release: left out of a workload's hash when unset, so
#: stored results of older sweeps keep their keys
_NEW_WORKLOAD_FIELDS = ("mesh_gemv", "mesh_gemm", "algo", "cluster", "mode", "plan", "chip",
                        "requests", "rate", "prompt_tokens", "output_tokens", "seed",
                        "cost_source")


class SweepError(UserError, ValueError):
    """A malformed sweep file or point; ``str(err)`` is one line (file, field, value, accepted)."""


#: metric name -> (direction, unit/description); every evaluated point reports all of them
METRICS: dict[str, tuple[str, str]] = {
    "latency_s": ("minimize", "seconds for all workloads (weighted sum)"),
    "throughput_tops": ("maximize", "2*MACs / latency, tera-operations per second"),
    "tokens_per_s": ("maximize", "LLM tokens / latency of the LLM workloads"),
    "energy_j": ("minimize", "joules for all workloads"),
    "tokens_per_j": ("maximize", "LLM tokens / joules of the LLM workloads (cluster: tokens "
                     "trained per step or generated / the run's joules)"),
    "j_per_token": ("minimize", "joules per LLM token: joules of the LLM workloads / their "
                    "tokens (1 / tokens_per_j)"),
    "pj_per_mac": ("minimize", "picojoules per multiply-accumulate: energy_j / macs * 1e12 (all "
                   "energy, DRAM and idle included)"),
    "power_w": ("minimize", "energy / latency, watts"),
    "area_mm2": ("minimize", "chip area, mm^2"),
    "perf_per_w": ("maximize", "TOPS/W"),
    "perf_per_mm2": ("maximize", "TOPS/mm^2"),
    "sram_kib": ("minimize", "on-chip SRAM, KiB"),
    "pes": ("minimize", "processing elements (count)"),
    "utilization": ("maximize", "MACs / (cycles * PEs)"),
    "cycles": ("minimize", "clock cycles for all workloads"),
    "dram_bytes": ("minimize", "off-chip bytes"),
    "macs": ("maximize", "multiply-accumulates"),
    "chips": ("minimize", "chips of the cluster workloads' clusters (largest)"),
    "cluster_area_mm2": ("minimize", "chips x chip area of the largest cluster, mm^2 "
                         "(ArchSpec chips only)"),
    "ttft_p99_s": ("minimize", "serving: 99th-percentile time to first token, seconds"),
    "tpot_p99_s": ("minimize", "serving: 99th-percentile time per output token, seconds"),
    "fpga_luts_ice40": ("minimize", "GEMM core's iCE40 LUT4s, predicted from Yosys syntheses "
                        "(tilewright.app.sweep.resource_model; NaN where it does not apply)"),
    "fpga_ffs_ice40": ("minimize", "GEMM core's iCE40 flip-flops, predicted"),
    "fpga_dsps_ice40": ("minimize", "GEMM core's iCE40 SB_MAC16 DSPs, predicted"),
    "fpga_brams_ice40": ("minimize", "GEMM core's iCE40 SB_RAM40_4K block RAMs, predicted"),
    "fpga_luts_ecp5": ("minimize", "GEMM core's ECP5 LUT4s, predicted from Yosys syntheses"),
    "fpga_ffs_ecp5": ("minimize", "GEMM core's ECP5 flip-flops, predicted"),
    "fpga_dsps_ecp5": ("minimize", "GEMM core's ECP5 MULT18X18D DSPs, predicted"),
    "fpga_brams_ecp5": ("minimize", "GEMM core's ECP5 DP16KD block RAMs, predicted"),
    "fpga_fmax_mhz_ecp5": ("maximize", "GEMM core's ECP5 Fmax after nextpnr, MHz, predicted"),
}
#: metrics known without evaluating a workload (constraints on them skip the evaluation)
STATIC_METRICS = ("area_mm2", "sram_kib", "pes", "fpga_luts_ice40", "fpga_ffs_ice40",
                  "fpga_dsps_ice40", "fpga_brams_ice40", "fpga_luts_ecp5", "fpga_ffs_ecp5",
                  "fpga_dsps_ecp5", "fpga_brams_ecp5", "fpga_fmax_mhz_ecp5")
#: the static metrics of the GEMM core's FPGA resource model (a mesh design has no GEMM core)
FPGA_METRICS = tuple(m for m in STATIC_METRICS if m.startswith("fpga_"))


def workload_uses_arch(w: dict[str, Any]) -> bool:
    """Whether a workload (as a mapping) runs on the sweep's ArchSpec: every kind but a
    ``cluster`` workload, which runs the cluster file's chip unless it says ``chip: sweep``."""
    return not w.get("cluster") or w.get("chip") == "sweep"


def produced_static_metrics(uses_arch: bool, mesh: bool) -> tuple[str, ...]:
    """The static metrics a point has: none when no workload uses the ArchSpec (they would
    describe a design nothing ran), no FPGA figures for a mesh design; ``perf_per_mm2`` exists
    exactly when ``area_mm2`` does; no FPGA figures either without the predictor's packages (the
    ``fpga`` extra)."""
    from tilewright.app.sweep.resource_model import (  # noqa: PLC0415  (lazy: pandas, data)
        predictor_installed)
    if not uses_arch:
        return ()
    fpga = not mesh and predictor_installed()
    return tuple(m for m in STATIC_METRICS if fpga or m not in FPGA_METRICS)

OBJECTIVE_ALIASES = {"latency": "latency_s", "throughput": "throughput_tops", "energy": "energy_j",
                     "area": "area_mm2", "power": "power_w", "perf/w": "perf_per_w",
                     "perf_per_watt": "perf_per_w", "perf/mm2": "perf_per_mm2",
                     "perf/mm²": "perf_per_mm2", "tokens": "tokens_per_s", "sram": "sram_kib",
                     "tokens/j": "tokens_per_j"}


#: metrics reported per workload as ``<tag>:<metric>`` (module doc): the workload's own figures,
#: not multiplied by its ``weight``
PER_WORKLOAD_METRICS = ("latency_s", "energy_j", "cycles", "macs", "dram_bytes", "tokens_per_s",
                        "tokens_per_j", "j_per_token", "pj_per_mac", "utilization")


def workload_tag(w: dict[str, Any], index: int) -> str:
    """A workload's tag in per-workload metric names: its ``name``, else ``w<index>``."""
    return w.get("name") or f"w{index}"


def metric_info(name: str) -> tuple[str, str]:
    """(direction, description) of a metric, per-workload ``<tag>:<metric>`` names included."""
    tag, sep, base = name.rpartition(":")
    if sep:
        direction, text = METRICS[base]
        return direction, f"{text}; workload {tag}"
    return METRICS[name]


def _metric(name: str, tags: tuple[str, ...] = (), workload: Any = None) -> str:
    """The metric ``name`` (or alias) resolved; ``workload`` (a tag or an index into ``tags``)
    or a ``<tag>:`` prefix makes it a per-workload metric."""
    text = str(name)
    if workload is None and ":" in text:
        workload, _, text = text.rpartition(":")
    key = OBJECTIVE_ALIASES.get(text.lower(), text)
    if key not in METRICS:
        raise ValueError(f"= {name!r}: must be a metric ({', '.join(METRICS)}) or an alias "
                         f"({', '.join(OBJECTIVE_ALIASES)})")
    if workload is None:
        return key
    if isinstance(workload, int) and not isinstance(workload, bool) and 0 <= workload < len(tags):
        workload = tags[workload]
    if workload not in tags:
        raise ValueError(f"= {name!r}: workload {workload!r} is not a workload of this sweep "
                         f"(names or tags: {', '.join(tags)}; or an index 0-{len(tags) - 1})")
    if key not in PER_WORKLOAD_METRICS:
        raise ValueError(f"= {name!r}: {key} is not reported per workload (accepted: "
                         f"{', '.join(PER_WORKLOAD_METRICS)})")
    return f"{workload}:{key}"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Axis(_Model):
    """One parameter axis: ``paths`` (dotted ArchSpec fields) all set to the same value, taken
    from ``values`` or the range ``[low, high]`` (``step`` for a grid; ``log`` sampling)."""

    paths: tuple[str, ...]
    values: tuple[Any, ...] | None = None
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    integer: bool = True

    @property
    def name(self) -> str:
        return ",".join(self.paths)

    def grid(self) -> list[Any]:
        if self.values is not None:
            return list(self.values)
        assert self.low is not None and self.high is not None
        if self.step is None:
            raise SweepError(f"axes.{self.name}: a range needs `step` (or `values`) for a grid "
                             f"search; random/tpe/nsga2 sample it")
        n = int(math.floor((self.high - self.low) / self.step + 1e-9)) + 1
        vals = [self.low + i * self.step for i in range(n)]
        return [int(round(v)) for v in vals] if self.integer else vals


class Workload(_Model):
    """An LLM layer (``model``), a plain GEMM (``gemm: [M, K, N]``), a GEMV/GEMM on the mesh
    (``mesh_gemv: [K, N]`` / ``mesh_gemm: [M, K, N]``) or a cluster run (``cluster`` + ``model``);
    see the module doc."""

    model: str | None = Field(None, description="a built-in name, a config.json (or its "
                              "folder), or a user module path/file.py:factory or .onnx (llm "
                              "workloads; a cluster run needs an LLM config)")
    gemm: tuple[int, int, int] | None = Field(None, description="M, K, N of a plain GEMM")
    seq: int = Field(512, ge=1, description="tokens per sequence (prefill) / context (decode)")
    batch: int = Field(1, ge=1, description="sequences (LLM) or independent GEMMs")
    phase: Literal["prefill", "decode"] = "prefill"
    format: str | None = Field(None, description="operand format of the compiled Program / "
                               "GEMM / mesh op: the design's tensor_engine.input_format (the "
                               "default; any other value is refused: a point is one design)")
    layers: int | Literal["all"] = Field(1, description="layers to cost: a count or 'all'")
    weight: float = Field(1.0, gt=0, description="multiplier of this workload's time and energy")
    name: str | None = None
    # mesh workloads
    mesh_gemv: tuple[int, int] | None = Field(None, description="K, N of [1,K]x[K,N] on the mesh")
    mesh_gemm: tuple[int, int, int] | None = Field(None, description="M, K, N on the mesh")
    algo: str | None = Field(None, description="mesh algorithm (gemv: mesh | allreduce; gemm: "
                             "mesh | cannon | summa); default mesh")
    # cluster workloads
    cluster: str | None = Field(None, description="cluster preset or YAML path")
    mode: Literal["train", "serve"] | None = Field(None, description="cluster: train (default) "
                                                   "| serve")
    plan: dict[str, Any] | None = Field(None, description="cluster: TrainPlan/ServePlan fields")
    chip: Literal["cluster", "sweep"] | None = Field(
        None, description="cluster: the cluster file's chip (default) or the sweep's ArchSpec")
    requests: int | None = Field(None, ge=1, description="serve: Poisson requests (default 64)")
    rate: float | None = Field(None, gt=0, description="serve: arrivals per second (default 10)")
    prompt_tokens: int | tuple[int, int] | None = Field(None, description="serve: N or [LO, HI]")
    output_tokens: int | tuple[int, int] | None = Field(None, description="serve: N or [LO, HI]")
    seed: int | None = Field(None, description="serve: seed of the arrivals (default 0)")
    cost_source: Literal["compiler", "table"] | None = Field(
        None, description="cluster: per-chip compute source (default: the cluster model's)")

    @property
    def kind(self) -> str:
        """``llm`` | ``gemm`` | ``mesh`` | ``cluster``."""
        if self.cluster is not None:
            return "cluster"
        if self.mesh_gemv is not None or self.mesh_gemm is not None:
            return "mesh"
        return "gemm" if self.gemm is not None else "llm"

    def plain(self) -> dict[str, Any]:
        """JSON-able mapping (what workers receive and what the result key hashes)."""
        d = self.model_dump(mode="json")
        return {k: v for k, v in d.items() if not (k in _NEW_WORKLOAD_FIELDS and v is None)}

    @model_validator(mode="after")
    def _one_kind(self) -> "Workload":
        kinds = [k for k, v in (("gemm", self.gemm), ("mesh_gemv", self.mesh_gemv),
                                ("mesh_gemm", self.mesh_gemm), ("cluster", self.cluster))
                 if v is not None]
        if len(kinds) > 1 or (not kinds and self.model is None) or \
                (kinds and kinds[0] != "cluster" and self.model is not None):
            raise ValueError("needs exactly one of `model: <config>`, `gemm: [M, K, N]`, "
                             "`mesh_gemv: [K, N]`, `mesh_gemm: [M, K, N]` or `cluster: <file>` "
                             "(with `model`)")
        if kinds == ["cluster"] and self.model is None:
            raise ValueError("a cluster workload needs `model: <config>` (the LLM it runs)")
        cluster_only = ("mode", "plan", "chip", "requests", "rate", "prompt_tokens",
                        "output_tokens", "seed", "cost_source")
        for f in cluster_only:
            if getattr(self, f) is not None and self.kind != "cluster":
                raise ValueError(f"{f}: only a cluster workload (`cluster: <file>`) takes it")
        if self.algo is not None:
            ok = GEMV_ALGOS if self.mesh_gemv is not None else \
                GEMM_ALGOS if self.mesh_gemm is not None else ()
            if self.algo not in ok:
                raise ValueError(f"algo = {self.algo!r}: " + (f"must be one of {', '.join(ok)}"
                                 if ok else "only mesh_gemv / mesh_gemm workloads take it"))
        for f, dims in (("gemm", self.gemm), ("mesh_gemv", self.mesh_gemv),
                        ("mesh_gemm", self.mesh_gemm)):
            if dims is not None and min(dims) < 1:
                raise ValueError(f"{f} = {list(dims)}: every dimension must be an integer >= 1")
        if self.format is not None and self.format not in FORMATS:
            raise ValueError(f"format = {self.format!r}: must be one of {sorted(FORMATS)}")
        if self.model is not None:
            from tilewright.models.llm_configs import \
                get_config  # noqa: PLC0415  (lazy: pulls in torch)
            from tilewright.models.resolve import (  # noqa: PLC0415  (lazy: models layer)
                model_form, refuse_user_model)
            if model_form(self.model) in ("factory", "onnx"):   # loaded by sweep_from_dict
                if self.kind == "cluster":
                    refuse_user_model(self.model, "model =", "a cluster run needs a decoder "
                                      "LLM's shapes (layers, width, heads, KV cache)")
                return self
            try:                         # a built-in name or a Hugging Face config.json
                get_config(self.model)
            except ValueError as exc:
                raise ValueError(f"model = {self.model!r}: {exc}") from None
        return self

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        if self.kind == "cluster":
            plan = " ".join(f"{k}={v}" for k, v in (self.plan or {}).items())
            return f"{self.model} {self.mode or 'train'} on {self.cluster} {plan}".strip()
        if self.kind == "mesh":
            dims = self.mesh_gemv or self.mesh_gemm
            op = "gemv" if self.mesh_gemv is not None else "gemm"
            return f"mesh {op} {'x'.join(map(str, dims))} {self.format} {self.algo or 'mesh'}"
        if self.gemm is not None:
            b = f"{self.batch}x" if self.batch > 1 else ""
            return f"gemm {b}{'x'.join(map(str, self.gemm))} {self.format}"
        if self.user_module:
            return f"{self.model} {self.format}"      # its own example inputs
        return f"{self.model} {self.phase} seq={self.seq} batch={self.batch} {self.format}"

    @property
    def tokens(self) -> int:
        return self.batch * (self.seq if self.phase == "prefill" else 1) \
            if self.kind == "llm" and not self.user_module else 0

    @property
    def user_module(self) -> bool:
        """An ``llm`` workload naming a user module (``file.py:factory`` / ``.onnx``)."""
        from tilewright.models.resolve import model_form  # noqa: PLC0415  (lazy: models layer)
        return self.kind == "llm" and model_form(str(self.model)) in ("factory", "onnx")


class Objective(_Model):
    metric: str
    direction: Literal["minimize", "maximize"]


class Constraint(_Model):
    """``metric`` must lie within ``[min, max]`` (either bound optional)."""

    metric: str
    min: float | None = None
    max: float | None = None

    def ok(self, value: float | None) -> bool:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return False
        return (self.min is None or value >= self.min) and (self.max is None or value <= self.max)

    @property
    def text(self) -> str:
        parts = ([f"{self.metric} >= {self.min:g}"] if self.min is not None else []) + \
                ([f"{self.metric} <= {self.max:g}"] if self.max is not None else [])
        return " and ".join(parts)


class SearchSpec(_Model):
    method: Literal["grid", "random", "tpe", "nsga2"] = "grid"
    trials: int | None = Field(None, ge=1, description="points to evaluate (random/tpe/nsga2)")
    seed: int = 0
    population: int = Field(20, ge=2, description="NSGA-II population size")


class SweepSpec(_Model):
    """A validated sweep (see module doc)."""

    name: str = "sweep"
    base: ArchSpec
    tech: str = "45nm"
    axes: tuple[Axis, ...]
    workloads: tuple[Workload, ...] = Field(..., min_length=1)
    objectives: tuple[Objective, ...] = Field(..., min_length=1)
    constraints: tuple[Constraint, ...] = ()
    search: SearchSpec = SearchSpec()
    source: str = "sweep"

    def definition(self) -> dict[str, str]:
        """What a stored point's values depend on, part by part, each as a content hash: the
        base ArchSpec, the axes (paths and values), the workloads (and the content of any cluster
        file, config.json, factory ``.py`` or ``.onnx`` file they name), the constraints (they decide ``skipped`` and ``feasible``) and the
        technology table's figures. Two runs may share one database only if these are equal;
        objectives and the search may change between runs (they do not change a point)."""
        def digest(obj: Any) -> str:
            return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()) \
                .hexdigest()[:16]
        from tilewright.models.resolve import model_file  # noqa: PLC0415  (lazy: models pull torch)
        clusters = {}
        for w in self.workloads:
            if w.kind == "cluster" and w.cluster and Path(str(w.cluster)).is_file():
                clusters[str(w.cluster)] = digest(Path(str(w.cluster)).read_text())
            source = model_file(w.model) if w.model else None
            if source is not None and source.is_file():   # a user's model: its content counts
                clusters[str(source)] = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
        return {"base": self.base.content_hash(),
                "axes": digest(sorted((a.model_dump(mode="json") for a in self.axes),
                                      key=lambda a: a["paths"])),   # order is not meaning
                "workloads": digest([[w.model_dump(mode="json") for w in self.workloads],
                                     clusters]),
                "constraints": digest([c.model_dump(mode="json") for c in self.constraints]),
                "tech": digest(load_tech(self.tech).model_dump(mode="json"))}

    @property
    def static_constraints(self) -> tuple[Constraint, ...]:
        return tuple(c for c in self.constraints if c.metric in STATIC_METRICS)

    def grid_points(self) -> list[dict[str, Any]]:
        """Every combination of the axes' values, in a fixed order (first axis outermost)."""
        names = [a.name for a in self.axes]
        return [dict(zip(names, combo))
                for combo in itertools.product(*(a.grid() for a in self.axes))]

    def grid_size(self) -> int:
        return math.prod(len(a.grid()) for a in self.axes)

    def workloads_for(self, point: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """The workloads (plain mappings, what workers receive). A cluster workload's
        ``cluster`` becomes the full cluster mapping (so a result's key follows the cluster
        file's content, not its path) with the ``cluster.*`` axis values of ``point`` set, and
        its ``plan`` gets the ``plan.*`` values."""
        out = [w.plain() for w in self.workloads]
        over = {path: v for name, value in (point or {}).items()
                for path, v in axis_assignments(name, value)
                if path.startswith(WORKLOAD_AXIS_PREFIXES)}
        if not any("cluster" in w for w in out):
            return out
        from tilewright.dataflow_sim.cluster import \
            load_cluster  # noqa: PLC0415  (lazy: pulls in simpy, torch)
        for w in out:
            if "cluster" not in w:
                continue
            cl = load_cluster(w["cluster"]).model_dump(mode="json", exclude_none=True)
            plan = dict(w.get("plan") or {})
            for path, v in over.items():
                head, rest = path.split(".", 1)
                try:
                    set_path(cl if head == "cluster" else plan, rest, v)
                except (AttributeError, TypeError):
                    raise SweepError(f"{self.source}: axes.{path}: cluster {w['cluster']!r} has "
                                     f"no mapping there to set a field in (e.g. a preset name "
                                     f"instead of an inline chip.arch)") from None
            w["cluster"], w["plan"] = cl, plan
        return out

    def workloads_key(self, point: dict[str, Any] | None = None) -> str:
        """Hash of the workload list (with ``point``'s cluster/plan axis values applied) and the
        technology table's *content* (so editing a table re-evaluates, and a copy under another
        name does not): with the ArchSpec hash it identifies a stored result."""
        tech = load_tech(self.tech).model_dump(mode="json")
        tech.pop("name", None)
        text = json.dumps(self.workloads_for(point) + [tech], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def arch_for(self, point: dict[str, Any]) -> ArchSpec:
        return apply_point(self.base, point, source=self.source)


# ---- applying a point to the base ArchSpec -------------------------------------------------
def set_path(data: dict[str, Any], path: str, value: Any) -> None:
    """Set ``a.b.c`` in nested dicts ``data`` (creating missing sections)."""
    parts = path.split(".")
    cur = data
    for p in parts[:-1]:
        if cur.get(p) is None:
            cur[p] = {}
        cur = cur[p]
    cur[parts[-1]] = value


def axis_assignments(name: str, value: Any) -> list[tuple[str, Any]]:
    """``(path, value)`` pairs one axis value sets: every comma-joined path of ``name`` gets
    ``value``, or — a list with one entry per path (two or more paths) — its entry (zipped)."""
    paths = name.split(",")
    if len(paths) > 1 and isinstance(value, (list, tuple)) and len(value) == len(paths):
        return list(zip(paths, value))
    return [(p, value) for p in paths]


def apply_point(base: ArchSpec, point: dict[str, Any], source: str = "sweep") -> ArchSpec:
    """The ArchSpec ``base`` with the axis values ``point`` (axis name -> value) applied; raises
    :class:`ArchSpecError` (one line) if the combination is not a valid ArchSpec."""
    data = base.model_dump(mode="json", exclude_none=True)
    paths_set: set[str] = set()
    for name, value in point.items():
        for path, v in axis_assignments(name, value):
            if path.startswith(WORKLOAD_AXIS_PREFIXES):
                continue                       # a cluster/plan axis (SweepSpec.workloads_for)
            set_path(data, path, v)
            paths_set.add(path)
    te = data.get("tensor_engine", {})
    if "tensor_engine.input_format" in paths_set:
        if "tensor_engine.weight_format" not in paths_set:
            te["weight_format"] = te["input_format"]
        if "tensor_engine.accumulator_format" not in paths_set:
            te["accumulator_format"] = "int32" if te["input_format"] == "int8" else "fp32"
    desc = ", ".join(f"{k}={v}" for k, v in point.items())
    return ArchSpec.from_dict(data, source=f"{source} point ({desc})")


# ---- parsing -------------------------------------------------------------------------------
_CONSTRAINT_RE = re.compile(r"^\s*([\w/².:-]+?)\s*(<=|>=|<|>)\s*([-+0-9.eE]+)\s*$")


def _parse_axis(name: Any, spec: Any, base: ArchSpec,
                modes: frozenset[str] | None = None) -> Axis:
    """``modes``: the modes (train/serve) of the sweep's cluster workloads (None: there are
    none, so cluster./plan. axes are refused)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"{name!r}: axis names are dotted ArchSpec paths, e.g. tensor_engine.rows")
    paths = tuple(p.strip() for p in name.split(","))
    dumped = base.model_dump(mode="json")
    for p in paths:
        if p.startswith(WORKLOAD_AXIS_PREFIXES):
            _check_workload_path(p, modes)
        else:
            _check_path(p, dumped)
    if isinstance(spec, (list, tuple)):
        if not spec:
            raise ValueError(f"{name} = []: needs at least one value")
        return Axis(paths=paths, values=tuple(spec))
    if isinstance(spec, dict):
        extra = set(spec) - {"values", "low", "high", "step", "log"}
        if extra:
            raise ValueError(f"{name}.{sorted(extra)[0]} = (unknown key): accepted keys are "
                             f"values, low, high, step, log")
        if "values" in spec:
            return _parse_axis(name, spec["values"], base, modes)
        if "low" not in spec or "high" not in spec:
            raise ValueError(f"{name} = {spec!r}: a range needs `low` and `high` (or give `values`)")
        lo, hi = spec["low"], spec["high"]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (lo, hi)) \
                or lo > hi:
            raise ValueError(f"{name}: low = {lo!r}, high = {hi!r}: must be numbers with low <= high")
        if spec.get("log") and lo <= 0:
            raise ValueError(f"{name}.low = {lo!r}: must be > 0 for a log range")
        step = spec.get("step")
        if step is not None and (not isinstance(step, (int, float)) or step <= 0):
            raise ValueError(f"{name}.step = {step!r}: must be a number > 0")
        integer = all(isinstance(v, int) for v in (lo, hi)) and (step is None or isinstance(step, int))
        return Axis(paths=paths, low=lo, high=hi, step=step, log=bool(spec.get("log")),
                    integer=integer)
    raise ValueError(f"{name} = {spec!r}: must be a list of values or a mapping "
                     f"{{low, high[, step][, log]}}")


def _check_path(path: str, dumped: dict[str, Any]) -> None:
    optional = {"mesh": MeshSpec, "vector_unit": VectorUnitSpec}
    model: Any = ArchSpec
    parts = path.split(".")
    for i, part in enumerate(parts):
        fields = getattr(model, "model_fields", {})
        if part not in fields:
            where = ".".join(parts[:i]) or "ArchSpec"
            raise ValueError(f"{path}: {part!r} is not a field of {where} (fields: "
                             f"{', '.join(fields)})")
        ann = fields[part].annotation
        model = optional.get(part) if i == 0 and part in optional else ann
        if i == 0 and part in optional and dumped.get(part) is None and len(parts) > 1:
            pass   # the section is created from its defaults plus the axis values
    if hasattr(model, "model_fields"):
        raise ValueError(f"{path}: is a section; name one of its fields "
                         f"({', '.join(model.model_fields)})")


def _check_workload_path(path: str, modes: frozenset[str] | None) -> None:
    """``cluster.<ClusterSpec field path>`` or ``plan.<TrainPlan/ServePlan field>``."""

    from tilewright.dataflow_sim.cluster import (  # noqa: PLC0415  (lazy: pulls in simpy, torch)
        ClusterSpec, ServePlan, TrainPlan)
    head, _, rest = path.partition(".")
    if not modes:
        raise ValueError(f"{path}: {head}.* axes need a cluster workload "
                         f"(`cluster: <file>`, `model: <config>`) in workloads")
    if not rest:
        raise ValueError(f"{path}: name a field after `{head}.`")
    if head == "plan":
        plans = {"train": TrainPlan, "serve": ServePlan}
        for mode in sorted(modes):
            fields = plans[mode].model_fields
            if rest not in fields:
                raise ValueError(f"{path}: {rest!r} is not a field of the {mode} plan "
                                 f"({plans[mode].__name__}: {', '.join(fields)})")
        return
    models: list[Any] = [ClusterSpec]
    parts = rest.split(".")
    for i, part in enumerate(parts):
        fields = {k: f for m in models for k, f in getattr(m, "model_fields", {}).items()}
        if not fields:
            return                          # a free mapping (e.g. chip.arch): checked at run time
        if part not in fields:
            where = "cluster" + "".join(f".{x}" for x in parts[:i])
            raise ValueError(f"{path}: {part!r} is not a field of {where} (fields: "
                             f"{', '.join(fields)})")
        ann = fields[part].annotation
        args = typing.get_args(typing.get_args(ann)[0]) if typing.get_origin(ann) is \
            typing.Annotated else typing.get_args(ann)
        models = [a for a in (args or (ann,)) if hasattr(a, "model_fields") or a is dict
                  or typing.get_origin(a) is dict]
        models = [{} if (a is dict or typing.get_origin(a) is dict) else a for a in models]
    if any(hasattr(m, "model_fields") for m in models):
        names = {k for m in models for k in getattr(m, "model_fields", {})}
        raise ValueError(f"{path}: is a section; name one of its fields ({', '.join(names)})")


def _parse_objective(o: Any, tags: tuple[str, ...] = ()) -> Objective:
    if isinstance(o, str):
        m = _metric(o, tags)
        return Objective(metric=m, direction=metric_info(m)[0])
    if isinstance(o, dict) and "metric" in o:
        extra = set(o) - {"metric", "direction", "workload"}
        if extra:
            raise ValueError(f"= {o!r}: accepted keys are metric, direction and workload")
        m = _metric(o["metric"], tags, o.get("workload"))
        return Objective(metric=m, direction=o.get("direction", metric_info(m)[0]))
    raise ValueError(f"= {o!r}: must be a metric name or {{metric: NAME, direction: "
                     f"minimize|maximize, workload: NAME|INDEX}}")


def _parse_constraint(c: Any, tags: tuple[str, ...] = ()) -> Constraint:
    if isinstance(c, str):
        m = _CONSTRAINT_RE.match(c)
        if not m:
            raise ValueError(f"= {c!r}: must look like 'area_mm2 <= 4' (<=, >=, <, >)")
        metric, op, val = _metric(m.group(1), tags), m.group(2), float(m.group(3))
        return Constraint(metric=metric, **({"max": val} if "<" in op else {"min": val}))
    if isinstance(c, dict) and "metric" in c:
        extra = set(c) - {"metric", "min", "max", "workload"}
        if extra or ("min" not in c and "max" not in c):
            raise ValueError(f"= {c!r}: accepted keys are metric, workload and min and/or max")
        return Constraint(metric=_metric(c["metric"], tags, c.get("workload")), min=c.get("min"),
                          max=c.get("max"))
    raise ValueError(f"= {c!r}: must be 'metric <= value' or {{metric, min, max, workload}}")


_TOP = ("name", "base", "tech", "axes", "workloads", "objectives", "constraints", "search")


def _err(source: str, field: str, text: str) -> SweepError:
    sep = "" if text.startswith((" ", ":", "=", ".")) or field.endswith(".") else ": "
    return SweepError(f"{source}: {field}{sep}{text}".replace(": =", " =").replace(":  ", ": "))


def sweep_from_dict(data: Any, source: str = "sweep", root: Path | None = None) -> SweepSpec:
    """Validate a sweep mapping (see module doc); raise :class:`SweepError` (one line)."""
    if not isinstance(data, dict):
        raise SweepError(f"{source}: expected a mapping with keys {', '.join(_TOP)}, got "
                         f"{type(data).__name__}")
    for key in data:
        if key not in _TOP:
            raise SweepError(f"{source}: {key} = (unknown key): accepted keys are {', '.join(_TOP)}")
    for key in ("base", "axes", "workloads", "objectives"):
        if key not in data:
            raise SweepError(f"{source}: {key} = (missing): is required")
    if "name" in data and not (isinstance(data["name"], str) and data["name"].strip()):
        raise SweepError(f"{source}: name = {data['name']!r}: must be a non-empty text "
                         "(the sweep's name in the results database)")
    # base
    b = data["base"]
    try:
        if isinstance(b, dict):
            base = ArchSpec.from_dict(b, source=f"{source}: base")
        elif isinstance(b, str):
            p = (root / b) if root is not None and (root / b).exists() else Path(b)
            base = load_arch(p if p.exists() else b)
        else:
            raise SweepError(f"{source}: base = {b!r}: must be a preset name, a YAML path or a "
                             f"mapping of ArchSpec fields")
    except ArchSpecError as exc:
        raise SweepError(f"{source}: base: {exc}") from None
    # tech
    tech = str(data.get("tech", "45nm"))
    try:
        tp = root / tech if root is not None and (root / tech).exists() else tech
        load_tech(tp)
        tech = str(tp)
    except TechError as exc:
        raise SweepError(f"{source}: tech = {tech!r}: {exc}") from None
    # workloads
    wl_in = data["workloads"]
    if not isinstance(wl_in, list) or not wl_in:
        raise SweepError(f"{source}: workloads = {wl_in!r}: must be a non-empty list")
    workloads = []
    for i, w in enumerate(wl_in):
        try:
            if not isinstance(w, dict):
                raise SweepError(f"{source}: workloads[{i}] = {w!r}: must be a mapping "
                                 f"(model: ... or gemm: [M, K, N])")
            workloads.append(Workload.model_validate(w))
        except ValidationError as exc:
            e = exc.errors(include_url=False)[0]
            loc = ".".join(str(x) for x in e["loc"])
            if e["type"] == "value_error":
                msg = str(e["msg"]).removeprefix("Value error, ")
                raise SweepError(f"{source}: workloads[{i}]{'.' + loc if loc else ''}: {msg}") \
                    from None
            shown = "(unknown key)" if e["type"] == "extra_forbidden" else repr(e.get("input"))
            acc = "accepted keys are " + ", ".join(Workload.model_fields) \
                if e["type"] == "extra_forbidden" else e["msg"].lower()
            raise SweepError(f"{source}: workloads[{i}].{loc} = {shown}: {acc}") from None
        workloads[-1] = _resolve_cluster(workloads[-1], f"{source}: workloads[{i}]", root)
        workloads[-1] = _resolve_user_model(workloads[-1], f"{source}: workloads[{i}]", root)
    tags = tuple(workload_tag({"name": w.name}, i) for i, w in enumerate(workloads))
    for i, t in enumerate(tags):
        if ":" in t or tags.index(t) != i:
            raise SweepError(f"{source}: workloads[{i}].name = {t!r}: must be unique among the "
                             f"workloads (unnamed ones are w<index>) and contain no ':'")
    # axes (after the workloads: cluster./plan. axes are checked against them)
    modes = frozenset(w.mode or "train" for w in workloads if w.kind == "cluster") or None
    axes_in = data["axes"]
    if not isinstance(axes_in, dict) or not axes_in:
        raise SweepError(f"{source}: axes = {axes_in!r}: must be a non-empty mapping of dotted "
                         f"ArchSpec paths to values or ranges")
    axes = []
    for name, spec in axes_in.items():
        try:
            axes.append(_parse_axis(name, spec, base, modes))
        except (ValueError, ValidationError) as exc:
            raise _err(source, "axes.", str(exc).splitlines()[0]) from None
    # objectives / constraints
    objs_in = data["objectives"]
    objs_in = [objs_in] if isinstance(objs_in, (str, dict)) else objs_in
    if not isinstance(objs_in, list) or not objs_in:
        raise SweepError(f"{source}: objectives = {objs_in!r}: must be a non-empty list")
    try:
        objectives = tuple(_parse_objective(o, tags) for o in objs_in)
    except (ValueError, ValidationError) as exc:
        raise _err(source, "objectives ", str(exc).splitlines()[0]) from None
    cons_in = data.get("constraints") or []
    if not isinstance(cons_in, list):
        raise SweepError(f"{source}: constraints = {cons_in!r}: must be a list")
    try:
        constraints = tuple(_parse_constraint(c, tags) for c in cons_in)
    except (ValueError, ValidationError) as exc:
        raise _err(source, "constraints ", str(exc).splitlines()[0]) from None
    # search
    s_in = data.get("search") or {}
    if isinstance(s_in, str):
        s_in = {"method": s_in}
    try:
        search = SearchSpec.model_validate(s_in)
    except ValidationError as exc:
        e = exc.errors(include_url=False)[0]
        loc = ".".join(str(x) for x in e["loc"])
        shown = "(unknown key)" if e["type"] == "extra_forbidden" else repr(e.get("input"))
        acc = "accepted keys are method, trials, seed, population" \
            if e["type"] == "extra_forbidden" else e["msg"].lower()
        raise SweepError(f"{source}: search.{loc} = {shown}: {acc}") from None
    if search.method == "nsga2" and len(objectives) < 2:
        pass  # NSGA-II also works single-objective; allowed
    spec = SweepSpec(name=str(data.get("name", "sweep")), base=base, tech=tech, axes=tuple(axes),
                     workloads=tuple(workloads), objectives=objectives, constraints=constraints,
                     search=search, source=source)
    _check_one_design(spec, source)
    if any(p.startswith(WORKLOAD_AXIS_PREFIXES) for a in axes for p in a.paths):
        spec.workloads_for({a.name: a.values[0] if a.values else a.low for a in axes})
    if search.method == "grid":
        try:
            spec.grid_size()
        except SweepError as exc:
            raise SweepError(f"{source}: {exc}") from None
    elif search.trials is None:
        raise SweepError(f"{source}: search.trials = (missing): is required for "
                         f"method {search.method!r}")
    return spec


#: the fields each workload kind reads besides ``weight`` and ``name``; a field set to anything
#: but its default on a kind that does not read it is refused, never ignored
WORKLOAD_FIELDS = {
    "llm": ("model", "seq", "batch", "phase", "format", "layers"),
    "gemm": ("gemm", "batch", "format"),
    "mesh": ("mesh_gemv", "mesh_gemm", "format", "algo"),
    "cluster": ("cluster", "model", "mode", "plan", "chip", "requests", "rate", "prompt_tokens",
                "output_tokens", "seed", "cost_source"),
}
#: ArchSpec paths that set the engine's operand format (a workload runs in the point's format)
FORMAT_PATHS = ("tensor_engine.input_format", "tensor_engine.weight_format")


def _check_one_design(spec: SweepSpec, source: str) -> None:
    """A sweep point is one design: every workload runs in the point's own engine format (a
    workload ``format`` that disagrees with the design, or is fixed while an axis varies the
    format, is refused); a field a workload's kind does not read is refused; ArchSpec axes are
    refused when no workload uses the ArchSpec (cluster workloads on the cluster file's chip)."""
    fmt_axis = [p for a in spec.axes for p in a.paths if p in FORMAT_PATHS]
    engine = spec.base.tensor_engine.input_format
    for i, w in enumerate(spec.workloads):
        where = f"{source}: workloads[{i}]"
        reads = set(WORKLOAD_FIELDS[w.kind]) | {"weight", "name"}
        for f in sorted(w.model_fields_set - reads):
            if getattr(w, f) != Workload.model_fields[f].default:
                raise SweepError(f"{where}.{f} = {getattr(w, f)!r}: a {w.kind} workload does not "
                                 f"read it (it reads {', '.join(WORKLOAD_FIELDS[w.kind])}); "
                                 f"remove it")
        if w.format is None:
            continue
        if fmt_axis:
            raise SweepError(f"{where}.format = {w.format!r}: fixed while axis {fmt_axis[0]} "
                             f"varies the design's format; drop it (each point runs in its own "
                             f"format)")
        if w.format != engine:
            raise SweepError(f"{where}.format = {w.format!r} disagrees with the design's "
                             f"tensor_engine.input_format = {engine!r}: a point is one design; "
                             f"drop `format` (a workload runs in the design's format) or change "
                             f"the base")
    uses_arch = any(workload_uses_arch(w.model_dump()) for w in spec.workloads)
    arch_axes = [p for a in spec.axes for p in a.paths
                 if not p.startswith(WORKLOAD_AXIS_PREFIXES)]
    if arch_axes and not uses_arch:
        raise SweepError(f"{source}: axes.{arch_axes[0]}: no workload uses the ArchSpec (cluster "
                         f"workloads run the cluster file's chip); add `chip: sweep` to a "
                         f"workload or sweep cluster./plan. fields")
    have = produced_static_metrics(uses_arch, spec.base.mesh is not None)
    asked = [("objectives", o.metric) for o in spec.objectives] + \
        [("constraints", c.metric) for c in spec.constraints]
    for where, metric in asked:
        static = metric if metric != "perf_per_mm2" else "area_mm2"
        if static in STATIC_METRICS and static not in have:
            if uses_arch and spec.base.mesh is None:          # the predictor is not installed
                from tilewright.app.sweep.resource_model import (  # noqa: PLC0415  (lazy: pandas)
                    require_predictor)
                try:
                    require_predictor()
                except ExtraMissing as exc:
                    raise ExtraMissing(f"{source}: {where}: {metric} is predicted by the FPGA "
                                       f"resource model: {exc}") from None
            why = ("no workload uses the ArchSpec (cluster workloads run the cluster file's "
                   "chip; add `chip: sweep`)" if not uses_arch else
                   "the base is a mesh design: the FPGA figures predict the single-core GEMM "
                   "core, which a mesh design does not have")
            raise SweepError(f"{source}: {where}: {metric} is not produced: {why}")


#: the fields an ``llm`` workload of a user module (``file.py:factory`` / ``.onnx``) does not
#: read: it runs whole on the example inputs its factory or file gives, as ``compile`` runs it
USER_MODEL_UNREAD = ("seq", "batch", "phase", "layers")


def _resolve_user_model(w: Workload, where: str, root: Path | None) -> Workload:
    """An ``llm`` workload naming a user module (``path/file.py:factory`` or ``.onnx``): refuse
    the shape fields it does not read (:data:`USER_MODEL_UNREAD`), make a path relative to the
    sweep file absolute (workers find it), and load the module now so a bad file or factory is
    one line naming the sweep file and workload."""
    from tilewright.models.resolve import (  # noqa: PLC0415  (lazy: pulls in torch)
        model_form, resolve_model)
    from tilewright.models.llm_shapes import ModelInputError  # noqa: PLC0415  (lazy: models)
    if w.kind != "llm" or model_form(str(w.model)) not in ("factory", "onnx"):
        return w
    for f in USER_MODEL_UNREAD:
        if f in w.model_fields_set:
            raise SweepError(f"{where}.{f} = {getattr(w, f)!r}: a user module ({w.model}) runs "
                             f"whole on the example inputs its factory/file gives; "
                             f"{', '.join(USER_MODEL_UNREAD)} apply to LLM configs; remove it")
    text = str(w.model)
    file, _, factory = text.rpartition(":") if model_form(text) == "factory" else (text, "", "")
    if root is not None and not Path(file).is_absolute() and (root / file).exists():
        text = str((root / file).resolve()) + (":" + factory if factory else "")
    try:
        resolve_model(text)
    except ModelInputError as exc:
        raise SweepError(f"{where}.model: {exc}") from None
    return w.model_copy(update={"model": text})


def _resolve_cluster(w: Workload, where: str, root: Path | None) -> Workload:
    """Check a cluster workload's file, model and plan now (one-line errors); make a relative
    cluster path absolute so workers find it. Plans the cluster cannot run are run-time errors."""
    if w.kind != "cluster":
        return w

    from tilewright.dataflow_sim.cluster import (  # noqa: PLC0415  (lazy: pulls in simpy, torch)
        ClusterSpecError, ServePlan, TrainPlan, load_cluster)
    from tilewright.models.llm_configs import get_config  # noqa: PLC0415  (lazy: pulls in torch)
    from tilewright.models.llm_shapes import \
        unmodeled_fields  # noqa: PLC0415  (lazy: models layer)
    path = w.cluster
    if root is not None and (root / str(path)).exists():
        path = str((root / str(path)).resolve())
    try:
        cl = load_cluster(path)
    except ClusterSpecError as exc:
        raise SweepError(f"{where}.cluster = {w.cluster!r}: {exc}") from None
    try:                                 # a built-in name or a Hugging Face config.json
        left = unmodeled_fields(get_config(w.model))
    except ValueError as exc:
        raise SweepError(f"{where}.model = {w.model!r}: {exc}") from None
    if left:                             # never ignore a field the config sets
        raise SweepError(f"{where}.model = {w.model!r}: the cluster model does not model "
                         f"{', '.join(left)}")
    plan_cls = ServePlan if w.mode == "serve" else TrainPlan
    plan = dict(w.plan or {})
    if plan_cls is TrainPlan and plan.get("dp") == "auto":
        plan["dp"] = 1                          # resolved per point: chips / (tp·pp·sp)
    try:
        plan_cls.model_validate(plan)
    except VErr as exc:
        e = exc.errors(include_url=False)[0]
        loc = ".".join(str(x) for x in e["loc"])
        shown = "(unknown key)" if e["type"] == "extra_forbidden" else repr(e.get("input"))
        acc = f"accepted keys are {', '.join(plan_cls.model_fields)}" \
            if e["type"] == "extra_forbidden" else e["msg"].lower()
        raise SweepError(f"{where}.plan.{loc} = {shown}: {acc}") from None
    if w.chip == "sweep" and cl.arch() is None:
        raise SweepError(f"{where}.chip = 'sweep': cluster {w.cluster!r} has a GPU chip; "
                         f"`chip: sweep` needs a cluster whose chip is `kind: arch`")
    return w.model_copy(update={"cluster": path})


def load_sweep(path: str | Path) -> SweepSpec:
    """Load and validate a sweep YAML file (see module doc)."""
    p = Path(path)
    if not p.exists():
        raise SweepError(f"{path}: no such sweep file")
    data = load_user_yaml(p, SweepError, what="sweep YAML")
    return sweep_from_dict(data, source=str(path), root=p.parent)
