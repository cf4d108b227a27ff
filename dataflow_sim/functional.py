"""Functional model: the target's exact arithmetic, task by task, in numpy.

It executes a :class:`~tilewright.compiler.program.Program` with the semantics documented there:
int8 x int8 GEMMs into an int32 accumulator that wraps modulo 2**32, and the vector ops of
:data:`~tilewright.compiler.program.VECTOR_OPS`. The GEMM is pluggable so that the same driver runs a
program with GEMMs on another level (the RTL co-simulation passes its own).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from tilewright.compiler.program import GemmTask, Program, VectorTask

__all__ = ["gemm_int8", "run_vector", "run_program", "wrap_int32"]


def wrap_int32(x: np.ndarray) -> np.ndarray:
    """Reduce int64 values modulo 2**32 into int32 (two's complement wrap)."""
    return x.astype(np.int64).astype(np.uint32).astype(np.int32) if x.dtype != np.int32 else x


def gemm_int8(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` for int8 operands with an int32 accumulator that wraps (exactly as the PEs do).

    Exact: int64 sums of int8 products cannot overflow for K < 2**48, and wrapping addition is
    associative modulo 2**32, so the wrapped int64 result equals any order of int32 accumulation.
    """
    if a.dtype != np.int8 or b.dtype != np.int8:
        raise TypeError(f"gemm_int8 takes int8 operands, got {a.dtype} and {b.dtype}")
    return wrap_int32(a.astype(np.int64) @ b.astype(np.int64))


def run_vector(task: VectorTask, env: dict[str, np.ndarray]) -> np.ndarray:
    """Execute one vector task on tensors in ``env`` (name -> array)."""
    ins = [env[x] for x in task.inputs]
    if task.op == "requantize":
        acc, bias, mult, shift = (x.astype(np.int64) for x in ins)
        if np.any(shift < 1) or np.any(shift > 63):
            raise ValueError(f"task {task.name}: requantize shift must be from 1 to 63")
        # floor((p + 2**(s-1)) / 2**s) without int64 overflow: |acc + bias| <= 2**32 and
        # -2**31 < mult keep p in int64, but p + 2**(s-1) may not be; halve p first (exact:
        # floor(floor(x)/d) == floor(x/d) for integer d).
        p = (acc + bias) * mult
        q, r = p >> 1, p & 1
        half = np.int64(1) << np.maximum(shift - 2, 0)
        y = np.where(shift == 1, q + r, (q + half) >> (shift - 1))
        lo = 0 if task.attrs.get("relu", False) else -128
        return np.clip(y, lo, 127).astype(np.int8)
    if task.op == "bias_add":
        acc, bias = ins
        return wrap_int32(acc.astype(np.int64) + bias.astype(np.int64))
    if task.op == "slice":
        (x,) = ins
        index = [slice(None)] * x.ndim
        index[task.attrs["axis"]] = slice(task.attrs["start"], task.attrs["stop"])
        return np.ascontiguousarray(x[tuple(index)])
    if task.op == "concat":
        if len({x.dtype for x in ins}) != 1:
            raise ValueError(f"task {task.name}: concat of mixed formats {[x.dtype for x in ins]}")
        return np.concatenate(ins, axis=task.attrs["axis"])
    raise ValueError(f"task {task.name}: vector op {task.op!r} has no functional model")


def run_program(program: Program, inputs: dict[str, np.ndarray],
                gemm: Callable[[np.ndarray, np.ndarray], np.ndarray] = gemm_int8
                ) -> dict[str, np.ndarray]:
    """Run ``program`` on ``inputs``; return every tensor computed (name -> array)."""
    missing = [x for x in program.inputs if x not in inputs]
    if missing:
        raise ValueError(f"program {program.name}: missing inputs {missing}")
    env: dict[str, np.ndarray] = {**program.constants, **inputs}
    for task in program.tasks:
        if isinstance(task, GemmTask):
            env[task.out] = gemm(env[task.a], env[task.b])
        else:
            env[task.out] = run_vector(task, env)
    return env
