"""GEMM suites: Programs of independent GEMM tasks used to exercise the core across shapes."""

from __future__ import annotations

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.compiler.program import GemmTask, Program, TensorInfo

__all__ = ["gemm_suite", "suite_shapes"]


def suite_shapes(arch: ArchSpec) -> list[tuple[int, int, int, str]]:
    """(M, K, N, kind) shapes that cover the array's corner cases for ``arch``.

    Kinds: ``random`` (four seeded shapes up to three tiles per dim), ``exact`` (one tile), ``ragged`` (no dim a multiple of the array), ``fold`` (K and N
    several times the array), ``gemv`` (M = 1), ``tall`` (M large), ``extreme`` (all -128,
    long K: the largest accumulations).
    """
    R, C = arch.tensor_engine.rows, arch.tensor_engine.cols
    rng = np.random.default_rng(R * 1000 + C)
    randoms = [(int(rng.integers(1, 3 * R + 3)), int(rng.integers(1, 3 * R + 3)),
                int(rng.integers(1, 3 * C + 3)), "random") for _ in range(4)]
    return randoms + [
        (R, R, C, "exact"),
        (R + 3, 2 * R + 1, C + 2, "ragged"),
        (5, 3 * R + 2, 2 * C + 3, "fold"),
        (1, 2 * R + 5, 3 * C, "gemv"),
        (4 * R + 1, R - 1 if R > 1 else 1, C, "tall"),
        (2, 515, C + 1, "extreme"),
    ]


def gemm_suite(arch: ArchSpec, shapes: list[tuple[int, int, int, str]] | None = None,
               seed: int = 0) -> tuple[Program, dict[str, np.ndarray]]:
    """A Program with one GEMM task per shape, and its random int8 inputs (``extreme``: -128)."""
    rng = np.random.default_rng(seed)
    shapes = shapes if shapes is not None else suite_shapes(arch)
    tensors, tasks, inputs = {}, [], {}
    for idx, (m, k, n, kind) in enumerate(shapes):
        a, b, c = f"a{idx}", f"b{idx}", f"c{idx}"
        if kind == "extreme":
            av = np.full((m, k), -128, np.int8)
            bv = np.full((k, n), -128, np.int8)
            bv[:, ::2] = 127          # mixed signs: -128*127 and -128*-128 sums in one tile
        else:
            av = rng.integers(-128, 128, (m, k), dtype=np.int8)
            bv = rng.integers(-128, 128, (k, n), dtype=np.int8)
        inputs[a], inputs[b] = av, bv
        tensors[a] = TensorInfo(name=a, shape=(m, k), format="int8")
        tensors[b] = TensorInfo(name=b, shape=(k, n), format="int8")
        tensors[c] = TensorInfo(name=c, shape=(m, n), format="int32")
        tasks.append(GemmTask(name=f"gemm{idx}_{kind}", a=a, b=b, out=c, m=m, k=k, n=n,
                              source=f"suite:{kind}"))
    prog = Program(name=f"gemm-suite-{arch.name}", arch_hash=arch.content_hash(), tensors=tensors,
                   inputs=list(inputs), outputs=[t.out for t in tasks], tasks=tasks)
    prog.check()
    return prog, inputs
