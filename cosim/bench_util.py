"""The job folder a Program co-simulation runs through: both sides of it, in one place.

The run side (:func:`run_program_job`, called by :mod:`~tilewright.cosim.run`,
:mod:`~tilewright.cosim.accel_run`, :mod:`~tilewright.cosim.axi_run` and
:mod:`~tilewright.cosim.axi_accel_run`) writes ``arch.yaml``, ``program/`` (a saved Program),
``inputs.npz`` and, when the bench takes options, ``job.json``; runs the cocotb bench on a build
with the folder as ``$TILEWRIGHT_JOB``; and reads back ``outputs.npz`` and the bench's JSON
results. The bench side (:func:`load_program_job`, :func:`save_outputs`, used inside the
simulator by the matching ``*_bench`` modules) reads and writes the same files.

No cocotb import here: the module is loaded in the simulator and in the main process alike.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.compiler.program import GemmTask, Program
from tilewright.cosim.verilator import run_cocotb_bench

__all__ = ["ProgramJob", "load_program_job", "gemm_tasks", "save_outputs", "JobResult",
           "run_program_job", "check_probes"]


# ---- bench side (inside the simulator) ---------------------------------------------------------
@dataclass
class ProgramJob:
    """What a bench reads from its job folder."""

    folder: Path
    arch: ArchSpec
    program: Program
    inputs: dict[str, np.ndarray]
    spec: dict                       #: ``job.json`` ({} when the run side wrote none)

    @property
    def env(self) -> dict[str, np.ndarray]:
        """A fresh tensor environment: the Program's constants and the inputs."""
        return {**self.program.constants, **self.inputs}


def load_program_job(folder: str | Path | None = None) -> ProgramJob:
    """Read the job folder (default ``$TILEWRIGHT_JOB``)."""
    job = Path(folder if folder is not None else os.environ["TILEWRIGHT_JOB"])
    arch = ArchSpec.from_yaml((job / "arch.yaml").read_text(), source=str(job / "arch.yaml"))
    program = Program.load(job / "program")
    spec_file = job / "job.json"
    spec = json.loads(spec_file.read_text()) if spec_file.exists() else {}
    with np.load(job / "inputs.npz") as npz:
        inputs = {k: npz[k] for k in npz.files}
    return ProgramJob(job, arch, program, inputs, spec)


def gemm_tasks(job: ProgramJob, env: dict) -> Iterator[GemmTask]:
    """The Program's GEMM tasks, in order, for the bench to run on the RTL; every other task
    runs on the functional model (into ``env``) when the iteration reaches it, so the bench
    must store each GEMM's output in ``env`` before asking for the next task."""
    from tilewright.dataflow_sim.functional import run_vector  # noqa: PLC0415

    for task in job.program.tasks:
        if isinstance(task, GemmTask):
            yield task
        else:
            env[task.out] = run_vector(task, env)


def save_outputs(job: ProgramJob, env: Mapping[str, np.ndarray], **results) -> None:
    """Write ``outputs.npz`` (every tensor of ``env`` the Program computed: not a constant, not
    an input) and each keyword as ``<name>.json``."""
    computed = {k: v for k, v in env.items()
                if k not in job.program.constants and k not in job.inputs}
    np.savez(job.folder / "outputs.npz", **computed)
    for name, value in results.items():
        (job.folder / f"{name}.json").write_text(json.dumps(value, indent=1))


# ---- run side (main process) -------------------------------------------------------------------
@dataclass
class JobResult:
    """What :func:`run_program_job` read back."""

    outputs: dict[str, np.ndarray]   #: every tensor the program computed
    results: dict[str, object]       #: each requested ``<name>.json``, parsed
    log_text: str                    #: the simulation log
    sim_seconds: float               #: wall time of the simulator process (s)
    folder: Path | None              #: the job folder when kept (``keep_dir``), else None


def run_program_job(build, bench_module: str, what: str, arch: ArchSpec, program: Program,
                    inputs: Mapping[str, np.ndarray], *, results: Iterable[str] = ("cycles",),
                    spec: dict | None = None, keep_dir: str | Path | None = None,
                    prefix: str = "tilewright-job-", waves: bool = False) -> JobResult:
    """Write the job folder (``keep_dir``, else a temporary folder named ``prefix...`` removed
    afterwards), run the cocotb bench ``bench_module`` on ``build`` with it
    (:func:`tilewright.cosim.verilator.run_cocotb_bench`; ``what`` names it in errors) and read
    back ``outputs.npz`` and ``<name>.json`` for each name in ``results``. ``spec``, if given,
    is written as ``job.json``."""
    job = Path(keep_dir) if keep_dir else Path(tempfile.mkdtemp(prefix=prefix))
    job.mkdir(parents=True, exist_ok=True)
    (job / "arch.yaml").write_text(arch.to_yaml())
    program.save(job / "program")
    np.savez(job / "inputs.npz", **inputs)
    if spec is not None:
        (job / "job.json").write_text(json.dumps(spec))
    t0 = time.perf_counter()
    log_text = run_cocotb_bench(build, bench_module, job, what, waves=waves)
    sim_s = time.perf_counter() - t0
    with np.load(job / "outputs.npz") as npz:
        outputs = {k: npz[k] for k in npz.files}
    parsed = {name: json.loads((job / f"{name}.json").read_text()) for name in results}
    if not keep_dir:
        shutil.rmtree(job, ignore_errors=True)
    return JobResult(outputs, parsed, log_text, sim_s, job if keep_dir else None)


def check_probes(probes: Sequence[Sequence[dict]]) -> None:
    """Raise ValueError for a raw bus access that is not ``{"op": "read"|"write", "addr": int,
    ...}`` (before any build or simulation)."""
    for group in probes:
        for acc in group:
            if acc.get("op") not in ("read", "write") or not isinstance(acc.get("addr"), int):
                raise ValueError(f"probe {acc!r}: needs op 'read' or 'write' and an int addr")
