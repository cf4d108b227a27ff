"""What the C++ fast drivers share on the Python side: their build and the driver process.

* :class:`FastDriver` — a top's driver declaration (C++ source, executable, flags).
* :func:`build_driver_exe` — ``verilator --cc --exe --build`` of a generated top with one C++
  driver source (``fast_driver/*.cpp``, which include ``fast_driver/driver_util.h``) into
  ``tmp/obj/<executable>``; the build step :func:`tilewright.cosim.verilator.cached_build` runs.
* :func:`run_driver` — one driver process fed through pipes (``<exe> - -``): the caller's ``body``
  sends commands and reads results (both streams recorded, saved to ``keep_dir`` as
  ``commands.bin`` / ``results.bin`` so ``<exe> commands.bin results.bin`` replays the run); a
  driver that dies or fails a check becomes a RuntimeError carrying its stderr.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from tilewright.errors import UserError

__all__ = ["DRIVER_DIR", "SHARED_HEADER", "FastDriver", "FastRecipe", "FAST_RECIPES",
           "RECIPE_ENV", "UnknownRecipe", "fast_recipe", "build_driver_exe", "DriverPipe", "run_driver"]

#: folder of the C++ drivers
DRIVER_DIR = Path(__file__).parent / "fast_driver"
#: header every driver includes
SHARED_HEADER = DRIVER_DIR / "driver_util.h"


@dataclass(frozen=True)
class FastDriver:
    """A top's C++ fast driver: what to compile with the Verilated top."""

    source: str                  #: the driver's C++ file in :data:`DRIVER_DIR`
    executable: str              #: the built executable's file name
    cflags: Callable[[Any], str]   #: g++ flags for the top's params (e.g. the array shape)
    prefix: str | None = None    #: Verilated model class name (``--prefix``), None: Verilator's

    @property
    def sources(self) -> tuple[Path, Path]:
        """The C++ files a build depends on (the driver and :data:`SHARED_HEADER`)."""
        return DRIVER_DIR / self.source, SHARED_HEADER


@dataclass(frozen=True)
class FastRecipe:
    """How a fast driver is built besides its top and source: Verilator options and g++ flags
    appended to the top's own (a later ``-O`` wins). Compared by
    ``benchmarks/fast_driver_speed.py`` (build seconds, simulated cycles per second)."""

    verilator: tuple[str, ...] = ("-O3", "--x-assign", "fast", "--x-initial", "fast")
    cflags: str = ""    #: g++ flags after the top's ``cflags(params)``
    ldflags: str = ""   #: linker flags

    def command(self, *, top: str, source: Path, executable: str, cflags: str, mdir: Path,
                verilog: Path, prefix: str | None = None) -> list[str]:
        """The ``verilator --cc --exe --build`` command line of this recipe."""
        return ["verilator", "--cc", "--exe", "--build", "-Wno-fatal", *self.verilator,
                "--top-module", top, *(["--prefix", prefix] if prefix else []),
                "--Mdir", str(mdir), "-o", executable, "-j", "2",
                "-CFLAGS", " ".join(f for f in (cflags, self.cflags) if f),
                *(["-LDFLAGS", self.ldflags] if self.ldflags else []), str(verilog), str(source)]


_BASE = FastRecipe().verilator
#: the recipes the benchmark compares, by name; "default" is what builds use unless
#: :data:`RECIPE_ENV` names another
FAST_RECIPES: dict[str, FastRecipe] = {
    "default": FastRecipe(),
    "gcc-Os": FastRecipe(cflags="-Os"),
    "gcc-O3": FastRecipe(cflags="-O3"),
    "native": FastRecipe(cflags="-march=native"),
    "lto": FastRecipe(cflags="-flto=auto", ldflags="-O2 -flto=auto"),
    "threads2": FastRecipe((*_BASE, "--threads", "2")),
    # the accelerator driver's earlier clocking: an eval at the falling edge too (accel_main.cpp)
    "eval-falling-edge": FastRecipe(cflags="-DTW_EVAL_FALLING_EDGE=1"),
}
#: environment variable naming the fast-driver recipe of every build (a key of FAST_RECIPES)
RECIPE_ENV = "TILEWRIGHT_FAST_RECIPE"


class UnknownRecipe(UserError, ValueError):
    """``$TILEWRIGHT_FAST_RECIPE`` names no recipe of :data:`FAST_RECIPES`."""


def fast_recipe(name: str | None = None) -> tuple[str, FastRecipe]:
    """The recipe called ``name`` (default: ``$TILEWRIGHT_FAST_RECIPE``, else "default") with
    its name. Raises :class:`UnknownRecipe` naming the accepted recipes for an unknown one."""
    name = name or os.environ.get(RECIPE_ENV) or "default"
    if name not in FAST_RECIPES:
        raise UnknownRecipe(f"{RECIPE_ENV}={name!r}: unknown fast-driver recipe; accepted: "
                         f"{', '.join(FAST_RECIPES)}")
    return name, FAST_RECIPES[name]


def build_driver_exe(tmp: Path, *, top: str, source: Path, executable: str, cflags: str,
                     what: str, prefix: str | None = None,
                     recipe: FastRecipe = FAST_RECIPES["default"]) -> None:
    """Build ``tmp/rtl/<top>.v`` with the C++ driver ``source`` into ``tmp/obj/<executable>``
    (the ``recipe``'s Verilator options, g++ ``cflags`` then the recipe's); the log goes to
    ``tmp/build.log``. Raises RuntimeError with the log's tail if the build fails. Object files
    and precompiled headers (~130 MB) are deleted: only the executable runs."""
    cmd = recipe.command(top=top, source=source, executable=executable, cflags=cflags,
                         mdir=tmp / "obj", verilog=tmp / "rtl" / f"{top}.v", prefix=prefix)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    (tmp / "build.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0 or not (tmp / "obj" / executable).exists():
        raise RuntimeError(f"{what} build failed (exit {proc.returncode}); log tail:\n"
                           f"{(proc.stdout + proc.stderr)[-3000:]}")
    for junk in (*(tmp / "obj").glob("*.gch"), *(tmp / "obj").glob("*.o")):
        junk.unlink()


class DriverPipe:
    """The running driver: :meth:`send` bytes to its stdin, :meth:`read` bytes from its stdout
    (both recorded in :attr:`sent` / :attr:`received`)."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.sent, self.received = bytearray(), bytearray()

    def send(self, data: bytes) -> None:
        self.sent += data
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def read(self, n: int) -> bytes:
        data = self.proc.stdout.read(n)
        self.received += data
        return data


def run_driver(executable: Path, what: str, run_name: str, body: Callable[[DriverPipe], None],
               keep_dir: Path | None = None) -> None:
    """Start ``executable - -``, call ``body(pipe)`` (which sends every command, the end marker
    included, and reads every result), close its stdin and wait for exit status 0. A broken pipe,
    a RuntimeError from ``body`` or a nonzero exit raises RuntimeError naming ``what`` and
    ``run_name`` with the driver's stderr. With ``keep_dir`` the two streams are saved there."""
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([str(executable), "-", "-"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err)
        pipe = DriverPipe(proc)

        def died(when: str) -> RuntimeError:
            proc.kill()
            proc.wait()
            err.seek(0)
            msg = err.read().decode(errors="replace").strip()
            return RuntimeError(f"{what} {executable} failed {when} (exit {proc.returncode}): "
                                f"{msg or 'no message'}")

        try:
            body(pipe)
            proc.stdin.close()
            rc = proc.wait(timeout=60)
        except (BrokenPipeError, RuntimeError) as exc:
            raise died(f"while running {run_name}: {exc}") from None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if rc != 0:
            raise died(f"at the end of {run_name}")
    if keep_dir is not None:
        (keep_dir / "commands.bin").write_bytes(bytes(pipe.sent))
        (keep_dir / "results.bin").write_bytes(bytes(pipe.received))
