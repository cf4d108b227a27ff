"""Beats encoded for the Verilated RTL vector unit (top ``vector``): result beats and cycles back.

:func:`prepare_vector` packs a :class:`VectorBeats` job (op names as the compiler's VectorTask
ops, 32-bit lanes) for one simulator process (:mod:`tilewright.cocotb_tests.vector_bench`); the
run's one record is a :class:`VectorRtlRun` (the result beats unpacked). Compare them with
:func:`tilewright.dataflow_sim.vector_numerics.run_beats`, the bit-exact reference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.compiler.codegen import REQUANT_SHIFT_BITS
from tilewright.cosim.job import JobFiles, PreparedJob
from tilewright.dataflow_sim.vector_numerics import REDUCTION_OPS
from tilewright.rtl.vector_unit import (LATENCY, OP_NAMES, operand_layout, result_layout,
                                        vector_lanes)

__all__ = ["VectorBeats", "VectorRtlRun", "prepare_vector", "pack_operands", "unpack_results"]


@dataclass(frozen=True)
class VectorBeats:
    """Operand beats for the vector unit: per beat an op name, ``a``/``b`` rows (beats, lanes)
    of signed 32-bit lanes (raw Q8.8 for the Q8.8 ops) and ``last``; ``s`` (beats, lanes)
    requant shifts (0..63; None: all 0); ``results.ready`` follows the 0/1 pattern ``ready``,
    repeated."""

    ops: Sequence[str]
    a: np.ndarray
    b: np.ndarray
    last: Sequence[bool]
    ready: Sequence[int] = (1,)
    s: np.ndarray | None = None


@dataclass
class VectorRtlRun:
    """One RTL vector-unit run."""

    outputs: np.ndarray      #: (result beats, lanes) int64: sign-extended 32-bit lanes
    out_last: np.ndarray     #: (result beats,) bool: ``last`` of each result beat
    in_cycles: np.ndarray    #: cycle of each operand transfer
    out_cycles: np.ndarray   #: cycle of each result transfer
    cycles: int              #: cycles from the first possible transfer to the last result


def pack_operands(lanes: int, ops: Sequence[str], a: np.ndarray, b: np.ndarray,
                  last: Sequence[bool], s: np.ndarray | None = None) -> list[int]:
    """``operands`` payloads (ints) for beats of (op name, 32-bit a/b rows, last, requant
    shift rows)."""
    lay = operand_layout(lanes)
    unknown = sorted(set(ops) - set(OP_NAMES))
    if unknown:
        raise ValueError(f"vector unit: unknown op(s) {unknown}; accepted: {', '.join(OP_NAMES)}")
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    s = np.zeros_like(a) if s is None else np.asarray(s, np.int64)
    if a.shape != (len(ops), lanes) or b.shape != a.shape or s.shape != a.shape \
            or len(last) != len(ops):
        raise ValueError(f"vector unit: a, b and s must be (beats={len(ops)}, lanes={lanes}) "
                         f"and last one flag per beat; got a {a.shape}, b {b.shape}, "
                         f"s {s.shape}, last {len(last)}")
    sbits = REQUANT_SHIFT_BITS
    if s.size and (s.min() < 0 or s.max() >= 1 << sbits):
        raise ValueError(f"vector unit: requant shifts are 0 .. {(1 << sbits) - 1}")
    # a and b are adjacent 32-bit lane fields: pack their bytes as one little-endian integer
    base = lay["a"].offset
    assert lay["b"].offset == base + 32 * lanes and base >= lay["last"].offset + 1
    assert lay["s"].offset == base + 64 * lanes
    lane_bytes = np.concatenate([a, b], axis=1).astype(np.int64).astype("<u4")
    code = {name: o.value << lay["op"].offset for name, o in OP_NAMES.items()}
    last_bit = 1 << lay["last"].offset
    words = []
    for op, row, srow, lst in zip(ops, lane_bytes, s, last):
        sv = sum(int(v) << (sbits * i) for i, v in enumerate(srow))
        words.append(code[op] | (last_bit if lst else 0)
                     | int.from_bytes(row.tobytes(), "little") << base
                     | sv << lay["s"].offset)
    return words


def unpack_results(lanes: int, words: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """(data (beats, lanes) int64, last (beats,) bool) of ``results`` payloads."""
    lay = result_layout(lanes)
    base, lbit = lay["data"].offset, lay["last"].offset
    out = np.zeros((len(words), lanes), np.int64)
    for j, w in enumerate(words):
        for i in range(lanes):
            v = (w >> (base + 32 * i)) & 0xFFFFFFFF
            out[j, i] = v - (1 << 32) if v >> 31 else v
    return out, np.array([bool((w >> lbit) & 1) for w in words], bool)


def prepare_vector(job: VectorBeats, arch: ArchSpec) -> PreparedJob:
    """The beats as one stream through the RTL unit for ``arch``."""
    lanes = vector_lanes(arch)
    words = pack_operands(lanes, job.ops, job.a, job.b, job.last, job.s)
    expected = sum(1 for op, lst in zip(job.ops, job.last) if op not in REDUCTION_OPS or lst)
    pattern = [int(bool(r)) for r in job.ready]
    if not any(pattern):
        raise ValueError("vector unit: the ready pattern must contain a 1")
    max_cycles = (len(words) + LATENCY + 4) * (len(pattern) + 1)
    spec = {"beats": words, "ready": pattern, "expected_outputs": expected,
            "max_cycles": max_cycles}

    def decode(res) -> dict:
        r = res.results["results"]
        data, out_last = unpack_results(lanes, r["outputs"])
        return {"records": [VectorRtlRun(data, out_last, np.array(r["in_cycles"]),
                                         np.array(r["out_cycles"]), int(r["cycles"]))]}
    return PreparedJob(JobFiles(spec), decode)
