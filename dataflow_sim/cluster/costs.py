"""Per-chip cost of one op: GEMMs from the cycle model (ArchSpec chips) or a roofline (GPU
presets); every non-GEMM op from an explicit roofline. No op is ever free.

Conventions (seconds everywhere):

* **GEMM on an ArchSpec chip** — ``gemm_cycles_array(m, k, n, rows, cols, dataflow).cycles /
  clock``: the tensor engine's own cycle count (``tilewright`` convention); off-chip traffic of the
  GEMM is the cycle model's business, not added here.
* **GEMM on a GPU preset** — ``max(2·m·k·n / tensor_flops, element_bytes·(m·k + k·n + m·n) /
  hbm_bytes_per_s)``: each GEMM reads its operands and writes its result once.
* **Non-GEMM op (norm, softmax, rotary, activation, residual, routing, KV write, gather)** —
  ``max(flops / vector_flops_per_s, bytes / hbm_bytes_per_s)``. For ArchSpec chips the vector
  throughput is ``vector_unit.lanes · clock`` (the tensor engine's column count without a vector
  unit, as the compiler's Report assumes), the bandwidth ``offchip.bandwidth_gbps`` and the
  capacity ``offchip.capacity_gib`` (:meth:`.cluster_spec.ClusterSpec.chip_capacity_gib`). An op with neither FLOPs nor
  bytes is an error.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tilewright.arch import ArchSpec
from tilewright.formats import FORMATS
from tilewright.compiler.engine_timing import tensor_engine_gemm_cycles

from .cluster_spec import GPU_PRESETS, ArchChip, ClusterSpec

__all__ = ["ChipModel", "chip_model", "ZeroCostOp"]

#: bytes per element of each format, from the formats registry
_FORMAT_BYTES = {name: max(1, f.bits // 8) for name, f in FORMATS.items()}


class ZeroCostOp(ValueError):
    """An op reached the cost model with no FLOPs and no bytes (it would be costed as free)."""


@dataclass(frozen=True)
class ChipModel:
    """What the cluster model needs to know about one chip."""

    name: str
    hbm_bytes: float            # capacity, bytes
    hbm_bytes_per_s: float      # off-chip bandwidth, bytes/s
    vector_flops_per_s: float   # non-GEMM throughput, ops/s
    element_bytes: int          # bytes per activation/weight element
    peak_gemm_flops_per_s: float  # 2·MACs/s of the tensor engine (for utilization)
    arch: ArchSpec | None = None  # set: GEMMs from the cycle model; None: GEMM roofline

    def gemm_seconds(self, m, k, n, count=1, positive: bool = False) -> np.ndarray:
        """Seconds of ``count`` independent M×K×N GEMMs (numpy-broadcast over arrays); a GEMM
        with a zero dimension takes 0 s. ``positive=True`` promises every dimension is ≥ 1."""
        if positive and self.arch is None:
            m, k, n = (np.asarray(x, dtype=np.float64) for x in (m, k, n))
            return np.maximum(2.0 * m * k * n / self.peak_gemm_flops_per_s,
                              self.element_bytes * (m * k + k * n + m * n)
                              / self.hbm_bytes_per_s) * count
        m, k, n, count = (np.asarray(x, dtype=np.int64) for x in (m, k, n, count))
        if self.arch is not None:
            te = self.arch.tensor_engine
            cycles, _ = tensor_engine_gemm_cycles(te, np.maximum(m, 1), np.maximum(k, 1),
                                                  np.maximum(n, 1))
            t = cycles / (self.arch.clock_mhz * 1e6)
        else:
            flops = 2.0 * m * k * n
            nbytes = self.element_bytes * (m * k + k * n + m * n).astype(np.float64)
            t = np.maximum(flops / self.peak_gemm_flops_per_s, nbytes / self.hbm_bytes_per_s)
        return np.where((m > 0) & (k > 0) & (n > 0), t * count, 0.0)

    def vector_seconds(self, flops, nbytes) -> np.ndarray:
        """Roofline seconds of non-GEMM ops with ``flops`` ops and ``nbytes`` off-chip bytes."""
        if isinstance(flops, (int, float)) and isinstance(nbytes, (int, float)):
            if flops <= 0 and nbytes <= 0:
                raise ZeroCostOp("a non-GEMM op has neither FLOPs nor bytes; it cannot be "
                                 "costed (never cost an op as zero)")
            return max(flops / self.vector_flops_per_s, nbytes / self.hbm_bytes_per_s)
        flops, nbytes = np.asarray(flops, np.float64), np.asarray(nbytes, np.float64)
        if np.any((flops <= 0) & (nbytes <= 0)):
            raise ZeroCostOp("a non-GEMM op has neither FLOPs nor bytes; it cannot be costed "
                             "(never cost an op as zero)")
        return np.maximum(flops / self.vector_flops_per_s, nbytes / self.hbm_bytes_per_s)

    def op_seconds(self, ops: pd.DataFrame) -> np.ndarray:
        """Seconds of each row of an op table (``kind`` gemm|vector; comm rows give 0 here and
        are timed by the network)."""
        kind = ops["kind"].to_numpy()
        out = np.zeros(len(ops))
        g = kind == "gemm"
        if g.any():
            out[g] = self.gemm_seconds(ops["m"].to_numpy()[g], ops["k"].to_numpy()[g],
                                       ops["n"].to_numpy()[g], ops["count"].to_numpy()[g])
        v = kind == "vector"
        if v.any():
            out[v] = self.vector_seconds(ops["flops"].to_numpy()[v], ops["bytes"].to_numpy()[v])
        unknown = set(kind) - {"gemm", "vector", "comm"}
        if unknown:
            raise ValueError(f"op kinds {sorted(unknown)} have no cost model")
        return out


def chip_model(spec: ClusterSpec) -> ChipModel:
    """The :class:`ChipModel` of the cluster's chip."""
    chip = spec.chip
    if isinstance(chip, ArchChip):
        arch = spec.arch()
        assert arch is not None
        te = arch.tensor_engine
        hz = arch.clock_mhz * 1e6
        with warnings.catch_warnings():     # already warned when the file was loaded
            warnings.simplefilter("ignore", FutureWarning)
            lanes = spec.chip_vector_lanes()
            cap = spec.chip_capacity_gib()
        return ChipModel(name=arch.name, hbm_bytes=cap * 2**30,
                         hbm_bytes_per_s=arch.offchip.bandwidth_gbps * 1e9,
                         vector_flops_per_s=lanes * hz,
                         element_bytes=_FORMAT_BYTES[te.input_format],
                         peak_gemm_flops_per_s=2.0 * te.macs_per_cycle * hz, arch=arch)
    p = GPU_PRESETS[chip.preset]
    return ChipModel(name=chip.preset, hbm_bytes=p.hbm_gib * 2**30,
                     hbm_bytes_per_s=p.hbm_bytes_per_s, vector_flops_per_s=p.vector_flops,
                     element_bytes=p.element_bytes, peak_gemm_flops_per_s=p.tensor_flops)
