"""What the Verilator build cache saves: one cocotb build of a GEMM core, four ways.

Usage:  python benchmarks/build_cache.py [--size 3x5] [--dataflow ws]

Each row is one ``tilewright.cosim.build.build("core", arch)`` in its own Python process (so
its CPU seconds, the process's and its children's — Verilator, make, g++ — are its own):

1. the anchor: a fresh cache, ccache off (``CCACHE_DISABLE=1``): every file compiled;
2. a fresh build cache with a ccache warmed by a *different* design (the 4x4 WS core): the
   Verilator/cocotb run-time files (``verilated*.cpp``) come from ccache, the model's own
   files are compiled (needs the Debian ``ccache`` package; the row says so without it);
3. the same cache again with an ArchSpec that differs only in fields the core does not read
   (name, clock, off-chip port): the Verilog is generated and hashed, found identical, and no
   Verilator runs;
4. the same request again: answered from the recorded request, nothing generated.

Prints one table: wall and CPU seconds and their ratio to the anchor. Absolute seconds depend on
machine load; CPU seconds are steadier than wall seconds on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

#: one build in a child process; prints the Build's fields and the CPU seconds it used
CHILD = """
import json, resource, sys, time
from tilewright.arch import ArchSpec, default_arch
from tilewright.cosim.build import build
rows, cols, dataflow, renamed = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
base = default_arch().model_dump(mode="json")
base["tensor_engine"].update(rows=rows, cols=cols, dataflow=dataflow)
base.update(name=f"bench-{dataflow}{rows}x{cols}",
            memory={"scratchpad_kib": 32, "accumulator_kib": 16})
if renamed:
    base.update(name="bench-renamed", clock_mhz=250.0,
                offchip={"bandwidth_gbps": 1.0, "latency_ns": 20.0})
t0 = time.perf_counter()
b = build("core", ArchSpec.from_dict(base))
wall = time.perf_counter() - t0
cpu = sum(getattr(resource.getrusage(w), f)
          for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN) for f in ("ru_utime", "ru_stime"))
print(json.dumps({"dir": b.build_dir.name, "cached": b.cached, "wall": wall, "cpu": cpu}))
"""


def one_build(cache: Path, size: tuple[int, int], dataflow: str, *, renamed: bool = False,
              ccache: Path | None = None) -> dict:
    """Run one build in a child process with ``cache`` as TILEWRIGHT_CACHE."""
    env = {**os.environ, "TILEWRIGHT_CACHE": str(cache)}
    env.pop("CCACHE_DIR", None)
    if ccache is None:
        env["CCACHE_DISABLE"] = "1"
    else:
        env["CCACHE_DIR"] = str(ccache)
    out = subprocess.run([sys.executable, "-c", CHILD, str(size[0]), str(size[1]), dataflow,
                          "1" if renamed else "0"], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"build failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="3x5", help="rows x cols of the core")
    ap.add_argument("--dataflow", default="ws", choices=["ws", "os"])
    args = ap.parse_args()
    size = tuple(int(v) for v in args.size.split("x"))
    work = Path(tempfile.mkdtemp(prefix="tw-bench-build-cache-"))
    try:
        have_ccache = shutil.which("ccache") is not None
        rows = [("fresh cache, no ccache (anchor)", one_build(work / "a", size, args.dataflow))]
        if have_ccache:
            one_build(work / "warm", (4, 4), "ws", ccache=work / "ccache")     # warms ccache
            rows.append(("fresh cache, ccache warmed by another design",
                         one_build(work / "b", size, args.dataflow, ccache=work / "ccache")))
        else:
            rows.append(("fresh cache, ccache (not installed: apt-get install ccache)",
                         one_build(work / "b", size, args.dataflow)))
        rows.append(("other ArchSpec, same Verilog",
                     one_build(work / "b", size, args.dataflow, renamed=True)))
        rows.append(("the same request again",
                     one_build(work / "b", size, args.dataflow, renamed=True)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    anchor = rows[0][1]
    table = Table(title=f"cocotb build of the {args.size} {args.dataflow.upper()} GEMM core")
    for col in ("case", "Verilator ran", "wall s", "CPU s", "CPU / anchor", "build folder"):
        table.add_column(col)
    for name, r in rows:
        table.add_row(name, "no" if r["cached"] else "yes", f"{r['wall']:.1f}",
                      f"{r['cpu']:.1f}", f"{r['cpu'] / anchor['cpu']:.2f}", r["dir"])
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
