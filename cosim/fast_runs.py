"""Jobs on the C++ fast drivers: no Python per cycle, the cocotb benches' semantics.

* :func:`run_core_fast` — a Program on the GEMM core (``fast_driver/main.cpp``): tasks in order,
  GEMM tasks on the RTL (one :class:`~tilewright.cosim.gemm_commands.GemmCommand` each), vector
  tasks with the functional model's vector ops on the RTL's results.
* :func:`run_accel_fast` — a Program on the accelerator top (``fast_driver/accel_main.cpp``): the
  instruction words, then per GEMM task its segment's memory image stored into the driver's
  external-memory model (the cocotb bench's latency / one-beat-per-cycle rules), the segment run
  from its entry and C read back (:mod:`tilewright.cosim.accel_commands`).
* :func:`run_kernels_fast` — vector/scan kernels on the accelerator top the same way, one
  driver process per batch of kernels whose code fits the instruction memory.

The driver process lives for the whole job and receives one command at a time through a pipe
(:func:`~tilewright.cosim.driver_process.run_driver`); its cycle count is checked equal to the
top's counter. With ``keep_dir`` the exact streams are saved (``commands.bin``, ``results.bin``;
batch ``i`` of a kernel run in ``keep_dir/batch<i>``): ``<executable> commands.bin results.bin``
replays them. Each function returns :class:`~tilewright.cosim.sim.SimRun` fields.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.compiler.codegen import beat_bytes, disassemble, memory_latency_cycles
from tilewright.compiler.program import GemmTask, Program
from tilewright.cosim import accel_commands as ac
from tilewright.cosim import gemm_commands as gc
from tilewright.cosim.driver_process import DriverPipe, run_driver
from tilewright.cosim.job import computed, operands
from tilewright.cosim.verilator import Build
from tilewright.dataflow_sim.accel_timing import predict_segment
from tilewright.dataflow_sim.functional import run_vector

__all__ = ["run_core_fast", "run_accel_fast", "run_kernels_fast"]


def _folder(keep_dir) -> Path | None:
    job = Path(keep_dir) if keep_dir else None
    if job:
        job.mkdir(parents=True, exist_ok=True)
    return job


def run_core_fast(build: Build, program: Program, inputs: dict[str, np.ndarray],
                  arch: ArchSpec, keep_dir=None) -> dict:
    """Run ``program`` on the core's fast driver; records per GEMM task: task, m, k, n, cycles
    (the core's counter), cycles_driver, run_seconds."""
    env = {**program.constants, **inputs}
    records: list[dict] = []
    cols = arch.tensor_engine.cols

    def body(pipe: DriverPipe) -> None:
        pipe.send(gc.stream_header(arch))
        for task in program.tasks:
            if not isinstance(task, GemmTask):
                env[task.out] = run_vector(task, env)
                continue
            cmd = gc.GemmCommand.from_operands(arch, env[task.a], env[task.b])
            pipe.send(cmd.to_bytes())
            res = gc.read_result(pipe, cols)
            if res.cycles_counter != res.cycles_driver:
                raise RuntimeError(f"{task.name}: cycle counter {res.cycles_counter} != "
                                   f"driver count {res.cycles_driver}")
            env[task.out] = cmd.c_from_lanes(res.c_lanes)
            records.append({"task": task.name, "m": task.m, "k": task.k, "n": task.n,
                            "cycles": res.cycles_counter, "cycles_driver": res.cycles_driver,
                            "run_seconds": res.busy_ns * 1e-9})
        pipe.send(gc.stream_end())

    job = _folder(keep_dir)
    run_driver(build.executable, "fast driver", program.name, body, job)
    return {"outputs": computed(program, inputs, env), "records": records, "job_dir": job}


def _run_segment(pipe: DriverPipe, arch: ArchSpec, isa, seg, image: dict[int, int], result,
                 name: str, idx: int = 0, trace: bool = False) -> tuple[object, dict]:
    """Send one segment (its memory ``image``), read its result record; ``result(arch,
    read)`` turns the words read back into the segment's output (called once with a recording
    reader first, to learn which word ranges to read back); ``idx``: the index register;
    ``trace``: the record's ``timeline`` is the RTL's
    (:func:`~tilewright.cosim.accel_commands.timeline_from_events`)."""
    ranges: list[tuple[int, int]] = []

    def record(addr: int, count: int) -> list[int]:
        ranges.append((addr, count))
        return [0] * count

    result(arch, record)
    w = beat_bytes(arch)
    watchdog = 4 * predict_segment(isa, seg, arch).cycles + 10_000
    pipe.send(ac.segment_command(seg.entry, watchdog, image, ranges, w, idx, trace))
    res = ac.read_result(pipe, w, trace)
    if res["cycles"] != res["cycles_driver"] or res["error"]:
        raise RuntimeError(f"{name}: cycle counter {res['cycles']} vs driver "
                           f"{res['cycles_driver']}, controller error {res['error']} at pc "
                           f"{res['pc']}")
    if trace:
        ops = {pc: ins.op for pc, ins in enumerate(disassemble(list(isa.words)))}
        res["timeline"] = ac.timeline_from_events(res.pop("events"), seg.task, res["cycles"],
                                                  ops)
    words = iter(res.pop("words"))
    back = {(a, n): [next(words) for _ in range(n)] for a, n in ranges}
    return result(arch, lambda a, n: back[(a, n)]), res


def run_accel_fast(build: Build, program: Program, inputs: dict[str, np.ndarray],
                   arch: ArchSpec, isa, keep_dir=None, timeline: bool = False) -> dict:
    """Run ``program`` (compiled to ``isa``) on the accelerator's fast driver; records per
    segment like the cocotb bench's (task, m, k, n, tiles, cycles, retired, beats ...; with
    ``timeline`` also the RTL's ``timeline``)."""
    env = {**program.constants, **inputs}
    records: list[dict] = []

    def body(pipe: DriverPipe) -> None:
        pipe.send(ac.stream_header(isa.words, beat_bytes(arch), memory_latency_cycles(arch)))
        for task in program.tasks:
            if not isinstance(task, GemmTask):
                env[task.out] = run_vector(task, env)
                continue
            seg = isa.segment(task.name)
            image = isa.image(arch, seg, *operands(task, env))
            env[task.out], res = _run_segment(
                pipe, arch, isa, seg, image,
                lambda a, read, _s=seg: isa.c_result(a, _s, read), f"task {task.name}",
                trace=timeline)
            res.update(task=task.name, m=task.m, k=task.k, n=task.n, tiles=len(seg.tiles))
            records.append(res)
        pipe.send(ac.stream_end())

    job = _folder(keep_dir)
    run_driver(build.executable, "accelerator fast driver", program.name, body, job)
    return {"outputs": computed(program, inputs, env), "records": records, "job_dir": job}


def run_kernels_fast(build: Build, isas: list, batch, arch: ArchSpec, keep_dir=None,
                     timeline: bool = False) -> dict:
    """Run a :class:`~tilewright.cosim.program_jobs.KernelBatch` compiled to ``isas`` (one
    program per batch) on the accelerator's fast driver; outputs per kernel, records per
    kernel (task, cycles, retired, beats ...; with ``timeline`` also the RTL's ``timeline``)."""
    images = {s.task: s.image(arch, *batch.operands[s.task]) for isa in isas for s in isa.segments}
    idxs = {s.task: s.index(*batch.operands[s.task]) for isa in isas for s in isa.segments}
    outputs: dict[str, object] = {}
    records: list[dict] = []

    def batch_body(isa):
        def body(pipe: DriverPipe) -> None:
            pipe.send(ac.stream_header(isa.words, beat_bytes(arch), memory_latency_cycles(arch)))
            for seg in isa.segments:
                outputs[seg.task], res = _run_segment(pipe, arch, isa, seg, images[seg.task],
                                                      seg.result, f"kernel {seg.task}",
                                                      idxs[seg.task], timeline)
                res.update(task=seg.task)
                records.append(res)
            pipe.send(ac.stream_end())
        return body

    for i, isa in enumerate(isas):
        run_driver(build.executable, "accelerator fast driver", f"vector kernels {i}",
                   batch_body(isa), _folder(Path(keep_dir) / f"batch{i}" if keep_dir else None))
    return {"outputs": outputs, "records": records}
