"""How a Program is encoded for the UART bridge top (:mod:`tilewright.rtl.uart_bridge_top`), and
its cycle comparison.

:func:`prepare_uart` checks the job before any build (a Program compiled for another ArchSpec,
code that does not assemble, an image larger than the bridge's memory) and writes the job folder
the bench (:mod:`tilewright.cocotb_tests.uart_bench`) reads: ``arch.yaml``, ``program/``,
``inputs.npz`` and in ``job.json`` the link (``baud``, ``mem_words``). :func:`uart_comparison`
puts each record's CYCLES (read back over the line) next to the accelerator cycle model on the
ArchSpec with the bridge memory's read latency.
"""

from __future__ import annotations

from collections.abc import Sequence

from tilewright.arch import ArchSpec
from tilewright.compiler.codegen import codegen
from tilewright.compiler.program import Program
from tilewright.cosim.job import JobFiles, PreparedJob
from tilewright.cosim.program_jobs import axi_timing_arch, check_transcendental_passes
from tilewright.dataflow_sim.accel_timing import predict_segment
from tilewright.rtl.uart_bridge_top import BRIDGE_READ_LATENCY, UartLink, as_link

__all__ = ["prepare_uart", "uart_comparison", "link_from_spec"]


def link_from_spec(arch, spec: dict) -> UartLink:
    """The :class:`UartLink` of a job folder (``arch.yaml`` and ``job.json``)."""
    return UartLink(arch, baud=spec["baud"], mem_words=int(spec["mem_words"]))


def prepare_uart(program: Program, link: UartLink | ArchSpec, *, inputs=None,
                 probes: Sequence[tuple[bytes, int]] = ()) -> PreparedJob:
    """A Program on the UART bridge top: the bench loads its code over the line, and per GEMM
    task writes the image, starts, polls STATUS and reads C, CYCLES and RETIRED back over the
    line; other tasks run on the functional model. Records per GEMM task: task, m, k, n, tiles,
    status, cycles, retired, pc, line_bytes (bytes both ways for the task), line_cycles (clock
    cycles the task took on the line). Raises TypeError for params that are not a UartLink,
    ValueError for a Program compiled for another ArchSpec or an image larger than the bridge's
    memory, CodegenError/DoesNotFit before any build. An ArchSpec is the simulation link
    (:func:`~tilewright.rtl.uart_bridge_top.as_link`). ``probes``: raw requests sent after the
    Program, each (request bytes, reply length in bytes); ``run.probes`` holds each reply."""
    link = as_link(link)
    arch = link.arch
    if program.arch_hash != arch.content_hash():
        raise ValueError(f"program {program.name} was compiled for arch {program.arch_hash}, "
                         f"not {arch.name} ({arch.content_hash()})")
    check_transcendental_passes(arch)
    isa = codegen(program, arch)          # clear errors first
    if isa.ext_words > link.mem_words:
        raise ValueError(f"program {program.name} needs {isa.ext_words} external words of "
                         f"{isa.beat_bytes} bytes; the bridge memory has {link.mem_words} "
                         f"(UartLink(mem_words=...): a power of two >= {isa.ext_words})")
    for req, n in probes:
        if not isinstance(req, bytes) or not req or not isinstance(n, int) or n < 1:
            raise ValueError(f"probe {req!r}, {n!r}: needs (request bytes, reply length >= 1)")
    files = JobFiles({"baud": link.baud, "mem_words": link.mem_words,
                      "probes": [[req.hex(), n] for req, n in probes]}, arch, program,
                     dict(inputs or {}))

    def decode(res) -> dict:
        return {"outputs": res.outputs, "records": res.results["cycles"],
                "log_tail": res.log_text[-2000:], "isa": isa,
                "probes": [bytes.fromhex(r) for r in res.results["probes"]]}
    return PreparedJob(files, decode)


def uart_comparison(run, link: UartLink | ArchSpec) -> list[dict]:
    """Per GEMM task: CYCLES read over the line next to the accelerator cycle model on
    ``axi_timing_arch(arch, BRIDGE_READ_LATENCY)`` (the bridge memory's read latency)."""
    arch = as_link(link).arch
    tarch = axi_timing_arch(arch, BRIDGE_READ_LATENCY)
    rows = []
    for rec in run.records:
        pred = predict_segment(run.isa, run.isa.segment(rec["task"]), tarch)
        rows.append({"task": rec["task"], "m": rec["m"], "k": rec["k"], "n": rec["n"],
                     "rtl_cycles": rec["cycles"], "model_cycles": pred.cycles,
                     "equal": rec["cycles"] == pred.cycles, "line_bytes": rec["line_bytes"],
                     "line_cycles": rec["line_cycles"]})
    return rows
