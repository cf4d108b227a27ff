"""Run vector kernels on the Verilated accelerator top (its vector engine), through cocotb.

:func:`run_vector_kernels` compiles the kernels (:func:`~tilewright.compiler.vector_codegen.
codegen_vector`; clear errors before any build), builds (or reuses) the top for the ArchSpec and
runs the bench :mod:`tilewright.cocotb_tests.vector_accel_bench`. Compare the results with
:func:`tilewright.dataflow_sim.vector_isa.kernel_reference` (bit-exact) and the cycles with
:func:`tilewright.dataflow_sim.accel_timing.predict_segment` (exact).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.compiler.vector_codegen import (VectorIsa, VectorKernel, batch_kernels,
                                                codegen_vector)
from tilewright.cosim.accel_build import build_accel
from tilewright.cosim.verilator import run_cocotb_bench

__all__ = ["VectorAccelRun", "run_vector_kernels", "VECTOR_ACCEL_BENCH_MODULE"]

VECTOR_ACCEL_BENCH_MODULE = "tilewright.cocotb_tests.vector_accel_bench"
#: ``outputs.npz`` key suffix of a scan kernel's final state
STATE_SUFFIX = "__state"


@dataclass
class VectorAccelRun:
    """What one run produced."""

    outputs: dict[str, object]       #: kernel name -> raw result (int64; scan: (y, state))
    segments: list[dict]             #: per kernel: task, cycles, retired, read/write beats
    isas: list[VectorIsa]            #: the code that ran, one program per batch of kernels
    sim_seconds: float               #: wall time of the simulator process (s)

    def segment(self, name: str):
        """(program, segment) of kernel ``name``."""
        for isa in self.isas:
            if any(s.task == name for s in isa.segments):
                return isa, isa.segment(name)
        raise KeyError(f"no kernel {name!r} in this run")

    @property
    def rtl_cycles(self) -> int:
        return sum(r["cycles"] for r in self.segments)

    def comparison(self, arch: ArchSpec) -> list[dict]:
        """Per kernel: RTL cycles next to the cycle model's, and its vector/DMA busy cycles."""
        from tilewright.dataflow_sim.accel_timing import predict_segment  # noqa: PLC0415
        rows = []
        for rec in self.segments:
            isa, seg = self.segment(rec["task"])
            pred = predict_segment(isa, seg, arch)
            rows.append({"kernel": rec["task"], "op": seg.kernel.op, "shape": seg.kernel.shape,
                         "rtl_cycles": rec["cycles"], "model_cycles": pred.cycles,
                         "equal": rec["cycles"] == pred.cycles,
                         "vector_busy": pred.vector_cycles, "dma_busy": pred.dma_cycles})
        return rows


def run_vector_kernels(kernels: list[VectorKernel], operands: dict[str, list[np.ndarray]],
                       arch: ArchSpec, *, log=None,
                       keep_dir: str | Path | None = None) -> VectorAccelRun:
    """Run ``kernels`` (``operands[name]``: the kernel's raw Q8.8 operand arrays) on the
    accelerator top for ``arch`` in Verilator. Raises CodegenError/DoesNotFit before any build
    for kernels that cannot run, RuntimeError if the simulation or the bench's checks fail."""
    isas = [codegen_vector(arch, batch) for batch in batch_kernels(arch, kernels)]
    for isa in isas:         # operands checked here, not inside the simulator
        for seg in isa.segments:
            seg.image(arch, *operands[seg.task])
    build = build_accel(arch, log=log)
    job = Path(keep_dir) if keep_dir else Path(tempfile.mkdtemp(prefix="tilewright-vec-"))
    job.mkdir(parents=True, exist_ok=True)
    (job / "arch.yaml").write_text(arch.to_yaml())
    (job / "kernels.json").write_text(json.dumps(
        [[{"name": s.kernel.name, "kind": s.kernel.kind, "op": s.kernel.op,
           "shape": list(s.kernel.shape)} for s in isa.segments] for isa in isas]))
    np.savez(job / "operands.npz", **{f"{k.name}_{i}": np.asarray(x)
                                      for k in kernels for i, x in enumerate(operands[k.name])})
    t0 = time.perf_counter()
    run_cocotb_bench(build, VECTOR_ACCEL_BENCH_MODULE, job, "accelerator vector engine")
    sim_s = time.perf_counter() - t0
    with np.load(job / "outputs.npz") as npz:
        outputs: dict[str, object] = {k: npz[k] for k in npz.files}
    for k in kernels:
        if k.kind == "scan":
            outputs[k.name] = (outputs[k.name], outputs.pop(k.name + STATE_SUFFIX))
    segments = json.loads((job / "cycles.json").read_text())
    if not keep_dir:
        shutil.rmtree(job, ignore_errors=True)
    return VectorAccelRun(outputs, segments, isas, sim_s)
