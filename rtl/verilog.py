"""Verilog emission for generated components, with a JSON manifest of what was generated.

:func:`write_arch_rtl` is what ``tilewright rtl`` runs: by ``tensor_engine.kind`` it writes the
systolic GEMM core (:func:`write_rtl`, top ``tw_gemm_core``: array, SRAMs, fold sequencer) or, for
the tile-MAC kinds ``adder_tree`` / ``outer_product`` / ``cube``, the engine datapath of
:mod:`tilewright.rtl.engine_top` (top ``tw_mac_engine``, stream ports, no SRAMs or sequencer yet;
int8 x int8 -> int32 only). The manifest's ``kind`` and ``top`` say which.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from amaranth.back import verilog
from amaranth.hdl import Shape

from tilewright.arch import ArchSpec, ArchSpecError
from tilewright.rtl.emit import write_atomic, write_verilog
from tilewright.rtl.engine_top import ENGINE_GENERATOR_VERSION, ENGINE_TOP_NAME, make_engine
from tilewright.rtl.gemm_core import GENERATOR_VERSION, GemmCore
from tilewright.rtl.mx_core import MX_FORMATS, MX_TOP_NAME, write_mx_rtl
from tilewright.rtl.systolic_bf16 import write_bf16_rtl
from tilewright.rtl.systolic_fp8 import FP8_FORMATS, FP8_TOP_NAME, write_fp8_rtl

__all__ = ["TOP_NAME", "generate_verilog", "update_manifest", "write_rtl", "write_engine_top",
           "write_arch_rtl", "top_name"]

#: name of the generated top-level Verilog module
TOP_NAME = "tw_gemm_core"


def generate_verilog(arch: ArchSpec, platform=None) -> tuple[str, GemmCore]:
    """Elaborate the GEMM core for ``arch`` and return (Verilog text, component).

    Raises :class:`~tilewright.arch.ArchSpecError` for what the core does not implement (a
    tensor_engine.kind other than systolic). SRAM banks (``memory.*_banks``) are real banks
    (:func:`tilewright.rtl.gemm_core.banked_memory`). ``platform``: Amaranth's platform — the FPGA
    flow's :class:`~tilewright.rtl.fpga_primitives.FpgaFamily` builds that family's primitives
    (the same cycles); None (simulation) builds portable RTL."""
    if arch.tensor_engine.kind != "systolic":
        raise ArchSpecError(f"{arch.name}: tensor_engine.kind = {arch.tensor_engine.kind!r}: the "
                            f"GEMM-core RTL is a systolic array; accepted: 'systolic' (the "
                            f"tile-MAC kinds generate their engine: `tilewright rtl`)")
    core = GemmCore(arch)
    text = verilog.convert(core, name=TOP_NAME, emit_src=False, platform=platform)
    return text, core


def _ports(core: GemmCore) -> list[dict[str, Any]]:
    ports = []
    for path, member, _ in core.signature.flatten(core):
        ports.append({"name": "__".join(str(p) for p in path),
                      "direction": "input" if member.flow.value == "In" else "output",
                      "width_bits": member.shape.width if hasattr(member.shape, "width")
                      else len(getattr(core, path[0]))})
    return ports


def write_rtl(arch: ArchSpec, out_dir: str | Path, platform=None) -> dict[str, Any]:
    """Write ``<TOP_NAME>.v`` and ``manifest.json`` to ``out_dir``; return the manifest.

    Files are written to temporary names and renamed, so an interrupted run never leaves a
    half-written Verilog file or manifest behind.
    """
    t0 = time.perf_counter()
    text, core = generate_verilog(arch, platform)
    gen_s = time.perf_counter() - t0
    return write_verilog(out_dir, TOP_NAME, text, {
        "top": TOP_NAME,
        "kind": "systolic",
        "generator": "tilewright.rtl.gemm_core.GemmCore",
        "generator_version": GENERATOR_VERSION,
        "arch": arch.model_dump(mode="json"),
        "arch_hash": arch.content_hash(),
        "ports": _ports(core),
        "buffers_words": dict(zip(("a", "b", "acc"), core.depths)),
        "generation_seconds": round(gen_s, 3),
    })


def top_name(arch: ArchSpec) -> str:
    """Name of the top module :func:`write_arch_rtl` writes for ``arch``."""
    te = arch.tensor_engine
    if te.kind != "systolic":
        return ENGINE_TOP_NAME
    if te.input_format in MX_FORMATS:
        return MX_TOP_NAME
    return FP8_TOP_NAME if te.input_format in FP8_FORMATS else TOP_NAME


def write_engine_top(arch: ArchSpec, out_dir: str | Path) -> dict[str, Any]:
    """Write the tile-MAC engine of ``arch`` (``tensor_engine.kind`` adder_tree, outer_product or
    cube; (Tm, Tk, Tn) = (rows, depth, cols)) as ``tw_mac_engine.v`` plus ``manifest.json``;
    return the manifest. Raises ArchSpecError for a systolic kind or operands other than int8
    (the engines' RTL is int8 x int8 -> int32)."""
    te = arch.tensor_engine
    if te.kind == "systolic":
        raise ArchSpecError(f"{arch.name}: tensor_engine.kind = 'systolic': the engine top is for "
                            f"the tile-MAC kinds; accepted: 'adder_tree', 'outer_product', 'cube'")
    if te.input_format != "int8":
        raise ArchSpecError(f"{arch.name}: tensor_engine.input_format = {te.input_format!r}: the "
                            f"{te.kind} RTL is int8 x int8 -> int32; accepted: 'int8'")
    t0 = time.perf_counter()
    engine = make_engine(te.kind, te.engine_params)
    text = verilog.convert(engine, name=ENGINE_TOP_NAME, emit_src=False)
    gen_s = time.perf_counter() - t0
    tm, tk, tn = te.tile_shape
    return write_verilog(out_dir, ENGINE_TOP_NAME, text, {
        "top": ENGINE_TOP_NAME,
        "kind": te.kind,
        "generator": f"tilewright.rtl.engine_top ({type(engine).__name__})",
        "generator_version": ENGINE_GENERATOR_VERSION,
        "engine_params": te.engine_params,
        "tile_mkn": [tm, tk, tn],
        "macs_per_cycle": te.macs_per_cycle,
        "arch": arch.model_dump(mode="json"),
        "arch_hash": arch.content_hash(),
        "ports": [{"name": "__".join(str(q) for q in path),
                   "direction": "input" if member.flow.value == "In" else "output",
                   "width_bits": Shape.cast(member.shape).width}
                  for path, member, _ in engine.signature.flatten(engine)],
        "generation_seconds": round(gen_s, 3),
    })


def write_arch_rtl(arch: ArchSpec, out_dir: str | Path) -> dict[str, Any]:
    """``tilewright rtl``: the GEMM core (:func:`write_rtl`) for a systolic ``arch``, the tile-MAC
    engine (:func:`write_engine_top`) for the other kinds. The manifest's ``kind`` and ``top``
    name what was written."""
    if arch.tensor_engine.kind == "systolic":
        if arch.tensor_engine.input_format in FP8_FORMATS:   # the fp8 core (systolic_fp8)
            return write_fp8_rtl(arch, out_dir)
        if arch.tensor_engine.input_format in MX_FORMATS:    # the MX core (mx_core)
            return write_mx_rtl(arch, out_dir)
        if arch.tensor_engine.input_format == "bf16":        # the bf16 core (systolic_bf16)
            return write_bf16_rtl(arch, out_dir)
        return write_rtl(arch, out_dir)
    return write_engine_top(arch, out_dir)


def update_manifest(out_dir: str | Path, key: str, entries: dict[str, Any]) -> dict[str, Any]:
    """Merge ``entries`` into the ``key`` section of ``out_dir/manifest.json`` (written by
    :func:`write_rtl`; e.g. ``key="synthesis"``, ``entries={"ice40": {...}}``); return the
    manifest. The file is replaced atomically."""
    path = Path(out_dir) / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest[key] = {**manifest.get(key, {}), **entries}
    write_atomic(path, json.dumps(manifest, indent=1))
    return manifest
