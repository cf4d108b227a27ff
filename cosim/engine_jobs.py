"""int8 GEMMs encoded for a Verilated tile-MAC tensor engine (top ``engine``).

:func:`prepare_engine` tiles each C = A·B (zero-padding ragged edges) into the engine's beats
(:func:`gemm_beats`: output tiles in row-major order, K innermost) for the bench, which streams
every GEMM through one simulator process (:mod:`tilewright.cocotb_tests.engine_bench`); each
record is an :class:`EngineGemmRun` (C reassembled, int32, and the cycles). Compare with
:func:`tilewright.dataflow_sim.functional.gemm_int8` (bit-exact) and
:func:`tilewright.compiler.engine_timing.engine_gemm_cycles` (cycles).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tilewright.cosim.job import JobFiles, PreparedJob
from tilewright.rtl.cube import operand_layout
from tilewright.rtl.engine_top import engine_shape

__all__ = ["EngineParams", "EngineGemmRun", "gemm_beats", "unpack_tiles", "prepare_engine"]


@dataclass(frozen=True)
class EngineParams:
    """What an engine build is generated from: the family and its parameters (an ArchSpec with
    ``tensor_engine.kind`` other than ``systolic`` maps to them:
    ``TensorEngineSpec.engine_params``)."""

    kind: str
    params: tuple[tuple[str, int], ...]

    @classmethod
    def of(cls, kind: str, params: Mapping[str, int]) -> "EngineParams":
        """Validated (``engine_shape`` raises for an unknown kind or bad params)."""
        engine_shape(kind, params)
        return cls(kind, tuple(sorted((k, int(v)) for k, v in params.items())))

    @property
    def shape(self) -> tuple[int, int, int]:
        """(Tm, Tk, Tn) elements per beat."""
        return engine_shape(self.kind, dict(self.params))

    def key(self) -> str:
        return f"{self.kind}-" + "-".join(f"{k}{v}" for k, v in self.params)


@dataclass
class EngineGemmRun:
    """One GEMM on an RTL engine."""

    c: np.ndarray            #: (M, N) int32 result
    out_cycles: np.ndarray   #: cycle of each output tile (cycle 0 = first beat)
    cycles: int              #: first beat to last output tile, inclusive


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _check_operands(a: np.ndarray, b: np.ndarray) -> None:
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0] or 0 in a.shape + b.shape:
        raise ValueError(f"engine GEMM: A must be M x K and B K x N (non-empty); got A "
                         f"{a.shape}, B {b.shape}")
    for name, x in (("A", a), ("B", b)):
        if x.dtype != np.int8:
            raise ValueError(f"engine GEMM: {name} dtype {x.dtype}: accepted: int8")


def gemm_beats(shape: tuple[int, int, int], a: np.ndarray, b: np.ndarray) -> list[int]:
    """``ops_in`` payloads (ints) of C = A·B on an engine of tile shape (Tm, Tk, Tn)."""
    _check_operands(a, b)
    tm, tk, tn = shape
    (m, k), n = a.shape, b.shape[1]
    mt, kt, nt = _ceil_div(m, tm), _ceil_div(k, tk), _ceil_div(n, tn)
    ap = np.zeros((mt * tm, kt * tk), np.int8)
    ap[:m, :k] = a
    bp = np.zeros((kt * tk, nt * tn), np.int8)
    bp[:k, :n] = b
    a_t = ap.reshape(mt, tm, kt, tk).transpose(0, 2, 1, 3)          # (mt, kt, tm, tk)
    b_t = bp.reshape(kt, tk, nt, tn).transpose(2, 0, 1, 3)          # (nt, kt, tk, tn)
    a_b = np.broadcast_to(a_t[:, None], (mt, nt, kt, tm, tk)).reshape(-1, tm * tk)
    b_b = np.broadcast_to(b_t[None], (mt, nt, kt, tk, tn)).reshape(-1, tk * tn)
    lay = operand_layout(tm, tk, tn)
    assert lay["a"].offset == 0 and lay["b"].offset == 8 * tm * tk
    f_bit, l_bit = 1 << lay["first"].offset, 1 << lay["last"].offset
    raw = np.concatenate([a_b, b_b], axis=1).view(np.uint8)
    kidx = np.tile(np.arange(kt), mt * nt)
    return [int.from_bytes(row.tobytes(), "little") | (f_bit if ki == 0 else 0)
            | (l_bit if ki == kt - 1 else 0) for row, ki in zip(raw, kidx)]


def unpack_tiles(shape: tuple[int, int, int], words: Sequence[int], m: int, n: int) -> np.ndarray:
    """(M, N) int32 C from the ``c_out`` payloads of one GEMM (tiles row-major, cropped)."""
    tm, _, tn = shape
    mt, nt = _ceil_div(m, tm), _ceil_div(n, tn)
    if len(words) != mt * nt:
        raise ValueError(f"engine GEMM: {len(words)} output tiles, expected {mt * nt}")
    tiles = np.array([np.frombuffer(w.to_bytes(4 * tm * tn, "little"), "<i4") for w in words])
    c = tiles.reshape(mt, nt, tm, tn).transpose(0, 2, 1, 3).reshape(mt * tm, nt * tn)
    return np.ascontiguousarray(c[:m, :n]).astype(np.int32)


def prepare_engine(gemms: Sequence[tuple[np.ndarray, np.ndarray]], params: EngineParams
                   ) -> PreparedJob:
    """Each (A, B) int8 pair as one job of the bench; results in order."""
    if not gemms:
        raise ValueError("engine GEMM: no GEMMs given")
    shape = params.shape
    tm, _, tn = shape
    jobs = []
    for a, b in gemms:
        beats = gemm_beats(shape, a, b)
        tiles = _ceil_div(a.shape[0], tm) * _ceil_div(b.shape[1], tn)
        jobs.append({"beats": beats, "expected_outputs": tiles,
                     "max_cycles": len(beats) + 2 * 64 + 8})

    def decode(res) -> dict:
        return {"records": [EngineGemmRun(unpack_tiles(shape, r["outputs"], a.shape[0],
                                                       b.shape[1]),
                                          np.array(r["out_cycles"]), int(r["cycles"]))
                            for (a, b), r in zip(gemms, res.results["results"])]}
    return PreparedJob(JobFiles({"jobs": jobs}), decode)
