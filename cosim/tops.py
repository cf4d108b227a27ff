"""One :class:`Top` declaration per generated design, and the registry :data:`TOPS` of them.

A Top says everything the co-simulation layer needs to build and run a design: its Verilog
top-module name (read from the generator, the one place it is declared), the generator module
(whose source closure keys the build: :mod:`tilewright.cosim.source_hash`), how to write its
Verilog from its params (an ArchSpec, or the top's own params class), the g++ optimisation of
its cocotb model, its cocotb bench and the results that bench writes, its C++ fast driver (if
any) and how a job is checked and encoded for it (``prepare``). :func:`tilewright.cosim.build.build`
builds any Top; :func:`tilewright.cosim.sim.run` runs any job on any Top. The CLI and flows
iterate :data:`TOPS` instead of naming tops.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tilewright.arch import ArchSpec
from tilewright.compiler.codegen import beat_bytes
from tilewright.cosim import program_jobs as pj
from tilewright.cosim.bf16_jobs import Bf16Params, prepare_bf16
from tilewright.cosim.driver_process import FastDriver
from tilewright.cosim.engine_jobs import EngineParams, prepare_engine
from tilewright.cosim.fp8_jobs import Fp8Params, prepare_fp8
from tilewright.cosim.mx_jobs import MxParams, prepare_mx
from tilewright.cosim.job import PreparedJob, prepare_words
from tilewright.cosim.mesh_jobs import IMEM_DEPTH, prepare_mesh
from tilewright.cosim.scan_jobs import ScanParams, prepare_scan
from tilewright.cosim.uart_jobs import prepare_uart, uart_comparison
from tilewright.cosim.vector_jobs import prepare_vector
from tilewright.rtl.accel_top import ACCEL_TOP_NAME, write_accel_rtl
from tilewright.rtl.axi_accel_top import AXI_ACCEL_TOP_NAME, write_axi_accel_top
from tilewright.rtl.axi_gemm_top import AXI_TOP_NAME, write_axi_top
from tilewright.rtl.emit import write_verilog
from tilewright.rtl.engine_top import ENGINE_TOP_NAME, write_engine_rtl
from tilewright.rtl.mesh import MESH_TOP_NAME, write_mesh_rtl
from tilewright.rtl.passthrough import (PASSTHROUGH_TOP_NAME, PassthroughParams,
                                        write_passthrough_rtl)
from tilewright.rtl.scan_unit import SCAN_TOP_NAME, write_scan_rtl
from tilewright.rtl.systolic_bf16 import BF16_TOP_NAME, Bf16GemmCore, generate_bf16_verilog
from tilewright.rtl.systolic_fp8 import FP8_TOP_NAME, Fp8GemmCore, generate_fp8_verilog
from tilewright.rtl.mx_core import MX_TOP_NAME, MxGemmCore, generate_mx_verilog
from tilewright.rtl.uart_bridge_top import (UART_BRIDGE_TOP_NAME, as_link,
                                            write_uart_bridge_top)
from tilewright.rtl.vector_unit import VECTOR_TOP_NAME, vector_lanes, write_vector_rtl
from tilewright.rtl.verilog import TOP_NAME, write_rtl

__all__ = ["Top", "TOPS", "get_top", "DRIVERS", "PROGRAM_TOPS"]

#: every driver a top may have: the cocotb bench (Python every cycle) and the C++ fast driver
DRIVERS = ("cocotb", "fast")


@dataclass(frozen=True)
class Top:
    """A generated design the co-simulation layer builds and runs."""

    name: str                                 #: registry key ("core", "accel", ...)
    module: str                               #: the Verilog top-module name
    generator: str                            #: module whose source closure keys the build
    write: Callable[[Any, Path], object]      #: ``write(params, rtl_dir)``: ``<module>.v`` there
    params_key: Callable[[Any], str]          #: the build-key part of the params
    describe: Callable[[Any], str]            #: names the design in messages
    prepare: Callable[..., PreparedJob]       #: ``prepare(job, params, **options)``
    bench: str                                #: the cocotb bench module
    results: tuple[str, ...]                  #: the ``<name>.json`` files the bench writes
    opt: str | None = "-O0"                   #: g++ optimisation of the cocotb model (None:
    #:                                           Verilator's default; -O0 where cocotb dominates)
    verilator_args: tuple[str, ...] = ("-Wno-fatal", "-O1")   #: of the cocotb build
    fast: FastDriver | None = None            #: the C++ fast driver, if the top has one
    waves: bool = False                       #: a cocotb run can trace (``dump.vcd``)
    runs_programs: bool = False               #: ``prepare`` takes a Program (and ``inputs=``)
    compare: Callable | None = None           #: ``compare(run, arch)``: records vs the model

    @property
    def drivers(self) -> tuple[str, ...]:
        """The drivers this top supports."""
        return ("cocotb", "fast") if self.fast else ("cocotb",)


def _arch_key(arch: ArchSpec) -> str:
    return arch.content_hash()


def _shape(arch: ArchSpec) -> str:
    te = arch.tensor_engine
    return f"{arch.name} ({te.rows}x{te.cols} {te.dataflow})"


def _write_bf16(p: Bf16Params, rtl_dir: Path) -> None:
    a_depth, b_depth, acc_depth = p.buffer_depths
    core = Bf16GemmCore(rows=p.rows, cols=p.cols, a_depth=a_depth, b_depth=b_depth,
                        acc_depth=acc_depth)
    write_verilog(rtl_dir, BF16_TOP_NAME, generate_bf16_verilog(core))


def _write_fp8(p: Fp8Params, rtl_dir: Path) -> None:
    a_depth, b_depth, acc_depth = p.depths
    core = Fp8GemmCore(rows=p.rows, cols=p.cols, fmt=p.fmt, a_depth=a_depth, b_depth=b_depth,
                       acc_depth=acc_depth)
    write_verilog(rtl_dir, FP8_TOP_NAME, generate_fp8_verilog(core))


def _write_mx(p: MxParams, rtl_dir: Path) -> None:
    a_depth, b_depth, acc_depth = p.depths
    core = MxGemmCore(fmt=p.fmt, cols=p.cols, a_depth=a_depth, b_depth=b_depth,
                      acc_depth=acc_depth)
    write_verilog(rtl_dir, MX_TOP_NAME, generate_mx_verilog(core))


def _core_cflags(arch: ArchSpec) -> str:
    te = arch.tensor_engine
    return (f"-O2 -DTW_ROWS={te.rows} -DTW_COLS={te.cols}"
            + (f" -DTW_ACC_READ_LATENCY={te.pipeline.host_read_latency}"
               if te.pipeline.host_read else ""))


def _accel_cflags(arch: ArchSpec) -> str:
    return f"-O2 -DTW_BEAT_BYTES={beat_bytes(arch)}"


_TOPS = (
    Top("core", TOP_NAME, "tilewright.rtl.verilog", write_rtl, _arch_key, _shape,
        pj.prepare_core, "tilewright.cocotb_tests.gemm_core_bench", ("cycles",), opt=None,
        verilator_args=("-Wno-fatal", "-O2"),
        fast=FastDriver("main.cpp", "tw_gemm_fast", _core_cflags), waves=True,
        runs_programs=True),
    Top("accel", ACCEL_TOP_NAME, "tilewright.rtl.accel_top", write_accel_rtl, _arch_key,
        lambda a: f"the accelerator for {a.name}", pj.prepare_accel,
        "tilewright.cocotb_tests.accel_bench", ("cycles",),
        fast=FastDriver("accel_main.cpp", "tw_accel_fast", _accel_cflags, prefix="Vtw_accel"),
        waves=True, runs_programs=True, compare=pj.accel_comparison),
    Top("axi-core", AXI_TOP_NAME, "tilewright.rtl.axi_gemm_top", write_axi_top, _arch_key,
        lambda a: f"the AXI top for {a.name}", pj.prepare_axi_core,
        "tilewright.cocotb_tests.axi_bench", ("cycles", "probes"), waves=True,
        runs_programs=True),
    Top("axi-accel", AXI_ACCEL_TOP_NAME, "tilewright.rtl.axi_accel_top", write_axi_accel_top,
        _arch_key, lambda a: f"the AXI accelerator top for {a.name}", pj.prepare_axi_accel,
        "tilewright.cocotb_tests.axi_accel_bench", ("cycles", "raw_runs", "probes"),
        waves=True, runs_programs=True, compare=pj.axi_accel_comparison),
    # params: a UartLink (ArchSpec, baud, memory depth) or an ArchSpec (the simulation link);
    # the bench drives the rx/tx line
    Top("uart-accel", UART_BRIDGE_TOP_NAME, "tilewright.rtl.uart_bridge_top",
        write_uart_bridge_top, lambda p: as_link(p).key(), lambda p: as_link(p).describe(),
        prepare_uart,
        "tilewright.cocotb_tests.uart_bench", ("cycles", "probes"), opt=None, runs_programs=True,
        compare=uart_comparison),
    Top("bf16-core", BF16_TOP_NAME, "tilewright.rtl.systolic_bf16", _write_bf16,
        Bf16Params.key, lambda p: f"the bf16 core ({p.rows}x{p.cols}, depths {p.buffer_depths})",
        prepare_bf16, "tilewright.cocotb_tests.float_core_bench", ("results",)),
    Top("fp8-core", FP8_TOP_NAME, "tilewright.rtl.systolic_fp8", _write_fp8, Fp8Params.key,
        lambda p: f"the {p.fmt} core ({p.rows}x{p.cols}, depths {p.depths})", prepare_fp8,
        "tilewright.cocotb_tests.float_core_bench", ("results",)),
    Top("mx-core", MX_TOP_NAME, "tilewright.rtl.mx_core", _write_mx, MxParams.key,
        lambda p: f"the {p.fmt} core (32x{p.cols}, depths {p.depths})", prepare_mx,
        "tilewright.cocotb_tests.float_core_bench", ("results",)),
    Top("engine", ENGINE_TOP_NAME, "tilewright.rtl.engine_top",
        lambda p, d: write_engine_rtl(p.kind, dict(p.params), d), EngineParams.key,
        lambda p: f"the {p.kind} engine ({p.key()})", prepare_engine,
        "tilewright.cocotb_tests.engine_bench", ("results",)),
    Top("scan", SCAN_TOP_NAME, "tilewright.rtl.scan_unit",
        lambda p, d: write_scan_rtl(d, **asdict(p)), ScanParams.key,
        lambda p: f"the scan unit ({p.key()})", prepare_scan,
        "tilewright.cocotb_tests.scan_bench", ("results",), opt=None),
    Top("vector", VECTOR_TOP_NAME, "tilewright.rtl.vector_unit", write_vector_rtl,
        lambda a: f"l{vector_lanes(a)}", lambda a: f"the {vector_lanes(a)}-lane vector unit",
        prepare_vector, "tilewright.cocotb_tests.vector_bench", ("results",)),
    Top("mesh", MESH_TOP_NAME, "tilewright.rtl.mesh",
        lambda a, d: write_mesh_rtl(a, d, imem_depth=IMEM_DEPTH), _arch_key,
        lambda a: f"the {a.name} mesh", prepare_mesh, "tilewright.cocotb_tests.mesh_bench",
        ("results",)),
    # the worked example of docs/design.md, "Add a top": one rtl module, one bench, this entry
    Top("passthrough", PASSTHROUGH_TOP_NAME, "tilewright.rtl.passthrough", write_passthrough_rtl,
        PassthroughParams.key, lambda p: f"the passthrough ({p.key()})", prepare_words,
        "tilewright.cocotb_tests.passthrough_bench", ("results",), opt=None),
)

#: every generated design, by registry key
TOPS: dict[str, Top] = {t.name: t for t in _TOPS}
#: the tops that run a compiled Program
PROGRAM_TOPS = tuple(t.name for t in _TOPS if t.runs_programs)


def get_top(top: str | Top) -> Top:
    """The :class:`Top` named ``top`` (a Top is returned as is); ValueError naming the
    accepted keys otherwise."""
    if isinstance(top, Top):
        return top
    if top not in TOPS:
        raise ValueError(f"top {top!r}: accepted: {', '.join(TOPS)}")
    return TOPS[top]
