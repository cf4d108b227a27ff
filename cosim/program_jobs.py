"""How a Program (or a batch of vector kernels) is encoded for the tops that run one.

One ``prepare_*`` function per top (``core``, ``axi-core``, ``accel``, ``axi-accel``; see
:mod:`tilewright.cosim.tops`) checks the job before any build (a Program compiled for another
ArchSpec, a GEMM too large for the buffers, code that does not assemble: clear errors first) and
returns a :class:`~tilewright.cosim.job.PreparedJob`: the job folder for the cocotb bench
(``arch.yaml``, ``program/``, ``inputs.npz``, the options in ``job.json``), how the bench's ``outputs.npz`` and
``cycles.json`` (per GEMM task or segment) become the run's outputs and records, and for the tops
with a C++ driver (:mod:`tilewright.cosim.fast_runs`) how the driver runs the same job.

The cycle comparisons (:func:`accel_comparison`, :func:`axi_accel_comparison`) put each record
next to the accelerator cycle model's prediction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tilewright.arch import ArchSpec, ArchSpecError, VectorUnitSpec
from tilewright.compiler.codegen import codegen, disassemble, memory_latency_cycles
from tilewright.compiler.layout import GemmLayout
from tilewright.compiler.program import Program
from tilewright.compiler.vector_codegen import (PAIR_KINDS, VectorKernel, batch_kernels,
                                                codegen_vector)
from tilewright.cosim.accel_commands import timeline_from_events
from tilewright.cosim.fast_runs import run_accel_fast, run_core_fast, run_kernels_fast
from tilewright.cosim.job import STATE_SUFFIX, JobFiles, PreparedJob
from tilewright.dataflow_sim.accel_timing import (first_difference, predict_segment,
                                                  segment_timeline)
from tilewright.rtl.axi_accel_top import AxiAccelMap

__all__ = ["KernelBatch", "prepare_core", "prepare_axi_core", "prepare_accel",
           "prepare_axi_accel", "accel_comparison", "axi_accel_comparison", "axi_timing_arch",
           "AXI_RAM_READ_LATENCY", "kernel_segment", "check_axi_latency",
           "check_transcendental_passes", "RTL_TRANSCENDENTAL_PASSES", "timeline_comparison"]

#: read latency L (cycles from the DMA's request to its first data beat) the DMA sees through
#: :class:`tilewright.rtl.axi_accel_top.AxiMasterBridge` with cocotbext-axi 0.1.28's AxiRam:
#: 1 cycle request -> ARVALID (registered in the bridge), plus AxiRam's answer — the AR
#: handshake is sampled at a rising edge, the RAM model queues the beat and its R source drives
#: RVALID from the next rising edge, so the first beat is valid 2 cycles after the AR cycle
AXI_RAM_READ_LATENCY = 3


@dataclass(frozen=True)
class KernelBatch:
    """Vector/scan kernels to run on the accelerator top's vector engine; ``operands[name]``:
    the kernel's raw Q8.8 operand arrays."""

    kernels: Sequence[VectorKernel]
    operands: Mapping[str, Sequence[np.ndarray]]


def _check_program(program: Program, arch: ArchSpec) -> None:
    """ValueError for a Program compiled for another arch or with MX GEMMs (block scales: the
    accelerator top's MX core runs them, not the host-driven core); DoesNotFit for a GEMM too
    large."""
    if program.arch_hash != arch.content_hash():
        raise ValueError(f"program {program.name} was compiled for arch {program.arch_hash}, "
                         f"not {arch.name} ({arch.content_hash()})")
    mx = [t.name for t in program.gemms() if t.a_scale or t.b_scale]
    if mx:
        raise ValueError(f"program {program.name}: task {mx[0]} is an MX GEMM (block scales): "
                         f"it runs on the accelerator top (top 'accel')")
    for task in program.gemms():
        GemmLayout.for_arch(arch, task.m, task.k, task.n).check_fits(arch)


def _check_probes(probes: Sequence[Sequence[dict]]) -> list[list[dict]]:
    """The probe groups as lists; ValueError for a raw bus access that is not ``{"op":
    "read"|"write", "addr": int, ...}``."""
    for group in probes:
        for acc in group:
            if acc.get("op") not in ("read", "write") or not isinstance(acc.get("addr"), int):
                raise ValueError(f"probe {acc!r}: needs op 'read' or 'write' and an int addr")
    return [list(g) for g in probes]


def _program_job(program: Program, arch: ArchSpec, inputs, spec: dict, named=(), **fields
                 ) -> PreparedJob:
    """The job folder of ``program``; the bench's ``cycles`` become the records and each name
    in ``named`` (e.g. ``probes``) its own field."""
    files = JobFiles(spec, arch, program, dict(inputs or {}))

    def decode(res) -> dict:
        return {"outputs": res.outputs, "records": res.results["cycles"], "log_tail":
                res.log_text[-2000:], **{n: res.results[n] for n in named}, **fields}
    return PreparedJob(files, decode)


def prepare_core(program: Program, arch: ArchSpec, *, inputs=None) -> PreparedJob:
    """The GEMM core: GEMM tasks on the RTL (host-driven ports), other tasks on the functional
    model; records per GEMM task: task, m, k, n, cycles, run_seconds."""
    _check_program(program, arch)
    job = _program_job(program, arch, inputs, {})
    job.fast = lambda build, keep_dir: run_core_fast(build, program, dict(inputs or {}), arch,
                                                     keep_dir)
    return job


def prepare_axi_core(program: Program, arch: ArchSpec, *, inputs=None,
                     probes: Sequence[Sequence[dict]] = (),
                     pause_seed: int | None = None) -> PreparedJob:
    """The GEMM core behind AXI4-Lite. ``probes``: groups of raw accesses run after the Program
    (``{"op": "read"|"write", "addr": byte address, "data": int}``; a group's accesses are
    issued concurrently). ``pause_seed``: random valid/ready pauses on every AXI channel (None:
    none). Records per GEMM task add ``bus_cycles``; ``probes``: per access resp and data."""
    _check_program(program, arch)
    return _program_job(program, arch, inputs,
                        {"pause_seed": pause_seed, "probes": _check_probes(probes)},
                        named=("probes",))


def prepare_accel(job: Program | KernelBatch, arch: ArchSpec, *, inputs=None,
                  timeline: bool = False) -> PreparedJob:
    """The programmable accelerator: a Program's ``gemm`` tasks as ISA code (records per
    segment: task, m, k, n, tiles, cycles, retired, read/write beats ...), or a
    :class:`KernelBatch` on its vector engine (outputs per kernel; a scan's is (y, state)).
    ``timeline``: each record also carries the RTL's cycle-by-cycle ``timeline``
    (:class:`~tilewright.dataflow_sim.accel_timing.SegmentTimeline`; recorded by the C++ fast
    driver or the cocotb bench, the same events), which :func:`timeline_comparison` checks
    against the cycle model's."""
    check_transcendental_passes(arch)     # the cycle model and RTL take one pass per op
    if isinstance(job, KernelBatch):
        return _prepare_kernels(job, arch, timeline)
    isa = codegen(job, arch)              # clear errors first
    prepared = _program_job(job, arch, inputs, {"timeline": True} if timeline else {}, isa=isa)
    if timeline:
        prepared.decode = _with_timelines(prepared.decode, lambda _task: isa)
    prepared.fast = lambda build, keep_dir: {
        **run_accel_fast(build, job, dict(inputs or {}), arch, isa, keep_dir, timeline),
        "isa": isa}
    return prepared


def _prepare_kernels(batch: KernelBatch, arch: ArchSpec, timeline: bool = False
                     ) -> PreparedJob:
    isas = [codegen_vector(arch, kernels) for kernels in batch_kernels(arch, batch.kernels)]
    for isa in isas:         # operands checked here, not inside the simulator
        for seg in isa.segments:
            seg.image(arch, *batch.operands[seg.task])
    spec = {"kernels": [[{"name": s.kernel.name, "kind": s.kernel.kind, "op": s.kernel.op,
                          "shape": list(s.kernel.shape)} for s in isa.segments]
                        for isa in isas], **({"timeline": True} if timeline else {})}
    arrays = {f"{k.name}_{i}": np.asarray(x)
              for k in batch.kernels for i, x in enumerate(batch.operands[k.name])}

    def decode(res) -> dict:
        outputs: dict[str, object] = dict(res.outputs)
        for k in batch.kernels:
            if k.kind in PAIR_KINDS:       # scan: (y, final state); quantize: (codes, shift)
                outputs[k.name] = (outputs[k.name], outputs.pop(k.name + STATE_SUFFIX))
        return {"outputs": outputs, "records": res.results["cycles"], "isa": isas,
                "log_tail": res.log_text[-2000:]}

    return PreparedJob(
        JobFiles(spec, arch, None, arrays),
        _with_timelines(decode, lambda task: kernel_segment(isas, task)[0]) if timeline
        else decode,
        lambda build, keep_dir: {**run_kernels_fast(build, isas, batch, arch, keep_dir,
                                                    timeline), "isa": isas})


def _with_timelines(decode, isa_of):
    """``decode`` of a cocotb run whose records carry the bench's ``events``: each record's
    events become its ``timeline`` (:func:`~tilewright.cosim.accel_commands.timeline_from_events`;
    ``isa_of(task)``: the program its segment ran in)."""
    def decoded(res) -> dict:
        fields = decode(res)
        for rec in fields["records"]:
            isa = isa_of(rec["task"])
            ops = {pc: ins.op for pc, ins in enumerate(disassemble(list(isa.words)))}
            rec["timeline"] = timeline_from_events(
                [tuple(e) for e in rec.pop("events")], rec["task"], rec["cycles"], ops)
        return fields
    return decoded


def prepare_axi_accel(program: Program, arch: ArchSpec, *, inputs=None,
                      raw_runs: Sequence[dict] = (), probes: Sequence[Sequence[dict]] = (),
                      pause_seed: int | None = None) -> PreparedJob:
    """The accelerator behind AXI (AXI4-Lite control, AXI4 memory: cocotbext-axi's AxiRam).
    ``raw_runs``: runs after the Program, each ``{"words": {index: 64-bit word}, "entry": int}``.
    ``probes``: groups of raw AXI4-Lite accesses run last. ``pause_seed``: random valid/ready
    pauses on every channel of the AxiRam (None: always ready; outputs stay exact, CYCLES can
    only grow). Raises CodegenError/DoesNotFit/AssemblerError and ArchSpecError (a beat wider
    than the top takes) before any build."""
    isa = codegen(program, arch)          # clear errors first
    AxiAccelMap.for_arch(arch)
    check_transcendental_passes(arch)
    spec = {"raw_runs": [{"words": {str(i): int(w) for i, w in r["words"].items()},
                          "entry": int(r["entry"])} for r in raw_runs],
            "probes": _check_probes(probes), "pause_seed": pause_seed}
    return _program_job(program, arch, inputs, spec, named=("raw_runs", "probes"), isa=isa)


# ---- cycle comparisons -------------------------------------------------------------------------
def accel_comparison(run, arch: ArchSpec) -> list[dict]:
    """Per record of an accelerator run: RTL cycles next to the cycle model's prediction.
    Program runs: per GEMM task also the GEMM core's and the DMA's busy cycles and the
    utilization M·K·N / (peak MAC/cycle · cycles), peak = ``tensor_engine.macs_per_cycle``.
    Kernel runs: per kernel its op, shape and vector/DMA busy cycles."""
    if isinstance(run.isa, list):
        return _kernel_comparison(run, arch)
    te = arch.tensor_engine
    rows = []
    for rec in run.records:
        pred = predict_segment(run.isa, run.isa.segment(rec["task"]), arch)
        rows.append({"task": rec["task"], "m": rec["m"], "k": rec["k"], "n": rec["n"],
                     "steps": rec["tiles"], "rtl_cycles": rec["cycles"],
                     "model_cycles": pred.cycles, "equal": rec["cycles"] == pred.cycles,
                     "gemm_busy": pred.gemm_cycles, "dma_busy": pred.dma_cycles,
                     "utilization": rec["m"] * rec["k"] * rec["n"]
                     / (te.macs_per_cycle * rec["cycles"])})
    return rows


def timeline_comparison(run, arch: ArchSpec) -> list[dict]:
    """Per record of an accelerator run made with ``timeline=True`` (either driver): its task,
    the cycle model's timeline (:func:`~tilewright.dataflow_sim.accel_timing.segment_timeline`),
    the RTL's, and their first difference (None: every issue cycle and busy interval equal;
    :func:`~tilewright.dataflow_sim.accel_timing.first_difference`)."""
    rows = []
    for rec in run.records:
        if "timeline" not in rec:
            raise ValueError(f"record {rec['task']}: no RTL timeline (run with timeline=True)")
        isa, seg = (kernel_segment(run.isa, rec["task"]) if isinstance(run.isa, list)
                    else (run.isa, run.isa.segment(rec["task"])))
        model = segment_timeline(isa, seg, arch)
        rows.append({"task": rec["task"], "model": model, "rtl": rec["timeline"],
                     "difference": first_difference(model, rec["timeline"])})
    return rows


def kernel_segment(isas, name: str):
    """(program, segment) of kernel ``name`` among a kernel run's programs."""
    for isa in isas:
        if any(s.task == name for s in isa.segments):
            return isa, isa.segment(name)
    raise KeyError(f"no kernel {name!r} in this run")


def _kernel_comparison(run, arch: ArchSpec) -> list[dict]:
    rows = []
    for rec in run.records:
        isa, seg = kernel_segment(run.isa, rec["task"])
        pred = predict_segment(isa, seg, arch)
        rows.append({"kernel": rec["task"], "op": seg.kernel.op, "shape": seg.kernel.shape,
                     "rtl_cycles": rec["cycles"], "model_cycles": pred.cycles,
                     "equal": rec["cycles"] == pred.cycles,
                     "vector_busy": pred.vector_cycles, "dma_busy": pred.dma_cycles})
    return rows


def axi_timing_arch(arch: ArchSpec, latency_cycles: int = AXI_RAM_READ_LATENCY) -> ArchSpec:
    """``arch`` with ``offchip.latency_ns`` set so that ``memory_latency_cycles`` is
    ``latency_cycles``: the ArchSpec the accelerator cycle model needs to predict the top behind
    an AXI memory of that latency (bandwidth — hence the beat width — unchanged)."""
    data = arch.model_dump(mode="json")
    data["offchip"] = {**data["offchip"], "latency_ns": latency_cycles * 1000 / arch.clock_mhz}
    out = ArchSpec.from_dict(data)
    assert memory_latency_cycles(out) == latency_cycles
    return out


#: the ``vector_unit.transcendental_passes`` the accelerator's RTL vector engine and its cycle
#: model (:mod:`tilewright.dataflow_sim.accel_timing`) take: neither reads the field — every op is
#: one pass (:mod:`tilewright.rtl.vector_unit`) — so only the field's default is honoured
RTL_TRANSCENDENTAL_PASSES = VectorUnitSpec.model_fields["transcendental_passes"].default


def check_transcendental_passes(arch: ArchSpec, source: str | None = None) -> ArchSpec:
    """``arch`` unchanged unless its vector unit sets ``transcendental_passes`` to another value
    than the default, which the accelerator tops would be generated and timed without:
    :class:`ArchSpecError` naming the field (``tilewright compile`` costs such a value)."""
    vu = arch.vector_unit
    if vu is not None and vu.transcendental_passes != RTL_TRANSCENDENTAL_PASSES:
        raise ArchSpecError(
            f"{source or arch.name}: vector_unit.transcendental_passes = "
            f"{vu.transcendental_passes}: the accelerator's RTL vector engine and its cycle "
            f"model do not take this field (one pass per op); accepted: "
            f"{RTL_TRANSCENDENTAL_PASSES} (the default) or leave it out (`tilewright compile` "
            f"costs other values)")
    return arch


def check_axi_latency(arch: ArchSpec, source: str | None = None) -> ArchSpec:
    """``arch`` unchanged when its off-chip latency is the AXI RAM model's
    (:data:`AXI_RAM_READ_LATENCY` cycles at ``clock_mhz``); else :class:`ArchSpecError` naming
    ``offchip.latency_ns`` and the accepted value. cocotbext-axi's AxiRam answers a read after a
    fixed delay and has no latency setting, so a run behind it measures that latency, not the
    ArchSpec's: such a design is refused rather than costed at another latency."""
    got = memory_latency_cycles(arch)
    if got != AXI_RAM_READ_LATENCY:
        ok_ns = AXI_RAM_READ_LATENCY * 1000 / arch.clock_mhz
        raise ArchSpecError(
            f"{source or arch.name}: offchip.latency_ns = {arch.offchip.latency_ns:g} "
            f"({got} cycles at {arch.clock_mhz:g} MHz): the AXI accelerator top runs against "
            f"cocotbext-axi's AxiRam, whose read latency is {AXI_RAM_READ_LATENCY} cycles; "
            f"accepted: offchip.latency_ns = {ok_ns:g} (or --top accel, whose memory model "
            f"applies the ArchSpec's latency)")
    return arch


def axi_accel_comparison(run, arch: ArchSpec) -> list[dict]:
    """Per GEMM task: the CYCLES register next to the accelerator cycle model on
    :func:`axi_timing_arch` (``arch`` with the AXI port's latency) and the utilization
    M·K·N / (rows·cols·cycles)."""
    te, tarch = arch.tensor_engine, axi_timing_arch(arch)
    rows = []
    for rec in run.records:
        pred = predict_segment(run.isa, run.isa.segment(rec["task"]), tarch)
        rows.append({"task": rec["task"], "m": rec["m"], "k": rec["k"], "n": rec["n"],
                     "rtl_cycles": rec["cycles"], "model_cycles": pred.cycles,
                     "equal": rec["cycles"] == pred.cycles,
                     "utilization": rec["m"] * rec["k"] * rec["n"]
                     / (te.rows * te.cols * rec["cycles"])})
    return rows
