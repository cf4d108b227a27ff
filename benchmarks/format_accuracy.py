"""Accuracy and emulation speed of every number format's exact GEMM arithmetic.

Usage:  python benchmarks/format_accuracy.py [--shapes 64x256x64,128x1024x128] [--k-block 128]

For each GEMM shape M x K x N: activations a ~ N(0, 1) (M x K), weights b ~ N(0, 1/K) (K x N).
The anchor is torch's fp32 ``a @ b``. Each format quantizes a along K (axis 1) and b along K
(axis 0) and runs :func:`tilewright.dataflow_sim.numerics.gemm` with ``k_block`` array rows and the
format's default accumulator (int32 for int8, fp32 otherwise).
Columns: max |out - ref|, relative Frobenius error ||out - ref|| / ||ref||, and emulation speed
(GEMMs per wall second of ``gemm`` alone, quantization excluded; millions of MACs per second).
Speeds depend on machine load. Printed, never asserted.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from tilewright.dataflow_sim.numerics import gemm
from tilewright.formats import FORMATS, quantize

VARIANTS = [(f.name, g) for f in FORMATS.values()
            for g in (["tensor", "channel"] if f.scaling == "fp32" else [None])]


def rate(fn, min_seconds: float = 0.3) -> float:
    """Calls of ``fn`` per second, timed over at least ``min_seconds`` (and at least one call)."""
    n, t0 = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        dt = time.perf_counter() - t0
        if dt >= min_seconds:
            return n / dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="64x256x64,128x1024x128,256x2048x256")
    ap.add_argument("--k-block", type=int, default=128, help="array rows (k per tile)")
    args = ap.parse_args()
    table = Table(title=f"GEMM error vs torch fp32 and emulation speed (k_block={args.k_block})")
    for col in ["M x K x N", "format", "scale", "acc", "max abs err", "rel Frobenius", "GEMMs/s",
                "MMAC/s"]:
        table.add_column(col, justify="left" if col in ("format", "scale", "acc") else "right")
    rng = np.random.default_rng(0)
    for shape in args.shapes.split(","):
        m, k, n = (int(v) for v in shape.split("x"))
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
        ref = (torch.from_numpy(a) @ torch.from_numpy(b)).numpy().astype(np.float64)
        for name, gran in VARIANTS:
            qa = quantize(a, name, axis=1, granularity=gran)  # type: ignore[arg-type]
            qb = quantize(b, name, axis=0, granularity=gran)  # type: ignore[arg-type]
            kb = args.k_block
            out = gemm(qa, qb, name, k_block=kb).astype(np.float64)
            per_s = rate(lambda: gemm(qa, qb, name, k_block=kb))
            err = out - ref
            table.add_row(shape, name, gran or FORMATS[name].scaling, FORMATS[name].default_acc,
                          f"{np.abs(err).max():.3e}",
                          f"{np.linalg.norm(err) / np.linalg.norm(ref):.3e}",
                          f"{per_s:.1f}", f"{per_s * m * k * n / 1e6:.0f}")
        table.add_section()
    Console(width=120).print(table)


if __name__ == "__main__":
    main()
