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

import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

__all__ = ["DRIVER_DIR", "SHARED_HEADER", "FastDriver", "build_driver_exe", "DriverPipe",
           "run_driver"]

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


def build_driver_exe(tmp: Path, *, top: str, source: Path, executable: str, cflags: str,
                     what: str, prefix: str | None = None) -> None:
    """Build ``tmp/rtl/<top>.v`` with the C++ driver ``source`` into ``tmp/obj/<executable>``
    (Verilator ``-O3``, X values fast, g++ ``cflags``); the log goes to ``tmp/build.log``.
    Raises RuntimeError with the log's tail if the build fails. Object files and precompiled
    headers (~130 MB) are deleted: only the executable runs."""
    cmd = ["verilator", "--cc", "--exe", "--build", "-Wno-fatal", "-O3",
           "--x-assign", "fast", "--x-initial", "fast", "--top-module", top,
           *(["--prefix", prefix] if prefix else []),
           "--Mdir", str(tmp / "obj"), "-o", executable, "-j", "2", "-CFLAGS", cflags,
           str(tmp / "rtl" / f"{top}.v"), str(source)]
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
