"""Run beats through the Verilated RTL vector unit and return its result beats and cycles.

:func:`run_vector_beats` packs operand beats (op names as the compiler's VectorTask ops, raw
Q8.8 lanes), builds (or reuses) the unit for the ArchSpec, streams them in one simulator process
(:mod:`tilewright.cocotb_tests.vector_bench`) and unpacks the result beats. Compare them with
:func:`tilewright.dataflow_sim.vector_numerics.run_beats`, the bit-exact reference.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.cosim.vector_build import build_vector_unit
from tilewright.cosim.verilator import run_cocotb_bench

__all__ = ["VectorRtlRun", "run_vector_beats", "pack_operands", "unpack_results",
           "VECTOR_BENCH_MODULE"]

VECTOR_BENCH_MODULE = "tilewright.cocotb_tests.vector_bench"


@dataclass
class VectorRtlRun:
    """One RTL vector-unit run."""

    outputs: np.ndarray      #: (result beats, lanes) int64: sign-extended 32-bit lanes
    out_last: np.ndarray     #: (result beats,) bool: ``last`` of each result beat
    in_cycles: np.ndarray    #: cycle of each operand transfer
    out_cycles: np.ndarray   #: cycle of each result transfer
    cycles: int              #: cycles from the first possible transfer to the last result


def pack_operands(lanes: int, ops: Sequence[str], a: np.ndarray, b: np.ndarray,
                  last: Sequence[bool]) -> list[int]:
    """``operands`` payloads (ints) for beats of (op name, raw Q8.8 a/b rows, last)."""
    from tilewright.rtl.vector_unit import OP_NAMES, operand_layout  # noqa: PLC0415
    lay = operand_layout(lanes)
    unknown = sorted(set(ops) - set(OP_NAMES))
    if unknown:
        raise ValueError(f"vector unit: unknown op(s) {unknown}; accepted: {', '.join(OP_NAMES)}")
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    if a.shape != (len(ops), lanes) or b.shape != a.shape or len(last) != len(ops):
        raise ValueError(f"vector unit: a and b must be (beats={len(ops)}, lanes={lanes}) and "
                         f"last one flag per beat; got a {a.shape}, b {b.shape}, "
                         f"last {len(last)}")
    # a and b are adjacent 16-bit lane fields: pack their bytes as one little-endian integer
    base = lay["a"].offset
    assert lay["b"].offset == base + 16 * lanes and base >= lay["last"].offset + 1
    lane_bytes = np.concatenate([a, b], axis=1).astype("<u2")
    code = {name: o.value << lay["op"].offset for name, o in OP_NAMES.items()}
    last_bit = 1 << lay["last"].offset
    words = []
    for op, row, lst in zip(ops, lane_bytes, last):
        words.append(code[op] | (last_bit if lst else 0)
                     | int.from_bytes(row.tobytes(), "little") << base)
    return words


def unpack_results(lanes: int, words: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """(data (beats, lanes) int64, last (beats,) bool) of ``results`` payloads."""
    from tilewright.rtl.vector_unit import result_layout  # noqa: PLC0415
    lay = result_layout(lanes)
    base, lbit = lay["data"].offset, lay["last"].offset
    out = np.zeros((len(words), lanes), np.int64)
    for j, w in enumerate(words):
        for i in range(lanes):
            v = (w >> (base + 32 * i)) & 0xFFFFFFFF
            out[j, i] = v - (1 << 32) if v >> 31 else v
    return out, np.array([bool((w >> lbit) & 1) for w in words], bool)


def run_vector_beats(arch: ArchSpec, ops: Sequence[str], a, b, last: Sequence[bool], *,
                     ready: Sequence[int] = (1,), log=None) -> VectorRtlRun:
    """Stream the beats through the RTL unit for ``arch`` (``results.ready`` follows the 0/1
    pattern ``ready``, repeated) and return its result beats and transfer cycles."""

    from tilewright.dataflow_sim.vector_numerics import REDUCTION_OPS  # noqa: PLC0415
    from tilewright.rtl.vector_unit import LATENCY, vector_lanes  # noqa: PLC0415
    lanes = vector_lanes(arch)
    words = pack_operands(lanes, ops, a, b, last)
    expected = sum(1 for op, lst in zip(ops, last) if op not in REDUCTION_OPS or lst)
    pattern = [int(bool(r)) for r in ready]
    if not any(pattern):
        raise ValueError("vector unit: the ready pattern must contain a 1")
    build = build_vector_unit(arch, log=log)
    folder = Path(tempfile.mkdtemp(prefix="tilewright-vector-"))
    max_cycles = (len(words) + LATENCY + 4) * (len(pattern) + 1)
    (folder / "job.json").write_text(json.dumps({"beats": words, "ready": pattern,
                                                 "expected_outputs": expected,
                                                 "max_cycles": max_cycles}))
    run_cocotb_bench(build, VECTOR_BENCH_MODULE, folder, "RTL vector")
    r = json.loads((folder / "results.json").read_text())
    shutil.rmtree(folder, ignore_errors=True)
    data, out_last = unpack_results(lanes, r["outputs"])
    return VectorRtlRun(data, out_last, np.array(r["in_cycles"]), np.array(r["out_cycles"]),
                        int(r["cycles"]))
