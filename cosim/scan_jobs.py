"""Sequences encoded for the Verilated scan unit (top ``scan``): h codes and cycles back.

:func:`prepare_scan` encodes any number of :class:`ScanJob` for one simulator process (one cocotb
test, :mod:`tilewright.cocotb_tests.scan_bench`); each record is a :class:`ScanRtlRun`. Codes use
the formats of :mod:`tilewright.rtl.scan_unit` (bit-exact twin:
:mod:`tilewright.dataflow_sim.scan_numerics`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from tilewright.cosim.job import JobFiles, PreparedJob

__all__ = ["ScanParams", "ScanJob", "ScanRtlRun", "prepare_scan", "pack_lanes", "unpack_lanes"]


@dataclass(frozen=True)
class ScanParams:
    """Parameters of one scan unit build (see :class:`tilewright.rtl.scan_unit.ScanUnit`; the
    unit is not described by an ArchSpec yet)."""

    lanes: int = 4
    a_bits: int = 16
    h_bits: int = 32
    frac_bits: int = 16

    def key(self) -> str:
        return f"l{self.lanes}-a{self.a_bits}-h{self.h_bits}-f{self.frac_bits}"


@dataclass
class ScanJob:
    """Sequences streamed back to back: each ``(a_code [L, lanes], b_code [L, lanes],
    c_code [L, lanes], h0_code [lanes])`` (the order of ``scan_fp32``'s arguments); ``mode``
    "stream" (full rate) or "random" (seeded idle cycles and back-pressure)."""

    sequences: list[tuple[np.ndarray, np.ndarray, np.ndarray]]
    mode: str = "stream"
    seed: int = 0
    steps: int = field(init=False)

    def __post_init__(self) -> None:
        if self.mode not in ("stream", "random"):
            raise ValueError(f"ScanJob mode must be 'stream' or 'random', not {self.mode!r}")
        if not self.sequences:
            raise ValueError("ScanJob needs at least one sequence")
        self.steps = sum(len(seq[0]) for seq in self.sequences)


@dataclass
class ScanRtlRun:
    """One job's result: h codes after every step (int64 [steps, lanes], sequences
    concatenated in order), the y codes (int64 [steps]) and the RTL cycles (convention in
    :mod:`tilewright.cocotb_tests.scan_bench`)."""

    h: np.ndarray
    y: np.ndarray
    cycles: int


def pack_lanes(values: np.ndarray, bits: int) -> int:
    """Two's complement lane values -> one port word, lane 0 in the least significant bits."""
    mask, word = (1 << bits) - 1, 0
    for i, v in enumerate(np.asarray(values).tolist()):
        word |= (int(v) & mask) << (i * bits)
    return word


def unpack_lanes(word: int, lanes: int, bits: int) -> np.ndarray:
    """Port word -> signed int64 lane values (inverse of :func:`pack_lanes`)."""
    mask, sign = (1 << bits) - 1, 1 << (bits - 1)
    vals = [(word >> (i * bits)) & mask for i in range(lanes)]
    return np.array([v - (1 << bits) if v & sign else v for v in vals], np.int64)


def _beats(job: ScanJob, p: ScanParams) -> list[list[int]]:
    out = []
    for a, b, c, h0 in job.sequences:
        a, b, c, h0 = np.asarray(a), np.asarray(b), np.asarray(c), np.asarray(h0)
        if (a.shape != b.shape or a.shape != c.shape or a.ndim != 2 or a.shape[1] != p.lanes
                or h0.shape != (p.lanes,)):
            raise ValueError(f"scan sequence shapes a {a.shape}, b {b.shape}, c {c.shape}, "
                             f"h0 {h0.shape}; need a, b, c = [L, {p.lanes}] and h0 = [{p.lanes}]")
        h0w = pack_lanes(h0, p.h_bits)
        out += [[pack_lanes(a[t], p.a_bits), pack_lanes(b[t], p.h_bits),
                 pack_lanes(c[t], p.h_bits), int(t == 0), h0w] for t in range(len(a))]
    return out


def prepare_scan(jobs: list[ScanJob], params: ScanParams) -> PreparedJob:
    """The ``jobs`` as one simulation of the scan unit for ``params``."""
    spec = {"params": asdict(params),
            "jobs": [{"mode": j.mode, "seed": j.seed, "beats": _beats(j, params)} for j in jobs]}
    hbits = params.lanes * params.h_bits

    def decode(res) -> dict:
        runs = []
        for r in res.results["results"]:
            h = [unpack_lanes(w & ((1 << hbits) - 1), params.lanes, params.h_bits)
                 for w in r["out"]]
            y = [int(unpack_lanes(w >> hbits, 1, params.h_bits)[0]) for w in r["out"]]
            runs.append(ScanRtlRun(np.array(h, np.int64).reshape(-1, params.lanes),
                                   np.array(y, np.int64), r["cycles"]))
        return {"records": runs}
    return PreparedJob(JobFiles(spec), decode)
