"""The source closure of a generator module: every project file its Verilog can depend on.

:func:`source_closure` starts from one module (e.g. ``tilewright.rtl.accel_top``) and follows its
``import`` statements (top-level and function-local, read with :mod:`ast`, never executed) to every
``tilewright.*`` module they reach, transitively, packages' ``__init__`` included.
:func:`source_closure_hash` hashes those files' bytes: a build keyed on it is rebuilt when any of
them changes (the controller's decoder built from the compiler's ISA table included) and reused
when an unrelated module changes. No hand-typed file lists.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
from functools import lru_cache
from pathlib import Path

__all__ = ["source_closure", "source_closure_hash", "PROJECT"]

#: the import-name prefix of project modules (every layer folder maps below it)
PROJECT = "tilewright"


def _origin(name: str) -> Path | None:
    """The source file of module ``name``, or None when it is not an importable module."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


def _imported_names(path: Path, module: str) -> set[str]:
    """Module names imported anywhere in ``path`` (module ``module``): ``import a.b`` gives
    ``a.b``; ``from a import b`` gives ``a`` and ``a.b`` (``b`` may be a submodule)."""
    is_pkg = path.name == "__init__.py"
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:                       # relative: resolve against this module
                parts = module.split(".")
                base_parts = parts if is_pkg else parts[:-1]
                base_parts = base_parts[:len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


@lru_cache(maxsize=None)
def source_closure(module: str) -> tuple[Path, ...]:
    """Every project source file ``module`` reaches through imports (itself, the packages that
    hold each module, and what they import), sorted."""
    seen: dict[str, Path] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen or not (name == PROJECT or name.startswith(PROJECT + ".")):
            continue
        path = _origin(name)
        if path is None:
            continue
        seen[name] = path
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]   # parent packages
        todo += sorted(_imported_names(path, name))
    if module not in seen:
        raise ValueError(f"source_closure: no project module {module!r}")
    return tuple(sorted(set(seen.values())))


def source_closure_hash(module: str, *extra: Path) -> str:
    """10 hex digits over the bytes of :func:`source_closure` of ``module`` and the ``extra``
    files (e.g. a C++ driver's sources), each tagged with its file name."""
    h = hashlib.sha256()
    for path in (*source_closure(module), *extra):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:10]
