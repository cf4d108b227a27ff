"""Run a job on any generated top, with any driver it has: :func:`run`, returning a :class:`SimRun`.

One entry for every co-simulation: a Program on the GEMM core, the accelerator or their AXI tops
(cocotb bench or, where it exists, the C++ fast driver), vector kernels on the accelerator, GEMMs
on the bf16 core or a tile-MAC engine, sequences on the scan unit, beats on the vector unit,
MeshJobs on the mesh. The top's ``prepare`` checks and encodes the job before any build
(:mod:`tilewright.cosim.tops`), :func:`tilewright.cosim.build.build` builds (or reuses) the top,
then the cocotb bench runs through the one job harness (:func:`tilewright.cosim.job.run_job`) or
the C++ driver through its pipe (:mod:`tilewright.cosim.fast_runs`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tilewright.cosim.build import build
from tilewright.cosim.job import run_job
from tilewright.cosim.tops import DRIVERS, Top, get_top
from tilewright.cosim.verilator import Build

__all__ = ["SimRun", "run"]


@dataclass
class SimRun:
    """What one co-simulation produced, whatever the top and driver."""

    top: str                         #: the registry key of the top that ran
    driver: str                      #: "cocotb" or "fast"
    records: list                    #: per GEMM task / segment / kernel a dict (task, m, k, n,
    #:                                  cycles, ...); bf16, engine, scan, vector: one typed
    #:                                  record per job; mesh: per job {"cycles", "reads"}
    build: Build
    sim_seconds: float               #: wall time of the simulator or driver process (s)
    outputs: dict[str, Any] = field(default_factory=dict)   #: Program: every tensor it
    #:                                  computed; kernels: raw results per kernel (a scan's is
    #:                                  (y, state)); other tops: {}
    job_dir: Path | None = None      #: the job folder when kept (``keep_dir``)
    log_tail: str = field(default="", repr=False)
    isa: Any = None                  #: accelerator tops: the IsaProgram that ran (kernels: the
    #:                                  list of VectorIsa, one per batch)
    probes: list | None = None       #: AXI tops: per probe group, per access: resp, data
    raw_runs: list | None = None     #: axi-accel: per raw run: status, cycles, retired, pc

    @property
    def total_cycles(self) -> int:
        """Sum of the records' ``cycles``."""
        return sum(r["cycles"] if isinstance(r, dict) else r.cycles for r in self.records)

    def comparison(self, arch) -> list[dict]:
        """Per record: the RTL's cycles next to the cycle model's (tops that have one)."""
        top = get_top(self.top)
        if top.compare is None:
            raise ValueError(f"top {self.top!r} has no cycle-model comparison")
        return top.compare(self, arch)


def _check_driver(top: Top, driver: str, keep_dir, waves: bool) -> None:
    if driver not in DRIVERS:
        raise ValueError(f"driver {driver!r}: accepted: {', '.join(DRIVERS)}")
    if driver not in top.drivers:
        raise ValueError(f"top {top.name!r} has no {driver!r} driver; accepted: "
                         f"{', '.join(top.drivers)}")
    if waves and (driver != "cocotb" or not top.waves):
        raise ValueError(f"waves=True needs the cocotb driver of a top that traces "
                         f"(top {top.name!r}, driver {driver!r})")
    if waves and not keep_dir:
        raise ValueError("waves=True needs keep_dir: the folder that receives dump.vcd")


def run(top: str | Top, job, arch, *, driver: str = "cocotb", keep_dir: str | Path | None = None,
        waves: bool = False, log=None, **options) -> SimRun:
    """Run ``job`` on ``top`` (a registry key of :data:`~tilewright.cosim.tops.TOPS`) generated
    from ``arch`` (an ArchSpec, or the top's own params: ``Bf16Params``, ``EngineParams``,
    ``ScanParams``), driven by ``driver``.

    ``job``: a Program (``inputs=`` its input tensors) on "core", "accel", "axi-core",
    "axi-accel"; a ``KernelBatch`` on "accel"; (A, B) pairs on "bf16-core" and "engine"; a list
    of ``ScanJob`` on "scan"; ``VectorBeats`` on "vector"; a list of ``MeshJob`` on "mesh".
    ``options`` go to the top's ``prepare`` (e.g. ``probes``, ``pause_seed``, ``raw_runs``;
    ``timeline`` on "accel": each record's RTL timeline, either driver).
    ``keep_dir``: keep the job folder (or the fast driver's streams) there. ``waves``: trace every
    signal (cocotb, a tracing build; ``dump.vcd`` in ``keep_dir``, required).

    Raises ValueError for an unknown top, a driver the top lacks or a malformed job, the
    compiler's errors (DoesNotFit, CodegenError ...) before any build, RuntimeError if the
    simulation or the bench's own checks fail.
    """
    top = get_top(top)
    _check_driver(top, driver, keep_dir, waves)
    prepared = top.prepare(job, arch, **options)          # clear errors before any build
    built = build(top, arch, driver=driver, waves=waves, log=log)
    if driver == "fast":
        t0 = time.perf_counter()
        fields = prepared.fast(built, keep_dir)
        sim_s = time.perf_counter() - t0
    else:
        res = run_job(built, top.bench, top.describe(arch), prepared.files, results=top.results,
                      keep_dir=keep_dir, waves=waves)
        fields = {"job_dir": res.folder, **prepared.decode(res)}
        sim_s = res.sim_seconds
    return SimRun(top=top.name, driver=driver, build=built, sim_seconds=sim_s, **fields)
