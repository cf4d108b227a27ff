"""Per-op Report of a Program on an ArchSpec: cycles, MACs, bytes, intensity, roofline bound.

Every task that moves data or computes gets a cost (a view, which does neither, costs 0).
Conventions:

* **Mapped GEMMs** (``bgemm``, and each expert of ``grouped_gemm``) are costed by the analytical
  mapper (:func:`tilewright.compiler.gemm_mapper.cost_of` on the mapping recorded in the task — taken
  from the lowering's memoized :func:`tilewright.compiler.lower_llm.map_gemm_cached` result when the
  recorded mapping is the mapper's own choice, the same evaluation; for experts
  :func:`~tilewright.compiler.lower_llm.map_gemm_cached` per distinct row count): ``cycles`` =
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
  :func:`tilewright.dataflow_sim.cycle.tensor_engine_gemm_cycles` (the ``tilewright``
  convention; the systolic closed form or, for ``tensor_engine.kind`` adder_tree /
  outer_product / cube, :mod:`tilewright.compiler.engine_timing`), or the scratchpad's cycles
  when ``memory.bank_width_bytes`` cannot feed the engine (:func:`engine_split`).
* **Vector tasks** run on a vector unit of ``lanes`` elements per cycle: ``arch.vector_unit.lanes``
  or, an ASSUMPTION when the ArchSpec has no vector unit, ``tensor_engine.cols``. Cycles =
  ``passes * ceil(elements / lanes)`` with ``elements`` the larger of input and output element
  counts and ``passes`` from :func:`vector_passes` (1 for simple arithmetic and data movement;
  a task the lowering marks ``attrs["view"]`` (reshape, expand, slice, select, a permute of size-1
  axes) moves nothing and costs 0; a KV append (``concat`` with ``attrs["append"]``) reads and
  writes only the new tokens; ``arch.vector_unit.transcendental_passes`` for
  exp/rsqrt/silu/sigmoid/softplus/pow, :data:`TRANSCENDENTAL_PASSES` when there is no vector unit;
  softmax that + 1; top-k k; argsort ceil(log2 n)); at least 1 cycle.
* **quantize**: :data:`QUANTIZE_PASSES` vector passes over the input (|x| max, divide by the
  scale, round and convert; bf16: 1 pass); bytes = fp32 input + codes + scales; a KV cache's
  ``cached_elements`` (stored in the format already) are not charged.
* **attention**: :func:`tilewright.compiler.attention_timing.attention_cost`, as FuseMax runs it
  (Nayak et al., MICRO 2024): per visited (query block, key block) pair the array's QK^T and PV
  GEMMs and the vector unit's ``ATTENTION_VECTOR_PASSES`` passes over the score block (plus one
  over the output block) overlap — pipelined across pairs, each pair costs the larger of the two
  stages, plus the shorter stage once (fill/drain) and the final normalisation; edge blocks are
  costed as full blocks (an upper bound). Block sizes are the planner's, chosen for the least
  time (:func:`tilewright.compiler.llm_tiling.plan_attention_blocks`). The RTL never runs the
  cascade as one kernel (``tilewright sim --rtl`` runs its block GEMMs, each checked against
  the GEMM closed form), so there is no serial schedule to check against. Its rows also carry each
  resource's busy cycles (array streaming, weight fill, SRAM, vector) for ``bound``.
* **scan**: ``SCAN_PASSES`` vector passes over ``Bt * L * Di * N`` state elements (state
  multiply-add, then the C contraction's multiply-add).
* **bytes** are the off-chip bytes the task moves if every operand comes from and every result goes
  to off-chip memory (no reuse between tasks — an upper bound): for mapped GEMMs the mapper's
  traffic (an operand re-read per iteration of its irrelevant loop unless its working set stays
  resident in its buffer; :mod:`tilewright.compiler.gemm_mapper`), K/V re-read once per query
  block for attention.
  ``compulsory_bytes`` are the bytes of each operand moved once (mapped GEMMs:
  ``batch * (M*K*e + K*N*e + M*N*4)``; attention: Q, K, V read and the output written once;
  other tasks: ``bytes``), so ``bytes / compulsory_bytes`` is the re-fetch overhead.
* **roofline**: ``mem_cycles = bytes / (offchip.bandwidth_gbps * 1e9 / (clock_mhz * 1e6))``;
  a task takes ``max(cycles, mem_cycles)`` (a mapped GEMM its pipeline time, never less).
  ``intensity`` = (2 * MACs + vector element operations) / bytes (ops per byte). Totals add
  tasks' times (no overlap between tasks).
* **bound**: the task's time split over the resources of :data:`RESOURCES`, one column each
  (cycles): ``compute_cycles`` the engine streaming operands (WS folds*M, OS folds*K, tile-MAC
  beats), ``fill_cycles`` the rest of the engine's closed form (weight loading into a WS array,
  fill and drain), ``sram_cycles`` the scratchpad delivering the operands at
  ``memory.bank_width_bytes * scratchpad_banks`` bytes per cycle per buffer (0 without a bank
  width), ``dram_cycles`` the off-chip transfers (a mapped GEMM's DMA time, latency included;
  else ``mem_cycles``), ``vector_cycles`` the vector unit. ``bound`` is the resource with the
  most cycles, ``bound_share`` its cycles / ``time_cycles``.

:func:`report_columns` computes every number once (numpy columns); :func:`program_report` frames
them, :func:`report_totals` / :func:`program_totals` sum them (the latter without a DataFrame).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Hashable

import numpy as np
import pandas as pd

from tilewright.arch import ArchSpec
from tilewright.compiler.attention_timing import (ATTENTION_VECTOR_PASSES, attention_cost,
                                                  vector_lanes)
from tilewright.compiler.gemm_mapper import (ACC_BYTES, GemmOp, Mapping, MappingCost,
                                              command_sram_bytes, command_sram_reads, cost_of,
                                              mapper_arch_key,
                                              native_dataflow, sram_cycles)
from tilewright.compiler.lower_llm import ELEM_BYTES, map_gemm_cached
from tilewright.compiler.program import (FORMAT_DTYPES, AttentionTask, BgemmTask, GemmTask,
                                         GroupedGemmTask, Program, QuantizeTask, ScanTask,
                                         VectorTask, task_inputs)
from tilewright.dataflow_sim.cycle import tensor_engine_gemm_cycles

__all__ = ["program_report", "program_totals", "report_columns", "report_totals", "task_cost",
           "sram_totals", "SRAM_TOTALS",
           "vector_lanes", "vector_passes",
           "VECTOR_PASSES", "TRANSCENDENTAL_PASSES", "QUANTIZE_PASSES",
           "ATTENTION_VECTOR_PASSES", "SCAN_PASSES", "COLUMNS", "RESOURCES", "engine_split"]

TRANSCENDENTAL_PASSES = 4
"""passes of a transcendental function when the ArchSpec has no vector unit (fallback)"""
_TRANSCENDENTAL = ("exp", "rsqrt", "silu", "sigmoid", "softplus", "pow", "erf", "tanh")
VECTOR_PASSES: dict[str, int] = {
    **{op: TRANSCENDENTAL_PASSES for op in _TRANSCENDENTAL},
    "softmax": TRANSCENDENTAL_PASSES + 1,
}
"""vector passes per element for ops that are not one pass, without a vector unit (module doc)"""
QUANTIZE_PASSES = 3
"""vector passes of a scaled ``quantize`` (amax, divide, round/convert); unscaled (bf16): 1"""
SCAN_PASSES = 4
"""per state element and step: a*h, +b, *c, accumulate"""

COLUMNS = ["task", "kind", "op", "source", "format", "macs", "vector_ops", "cycles", "bytes",
           "compulsory_bytes", "mem_cycles", "intensity", "bound", "bound_share", "time_cycles",
           "compute_cycles", "fill_cycles", "sram_cycles", "dram_cycles", "vector_cycles",
           "buffer_bytes", "utilization", "scratchpad_bytes", "accumulator_bytes", "mapping"]
#: the resources a task's time is split over (``<resource>_cycles`` columns), in the order
#: :func:`report_columns` breaks ties in (the first of equal times labels the task)
RESOURCES = ("compute", "fill", "sram", "dram", "vector")


@lru_cache(maxsize=256)
def vector_passes(arch: ArchSpec) -> dict[str, int]:
    """:data:`VECTOR_PASSES` for ``arch``: transcendental functions take
    ``arch.vector_unit.transcendental_passes`` when the ArchSpec has a vector unit."""
    if arch.vector_unit is None:
        return VECTOR_PASSES
    tp = arch.vector_unit.transcendental_passes
    return {**{op: tp for op in _TRANSCENDENTAL}, "softmax": tp + 1}


def _gemm_cycles(arch: ArchSpec, m, k, n) -> np.ndarray:
    """Cycles of M x K x N GEMMs on the engine: its closed form, or the scratchpad's cycles when
    the bank width cannot feed it (:func:`engine_split`)."""
    return engine_split(arch, m, k, n)[0]


def engine_split(arch: ArchSpec, m, k, n, elem_bytes: int = 1
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(cycles, stream, fill, sram)`` of M x K x N GEMMs run as one command each: the
    closed form of :func:`tensor_engine_gemm_cycles` split into streaming cycles and the rest
    (weight loading, fill, drain; :func:`~tilewright.compiler.gemm_mapper.command_sram_reads`),
    the scratchpad's cycles for the operands (0 without a bank width) and the command's cycles
    ``max(closed form, sram)``."""
    cyc = tensor_engine_gemm_cycles(arch.tensor_engine, m, k, n)[0]
    a, b, stream = command_sram_reads(arch, native_dataflow(arch), elem_bytes, m, k, n)
    sram = sram_cycles(arch, a, b)
    return np.maximum(cyc, sram), stream, cyc - stream, sram


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


def _bgemm_cost(task: BgemmTask, arch: ArchSpec, arch_key: Hashable) -> MappingCost:
    """The mapper's cost of the mapping recorded on ``task``. When that mapping is the mapper's
    own choice for the task's shape on ``arch`` (the lowering's, memoized by
    :func:`~tilewright.compiler.lower_llm.map_gemm_cached`) its cost is taken from there — the same
    evaluation as :func:`~tilewright.compiler.gemm_mapper.cost_of`, which costs any other mapping."""

    eb = ELEM_BYTES[task.format]
    mapping = Mapping(task.tile_m, task.tile_k, task.tile_n, task.order, task.dataflow)
    try:
        res = map_gemm_cached(arch, task.m, task.k, task.n, batch=task.batch_size, elem_bytes=eb,
                              arch_key=arch_key, name=task.name)
    except ValueError:
        res = None
    if res is not None and res.mapping == mapping:
        return res.cost
    return cost_of(GemmOp(task.name, task.m, task.k, task.n, batch=task.batch_size,
                          elem_bytes=eb, out_bytes=4), arch, mapping)


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
    if task.attrs.get("view"):
        # a view re-describes memory the next task reads (compiler.lower_llm): nothing moves
        return 0, 0, 0
    if task.op == "concat" and task.attrs.get("append"):
        # KV append: the cache (input 0) stays in place; only the new tokens are read and
        # written into its slots
        new = sum(_numel(prog, x) for x in task.inputs[1:])
        return (max(1, -(-new // lanes)), new,
                sum(_nbytes(prog, x) for x in task.inputs[1:]) + new * _itemsize(
                    prog.tensors[task.out].format))
    if task.op == "take_rows" and task.attrs.get("lookup") == "embedding":
        # a table lookup moves only the rows it selects (and reads the ids), not the table;
        # the gathered rows are what it writes: bytes = n·D·elem + n·id bytes
        return max(1, -(-out // lanes)), out, _nbytes(prog, task.out) + _nbytes(prog, task.inputs[1])
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
    row["compulsory_bytes"] = sum(c.compulsory_bytes for c in costs)
    row["compute_cycles"] = sum(c.stream_cycles for c in costs)
    row["fill_cycles"] = sum(c.fill_cycles for c in costs)
    row["sram_cycles"] = sum(c.sram_cycles for c in costs)
    row["mapper_dram_cycles"] = math.ceil(sum(c.dma_cycles for c in costs))


def task_cost(task: Any, prog: Program, arch: ArchSpec, *, arch_key: Hashable | None = None
              ) -> dict[str, Any]:
    """Cost facts of one task (keys of :data:`COLUMNS` except the roofline ones).
    ``arch_key``: :func:`~tilewright.compiler.gemm_mapper.mapper_arch_key` of ``arch`` if the caller
    has it (saves recomputing it per task)."""

    lanes = vector_lanes(arch)
    row: dict[str, Any] = {"task": task.name, "kind": task.kind, "op": getattr(task, "op", task.kind),
                           "source": task.source, "format": getattr(task, "format", ""),
                           "macs": 0, "vector_ops": 0, "buffer_bytes": 0, "scratchpad_bytes": 0,
                           "accumulator_bytes": 0, "mapping": ""}
    if isinstance(task, GemmTask):
        cyc, stream, fill, sram = (int(x) for x in engine_split(arch, task.m, task.k, task.n))
        row.update(cycles=cyc, compute_cycles=stream, fill_cycles=fill, sram_cycles=sram)
        row["macs"] = task.macs
        row["bytes"] = task.m * task.k + task.k * task.n + 4 * task.m * task.n
        row["format"] = "int8"
        # one command: the engine's operand reads + A and B written in by DMA; its accumulator
        # traffic + the int32 result read out once
        sp, acc = command_sram_bytes(arch, native_dataflow(arch), 1, task.m, task.k, task.n)
        row["scratchpad_bytes"] = int(sp) + task.m * task.k + task.k * task.n
        row["accumulator_bytes"] = int(acc) + 4 * task.m * task.n
    elif isinstance(task, BgemmTask):
        eb = ELEM_BYTES[task.format]
        tm, tn, tk = task.tile_m, task.tile_n, task.tile_k
        _mapped(row, [_bgemm_cost(task, arch, arch_key or mapper_arch_key(arch))])
        row["macs"] = task.macs
        row["buffer_bytes"] = eb * (tm * tk + tk * tn) + 4 * tm * tn
        row["mapping"] = f"{tm}x{tk}x{tn} {task.order} {task.dataflow}"
    elif isinstance(task, GroupedGemmTask):
        eb = ELEM_BYTES[task.format]
        key = arch_key or mapper_arch_key(arch)
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
        c = attention_cost(arch, s=task.s, t=task.t, d=task.d, block_q=task.block_q,
                           block_kv=task.block_kv, causal_offset=task.causal_offset,
                           batch=task.batch_size, elem_bytes=eb)
        row["cycles"], row["macs"], row["vector_ops"], row["bytes"] = (
            c.cycles, c.macs, c.vector_ops, c.bytes)
        # each resource's busy cycles (they overlap in ``cycles``; ``bound`` is the busiest)
        bq, bk, d = min(task.block_q, task.s), min(task.block_kv, task.t), task.d
        pairs = task.visited_blocks() * task.batch_size
        qk, pv = engine_split(arch, bq, d, bk, eb), engine_split(arch, bq, bk, d, eb)
        vec = ATTENTION_VECTOR_PASSES * -(-bq * bk // lanes) + -(-bq * d // lanes)
        row["vector_cycles"] = pairs * vec + task.batch_size * -(-task.s * d // lanes)
        row["compute_cycles"], row["fill_cycles"], row["sram_cycles"] = (
            pairs * int(x + y) for x, y in zip(qk[1:], pv[1:]))
        # SRAM traffic: per visited pair the QK^T and PV block commands' operand reads and
        # accumulator traffic (:func:`command_sram_bytes`), plus the off-chip bytes written into
        # (Q, K, V) or read out of (the output) the scratchpad by DMA
        df = native_dataflow(arch)
        sp_qk, acc_qk = command_sram_bytes(arch, df, eb, bq, d, bk)
        sp_pv, acc_pv = command_sram_bytes(arch, df, eb, bq, bk, d)
        row["scratchpad_bytes"] = pairs * int(sp_qk + sp_pv) + c.bytes
        row["accumulator_bytes"] = pairs * int(acc_qk + acc_pv)
        # Q read, K and V read, the output written (int32), each once
        row["compulsory_bytes"] = task.batch_size * (eb * task.s * d + 2 * eb * task.t * d
                                                     + ACC_BYTES * task.s * d)
        row["buffer_bytes"] = task.buffer_bytes(eb)
        row["mapping"] = f"blocks {min(task.block_q, task.s)}x{min(task.block_kv, task.t)}"
    elif isinstance(task, ScanTask):
        elems = task.batch * task.length * task.channels * task.state
        row["cycles"] = max(1, SCAN_PASSES * -(-elems // lanes))
        row["vector_ops"] = SCAN_PASSES * elems
        row["bytes"] = sum(_nbytes(prog, x) for x in task_inputs(task)) \
            + _nbytes(prog, task.out) + _nbytes(prog, task.state_out)
        row["buffer_bytes"] = task.buffer_bytes()
        row["mapping"] = f"chunks {task.chunk_l}x{task.chunk_d}"
    elif isinstance(task, QuantizeTask):
        total = _numel(prog, task.x)
        elems = total - task.cached_elements      # a stored KV cache is not re-quantized
        passes = 1 if task.granularity == "none" else QUANTIZE_PASSES
        row["cycles"] = max(1, passes * -(-elems // lanes))
        row["vector_ops"] = passes * elems
        row["bytes"] = (_nbytes(prog, task.x) + _nbytes(prog, task.out)) * elems // total + (
            _nbytes(prog, task.scale_out) if task.scale_out else 0)
    elif isinstance(task, VectorTask):
        row["cycles"], row["vector_ops"], row["bytes"] = _vector_cost(
            task, prog, lanes, vector_passes(arch))
    else:  # pragma: no cover - every Task kind is handled above
        raise TypeError(f"task {task.name}: no cost model for {type(task).__name__}")
    if isinstance(task, (VectorTask, ScanTask, QuantizeTask)):
        row["vector_cycles"] = row["cycles"]
    for c in ("compute_cycles", "fill_cycles", "sram_cycles", "vector_cycles"):
        row.setdefault(c, 0)
    row.setdefault("compulsory_bytes", row["bytes"])   # other tasks read each operand once
    return row


_MAPPER_EXTRA = ["mapper_cycles", "mapper_dram_cycles"]
_ROW_COLUMNS = [c for c in COLUMNS if c not in ("mem_cycles", "intensity", "bound", "bound_share",
                                                 "time_cycles", "utilization", "dram_cycles")
                ] + _MAPPER_EXTRA


def report_columns(program: Program, arch: ArchSpec) -> dict[str, np.ndarray]:
    """The per-task columns of :func:`program_report` (:data:`COLUMNS` plus ``mapper_cycles``,
    float with NaN where a task is not mapped), as numpy arrays in task order. The one place
    the report's numbers are computed: :func:`program_report` frames them and
    :func:`program_totals` sums them."""
    key = mapper_arch_key(arch)
    rows = [task_cost(t, program, arch, arch_key=key) for t in program.tasks]
    cols: dict[str, np.ndarray] = {}
    for c in _ROW_COLUMNS:
        vals = [r.get(c) for r in rows]
        if c in _MAPPER_EXTRA:
            cols[c] = np.array([np.nan if v is None else v for v in vals], np.float64)
        elif c in ("task", "kind", "op", "source", "format", "mapping"):
            cols[c] = np.array(vals, object)
        else:
            cols[c] = np.array(vals, np.int64) if vals else np.zeros(0, np.int64)
    bytes_per_cycle = arch.offchip.bandwidth_gbps * 1e9 / (arch.clock_mhz * 1e6)
    cols["mem_cycles"] = np.ceil(cols["bytes"] / bytes_per_cycle).astype(np.int64)
    ops = 2 * cols["macs"] + cols["vector_ops"]
    cols["intensity"] = ops / np.maximum(cols["bytes"], 1)
    mapped = ~np.isnan(cols["mapper_cycles"])
    cols["dram_cycles"] = np.where(mapped, np.nan_to_num(cols["mapper_dram_cycles"]),
                                   cols["mem_cycles"]).astype(np.int64)
    cols["time_cycles"] = np.maximum(np.maximum(cols["cycles"], cols["mem_cycles"]),
                                     np.nan_to_num(cols["mapper_cycles"]).astype(np.int64))
    times = np.stack([cols[f"{r}_cycles"] for r in RESOURCES]) if len(mapped) else \
        np.zeros((len(RESOURCES), 0), np.int64)
    top = np.argmax(times, axis=0)
    # a view (0 cycles on every resource) is bound by nothing
    cols["bound"] = np.where(times.max(axis=0) > 0, np.array(RESOURCES, object)[top], "free")
    cols["bound_share"] = (np.take_along_axis(times, top[None], 0)[0]
                           / np.maximum(cols["time_cycles"], 1))
    cols["utilization"] = cols["macs"] / (np.maximum(cols["cycles"], 1)   # views: 0 cycles
                                          * arch.tensor_engine.macs_per_cycle)
    return cols


def _report_attrs(arch: ArchSpec) -> dict[str, Any]:
    return {"convention": "tilewright", "vector_lanes": vector_lanes(arch),
            "vector_lanes_source": "arch.vector_unit" if arch.vector_unit else
            "assumed = tensor_engine.cols",
            "transcendental_passes": vector_passes(arch)["exp"],
            "bytes_per_cycle": arch.offchip.bandwidth_gbps * 1e9 / (arch.clock_mhz * 1e6),
            "clock_mhz": arch.clock_mhz, "arch": arch.name}


def program_report(program: Program, arch: ArchSpec) -> pd.DataFrame:
    """One row per task (columns :data:`COLUMNS`); ``df.attrs`` holds the conventions used."""
    cols = report_columns(program, arch)
    df = pd.DataFrame({c: cols[c] for c in COLUMNS})
    df.attrs.update(_report_attrs(arch))
    return df


def _totals(cols: Any, clock_mhz: float, layers: int) -> dict[str, Any]:
    """Totals of per-task columns (a DataFrame or :func:`report_columns`' arrays)."""
    n = len(cols["time_cycles"])
    total = int(np.sum(cols["time_cycles"])) * layers
    return {"total_cycles": total, "compute_cycles": int(np.sum(cols["cycles"])) * layers,
            "mem_cycles": int(np.sum(cols["mem_cycles"])) * layers,
            "macs": int(np.sum(cols["macs"])) * layers,
            "bytes": int(np.sum(cols["bytes"])) * layers,
            "compulsory_bytes": int(np.sum(cols["compulsory_bytes"])) * layers,
            "vector_ops": int(np.sum(cols["vector_ops"])) * layers,
            **sram_totals(cols, layers),
            "time_us": total / clock_mhz, "layers": layers, "tasks": int(n),
            "max_buffer_bytes": int(np.max(cols["buffer_bytes"])) if n else 0}


SRAM_TOTALS = ("scratchpad_bytes", "accumulator_bytes", "sram_dram_bytes", "sram_macs")
"""the totals :func:`~tilewright.dataflow_sim.energy_area.energy_breakdown` takes SRAM access
energy from (:func:`sram_totals`)"""


def sram_totals(cols: Any, layers: int = 1) -> dict[str, int]:
    """SRAM traffic of the tasks that run on the tensor engine (MACs > 0): their
    ``scratchpad_bytes`` and ``accumulator_bytes`` (the mapper's per-op figures: operand reads
    as the engine's reuse has them, partial sums, DMA in and out), and the off-chip bytes
    (``sram_dram_bytes``) and MACs (``sram_macs``) of those tasks — the part of a workload whose
    SRAM energy those bytes give (the rest is charged per off-chip byte and vector op)."""
    eng = np.asarray(cols["macs"]) > 0
    return {"scratchpad_bytes": int(np.sum(np.asarray(cols["scratchpad_bytes"])[eng])) * layers,
            "accumulator_bytes": int(np.sum(np.asarray(cols["accumulator_bytes"])[eng])) * layers,
            "sram_dram_bytes": int(np.sum(np.asarray(cols["bytes"])[eng])) * layers,
            "sram_macs": int(np.sum(np.asarray(cols["macs"])[eng])) * layers}


def report_totals(df: pd.DataFrame, *, layers: int = 1) -> dict[str, Any]:
    """Totals of a per-op report; ``layers`` multiplies a one-layer report (identical layers)."""
    return _totals(df, df.attrs.get("clock_mhz", 1.0), layers)


def program_totals(program: Program, arch: ArchSpec, *, layers: int = 1) -> dict[str, Any]:
    """``report_totals(program_report(program, arch), layers=layers)`` without building the
    DataFrame (the sweep's fast path): the same columns (:func:`report_columns`), summed."""
    return _totals(report_columns(program, arch), arch.clock_mhz, layers)
