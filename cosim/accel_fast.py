"""The programmable accelerator top with a C++ fast driver: no Python per cycle.

:func:`build_accel_fast` builds the top (:mod:`tilewright.rtl.accel_top`) with its C++ driver
(``fast_driver/accel_main.cpp``, ``verilator --cc --exe --build``), cached under its own key
(``accel-fast-`` prefix; the key also hashes the driver's C++ source).
:func:`run_program_accel_fast` runs a Program on it with the cocotb bench's semantics
(:mod:`tilewright.cocotb_tests.accel_bench`): the instruction words loaded through the control port, then
per GEMM task its segment's memory image stored into the driver's external-memory model (same
latency / one-beat-per-cycle rules as ``ExtMemory``), the segment run from its entry (cycles counted
by the driver and checked equal to the top's ``cycles`` register) and C read back; other tasks run
on the functional model. The driver process lives for the whole Program and receives one segment at
a time through a pipe. :func:`run_vector_kernels_fast` runs vector/scan kernels
(:mod:`tilewright.compiler.vector_codegen`) the same way. With ``keep_dir`` the exact command and result streams are saved
(``commands.bin``, ``results.bin``): ``tw_accel_fast commands.bin results.bin`` replays them.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.compiler.program import GemmTask, Program
from tilewright.cosim.fast_pipe import (DRIVER_DIR, DriverBuild, DriverPipe, build_driver_exe,
                                         driver_hash, run_driver)
from tilewright.cosim.verilator import ToolMissing, cached_build, rtl_source_hash

__all__ = ["AccelFastBuild", "build_accel_fast", "run_program_accel_fast",
           "run_vector_kernels_fast", "DRIVER_SOURCE", "EXECUTABLE"]

#: the C++ harness compiled with the Verilated top
DRIVER_SOURCE = DRIVER_DIR / "accel_main.cpp"
#: name of the built executable inside the build folder
EXECUTABLE = "tw_accel_fast"
#: the Verilated model's class name the driver includes (``--prefix``)
PREFIX = "Vtw_accel"

MAGIC_STREAM, MAGIC_SEG, MAGIC_END, MAGIC_RESULT = (
    int.from_bytes(s, "little") for s in (b"TWA1", b"SEGM", b"DONE", b"RSLT"))


#: a finished fast-driver build of the accelerator top (``executable``: the C++ driver)
AccelFastBuild = DriverBuild


def _key(arch: ArchSpec) -> str:
    from tilewright.cosim.accel_build import isa_hash  # noqa: PLC0415
    from tilewright.rtl.accel_top import ACCEL_GENERATOR_VERSION, ACCEL_SOURCES  # noqa: PLC0415
    drv = driver_hash(DRIVER_SOURCE)
    return (f"accel-fast-{arch.content_hash()}-g{ACCEL_GENERATOR_VERSION}-"
            f"{rtl_source_hash(*ACCEL_SOURCES)}-{isa_hash(arch)}-d{drv}")


def build_accel_fast(arch: ArchSpec, *, log=None) -> AccelFastBuild:
    """Generate the top's Verilog for ``arch`` and build the C++ fast driver with it (cached).

    ``log`` (optional callable taking a str) receives progress messages. Raises ToolMissing when
    g++/make/Verilator are absent and RuntimeError (with the build log's tail) if the build fails.
    """
    from tilewright.compiler.codegen import beat_bytes  # noqa: PLC0415
    from tilewright.rtl.accel_top import ACCEL_TOP_NAME, write_accel_rtl  # noqa: PLC0415

    if not DRIVER_SOURCE.exists():
        raise ToolMissing(f"fast driver source {DRIVER_SOURCE} is missing from the installation")
    w = beat_bytes(arch)

    def build_step(tmp: Path) -> None:
        """``verilator --cc --exe --build`` of the top with the driver into ``tmp/obj``."""
        build_driver_exe(tmp, top=ACCEL_TOP_NAME, source=DRIVER_SOURCE, executable=EXECUTABLE,
                         cflags=f"-O2 -DTW_BEAT_BYTES={w}", prefix=PREFIX,
                         what=f"accelerator fast-driver ({arch.name})")

    te = arch.tensor_engine
    return cached_build(_key(arch), ACCEL_TOP_NAME, lambda d: write_accel_rtl(arch, d), log=log,
                        build_step=build_step, cls=DriverBuild, arch=arch, exe_name=EXECUTABLE,
                        what=f"the accelerator C++ fast driver for {arch.name} "
                             f"({te.describe()}, W={w})")


# ---- stream ------------------------------------------------------------------------------------
def _chunks(w: int) -> int:
    return -(-w // 4)


def stream_header(words, w: int, latency: int) -> bytes:
    """``TWA1``, W, L, the instruction words (low, high uint32 each)."""
    body = b"".join(struct.pack("<Q", int(x)) for x in words)
    return struct.pack("<4I", MAGIC_STREAM, w, latency, len(words)) + body


def segment_command(entry: int, watchdog: int, image: dict[int, int],
                    ranges: list[tuple[int, int]], w: int) -> bytes:
    """One segment: entry, watchdog, the image words to store, the ranges to read back."""
    nbytes = 4 * _chunks(w)
    parts = [struct.pack("<4I", MAGIC_SEG, entry, min(watchdog, 0xFFFFFFFF), len(image))]
    parts += [struct.pack("<I", a) + int(v).to_bytes(nbytes, "little") for a, v in image.items()]
    parts.append(struct.pack("<I", len(ranges)))
    parts += [struct.pack("<2I", a, n) for a, n in ranges]
    return b"".join(parts)


def stream_end() -> bytes:
    return struct.pack("<I", MAGIC_END)


def _read_exact(f, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise RuntimeError(f"result stream ended early ({len(data)} of {n} bytes)")
    return data


def read_result(f, w: int) -> dict:
    """One result record: cycles (counter, driver), retired, error, pc, beats, busy ns, words."""
    head = struct.unpack("<11I", _read_exact(f, 44))
    if head[0] != MAGIC_RESULT:
        raise RuntimeError(f"bad result magic {head[0]:#x}")
    ch = _chunks(w)
    raw = np.frombuffer(_read_exact(f, 4 * ch * head[10]), "<u4").reshape(head[10], ch)
    words = [sum(int(c) << (32 * i) for i, c in enumerate(row)) for row in raw] if ch > 1 \
        else [int(x) for x in raw[:, 0]]
    return {"cycles": head[1], "cycles_driver": head[2], "retired": head[3], "error": head[4],
            "pc": head[5], "read_beats": head[6], "write_beats": head[7],
            "run_seconds": (head[8] | (head[9] << 32)) * 1e-9, "words": words}


# ---- run ---------------------------------------------------------------------------------------
def run_program_accel_fast(program: Program, inputs: dict[str, np.ndarray], arch: ArchSpec, *,
                           log=None, keep_dir: str | Path | None = None):
    """Run ``program`` on the accelerator top for ``arch`` through the C++ fast driver; returns
    an :class:`~tilewright.cosim.accel_run.AccelRun` like
    :func:`~tilewright.cosim.accel_run.run_program_accel`. Raises CodegenError/DoesNotFit/
    AssemblerError (via codegen) before any build, RuntimeError if the driver fails a check
    (stderr in the message) or the controller stops with an error."""
    from tilewright.compiler.codegen import codegen, memory_latency_cycles  # noqa: PLC0415
    from tilewright.cosim.accel_run import AccelRun  # noqa: PLC0415
    from tilewright.dataflow_sim.accel_timing import predict_segment  # noqa: PLC0415
    from tilewright.dataflow_sim.functional import run_vector  # noqa: PLC0415

    isa = codegen(program, arch)          # clear errors first
    build = build_accel_fast(arch, log=log)
    w = isa.beat_bytes
    job = Path(keep_dir) if keep_dir else None
    if job:
        job.mkdir(parents=True, exist_ok=True)
    env = {**program.constants, **inputs}
    records: list[dict] = []

    def body(pipe: DriverPipe) -> None:
        pipe.send(stream_header(isa.words, w, memory_latency_cycles(arch)))
        for task in program.tasks:
            if not isinstance(task, GemmTask):
                env[task.out] = run_vector(task, env)
                continue
            seg = isa.segment(task.name)
            image = isa.image(arch, seg, np.asarray(env[task.a]), np.asarray(env[task.b]))
            ranges: list[tuple[int, int]] = []

            def record(addr: int, count: int, _r=ranges) -> list[int]:
                _r.append((addr, count))
                return [0] * count

            isa.c_result(arch, seg, record)       # only to learn which ranges C is in
            watchdog = 4 * predict_segment(isa, seg, arch).cycles + 10_000
            pipe.send(segment_command(seg.entry, watchdog, image, ranges, w))
            res = read_result(pipe, w)
            if res["cycles"] != res["cycles_driver"]:
                raise RuntimeError(f"{task.name}: cycle counter {res['cycles']} != "
                                   f"driver count {res['cycles_driver']}")
            if res["error"]:
                raise RuntimeError(f"task {task.name}: controller stopped with error at pc "
                                   f"{res['pc']}")
            words = iter(res.pop("words"))
            back = {(a, n): [next(words) for _ in range(n)] for a, n in ranges}
            env[task.out] = isa.c_result(arch, seg, lambda a, n: back[(a, n)])
            res.update(task=task.name, m=task.m, k=task.k, n=task.n, tiles=len(seg.tiles))
            records.append(res)
        pipe.send(stream_end())

    t0 = time.perf_counter()
    run_driver(build.executable, "accelerator fast driver", program.name, body, job)
    sim_s = time.perf_counter() - t0
    computed = {k: v for k, v in env.items() if k not in program.constants and k not in inputs}
    return AccelRun(computed, records, isa, build, sim_s, "")



def run_vector_kernels_fast(kernels, operands: dict[str, list[np.ndarray]], arch: ArchSpec, *,
                            log=None, keep_dir: str | Path | None = None):
    """Run vector/scan kernels on the accelerator top through the C++ fast driver; returns a
    :class:`~tilewright.cosim.vector_accel_run.VectorAccelRun` like the cocotb bench's
    :func:`~tilewright.cosim.vector_accel_run.run_vector_kernels` (same memory model, same
    counts). One driver process per batch of kernels whose code fits the instruction memory
    (``keep_dir``: the streams of batch ``i`` in ``keep_dir/batch<i>``)."""
    from tilewright.compiler.codegen import beat_bytes, memory_latency_cycles  # noqa: PLC0415
    from tilewright.compiler.vector_codegen import batch_kernels, codegen_vector  # noqa: PLC0415
    from tilewright.cosim.vector_accel_run import VectorAccelRun  # noqa: PLC0415
    from tilewright.dataflow_sim.accel_timing import predict_segment  # noqa: PLC0415

    isas = [codegen_vector(arch, batch) for batch in batch_kernels(arch, kernels)]
    images = {s.task: s.image(arch, *operands[s.task]) for isa in isas for s in isa.segments}
    build = build_accel_fast(arch, log=log)
    w = beat_bytes(arch)
    outputs: dict[str, object] = {}
    records: list[dict] = []

    def batch_body(isa):
        def body(pipe: DriverPipe) -> None:
            pipe.send(stream_header(isa.words, w, memory_latency_cycles(arch)))
            for seg in isa.segments:
                ranges: list[tuple[int, int]] = []

                def record(addr: int, count: int, _r=ranges) -> list[int]:
                    _r.append((addr, count))
                    return [0] * count

                seg.result(arch, record)          # only to learn which ranges hold the result
                watchdog = 4 * predict_segment(isa, seg, arch).cycles + 10_000
                pipe.send(segment_command(seg.entry, watchdog, images[seg.task], ranges, w))
                res = read_result(pipe, w)
                if res["cycles"] != res["cycles_driver"] or res["error"]:
                    raise RuntimeError(f"kernel {seg.task}: cycle counter {res['cycles']} vs "
                                       f"driver {res['cycles_driver']}, error {res['error']} at "
                                       f"pc {res['pc']}")
                words = iter(res.pop("words"))
                back = {(a, n): [next(words) for _ in range(n)] for a, n in ranges}
                outputs[seg.task] = seg.result(arch, lambda a, n: back[(a, n)])
                res.update(task=seg.task)
                records.append(res)
            pipe.send(stream_end())
        return body

    t0 = time.perf_counter()
    for i, isa in enumerate(isas):
        job = Path(keep_dir) / f"batch{i}" if keep_dir else None
        if job:
            job.mkdir(parents=True, exist_ok=True)
        run_driver(build.executable, "accelerator fast driver", f"vector kernels {i}",
                   batch_body(isa), job)
    return VectorAccelRun(outputs, records, isas, time.perf_counter() - t0)
