"""One entry point for the tile-MAC tensor-engine families: construction by kind, Verilog emission.

Families (all signed int8 x int8 -> int32, one shared stream interface and timing contract, see
:mod:`tilewright.rtl.cube`):

=================  =======================  ==================  ==============
kind               parameters               (Tm, Tk, Tn)        peak MAC/cycle
=================  =======================  ==================  ==============
``adder_tree``     ``n``                    (1, n, 1)           n
``outer_product``  ``rows``, ``cols``       (rows, 1, cols)     rows·cols
``cube``           ``tm``, ``tk``, ``tn``   (tm, tk, tn)        tm·tk·tn
=================  =======================  ==================  ==============

The generated top module (:data:`ENGINE_TOP_NAME`) has ports ``clk``, ``rst``,
``ops_in__valid``, ``ops_in__payload`` (:func:`tilewright.rtl.cube.operand_layout`),
``c_out__valid`` and ``c_out__payload`` (:func:`tilewright.rtl.cube.result_layout`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from amaranth.back import verilog

from tilewright.rtl.adder_tree import AdderTreeEngine
from tilewright.rtl.cube import CubeEngine, TileMacEngine, check_dim
from tilewright.rtl.emit import write_verilog
from tilewright.rtl.outer_product import OuterProductEngine

__all__ = ["ENGINE_KINDS", "ENGINE_TOP_NAME", "ENGINE_GENERATOR_VERSION", "make_engine",
           "engine_shape", "generate_engine_verilog", "write_engine_rtl"]

#: name of the generated top-level Verilog module
ENGINE_TOP_NAME = "tw_mac_engine"
#: bump when the generated hardware changes in a way the source hash would not show
ENGINE_GENERATOR_VERSION = 1

#: kind -> (component class, its parameter names in order)
ENGINE_KINDS: dict[str, tuple[type[TileMacEngine], tuple[str, ...]]] = {
    "adder_tree": (AdderTreeEngine, ("n",)),
    "outer_product": (OuterProductEngine, ("rows", "cols")),
    "cube": (CubeEngine, ("tm", "tk", "tn")),
}


def _check_params(kind: str, params: Mapping[str, int]) -> None:
    if kind not in ENGINE_KINDS:
        raise ValueError(f"engine kind {kind!r}: accepted: {', '.join(ENGINE_KINDS)}")
    cls, names = ENGINE_KINDS[kind]
    if set(params) != set(names):
        raise ValueError(f"engine {kind}: parameters {sorted(params)}: accepted exactly "
                         f"{', '.join(names)}")
    for name in names:
        check_dim(name, params[name])


def make_engine(kind: str, params: Mapping[str, int]) -> TileMacEngine:
    """The engine component of family ``kind`` with ``params`` (e.g. ``{"n": 8}``)."""
    _check_params(kind, params)
    cls, names = ENGINE_KINDS[kind]
    return cls(**{n: params[n] for n in names})


def engine_shape(kind: str, params: Mapping[str, int]) -> tuple[int, int, int]:
    """(Tm, Tk, Tn) of the engine ``kind`` with ``params``, validated like :func:`make_engine`."""
    _check_params(kind, params)
    p = params
    return {"adder_tree": lambda: (1, p["n"], 1),
            "outer_product": lambda: (p["rows"], 1, p["cols"]),
            "cube": lambda: (p["tm"], p["tk"], p["tn"])}[kind]()


def generate_engine_verilog(kind: str, params: Mapping[str, int]) -> str:
    """Verilog text of the engine as module :data:`ENGINE_TOP_NAME`."""
    return verilog.convert(make_engine(kind, params), name=ENGINE_TOP_NAME, emit_src=False)


def write_engine_rtl(kind: str, params: Mapping[str, int], out_dir: str | Path) -> Path:
    """Write ``<ENGINE_TOP_NAME>.v`` to ``out_dir`` (via a temporary name); return its path."""
    return write_verilog(out_dir, ENGINE_TOP_NAME, generate_engine_verilog(kind, params))
