"""Writing generated Verilog and its manifest: one place for the file entry (sha256, bytes) and the
write-to-temporary-then-rename that keeps an interrupted run from leaving half-written files."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

__all__ = ["write_atomic", "write_verilog", "file_entry", "write_float_core_rtl"]


def write_atomic(path: Path, content: str) -> None:
    """Write ``content`` to ``path`` via ``<path>.tmp`` and a rename."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(content)
    tmp.replace(path)


def file_entry(path: Path, text: str) -> dict[str, Any]:
    """The manifest's record of a written file: name, sha256 and size in bytes."""
    data = text.encode()
    return {"path": path.name, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


def write_verilog(out_dir: str | Path, top: str, text: str,
                  manifest: dict[str, Any] | None = None) -> dict[str, Any] | Path:
    """Write ``<top>.v`` (and, given ``manifest``, ``manifest.json`` with the file's entry added
    under ``files``) to ``out_dir``. Returns the completed manifest, or the Verilog path when no
    manifest is given."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    vfile = out / f"{top}.v"
    write_atomic(vfile, text)
    if manifest is None:
        return vfile
    manifest = {**manifest, "files": [file_entry(vfile, text)]}
    write_atomic(out / "manifest.json", json.dumps(manifest, indent=1))
    return manifest


def write_float_core_rtl(out_dir: str | Path, core: Any, *, top: str, text: str, arch: Any,
                         generator: str, version: str, seconds: float) -> dict[str, Any]:
    """``tilewright rtl`` for a float-accumulating systolic core (bf16, fp8, MX): write
    ``<top>.v`` and ``manifest.json`` (the core's element format, fp32 accumulator, its ports and
    buffer depths in words, the ArchSpec and its hash, ``seconds`` of generation); return the
    manifest."""
    ports = [{"name": "__".join(str(p) for p in path),
              "direction": "input" if member.flow.value == "In" else "output",
              "width_bits": len(getattr(core, path[0]))}
             for path, member, _ in core.signature.flatten(core)]
    return write_verilog(out_dir, top, text, {
        "top": top,
        "kind": "systolic",
        "element_format": core.fmt,
        "accumulator_format": "fp32",
        "generator": generator,
        "generator_version": version,
        "arch": arch.model_dump(mode="json"),
        "arch_hash": arch.content_hash(),
        "ports": ports,
        "buffers_words": dict(zip(("a", "b", "acc"), core.depths)),
        "generation_seconds": round(seconds, 3),
    })
