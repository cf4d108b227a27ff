"""Run a Program on the Verilated GEMM core through the C++ fast driver (no Python per cycle).

Semantics are the cocotb bench's (:mod:`tilewright.cocotb_tests.gemm_core_bench`): tasks run in order,
GEMM tasks on the RTL, vector tasks with the functional model's vector ops on the RTL's results.
The driver process stays alive for the whole Program and receives one GEMM command at a time
through a pipe (binary stream of :mod:`tilewright.cosim.gemm_commands`), so a GEMM may consume
the output of a vector task that consumed an earlier GEMM's RTL output. With ``keep_dir`` the
exact command and result streams are saved (``commands.bin``, ``results.bin``): the driver
replays them stand-alone with ``tw_gemm_fast commands.bin results.bin``.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.compiler.program import GemmTask, Program
from tilewright.cosim.fast_build import build_core_fast
from tilewright.cosim.fast_pipe import DriverPipe, run_driver
from tilewright.cosim.gemm_commands import GemmCommand, read_result, stream_end, stream_header
from tilewright.dataflow_sim.functional import run_vector

__all__ = ["run_program_fast"]


def run_program_fast(program: Program, inputs: dict[str, np.ndarray], arch: ArchSpec, *,
                     log=None, keep_dir: str | Path | None = None):
    """Build (or reuse) the fast driver for ``arch`` and run ``program`` on it; returns an
    :class:`~tilewright.cosim.run.RtlRun` (per-GEMM cycles from the core's counter, checked
    equal to the driver's own count). Raises RuntimeError if the driver fails a check or dies."""
    from tilewright.cosim.run import RtlRun  # noqa: PLC0415  (run.py dispatches here)

    build = build_core_fast(arch, log=log)
    job = Path(keep_dir) if keep_dir else None
    if job:
        job.mkdir(parents=True, exist_ok=True)
    env = {**program.constants, **inputs}
    records: list[dict] = []
    cols = arch.tensor_engine.cols

    def body(pipe: DriverPipe) -> None:
        pipe.send(stream_header(arch))
        for task in program.tasks:
            if not isinstance(task, GemmTask):
                env[task.out] = run_vector(task, env)
                continue
            cmd = GemmCommand.from_operands(arch, env[task.a], env[task.b])
            pipe.send(cmd.to_bytes())
            res = read_result(pipe, cols)
            if res.cycles_counter != res.cycles_driver:
                raise RuntimeError(f"{task.name}: cycle counter {res.cycles_counter} != "
                                   f"driver count {res.cycles_driver}")
            env[task.out] = cmd.c_from_lanes(res.c_lanes)
            records.append({"task": task.name, "m": task.m, "k": task.k, "n": task.n,
                            "cycles": res.cycles_counter, "cycles_driver": res.cycles_driver,
                            "run_seconds": res.busy_ns * 1e-9})
        pipe.send(stream_end())

    t0 = time.perf_counter()
    run_driver(build.executable, "fast driver", program.name, body, job)
    sim_s = time.perf_counter() - t0
    computed = {k: v for k, v in env.items() if k not in program.constants and k not in inputs}
    return RtlRun(computed, records, build, sim_s, job, "")

