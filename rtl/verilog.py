"""Verilog emission for generated components, with a JSON manifest of what was generated."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from amaranth.back import verilog

from tilewright.arch import ArchSpec, ArchSpecError
from tilewright.rtl.emit import write_atomic, write_verilog
from tilewright.rtl.gemm_core import GENERATOR_VERSION, GemmCore

__all__ = ["TOP_NAME", "generate_verilog", "update_manifest", "write_rtl"]

#: name of the generated top-level Verilog module
TOP_NAME = "tw_gemm_core"


def generate_verilog(arch: ArchSpec) -> tuple[str, GemmCore]:
    """Elaborate the GEMM core for ``arch`` and return (Verilog text, component).

    Raises :class:`~tilewright.arch.ArchSpecError` for what the core does not implement (SRAM
    banks other than 1)."""
    for field in ("scratchpad_banks", "accumulator_banks"):
        if getattr(arch.memory, field) != 1:
            raise ArchSpecError(f"{arch.name}: memory.{field}={getattr(arch.memory, field)}: the "
                                f"GEMM-core RTL implements 1 bank; accepted: 1")
    core = GemmCore(arch)
    text = verilog.convert(core, name=TOP_NAME, emit_src=False)
    return text, core


def _ports(core: GemmCore) -> list[dict[str, Any]]:
    ports = []
    for path, member, _ in core.signature.flatten(core):
        ports.append({"name": "__".join(str(p) for p in path),
                      "direction": "input" if member.flow.value == "In" else "output",
                      "width_bits": member.shape.width if hasattr(member.shape, "width")
                      else len(getattr(core, path[0]))})
    return ports


def write_rtl(arch: ArchSpec, out_dir: str | Path) -> dict[str, Any]:
    """Write ``<TOP_NAME>.v`` and ``manifest.json`` to ``out_dir``; return the manifest.

    Files are written to temporary names and renamed, so an interrupted run never leaves a
    half-written Verilog file or manifest behind.
    """
    t0 = time.perf_counter()
    text, core = generate_verilog(arch)
    gen_s = time.perf_counter() - t0
    return write_verilog(out_dir, TOP_NAME, text, {
        "top": TOP_NAME,
        "generator": "tilewright.rtl.gemm_core.GemmCore",
        "generator_version": GENERATOR_VERSION,
        "arch": arch.model_dump(mode="json"),
        "arch_hash": arch.content_hash(),
        "ports": _ports(core),
        "buffers_words": dict(zip(("a", "b", "acc"), core.depths)),
        "generation_seconds": round(gen_s, 3),
    })


def update_manifest(out_dir: str | Path, key: str, entries: dict[str, Any]) -> dict[str, Any]:
    """Merge ``entries`` into the ``key`` section of ``out_dir/manifest.json`` (written by
    :func:`write_rtl`; e.g. ``key="synthesis"``, ``entries={"ice40": {...}}``); return the
    manifest. The file is replaced atomically."""
    path = Path(out_dir) / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest[key] = {**manifest.get(key, {}), **entries}
    write_atomic(path, json.dumps(manifest, indent=1))
    return manifest
