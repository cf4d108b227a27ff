"""Program: the compiled artifact every simulation level consumes (see DESIGN.md, "Program").

A Program is an ordered list of tasks over named tensors. Tensors are typed (shape, format);
constant tensors (quantized weights, biases, requantization multipliers) travel with the Program.
Task order is a valid execution order; ``deps`` makes the data dependencies explicit.

Semantics of each task kind (every level implements exactly this):

``gemm``   out[m, n] = sum_k a[m, k] * b[k, n] over int8 operands with an int32 accumulator that
           wraps modulo 2**32 (two's complement), shapes a: M x K, b: K x N, out: M x N.
``vector`` an elementwise/per-channel op named by ``op``; see :data:`VECTOR_OPS`.

Serialization: ``save(dir)`` writes ``program.json`` (structure) and ``constants.npz`` (arrays);
``load(dir)`` restores an equal Program.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

__all__ = ["TensorInfo", "GemmTask", "VectorTask", "Task", "Program", "VECTOR_OPS", "FORMAT_DTYPES"]

#: element format name -> numpy dtype used to hold it exactly
FORMAT_DTYPES: dict[str, Any] = {"int8": np.int8, "int32": np.int32, "int64": np.int64,
                                 "fp32": np.float32}

#: vector op name -> one-line semantics (inputs in order; attrs named)
VECTOR_OPS: dict[str, str] = {
    "requantize": (
        "inputs (acc:int32[M,N], bias:int32[N], multiplier:int32[N], shift:int32[N]) -> int8[M,N]: "
        "y = clamp((int64(acc) + bias) * multiplier + 2**(shift-1) >> shift, lo, hi) with "
        "arithmetic shift (floor), lo = 0 if attrs.relu else -128, hi = 127"),
    "bias_add": "inputs (acc:int32[M,N], bias:int32[N]) -> int32[M,N]: acc + bias, wrapping int32",
    "slice": (
        "inputs (x) -> x restricted to elements [attrs.start, attrs.stop) along attrs.axis, same "
        "format; pure data movement (the compiler uses it to split GEMMs that do not fit)"),
    "concat": (
        "inputs (x0, x1, ...) of one format, shapes equal except along attrs.axis -> their "
        "concatenation along attrs.axis in input order; pure data movement"),
}


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TensorInfo(_Model):
    """A named tensor: shape (elements per dim) and element format (a key of FORMAT_DTYPES)."""

    name: str
    shape: tuple[int, ...]
    format: Literal["int8", "int32", "int64", "fp32"]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * np.dtype(FORMAT_DTYPES[self.format]).itemsize


class GemmTask(_Model):
    """One GEMM on the tensor engine: ``out = a @ b`` (int8 x int8 -> int32, wrapping).

    ``m, k, n`` are the logical sizes; the engine folds them over its rows x cols internally.
    ``source`` names the model op it came from (for reports and error messages).
    """

    kind: Literal["gemm"] = "gemm"
    name: str
    a: str
    b: str
    out: str
    m: int = Field(..., ge=1)
    k: int = Field(..., ge=1)
    n: int = Field(..., ge=1)
    deps: tuple[str, ...] = ()
    source: str = ""

    @property
    def macs(self) -> int:
        return self.m * self.k * self.n


class VectorTask(_Model):
    """An elementwise / per-channel op (see :data:`VECTOR_OPS`)."""

    kind: Literal["vector"] = "vector"
    name: str
    op: str
    inputs: tuple[str, ...]
    out: str
    attrs: dict[str, Any] = {}
    deps: tuple[str, ...] = ()
    source: str = ""


Task = Annotated[Union[GemmTask, VectorTask], Field(discriminator="kind")]


class Program(BaseModel):
    """The compiled program for one ArchSpec (identified by ``arch_hash``)."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    name: str
    arch_hash: str
    tensors: dict[str, TensorInfo]
    inputs: list[str]
    outputs: list[str]
    tasks: list[Task]
    meta: dict[str, Any] = Field(default_factory=dict)
    """free-form facts for users, e.g. quantization scales: ``{"input_scale": 0.02}``"""
    constants: dict[str, np.ndarray] = Field(default_factory=dict, exclude=True)

    def gemms(self) -> list[GemmTask]:
        return [t for t in self.tasks if isinstance(t, GemmTask)]

    def check(self) -> None:
        """Raise ValueError naming the task/tensor if the program is inconsistent."""
        defined = set(self.inputs) | set(self.constants)
        for name in self.constants:
            info = self.tensors[name]
            arr = self.constants[name]
            if tuple(arr.shape) != info.shape or arr.dtype != np.dtype(FORMAT_DTYPES[info.format]):
                raise ValueError(f"constant {name}: array {arr.dtype}{arr.shape} does not match "
                                 f"{info.format}{info.shape}")
        for task in self.tasks:
            ins = (task.a, task.b) if isinstance(task, GemmTask) else task.inputs
            for x in ins:
                if x not in defined:
                    raise ValueError(f"task {task.name}: input {x} is used before it is defined")
            if isinstance(task, VectorTask) and task.op not in VECTOR_OPS:
                raise ValueError(f"task {task.name}: unknown vector op {task.op!r}; "
                                 f"known: {sorted(VECTOR_OPS)}")
            defined.add(task.out)
        for x in self.outputs:
            if x not in defined:
                raise ValueError(f"program output {x} is never computed")

    # ---- serialization -------------------------------------------------------------------
    def save(self, directory: str | Path) -> Path:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        (d / "program.json").write_text(self.model_dump_json(indent=1))
        np.savez(d / "constants.npz", **self.constants)
        return d

    @classmethod
    def load(cls, directory: str | Path) -> "Program":
        d = Path(directory)
        data = json.loads((d / "program.json").read_text())
        with np.load(d / "constants.npz") as npz:
            consts = {k: npz[k] for k in npz.files}
        prog = cls.model_validate(data)
        prog.constants.update(consts)
        return prog
