"""The job folder every cocotb co-simulation runs through: both sides of it, in one place.

Run side (:func:`run_job`, called by :func:`tilewright.cosim.sim.run` for every top): writes
``job.json`` (the top's encoded job) and, when the job has them, ``arch.yaml``, ``program/`` (a
saved Program) and ``inputs.npz``; runs the top's cocotb bench on a build with the folder as
``$TILEWRIGHT_JOB``; reads back ``outputs.npz`` (when written) and ``<name>.json`` for each result
name the top declares. Bench side (:func:`load_job`, :func:`gemm_tasks`, :func:`save_results`,
used inside the simulator by every ``*_bench`` module) reads and writes the same files.

No cocotb import here: the module is loaded in the simulator and in the main process alike.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.compiler.program import GemmTask, Program
from tilewright.cosim.verilator import Build, run_cocotb_bench
from tilewright.dataflow_sim.functional import run_vector

__all__ = ["STATE_SUFFIX", "JobFiles", "Job", "load_job", "gemm_tasks", "operands", "computed",
           "save_results", "JobResult", "PreparedJob", "run_job", "prepare_words"]

#: ``outputs.npz`` key suffix of a scan kernel's final state (a kernel run on the accelerator)
STATE_SUFFIX = "__state"


@dataclass
class JobFiles:
    """What the run side writes into a job folder (and the bench side reads back as a
    :class:`Job`)."""

    spec: dict = field(default_factory=dict)      #: ``job.json``: the top's encoded job
    arch: ArchSpec | None = None                  #: ``arch.yaml``
    program: Program | None = None                #: ``program/``
    inputs: Mapping[str, np.ndarray] = field(default_factory=dict)   #: ``inputs.npz``


# ---- bench side (inside the simulator) ---------------------------------------------------------
@dataclass
class Job:
    """What a bench reads from its job folder."""

    folder: Path
    arch: ArchSpec | None
    program: Program | None
    inputs: dict[str, np.ndarray]
    spec: dict                       #: ``job.json``

    @property
    def env(self) -> dict[str, np.ndarray]:
        """A fresh tensor environment: the Program's constants and the inputs."""
        return {**self.program.constants, **self.inputs}


def load_job(folder: str | Path | None = None) -> Job:
    """Read the job folder (default ``$TILEWRIGHT_JOB``)."""
    job = Path(folder if folder is not None else os.environ["TILEWRIGHT_JOB"])
    arch_file = job / "arch.yaml"
    arch = (ArchSpec.from_yaml(arch_file.read_text(), source=str(arch_file))
            if arch_file.exists() else None)
    program = Program.load(job / "program") if (job / "program").exists() else None
    inputs: dict[str, np.ndarray] = {}
    if (job / "inputs.npz").exists():
        with np.load(job / "inputs.npz") as npz:
            inputs = {k: npz[k] for k in npz.files}
    return Job(job, arch, program, inputs, json.loads((job / "job.json").read_text()))


def gemm_tasks(job: Job, env: dict) -> Iterator[GemmTask]:
    """The Program's GEMM tasks, in order, for the bench to run on the RTL; every other task
    runs on the functional model (into ``env``) when the iteration reaches it, so the bench
    must store each GEMM's output in ``env`` before asking for the next task."""
    for task in job.program.tasks:
        if isinstance(task, GemmTask):
            yield task
        else:
            env[task.out] = run_vector(task, env)


def operands(task: GemmTask, env: Mapping) -> tuple:
    """A GEMM task's operands for :meth:`~tilewright.compiler.codegen.IsaProgram.image`: ``a``,
    ``b`` and (an MX task's) the block-scale codes ``a_scale``, ``b_scale``."""
    return tuple(None if x is None else np.asarray(env[x])
                 for x in (task.a, task.b, task.a_scale, task.b_scale))


def computed(program: Program, inputs: Mapping, env: Mapping[str, np.ndarray]) -> dict:
    """Every tensor of ``env`` the Program computed: not a constant, not an input."""
    return {k: v for k, v in env.items() if k not in program.constants and k not in inputs}


def save_results(job: Job, outputs: Mapping[str, np.ndarray] | None = None, **results) -> None:
    """Write ``outputs.npz`` (when ``outputs`` is given) and each keyword as ``<name>.json``."""
    if outputs is not None:
        np.savez(job.folder / "outputs.npz", **outputs)
    for name, value in results.items():
        (job.folder / f"{name}.json").write_text(json.dumps(value, indent=1))


# ---- run side (main process) -------------------------------------------------------------------
@dataclass
class JobResult:
    """What :func:`run_job` read back."""

    outputs: dict[str, np.ndarray]   #: ``outputs.npz`` ({} when the bench wrote none)
    results: dict[str, object]       #: each requested ``<name>.json``, parsed
    log_text: str                    #: the simulation log
    sim_seconds: float               #: wall time of the simulator process (s)
    folder: Path | None              #: the job folder when kept (``keep_dir``), else None


def run_job(build: Build, bench: str, what: str, files: JobFiles, *,
            results: Iterable[str], keep_dir: str | Path | None = None,
            waves: bool = False) -> JobResult:
    """Write ``files`` into the job folder (``keep_dir``, else a temporary folder removed
    afterwards), run the cocotb bench module ``bench`` on ``build`` with it
    (:func:`tilewright.cosim.verilator.run_cocotb_bench`; ``what`` names it in errors) and read
    back ``outputs.npz`` and ``<name>.json`` for each name in ``results``."""
    job = Path(keep_dir) if keep_dir else Path(tempfile.mkdtemp(prefix="tilewright-job-"))
    job.mkdir(parents=True, exist_ok=True)
    (job / "job.json").write_text(json.dumps(files.spec))
    if files.arch is not None:
        (job / "arch.yaml").write_text(files.arch.to_yaml())
    if files.program is not None:
        files.program.save(job / "program")
    if files.inputs:
        np.savez(job / "inputs.npz", **files.inputs)
    t0 = time.perf_counter()
    log_text = run_cocotb_bench(build, bench, job, what, waves=waves)
    sim_s = time.perf_counter() - t0
    outputs: dict[str, np.ndarray] = {}
    if (job / "outputs.npz").exists():
        with np.load(job / "outputs.npz") as npz:
            outputs = {k: npz[k] for k in npz.files}
    parsed = {name: json.loads((job / f"{name}.json").read_text()) for name in results}
    if not keep_dir:
        shutil.rmtree(job, ignore_errors=True)
    return JobResult(outputs, parsed, log_text, sim_s, job if keep_dir else None)


@dataclass
class PreparedJob:
    """A top's job, checked and encoded before any build (:attr:`Top.prepare`): what the cocotb
    bench reads, how its results become :class:`~tilewright.cosim.sim.SimRun` fields, and (for a
    top with a C++ driver) how the driver runs the same job."""

    files: JobFiles                                          #: the cocotb bench's job folder
    decode: Callable[[JobResult], dict]                      #: bench results -> SimRun fields
    fast: Callable[[Build, Path | None], dict] | None = None   #: (build, keep_dir) -> fields


def prepare_words(words, params, *, latency: int | None = None) -> PreparedJob:
    """A job of plain words streamed in one per cycle (``job.json``: ``words`` and a watchdog of
    ``max_cycles``), for a top whose bench streams words and reports ``results.json``; the run's
    one record is that report. ``latency`` (default: ``params.latency``) sizes the watchdog."""
    words = [int(w) for w in words]
    if not words:
        raise ValueError("a word stream needs at least one word")
    width = getattr(params, "width", None)
    if width is not None and any(not 0 <= w < 1 << width for w in words):
        raise ValueError(f"every word must fit in {width} bits (0 .. {(1 << width) - 1})")
    lat = latency if latency is not None else getattr(params, "latency", 0)
    spec = {"words": words, "max_cycles": len(words) + lat + 16}
    return PreparedJob(JobFiles(spec), lambda res: {"records": [res.results["results"]]})
