"""A C driver on the Verilated AXI accelerator top: build it and run it.

:func:`build_c_driver` compiles a C driver (written against the register map's generated C header
and ``examples/c/tw_bus.h``) with gcc, and links it with ``c_host/axil_verilated.cpp`` — the bus
on the Verilated ``tw_axi_accel_top`` — by ``verilator --cc --exe --build``. :func:`run_c_driver`
runs the executable with the Program's instruction words on stdin, then directives: memory images
in (:func:`image_directives`, ``MEM``), runs (``RUN <entry>``) and memory reads
(:func:`read_directives`, ``READ``) whose answers :func:`parse_memory` reads back. The shim
serves the top's AXI4 memory port from a memory of its own (the C driver's ``tw_mem_write`` /
``tw_mem_read``). Nothing here is cached: a build takes one Verilator run of the top.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tilewright.cosim.verilator import verilator_env
from tilewright.progress import progress

__all__ = ["HOST_SHIM", "build_c_driver", "run_c_driver", "image_directives", "read_directives",
           "parse_memory", "MAX_DIRECTIVE_BYTES"]

#: bytes one MEM or READ directive carries (``MAX_BYTES`` of examples/c/axi_accel_selftest.c)
MAX_DIRECTIVE_BYTES = 256

#: the C++ bus of ``tw_bus.h`` on the Verilated AXI accelerator top
HOST_SHIM = Path(__file__).parent / "c_host" / "axil_verilated.cpp"


def build_c_driver(rtl_dir: str | Path, driver_c: str | Path, work: str | Path, *,
                   top: str = "tw_axi_accel_top", bus_header_dir: str | Path) -> Path:
    """Compile ``driver_c`` (C11, ``-Wall -Werror``) with the header folder ``rtl_dir`` (where
    ``tilewright rtl`` wrote ``<top>.v`` and ``<top>.h``) and ``bus_header_dir`` (``tw_bus.h``),
    and link it with :data:`HOST_SHIM` and the Verilated ``<top>.v`` into ``work/obj/driver``.
    Raises RuntimeError with the compiler's output when a step fails."""
    rtl, work = Path(rtl_dir).resolve(), Path(work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    inc = [f"-I{rtl}", f"-I{Path(bus_header_dir).resolve()}"]
    obj = work / "driver.o"
    cc = subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", *inc, "-c",
                         str(driver_c), "-o", str(obj)], capture_output=True, text=True)
    if cc.returncode != 0:
        raise RuntimeError(f"gcc {driver_c} failed:\n{cc.stderr[-3000:]}")
    cmd = ["verilator", "--cc", "--exe", "--build", "-Wno-fatal", "-O3", "--x-assign", "fast",
           "--x-initial", "fast", "--top-module", top, "--Mdir", str(work / "obj"),
           "-o", "driver", "-j", "2", "-CFLAGS", " ".join(inc),
           str(rtl / f"{top}.v"), str(HOST_SHIM), str(obj)]
    with verilator_env(), progress(f"building the C driver on {top} with Verilator + g++"):
        proc = subprocess.run(cmd, capture_output=True, text=True)
    exe = work / "obj" / "driver"
    if proc.returncode != 0 or not exe.exists():
        raise RuntimeError(f"Verilator build of the C driver failed (exit {proc.returncode}):\n"
                           f"{(proc.stdout + proc.stderr)[-3000:]}")
    return exe


def run_c_driver(exe: str | Path, words: list[int], directives: list[str] = (),
                 timeout: float = 600) -> subprocess.CompletedProcess:
    """Run the built driver with ``words`` (64-bit instruction words) on stdin as hex lines,
    then ``directives`` (``MEM``/``RUN``/``READ`` lines; none: one run at ENTRY 0)."""
    text = "".join(f"{w:016x}\n" for w in words) + "".join(f"{d}\n" for d in directives)
    return subprocess.run([str(exe)], input=text, capture_output=True, text=True,
                          timeout=timeout)


def image_directives(image: dict[int, int], beat_bytes: int) -> list[str]:
    """``MEM`` lines writing external words (word address -> value, ``beat_bytes`` bytes each,
    as :meth:`~tilewright.compiler.codegen.IsaProgram.image` gives them) at byte addresses."""
    return [f"MEM {addr * beat_bytes:x} {int(v).to_bytes(beat_bytes, 'little').hex()}"
            for addr, v in sorted(image.items())]


def read_directives(addr: int, count: int, beat_bytes: int) -> list[str]:
    """``READ`` lines for ``count`` external words from word address ``addr``."""
    per = max(1, MAX_DIRECTIVE_BYTES // beat_bytes)
    return [f"READ {(addr + s) * beat_bytes:x} {min(per, count - s) * beat_bytes}"
            for s in range(0, count, per)]


def parse_memory(stdout: str, beat_bytes: int) -> dict[int, int]:
    """The driver's ``MEM <byte address> <bytes>`` answers as external words (word address ->
    value)."""
    out: dict[int, int] = {}
    for line in stdout.splitlines():
        if line.startswith("MEM "):
            _, addr, data = line.split()
            raw = bytes.fromhex(data)
            base = int(addr, 16) // beat_bytes
            for i in range(len(raw) // beat_bytes):
                out[base + i] = int.from_bytes(raw[i * beat_bytes:(i + 1) * beat_bytes],
                                               "little")
    return out
