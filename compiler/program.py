"""Program: the compiled artifact every simulation level consumes (see docs/design.md, "The four contracts").

A Program is an ordered list of tasks over named tensors. Tensors are typed (shape, format);
constant tensors (quantized weights, biases, requantization multipliers) travel with the Program.
Task order is a valid execution order; ``deps`` makes the data dependencies explicit.

Semantics of each task kind (every level implements exactly this):

``gemm``          out[m, n] = sum_k a[m, k] * b[k, n] over int8 operands with an int32 accumulator
                  that wraps modulo 2**32 (two's complement), shapes a: M x K, b: K x N, out: M x N.
``bgemm``         batched GEMM ``out[..., m, n] = sum_k a[..., m, k] * B[..., k, n]`` with
                  ``B = swapaxes(b, -1, -2)`` if ``transpose_b`` else ``b``; batch dims broadcast
                  like ``numpy.matmul`` (``batch`` = out's batch shape; when ``b`` is 2-D the
                  leading dims of ``a`` fold into M: ``batch = ()``, ``m = prod(a.shape[:-1])``).
                  Operands are element codes in ``format`` with optional scales ``a_scale`` /
                  ``b_scale`` (see *Number formats* below); out is fp32 (int32 for unscaled int8).
                  Arithmetic: :func:`tilewright.dataflow_sim.numerics.gemm` with
                  ``k_block`` (the array's rows) and accumulator ``acc``, per batch element.
                  ``tile_m/tile_k/tile_n``, ``order``, ``dataflow`` record the mapping that
                  :func:`tilewright.compiler.gemm_mapper.map_gemm` chose; a K tile shorter than K
                  (``tile_k < k``, a multiple of ``k_block``) accumulates into the same
                  accumulator tile in increasing k (an accumulate-capable core; the result equals
                  the unsplit GEMM because tiles hold whole ``k_block`` runs).
``grouped_gemm``  rows of ``a`` [R, K] are grouped by expert: the first ``counts[0]`` rows use
                  ``b[0]``, the next ``counts[1]`` rows ``b[1]``, ... (``counts`` int64 [E] is a
                  *run-time* tensor, sum = R); ``b`` [E, K, N] (or [E, N, K] if ``transpose_b``);
                  out [R, N] fp32. ``example_counts`` are the counts of the example run, used only
                  by reports. Formats and scales as ``bgemm`` (``b_scale`` stacked per expert:
                  [E, ...], each expert quantized on its own).
``attention``     ``out = softmax(scale * q @ k^T + mask) @ v`` along the last axis, q [..., S, d],
                  k and v [..., T, d] (batch dims broadcast), mask = -inf where key ``j > i +
                  causal_offset`` (no mask if ``causal_offset`` is None), computed as a streaming
                  cascade (FlashAttention): for each block of ``block_q`` queries, loop over blocks of
                  ``block_kv`` keys keeping the running max ``m``, running sum ``l`` and the output
                  accumulator ``o`` (``m' = max(m, rowmax(s))``, ``p = exp(s - m')``,
                  ``l' = exp(m - m') l + rowsum(p)``, ``o' = exp(m - m') o + p v``; ``out = o / l``);
                  key blocks that are fully masked are skipped. On-chip buffer: see
                  :meth:`AttentionTask.buffer_bytes` (independent of S and T). Its two GEMMs run
                  in ``format`` like ``bgemm`` per batch element and block: ``s = fl32(gemm(q_b,
                  k_b^T) * scale)`` with q, k codes and scales from ``quantize`` tasks; ``p``
                  (fp32, in [0, 1]) is quantized per (batch element, query block, key block):
                  bf16 by RNE, int8/fp8 per tensor (``quantize(p, granularity="tensor")``), MX
                  by 32-blocks along the key axis (``block_kv`` is then a multiple of 32 or >= T,
                  and ``v`` is quantized along its key axis, -2); ``o += gemm(p, v_b)``.
``scan``          selective scan: ``h[t] = a[:, t] * h[t-1] + b[:, t]`` (elementwise over
                  [Bt, Di, N]), ``y[:, t, :] = sum_n h[t][:, :, n] * c[:, t, None, n]``, with
                  ``h[-1] = h0``; a, b [Bt, L, Di, N], c [Bt, L, N], h0 [Bt, Di, N]; outputs ``out``
                  = y [Bt, L, Di] and ``state_out`` = h[L-1]. Executed in chunks of ``chunk_d``
                  channels x ``chunk_l`` time steps so the state chunk stays on chip.
``quantize``      ``(out, scale_out) = quantize(x, format, axis=axis, granularity=granularity)``
                  of :mod:`tilewright.formats` (element codes; fp32 scales of shape ``x`` with
                  size 1 per tensor / per channel, or E8M0 ``e8m0`` codes per 32-block; no
                  ``scale_out`` for bf16/fp32). Run-time (activation) quantization; weights are
                  quantized at compile time by the same function and travel as constants.
``vector``        an elementwise / reduction / data-movement op named by ``op``; see
                  :data:`VECTOR_OPS`.
``mesh_phase``    one bulk-synchronous phase on a 2-D mesh of cores (``ArchSpec.mesh``): a batch
                  of XY-routed messages released together plus per-core compute, run ``repeat``
                  times; timing conventions in :mod:`tilewright.dataflow_sim.mesh.model`, costed
                  by :func:`tilewright.dataflow_sim.mesh.run_mesh_program`. Its messages are the
                  rows of the int32 constant ``flows`` [F, 6]: (src row, src col, dst row, dst
                  col, stages, times) in physical coordinates (a multicast along a line is one
                  row whose destination is the farthest receiver; ``stages`` = cores whose
                  processor handles it; ``times`` = in how many of the repeats it runs, -1 =
                  all); message bytes are run-length coded: the first ``flow_counts[0]`` rows
                  carry ``flow_bytes[0]`` bytes each, and so on. A mesh task moves no tensor
                  values (cost only): the functional model and the single-core cost report
                  reject it.

Every task except ``gemm`` and ``mesh_phase`` runs on the functional model through
:func:`tilewright.dataflow_sim.functional.run_vector`; a task with a second output (``scan``'s
``state_out``) writes it into the environment itself and returns its primary output.

**Number formats.** Every tensor's ``format`` is visible in :attr:`Program.tensors`: ``fp32``,
``int8``/``int32``/``int64``/``bool``, the element-code formats of :mod:`tilewright.formats`
(``bf16``, ``fp8-e4m3``, ``fp8-e5m2``, ``mxint8``, ``mxfp8``, ``mxfp8-e5m2``; their numpy dtypes
in :data:`FORMAT_DTYPES`) and ``e8m0`` (uint8 MX scale codes). Scaling happens in two explicit
places: ``quantize`` (x -> codes, scales) before a GEMM, and the dequantization inside the GEMM
task after accumulation (``out = fl32(fl32(acc) * fl32(s_a * s_b))``; MX: per 32-block power of
two before each accumulator add) — step 4 and the MX rule of :mod:`~tilewright.dataflow_sim.numerics`.

A shape-only Program (a model built on the ``meta`` device) lists the constants whose values are
unknown in ``meta["unknown_constants"]``; it can be costed but not executed.

Serialization: ``save(dir)`` writes ``program.json`` (structure) and ``constants.npz`` (arrays);
``load(dir)`` restores an equal Program. Arrays whose dtype numpy cannot store natively (bf16,
fp8) are saved as their unsigned-integer bit view and re-viewed on load through the tensor's
format.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from tilewright.compiler.attention_timing import visited_pairs
from tilewright.formats import FORMATS as _NUMBER_FORMATS

__all__ = ["TensorInfo", "GemmTask", "VectorTask", "BgemmTask", "GroupedGemmTask",
           "AttentionTask", "ScanTask", "QuantizeTask", "MeshPhaseTask", "Task", "Program", "VECTOR_OPS", "FORMAT_DTYPES",
           "task_inputs", "task_outputs", "UNARY_OPS", "BINARY_OPS"]

class _FormatDtypes(Mapping):
    """Element format name -> numpy dtype holding it exactly: the number formats of
    :data:`tilewright.formats.FORMATS` (their ``dtype``, resolved on lookup so that importing
    this module does not import ml_dtypes) plus the plain tensor types below."""

    _PLAIN = {"int8": np.int8, "int32": np.int32, "int64": np.int64, "fp32": np.float32,
              "bool": np.bool_, "e8m0": np.uint8}

    def __getitem__(self, name: str) -> Any:
        if name in self._PLAIN:
            return self._PLAIN[name]
        return _NUMBER_FORMATS[name].dtype

    def __contains__(self, name: object) -> bool:      # a name check resolves no dtype
        return name in self._PLAIN or name in _NUMBER_FORMATS

    def __iter__(self):
        return iter(dict.fromkeys([*_NUMBER_FORMATS, *self._PLAIN]))

    def __len__(self) -> int:
        return len(set(_NUMBER_FORMATS) | set(self._PLAIN))


#: element format name -> numpy dtype used to hold it exactly
FORMAT_DTYPES: Mapping[str, Any] = _FormatDtypes()

UNARY_OPS = ("exp", "neg", "rsqrt", "silu", "sigmoid", "softplus", "relu", "logical_not", "erf",
             "tanh")
BINARY_OPS = ("add", "sub", "mul", "div", "floordiv", "eq", "gt")

#: vector op name -> one-line semantics (inputs in order; attrs named)
VECTOR_OPS: dict[str, str] = {
    "requantize": (
        "inputs (acc:int32[M,N], bias:int32[N], multiplier:int32[N], shift:int32[N]) -> int8[M,N]: "
        "y = clamp((int64(acc) + bias) * multiplier + 2**(shift-1) >> shift, lo, hi) with "
        "arithmetic shift (floor), lo = 0 if attrs.relu else -128, hi = 127"),
    "bias_add": "inputs (acc:int32[M,N], bias:int32[N]) -> int32[M,N]: acc + bias, wrapping int32",
    "slice": (
        "inputs (x) -> x restricted to elements [attrs.start, attrs.stop) (step attrs.step, "
        "default 1) along attrs.axis, same format; pure data movement (the compiler also uses it "
        "to split GEMMs that do not fit)"),
    "concat": (
        "inputs (x0, x1, ...) of one format, shapes equal except along attrs.axis -> their "
        "concatenation along attrs.axis in input order; pure data movement"),
    # ---- elementwise (fp32 arithmetic in IEEE single precision, one rounding per operation) --
    **{f: (f"inputs (x) -> same shape: {d}" + ("" if f == "logical_not" else "; fp32"))
       for f, d in (("exp", "e**x"), ("neg", "-x"), ("rsqrt", "1 / sqrt(x)"),
                    ("silu", "x * sigmoid(x)"), ("sigmoid", "1 / (1 + exp(-x))"),
                    ("softplus", "log1p(exp(x)), or x where x > 20 (torch's beta=1, threshold=20)"),
                    ("relu", "max(x, 0)"), ("logical_not", "not x (bool)"),
                    ("erf", "the error function erf(x)"), ("tanh", "tanh(x)"))},
    "pow": "inputs (x) -> x ** attrs.exponent (a Python scalar); fp32",
    **{f: (f"inputs (a, b) broadcast like numpy, or (a,) with attrs.scalar (attrs.scalar_first: "
           f"scalar is the left operand) -> {d}; result in attrs.format")
       for f, d in (("add", "a + b"), ("sub", "a - b"), ("mul", "a * b"), ("div", "a / b"),
                    ("floordiv", "floor(a / b) (integers)"), ("eq", "a == b (bool)"),
                    ("gt", "a > b (bool)"))},
    "masked_fill": "inputs (x, mask:bool broadcastable to x) -> where(mask, attrs.value, x)",
    "cast": "inputs (x) -> x converted to attrs.format (float -> int truncates toward zero)",
    # ---- reductions, scans along an axis ----------------------------------------------------
    **{f"reduce_{f}": (f"inputs (x) -> {f} over attrs.axes (list of ints), keeping them as size 1 "
                       f"if attrs.keepdim")
       for f in ("sum", "mean", "max", "any")},
    "softmax": "inputs (x) -> exp(x - max) / sum(exp(x - max)) along attrs.axis; fp32",
    "cumsum": "inputs (x) -> inclusive running sum along attrs.axis, in index order",
    "topk_indices": (
        "inputs (x) -> int64 indices of the attrs.k largest values along attrs.axis, in "
        "descending order of value (ties: lower index first); the values are a gather"),
    "gather": "inputs (x, index:int64) -> take_along_axis(x, index, attrs.axis)",
    "argsort": "inputs (x:int) -> int64 permutation sorting x ascending along attrs.axis, stable",
    "bincount": "inputs (x:int64 1-D, values in [0, attrs.length)) -> int64 [attrs.length] counts",
    "take_rows": "inputs (x [R, ...], index:int64 [n]) -> x[index] ([n, ...])",
    "scatter_add_rows": (
        "inputs (src [n, D], index:int64 [n], weight [n]) -> out [attrs.rows, D] = zeros, then "
        "for i = 0..n-1 in order: out[index[i]] += weight[i] * src[i]; fp32"),
    # ---- data movement (a copy through the vector unit; no arithmetic) ----------------------
    "reshape": "inputs (x) -> x reshaped to attrs.shape in row-major (C) order",
    "permute": "inputs (x) -> x with axes reordered: out axis i is x axis attrs.axes[i]",
    "expand": "inputs (x) -> x broadcast to attrs.shape",
    "select": "inputs (x) -> x[..., attrs.index, ...] along attrs.axis (that axis removed)",
    "stack": "inputs (x0, x1, ...) equal shapes -> stacked along a new axis attrs.axis",
    "pad": ("inputs (x) -> x padded with attrs.value; attrs.pads lists (before, after) element "
            "counts per axis, first axis first"),
    "copy": "inputs (x) -> x (a copy; e.g. an alias the model returns)",
}


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TensorInfo(_Model):
    """A named tensor: shape (elements per dim) and element format (a key of FORMAT_DTYPES)."""

    name: str
    shape: tuple[int, ...]
    format: str

    @field_validator("format")
    @classmethod
    def _known_format(cls, v: str) -> str:
        if v not in FORMAT_DTYPES:
            raise ValueError(f"format {v!r}: must be one of {sorted(FORMAT_DTYPES)}")
        return v

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * np.dtype(FORMAT_DTYPES[self.format]).itemsize


class _Task(_Model):
    """What every task carries besides its operands: ``deps`` (names of the tasks it waits for)
    and ``source`` (the model op it came from, for reports and error messages)."""

    deps: tuple[str, ...] = ()
    source: str = ""


class GemmTask(_Task):
    """One GEMM on the tensor engine: ``out = a @ b`` (int8 x int8 -> int32, wrapping).

    ``m, k, n`` are the logical sizes; the engine folds them over its rows x cols internally.
    ``source`` names the model op it came from (for reports and error messages).
    ``a_scale``/``b_scale`` (both or neither): the ``e8m0`` block-scale codes of an MX GEMM
    (a: M x ceil(K/32), b: ceil(K/32) x N) for an ArchSpec whose engine takes an MX format; then
    ``a``/``b`` hold the 8-bit element codes and ``out`` the fp32 accumulator (as int32 bit
    patterns): the MX rule of :mod:`tilewright.dataflow_sim.numerics`, run on the accelerator
    top (the functional model runs MX GEMMs as ``bgemm``, and refuses this form). On an fp8
    ArchSpec they are one-element fp32 per-tensor scales instead, which the accelerator top
    applies as it stores C (its ``SCALE`` instructions, :func:`tilewright.compiler.codegen.
    task_scales`); ``out`` then holds the scaled fp32 result as int32 bit patterns.
    """

    kind: Literal["gemm"] = "gemm"
    name: str
    a: str
    b: str
    out: str
    m: int = Field(..., ge=1)
    k: int = Field(..., ge=1)
    n: int = Field(..., ge=1)
    a_scale: str | None = None
    b_scale: str | None = None

    @property
    def macs(self) -> int:
        return self.m * self.k * self.n


class VectorTask(_Task):
    """An elementwise / per-channel op (see :data:`VECTOR_OPS`)."""

    kind: Literal["vector"] = "vector"
    name: str
    op: str
    inputs: tuple[str, ...]
    out: str
    attrs: dict[str, Any] = {}


class BgemmTask(_Task):
    """Batched GEMM (see the module table). ``batch`` is the broadcast batch shape of ``out``;
    ``tile_m/tile_n/tile_k`` the tiling the mapper chose (elements; the functional model runs
    the tiles in this order: m outer, n, then k inner accumulating)."""

    kind: Literal["bgemm"] = "bgemm"
    name: str
    a: str
    b: str
    out: str
    batch: tuple[int, ...] = ()
    m: int = Field(..., ge=1)
    k: int = Field(..., ge=1)
    n: int = Field(..., ge=1)
    transpose_b: bool = False
    format: str = "fp32"
    a_scale: str | None = None
    b_scale: str | None = None
    acc: Literal["fp32", "int32"] = "fp32"
    k_block: int | None = Field(None, ge=1)
    """k per PE-column partial sum (the array's rows); None = all of K in one run"""
    tile_m: int = Field(..., ge=1)
    tile_n: int = Field(..., ge=1)
    tile_k: int = Field(..., ge=1)
    order: str = "mkn"
    """loop order over tiles, outer -> inner (:data:`tilewright.compiler.gemm_mapper.LOOP_ORDERS`)"""
    dataflow: str = "ws"

    @property
    def batch_size(self) -> int:
        return int(np.prod(self.batch, dtype=np.int64)) if self.batch else 1

    @property
    def macs(self) -> int:
        return self.batch_size * self.m * self.k * self.n


class GroupedGemmTask(_Task):
    """Per-expert GEMMs over rows grouped by expert, counts known at run time (module table)."""

    kind: Literal["grouped_gemm"] = "grouped_gemm"
    name: str
    a: str
    b: str
    counts: str
    out: str
    rows: int = Field(..., ge=0)
    experts: int = Field(..., ge=1)
    k: int = Field(..., ge=1)
    n: int = Field(..., ge=1)
    transpose_b: bool = False
    format: str = "fp32"
    a_scale: str | None = None
    b_scale: str | None = None
    acc: Literal["fp32", "int32"] = "fp32"
    k_block: int | None = Field(None, ge=1)
    example_counts: tuple[int, ...] = ()
    """rows per expert in the example run (reports only); empty = not known"""
    counts_source: str = ""

    @property
    def macs(self) -> int:
        return self.rows * self.k * self.n


class AttentionTask(_Task):
    """Fused streaming attention (FlashAttention cascade; module table)."""

    kind: Literal["attention"] = "attention"
    name: str
    q: str
    k: str
    v: str
    out: str
    batch: tuple[int, ...]
    s: int = Field(..., ge=1)
    t: int = Field(..., ge=1)
    d: int = Field(..., ge=1)
    scale: float
    causal_offset: int | None = None
    block_q: int = Field(..., ge=1)
    block_kv: int = Field(..., ge=1)
    format: str = "fp32"
    q_scale: str | None = None
    k_scale: str | None = None
    v_scale: str | None = None
    acc: Literal["fp32", "int32"] = "fp32"
    k_block: int | None = Field(None, ge=1)

    @property
    def batch_size(self) -> int:
        return int(np.prod(self.batch, dtype=np.int64)) if self.batch else 1

    def visited_blocks(self) -> int:
        """(query block, key block) pairs the cascade computes: all, minus the key blocks that
        lie entirely in the masked future of their query block
        (:func:`~tilewright.compiler.attention_timing.visited_pairs`)."""
        return visited_pairs(self.s, self.t, self.block_q, self.block_kv, self.causal_offset)

    def buffer_bytes(self, elem_bytes: int = 4) -> int:
        """On-chip bytes the cascade holds at once: the q block, one k and one v block
        (``elem_bytes`` each element), the fp32 score/probability block, the fp32 output
        accumulator and the fp32 running max and sum. Depends on block sizes and d only."""
        bq, bk, d = min(self.block_q, self.s), min(self.block_kv, self.t), self.d
        return elem_bytes * (bq * d + 2 * bk * d) + 4 * (bq * bk + bq * d + 2 * bq)


class ScanTask(_Task):
    """Chunked selective scan (module table); two outputs: ``out`` (y) and ``state_out``."""

    kind: Literal["scan"] = "scan"
    name: str
    a: str
    b: str
    c: str
    h0: str
    out: str
    state_out: str
    batch: int = Field(..., ge=1)
    length: int = Field(..., ge=1)
    channels: int = Field(..., ge=1)
    state: int = Field(..., ge=1)
    chunk_l: int = Field(..., ge=1)
    chunk_d: int = Field(..., ge=1)

    def buffer_bytes(self) -> int:
        """On-chip fp32 bytes of one chunk: the state (chunk_d x N), a and b chunks
        (chunk_l x chunk_d x N each), the c chunk (chunk_l x N) and the y chunk (chunk_l x chunk_d)."""
        cl, cd, n = min(self.chunk_l, self.length), min(self.chunk_d, self.channels), self.state
        return 4 * (cd * n + 2 * cl * cd * n + cl * n + cl * cd)


class QuantizeTask(_Task):
    """Run-time quantization of ``x`` to element codes ``out`` and scales ``scale_out``
    (module table; :func:`tilewright.formats.quantize` with these arguments)."""

    kind: Literal["quantize"] = "quantize"
    name: str
    x: str
    out: str
    scale_out: str | None = None
    format: str
    granularity: Literal["none", "tensor", "channel", "block"]
    axis: int
    """the operand's reduction axis (MX blocks run along it; channel scales are across it)"""
    cached_elements: int = Field(0, ge=0)
    """leading elements of ``x`` already held in ``format`` (a KV cache quantized when its tokens
    were appended): costed as not re-quantized (only the rest is); the functional model
    quantizes all of ``x`` (see :mod:`tilewright.compiler.lower_llm`, KV append)"""


class MeshPhaseTask(_Task):
    """One phase of a mesh schedule (module table, ``mesh_phase``).

    ``op`` names the layer op the phase belongs to (consecutive tasks of one op are one mesh
    run: SRAM, route-id and defect checks apply per op). ``cores``: bool [mesh rows, mesh cols]
    constant, the cores the op uses; ``macs_per_core`` / ``vector_ops_per_core``: work of every
    one of them in one run of the phase (a core does ``core_macs_per_cycle`` of either per
    cycle); ``overlap``: compute overlaps the messages (double buffering); ``route_group``:
    phases that are translations of one another; ``memory_bytes_per_core``: peak SRAM bytes the
    op keeps on each of its cores; ``useful_macs``: the model's MACs this phase performs
    (padding excluded; for reports).
    """

    kind: Literal["mesh_phase"] = "mesh_phase"
    name: str
    op: str
    cores: str
    flows: str | None = None
    flow_bytes: tuple[int, ...] = ()
    flow_counts: tuple[int, ...] = ()
    macs_per_core: int = Field(0, ge=0)
    vector_ops_per_core: int = Field(0, ge=0)
    overlap: bool = False
    repeat: int = Field(1, ge=1)
    route_group: str | None = None
    memory_bytes_per_core: int = Field(0, ge=0)
    useful_macs: int = Field(0, ge=0)
    relay_wave: bool = False     # next store-and-forward wave of the previous task's messages

    @field_validator("flow_counts")
    @classmethod
    def _runs_match(cls, v: tuple[int, ...], info: Any) -> tuple[int, ...]:
        if len(v) != len(info.data.get("flow_bytes", ())):
            raise ValueError(f"flow_counts has {len(v)} runs but flow_bytes has "
                             f"{len(info.data.get('flow_bytes', ()))}: one byte count per run")
        if any(c < 0 for c in v) or any(b < 0 for b in info.data.get("flow_bytes", ())):
            raise ValueError("flow_counts and flow_bytes must be >= 0")
        return v

    @property
    def message_count(self) -> int:
        return int(sum(self.flow_counts))


Task = Annotated[Union[GemmTask, VectorTask, BgemmTask, GroupedGemmTask, AttentionTask, ScanTask,
                       QuantizeTask, MeshPhaseTask],
                 Field(discriminator="kind")]


def task_inputs(task: Any) -> tuple[str, ...]:
    """Names of the tensors ``task`` reads, in operand order."""
    if isinstance(task, VectorTask):
        return task.inputs
    if isinstance(task, (GemmTask, BgemmTask)):
        return tuple(x for x in (task.a, task.b, task.a_scale, task.b_scale) if x)
    if isinstance(task, GroupedGemmTask):
        return tuple(x for x in (task.a, task.b, task.counts, task.a_scale, task.b_scale) if x)
    if isinstance(task, AttentionTask):
        return tuple(x for x in (task.q, task.k, task.v, task.q_scale, task.k_scale,
                                 task.v_scale) if x)
    if isinstance(task, QuantizeTask):
        return (task.x,)
    if isinstance(task, MeshPhaseTask):
        return (task.cores,) + ((task.flows,) if task.flows else ())
    return (task.a, task.b, task.c, task.h0)


def task_outputs(task: Any) -> tuple[str, ...]:
    """Names of the tensors ``task`` writes (primary output first)."""
    if isinstance(task, ScanTask):
        return (task.out, task.state_out)
    if isinstance(task, QuantizeTask) and task.scale_out:
        return (task.out, task.scale_out)
    if isinstance(task, MeshPhaseTask):
        return ()
    return (task.out,)


class Program(BaseModel):
    """The compiled program for one ArchSpec (identified by ``arch_hash``)."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    name: str
    arch_hash: str
    tensors: dict[str, TensorInfo]
    inputs: list[str]
    outputs: list[str]
    tasks: list[Task]
    meta: dict[str, Any] = Field(default_factory=dict)
    """free-form facts for users, e.g. quantization scales: ``{"input_scale": 0.02}``"""
    constants: dict[str, np.ndarray] = Field(default_factory=dict, exclude=True)

    def gemms(self) -> list[GemmTask]:
        return [t for t in self.tasks if isinstance(t, GemmTask)]

    def check(self) -> None:
        """Raise ValueError naming the task/tensor if the program is inconsistent."""
        defined = set(self.inputs) | set(self.constants) | set(self.meta.get("unknown_constants", ()))
        for name in self.constants:
            info = self.tensors[name]
            arr = self.constants[name]
            if tuple(arr.shape) != info.shape or arr.dtype != np.dtype(FORMAT_DTYPES[info.format]):
                raise ValueError(f"constant {name}: array {arr.dtype}{arr.shape} does not match "
                                 f"{info.format}{info.shape}")
        for task in self.tasks:
            for x in task_inputs(task):
                if x not in defined:
                    raise ValueError(f"task {task.name}: input {x} is used before it is defined")
            if isinstance(task, VectorTask) and task.op not in VECTOR_OPS:
                raise ValueError(f"task {task.name}: unknown vector op {task.op!r}; "
                                 f"known: {sorted(VECTOR_OPS)}")
            if isinstance(task, MeshPhaseTask):
                _check_mesh_task(task, self.tensors)
            defined.update(task_outputs(task))
        for x in self.outputs:
            if x not in defined:
                raise ValueError(f"program output {x} is never computed")

    # ---- serialization -------------------------------------------------------------------
    def save(self, directory: str | Path) -> Path:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        (d / "program.json").write_text(self.model_dump_json(indent=1))
        np.savez(d / "constants.npz", **{k: _storable(v) for k, v in self.constants.items()})
        return d

    @classmethod
    def load(cls, directory: str | Path) -> "Program":
        d = Path(directory)
        data = json.loads((d / "program.json").read_text())
        with np.load(d / "constants.npz") as npz:
            consts = {k: npz[k] for k in npz.files}
        prog = cls.model_validate(data)
        for k, v in consts.items():
            want = np.dtype(FORMAT_DTYPES[prog.tensors[k].format])
            prog.constants[k] = v if v.dtype == want else v.view(want)
        return prog


def _check_mesh_task(task: MeshPhaseTask, tensors: dict[str, TensorInfo]) -> None:
    """Shapes and formats of a mesh task's ``cores`` and ``flows`` tensors."""
    cores = tensors.get(task.cores)
    if cores is None or cores.format != "bool" or len(cores.shape) != 2:
        raise ValueError(f"mesh task {task.name}: cores {task.cores!r} must be a bool "
                         f"[mesh rows, mesh cols] tensor")
    if task.flows is None:
        if task.message_count:
            raise ValueError(f"mesh task {task.name}: flow_counts lists "
                             f"{task.message_count} messages but flows is None")
        return
    info = tensors.get(task.flows)
    if info is None or info.format != "int32" or len(info.shape) != 2 or info.shape[1] != 6:
        raise ValueError(f"mesh task {task.name}: flows {task.flows!r} must be an int32 [F, 6] "
                         "tensor (src row, src col, dst row, dst col, stages, times)")
    if info.shape[0] != task.message_count:
        raise ValueError(f"mesh task {task.name}: flows has {info.shape[0]} rows but "
                         f"flow_counts sums to {task.message_count}")


def _storable(arr: np.ndarray) -> np.ndarray:
    """``arr``, or its unsigned-integer bit view when numpy's npz cannot store its dtype
    (ml_dtypes' bf16/fp8 types would be saved as raw ``|V2``/``|V1``)."""
    if arr.dtype.kind in "biuf" and arr.dtype.type.__module__ == "numpy":
        return arr
    return arr.view(f"u{arr.dtype.itemsize}")
