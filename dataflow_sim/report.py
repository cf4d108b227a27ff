"""Per-op Report of a Program on an ArchSpec: cycles, MACs, bytes, intensity, roofline bound.

Every task gets a cost; none is free (DESIGN.md, "never cost an op as zero"). Conventions:

* **Mapped GEMMs** (``bgemm``, and each expert of ``grouped_gemm``) are costed by the analytical
  mapper (:func:`tilewright.compiler.mapper.cost_of` on the mapping recorded in the task; for
  experts :func:`tilewright.compiler.lower.map_gemm_cached` per distinct row count): ``cycles`` =
  core cycles (RTL-exact closed form summed over the tile commands), ``time_cycles`` = the
  mapper's double-buffered pipeline time (compute overlapped with DMA, latency included; never
  less than ``cycles`` or ``mem_cycles``), ``bytes`` = the mapping's DRAM bytes (operand re-fetches
  and partial sums included), ``scratchpad_bytes``/``accumulator_bytes`` = bytes moved at those
  levels, ``bound`` = the mapper's verdict (core vs DMA cycles), ``mapping`` = ``m_t x k_t x n_t
  order dataflow``. ``grouped_gemm`` uses the expert counts of the example run
  (``example_counts``) or, for a shape-only compile, an even split of the rows over the experts
  (``counts_source`` says which). The core streams every operand format at the int8 rate; the
  format changes element bytes, hence tiling and traffic.
* **Other GEMMs** (``gemm``, the two GEMMs of every attention block) take their cycles from
  :func:`tilewright.dataflow_sim.cycle.gemm_cycles_array` (the ``tilewright`` convention).
* **Vector tasks** run on a vector unit of ``lanes`` elements per cycle: ``arch.vector_unit.lanes``
  or, an ASSUMPTION when the ArchSpec has no vector unit, ``tensor_engine.cols``. Cycles =
  ``passes * ceil(elements / lanes)`` with ``elements`` the larger of input and output element
  counts and ``passes`` from :func:`vector_passes` (1 for simple arithmetic and data movement — a
  view is charged as a copy, an upper bound; ``arch.vector_unit.transcendental_passes`` for
  exp/rsqrt/silu/sigmoid/softplus/pow, :data:`TRANSCENDENTAL_PASSES` when there is no vector unit;
  softmax that + 1; top-k k; argsort ceil(log2 n)); at least 1 cycle.
* **quantize**: :data:`QUANTIZE_PASSES` vector passes over the input (|x| max, divide by the
  scale, round and convert; bf16: 1 pass); bytes = fp32 input + codes + scales.
* **attention**: per visited (query block, key block) pair: the QK^T and PV GEMMs plus
  ``ATTENTION_VECTOR_PASSES`` vector passes over the score block and one over the output block;
  edge blocks are costed as full blocks (an upper bound).
* **scan**: ``SCAN_PASSES`` vector passes over ``Bt * L * Di * N`` state elements (state
  multiply-add, then the C contraction's multiply-add).
* **bytes** are the off-chip bytes the task moves if every operand comes from and every result goes
  to off-chip memory (no reuse between tasks — an upper bound): inputs re-read once per tile of the
  other operand for GEMMs, K/V re-read once per query block for attention.
* **roofline**: ``mem_cycles = bytes / (offchip.bandwidth_gbps * 1e9 / (clock_mhz * 1e6))``; a
  task is ``compute``-bound if ``cycles >= mem_cycles`` else ``memory``-bound, and takes
  ``max(cycles, mem_cycles)``. ``intensity`` = (2 * MACs + vector element operations) / bytes
  (ops per byte). Totals add tasks' times (no overlap between tasks).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from tilewright.arch import ArchSpec
from tilewright.compiler.lower import ELEM_BYTES
from tilewright.compiler.mapper import GemmOp, Mapping, MappingCost, cost_of
from tilewright.compiler.program import (BINARY_OPS, FORMAT_DTYPES, AttentionTask, BgemmTask,
                                         GemmTask, GroupedGemmTask, Program, QuantizeTask,
                                         ScanTask, VectorTask, task_inputs)

__all__ = ["program_report", "report_totals", "task_cost", "vector_lanes", "vector_passes",
           "VECTOR_PASSES", "TRANSCENDENTAL_PASSES", "QUANTIZE_PASSES",
           "ATTENTION_VECTOR_PASSES", "SCAN_PASSES", "COLUMNS"]

TRANSCENDENTAL_PASSES = 4
"""passes of a transcendental function when the ArchSpec has no vector unit (fallback)"""
_TRANSCENDENTAL = ("exp", "rsqrt", "silu", "sigmoid", "softplus", "pow")
VECTOR_PASSES: dict[str, int] = {
    **{op: TRANSCENDENTAL_PASSES for op in _TRANSCENDENTAL},
    "softmax": TRANSCENDENTAL_PASSES + 1,
}
"""vector passes per element for ops that are not one pass, without a vector unit (module doc)"""
QUANTIZE_PASSES = 3
"""vector passes of a scaled ``quantize`` (amax, divide, round/convert); unscaled (bf16): 1"""
ATTENTION_VECTOR_PASSES = 6
"""vector passes over each score block of the cascade: scale and mask, row max, subtract, exp,
row sum, rescale of the running sum (1 pass each; the exp is not charged the transcendental 4)"""
SCAN_PASSES = 4
"""per state element and step: a*h, +b, *c, accumulate"""

COLUMNS = ["task", "kind", "op", "source", "format", "macs", "vector_ops", "cycles", "bytes",
           "mem_cycles", "intensity", "bound", "time_cycles", "buffer_bytes", "utilization",
           "scratchpad_bytes", "accumulator_bytes", "mapping"]


@lru_cache(maxsize=256)
def vector_passes(arch: ArchSpec) -> dict[str, int]:
    """:data:`VECTOR_PASSES` for ``arch``: transcendental functions take
    ``arch.vector_unit.transcendental_passes`` when the ArchSpec has a vector unit."""
    if arch.vector_unit is None:
        return VECTOR_PASSES
    tp = arch.vector_unit.transcendental_passes
    return {**{op: tp for op in _TRANSCENDENTAL}, "softmax": tp + 1}


def vector_lanes(arch: ArchSpec) -> int:
    """Vector lanes (elements per cycle): ``arch.vector_unit.lanes``, or — an ASSUMPTION when the
    ArchSpec has no vector unit — the tensor engine's column count."""
    if arch.vector_unit is not None:
        return arch.vector_unit.lanes
    return arch.tensor_engine.cols


def _gemm_cycles(arch: ArchSpec, m, k, n) -> np.ndarray:
    from tilewright.dataflow_sim.cycle import gemm_cycles_array  # noqa: PLC0415

    te = arch.tensor_engine
    return gemm_cycles_array(m, k, n, te.rows, te.cols, te.dataflow)[0]


def _splits(size: int, tile: int) -> list[tuple[int, int]]:
    """(tile size, how many) for full and ragged tiles of ``size``."""
    full, rem = divmod(size, tile)
    return [(tile, full)] * (full > 0) + [(rem, 1)] * (rem > 0)


def tiled_gemm_cycles(arch: ArchSpec, m: int, k: int, n: int, tm: int, tn: int, tk: int) -> int:
    """Cycles of an M x K x N GEMM run as tm x tk x tn tiles (each tile one cycle-model GEMM)."""
    combos = [(a, b, c, ca * cb * cc) for a, ca in _splits(m, tm) for b, cb in _splits(k, tk)
              for c, cc in _splits(n, tn)]
    arr = np.array(combos, np.int64)
    return int(np.sum(_gemm_cycles(arch, arr[:, 0], arr[:, 1], arr[:, 2]) * arr[:, 3]))


def _numel(prog: Program, name: str) -> int:
    return math.prod(prog.tensors[name].shape)


@lru_cache(maxsize=None)
def _itemsize(fmt: str) -> int:
    return np.dtype(FORMAT_DTYPES[fmt]).itemsize


def _nbytes(prog: Program, name: str) -> int:
    info = prog.tensors[name]
    return math.prod(info.shape) * _itemsize(info.format)


@lru_cache(maxsize=8192)
def _cost_of_cached(m: int, k: int, n: int, batch: int, elem_bytes: int, arch: ArchSpec,
                    mapping: Mapping) -> MappingCost:
    """The mapper's cost of one mapping; GEMMs of equal shape in a layer are costed once."""
    return cost_of(GemmOp("", m, k, n, batch=batch, elem_bytes=elem_bytes, out_bytes=4), arch,
                   mapping)


def _vector_cost(task: VectorTask, prog: Program, lanes: int, passes_of: dict[str, int]
                 ) -> tuple[int, int, int]:
    """(cycles, element operations, bytes) of a vector task."""
    ins = [_numel(prog, x) for x in task.inputs]
    out = _numel(prog, task.out)
    elements = max([out, *ins])
    if task.op == "topk_indices":
        passes = int(task.attrs["k"])
    elif task.op == "argsort":
        passes = max(1, math.ceil(math.log2(max(out, 2))))
    else:
        passes = passes_of.get(task.op, 1)
    cycles = max(1, passes * -(-elements // lanes))
    bytes_ = sum(_nbytes(prog, x) for x in task.inputs) + _nbytes(prog, task.out)
    return cycles, passes * elements, bytes_


def _counts_for(task: GroupedGemmTask) -> list[int]:
    if task.example_counts:
        return list(task.example_counts)
    base, rem = divmod(task.rows, task.experts)
    return [base + (e < rem) for e in range(task.experts)]


def _mapped(row: dict[str, Any], costs: list[MappingCost]) -> None:
    """Fill a row from mapper costs (summed over experts for a grouped GEMM)."""
    row["cycles"] = max(1, sum(c.core_cycles for c in costs))
    row["bytes"] = sum(c.dram_bytes for c in costs)
    row["scratchpad_bytes"] = sum(c.scratchpad_bytes for c in costs)
    row["accumulator_bytes"] = sum(c.accumulator_bytes for c in costs)
    row["mapper_cycles"] = math.ceil(sum(c.cycles for c in costs))
    core = sum(c.core_cycles for c in costs)
    dma = sum(c.dma_cycles for c in costs)
    row["mapper_bound"] = "compute" if core >= dma else "memory"


def task_cost(task: Any, prog: Program, arch: ArchSpec) -> dict[str, Any]:
    """Cost facts of one task (keys of :data:`COLUMNS` except the roofline ones)."""
    from tilewright.compiler.lower import map_gemm_cached  # noqa: PLC0415

    lanes = vector_lanes(arch)
    row: dict[str, Any] = {"task": task.name, "kind": task.kind, "op": getattr(task, "op", task.kind),
                           "source": task.source, "format": getattr(task, "format", ""),
                           "macs": 0, "vector_ops": 0, "buffer_bytes": 0, "scratchpad_bytes": 0,
                           "accumulator_bytes": 0, "mapping": ""}
    if isinstance(task, GemmTask):
        row["cycles"] = int(_gemm_cycles(arch, task.m, task.k, task.n))
        row["macs"] = task.macs
        row["bytes"] = task.m * task.k + task.k * task.n + 4 * task.m * task.n
        row["format"] = "int8"
    elif isinstance(task, BgemmTask):
        eb = ELEM_BYTES[task.format]
        tm, tn, tk = task.tile_m, task.tile_n, task.tile_k
        mapping = Mapping(tm, tk, tn, task.order, task.dataflow)
        _mapped(row, [_cost_of_cached(task.m, task.k, task.n, task.batch_size, eb, arch,
                                      mapping)])
        row["macs"] = task.macs
        row["buffer_bytes"] = eb * (tm * tk + tk * tn) + 4 * tm * tn
        row["mapping"] = f"{tm}x{tk}x{tn} {task.order} {task.dataflow}"
    elif isinstance(task, GroupedGemmTask):
        eb = ELEM_BYTES[task.format]
        key = arch.content_hash()
        costs, buf = [], 0
        for c in _counts_for(task):
            if c:
                res = map_gemm_cached(arch, c, task.k, task.n, elem_bytes=eb, arch_key=key,
                                      name=task.name)
                costs.append(res.cost)
                mp = res.mapping
                buf = max(buf, eb * (mp.m_t * mp.k_t + mp.k_t * mp.n_t) + 4 * mp.m_t * mp.n_t)
        _mapped(row, costs)
        row["macs"] = task.macs
        row["buffer_bytes"] = buf
        row["mapping"] = f"per expert ({len(costs)} active)"
    elif isinstance(task, AttentionTask):
        eb = ELEM_BYTES[task.format]
        bq, bk, d = min(task.block_q, task.s), min(task.block_kv, task.t), task.d
        pairs = task.visited_blocks() * task.batch_size
        gemm = int(_gemm_cycles(arch, bq, d, bk) + _gemm_cycles(arch, bq, bk, d))
        vec = ATTENTION_VECTOR_PASSES * -(-bq * bk // lanes) + -(-bq * d // lanes)
        final = task.batch_size * -(-task.s * d // lanes)
        row["cycles"] = pairs * (gemm + vec) + final
        row["macs"] = pairs * 2 * bq * bk * d
        row["vector_ops"] = pairs * (ATTENTION_VECTOR_PASSES * bq * bk + bq * d)
        row["bytes"] = task.batch_size * (eb * task.s * d + 4 * task.s * d) + pairs * 2 * eb * bk * d
        row["buffer_bytes"] = task.buffer_bytes(eb)
        row["mapping"] = f"blocks {bq}x{bk}"
    elif isinstance(task, ScanTask):
        elems = task.batch * task.length * task.channels * task.state
        row["cycles"] = max(1, SCAN_PASSES * -(-elems // lanes))
        row["vector_ops"] = SCAN_PASSES * elems
        row["bytes"] = sum(_nbytes(prog, x) for x in task_inputs(task)) \
            + _nbytes(prog, task.out) + _nbytes(prog, task.state_out)
        row["buffer_bytes"] = task.buffer_bytes()
        row["mapping"] = f"chunks {task.chunk_l}x{task.chunk_d}"
    elif isinstance(task, QuantizeTask):
        elems = _numel(prog, task.x)
        passes = 1 if task.granularity == "none" else QUANTIZE_PASSES
        row["cycles"] = max(1, passes * -(-elems // lanes))
        row["vector_ops"] = passes * elems
        row["bytes"] = _nbytes(prog, task.x) + _nbytes(prog, task.out) + (
            _nbytes(prog, task.scale_out) if task.scale_out else 0)
    elif isinstance(task, VectorTask):
        row["cycles"], row["vector_ops"], row["bytes"] = _vector_cost(
            task, prog, lanes, vector_passes(arch))
    else:  # pragma: no cover - every Task kind is handled above
        raise TypeError(f"task {task.name}: no cost model for {type(task).__name__}")
    return row


def program_report(program: Program, arch: ArchSpec) -> pd.DataFrame:
    """One row per task (columns :data:`COLUMNS`); ``df.attrs`` holds the conventions used."""
    rows = [task_cost(t, program, arch) for t in program.tasks]
    extra = ["mapper_cycles", "mapper_bound"]
    df = pd.DataFrame(rows, columns=[c for c in COLUMNS if c not in
                                     ("mem_cycles", "intensity", "bound", "time_cycles",
                                      "utilization")] + extra)
    bytes_per_cycle = arch.offchip.bandwidth_gbps * 1e9 / (arch.clock_mhz * 1e6)
    df["mem_cycles"] = np.ceil(df["bytes"] / bytes_per_cycle).astype(np.int64)
    ops = 2 * df["macs"] + df["vector_ops"]
    df["intensity"] = ops / df["bytes"].clip(lower=1)
    mapped = df["mapper_cycles"].notna()
    df["bound"] = np.where(mapped, df["mapper_bound"],
                           np.where(df["cycles"] >= df["mem_cycles"], "compute", "memory"))
    df["time_cycles"] = np.maximum(np.maximum(df["cycles"], df["mem_cycles"]),
                                   df["mapper_cycles"].fillna(0).astype(np.int64))
    df["utilization"] = df["macs"] / (df["cycles"] * arch.tensor_engine.macs_per_cycle)
    df.attrs.update({"convention": "tilewright", "vector_lanes": vector_lanes(arch),
                     "vector_lanes_source": "arch.vector_unit" if arch.vector_unit else
                     "assumed = tensor_engine.cols",
                     "transcendental_passes": vector_passes(arch)["exp"],
                     "bytes_per_cycle": bytes_per_cycle, "clock_mhz": arch.clock_mhz,
                     "arch": arch.name})
    return df[COLUMNS]


def report_totals(df: pd.DataFrame, *, layers: int = 1) -> dict[str, Any]:
    """Totals of a per-op report; ``layers`` multiplies a one-layer report (identical layers)."""
    clock = df.attrs.get("clock_mhz", 1.0)
    total = int(df["time_cycles"].sum()) * layers
    return {"total_cycles": total, "compute_cycles": int(df["cycles"].sum()) * layers,
            "mem_cycles": int(df["mem_cycles"].sum()) * layers,
            "macs": int(df["macs"].sum()) * layers, "bytes": int(df["bytes"].sum()) * layers,
            "time_us": total / clock, "layers": layers, "tasks": int(len(df)),
            "max_buffer_bytes": int(df["buffer_bytes"].max()) if len(df) else 0}
