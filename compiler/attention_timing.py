"""Cost of the fused attention cascade, pipelined as FuseMax runs it; the one closed form the
block planner (:func:`tilewright.compiler.llm_tiling.plan_attention_blocks`) minimises and the
report (:mod:`tilewright.dataflow_sim.report`) charges.

Schedule (Nayak et al., "FuseMax: Leveraging Extended Einsums to Optimize Attention Accelerator
Design", MICRO 2024, arXiv:2406.10491 — nearly 100 % of the array's peak on attention at long
sequences by overlapping the array's GEMMs with the softmax's vector work across tiles): the
cascade visits ``P`` (query block, key block) pairs (all heads and batch rows of the task, one
stream). Each pair has two stages on two units:

* array stage ``g`` (cycles): the QK^T GEMM ``bq x d x bk`` and the PV GEMM ``bq x bk x d``, each
  :func:`~tilewright.compiler.engine_timing.tensor_engine_gemm_cycles` (any engine kind);
* vector stage ``v`` (cycles): :data:`ATTENTION_VECTOR_PASSES` passes over the ``bq x bk`` score
  block and one over the ``bq x d`` output block (rescale), ``ceil(elements / lanes)`` each.

The two stages are pipelined across pairs (the array works on pair i+1 while the vector unit
works on pair i): ``P * max(g, v)`` plus the fill/drain of the shorter stage once,
``min(g, v)`` — the exact makespan of a two-stage pipeline of ``P`` equal items. The final
normalisation (one vector pass over each ``S x d`` output, per batch-head) runs after the stream:
``batch * ceil(S * d / lanes)``. Edge blocks are costed as full blocks (an upper bound).

DRAM bytes: q read once and the fp32 output written once per batch-head, K and V blocks read once
per visited pair (``2 * eb * bk * d`` each pair): no reuse of K/V across query blocks.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.compiler.engine_timing import tensor_engine_gemm_cycles

__all__ = ["ATTENTION_VECTOR_PASSES", "AttentionCost", "attention_cost", "vector_lanes",
           "visited_pairs"]

ATTENTION_VECTOR_PASSES = 6
"""vector passes over each score block of the cascade: scale and mask, row max, subtract, exp,
row sum, rescale of the running sum (1 pass each; the exp is not charged the transcendental 4)"""


def vector_lanes(arch: ArchSpec) -> int:
    """Vector lanes (elements per cycle): ``arch.vector_unit.lanes``, or — an ASSUMPTION when the
    ArchSpec has no vector unit — the tensor engine's column count."""
    if arch.vector_unit is not None:
        return arch.vector_unit.lanes
    return arch.tensor_engine.cols


def visited_pairs(s: int, t: int, bq: int, bk: int, causal_offset: int | None) -> int:
    """(query block, key block) pairs the cascade computes for S queries and T keys: all, minus
    the key blocks that lie entirely in the masked future of their query block (query row i sees
    keys ``<= i + causal_offset``; ``None``: no mask)."""
    nq, nk = -(-s // bq), -(-t // bk)
    if causal_offset is None:
        return nq * nk
    qi = np.arange(nq)
    last_q = np.minimum((qi + 1) * bq, s) - 1                 # last query row of each block
    last_key = np.clip(last_q + causal_offset, -1, t - 1)
    return int(np.sum(last_key // bk + 1))


class AttentionCost(NamedTuple):
    """Cost of one attention task (module doc): ``cycles`` of the pipelined cascade, its per-pair
    stages ``gemm_cycles`` (array) and ``vector_cycles``, ``pairs`` visited (times batch),
    ``macs`` and ``vector_ops`` (elements x passes) charged, DRAM ``bytes``."""

    cycles: int
    gemm_cycles: int
    vector_cycles: int
    pairs: int
    macs: int
    vector_ops: int
    bytes: int


def attention_cost(arch: ArchSpec, *, s: int, t: int, d: int, block_q: int, block_kv: int,
                   causal_offset: int | None, batch: int, elem_bytes: int) -> AttentionCost:
    """The cascade's cost on ``arch`` (module doc) for ``batch`` independent S x T heads with head
    dim ``d``, blocks ``block_q x block_kv`` (clipped to S and T), operands of ``elem_bytes``."""
    bq, bk = min(block_q, s), min(block_kv, t)
    lanes = vector_lanes(arch)
    pairs = visited_pairs(s, t, bq, bk, causal_offset) * batch
    gemm = int(np.sum(tensor_engine_gemm_cycles(arch.tensor_engine, [bq, bq], [d, bk],
                                                [bk, d])[0]))
    vec = ATTENTION_VECTOR_PASSES * -(-bq * bk // lanes) + -(-bq * d // lanes)
    final = batch * -(-s * d // lanes)
    cycles = pairs * max(gemm, vec) + min(gemm, vec) + final
    return AttentionCost(
        cycles=cycles, gemm_cycles=gemm, vector_cycles=vec, pairs=pairs,
        macs=pairs * 2 * bq * bk * d,
        vector_ops=pairs * (ATTENTION_VECTOR_PASSES * bq * bk + bq * d),
        bytes=batch * (elem_bytes * s * d + 4 * s * d) + pairs * 2 * elem_bytes * bk * d)
