"""Start-up cost of the light commands, and whole-process CPU against SCALE-Sim and ZigZag.

    python benchmarks/startup.py [--repeat 5] [--external-repeat 3] [--no-external]

CPU seconds are user + system time of the whole child process (``resource.getrusage`` of the
children, so imports, argument parsing and printing all count), the median of ``--repeat`` runs.
The first table holds the commands of issue 21 item 5 against its target (0.5 s of CPU each).

The second compares whole processes on a comparable GEMM, each tool started fresh as a user
would run it:

* SCALE-Sim 3.0.0 (its own venv, ``/tmp/scalesim_venv`` or ``$SCALESIM_PYTHON``; set up as in
  ``benchmarks/vs_scalesim.py``) running ``benchmarks/_scalesim_runner.py`` on 64 x 64 x 64, 8 x 8
  WS, against ``tilewright cycles --arch ws8x8 ... --convention scalesim`` (the same array and
  cycle convention: both print the compute cycles);
* ZigZag (``/tmp/zigzag_venv`` or ``$ZIGZAG_PYTHON``; ``benchmarks/vs_zigzag.py``) running
  ``benchmarks/_zigzag_runner.py`` on 128 x 256 x 256 with its bundled ``tpu_like`` 32 x 32 array
  (LOMA search), against a fresh python running tilewright's GEMM mapper
  (:func:`tilewright.compiler.gemm_mapper.map_gemm`) on ``vs_zigzag.tpu_like_arch()``.

A tool that is not installed is reported as such, never estimated. Benchmarks print; they never
assert.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: issue 21 item 5: the light commands start in at most this much CPU (user + system seconds)
TARGET_CPU_S = 0.5
COMMANDS = (["--help"], ["arch", "ws8x8"], ["cycles", "--arch", "ws8x8", "-m", "64", "-k", "64",
                                            "-n", "64"], ["models"])
SS_GEMM = (8, 8, "ws", 64, 64, 64)          # rows, cols, dataflow, M, K, N
ZZ_GEMM = (128, 256, 256)                   # M, K, N on the 32 x 32 tpu_like array


def _tilewright() -> list[str]:
    """The installed console script beside this python, else ``python -m`` of the CLI."""
    exe = Path(sys.executable).with_name("tilewright")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("tilewright")
    return [found] if found else [sys.executable, "-m", "tilewright.app.cli.main"]


def cpu_of(cmd: list[str], cwd: Path | None = None) -> tuple[float, str]:
    """(user + system CPU seconds of the whole child process, its stdout). Raises on failure."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=3600,
                       env={**os.environ, "COLUMNS": "200"})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()[-300:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), p.stdout


def median_cpu(cmd: list[str], repeat: int, cwd: Path | None = None) -> tuple[float, str]:
    """Median CPU seconds over ``repeat`` runs and the last run's stdout."""
    runs = [cpu_of(cmd, cwd) for _ in range(repeat)]
    return statistics.median(r[0] for r in runs), runs[-1][1]


def _venv_python(env: str, default: str, module: str) -> Path | None:
    p = Path(os.environ.get(env, default))
    if not p.exists():
        return None
    ok = subprocess.run([str(p), "-c", f"import {module}"], capture_output=True).returncode == 0
    return p if ok else None


def startup_table(repeat: int) -> None:
    tw = _tilewright()
    print(f"start-up CPU of light commands (user + sys of the whole process, median of {repeat})")
    hdr = f"{'command':<52} {'CPU s':>7} {'target s':>9} {'meets':>6}"
    print(hdr)
    print("-" * len(hdr))
    for args in COMMANDS:
        cpu, _ = median_cpu(tw + args, repeat)
        print(f"{'tilewright ' + ' '.join(args):<52} {cpu:>7.3f} {TARGET_CPU_S:>9.2f} "
              f"{'yes' if cpu <= TARGET_CPU_S else 'NO':>6}", flush=True)


def _tw_mapper_cmd(m: int, k: int, n: int) -> list[str]:
    code = (f"import sys; sys.path.insert(0, {str(HERE)!r}); "
            "from vs_zigzag import tpu_like_arch; "
            "from tilewright.compiler.gemm_mapper import GemmOp, map_gemm; "
            f"r = map_gemm(GemmOp('g', {m}, {k}, {n}, elem_bytes=1, out_bytes=1), "
            "tpu_like_arch()); print(int(r.cost.cycles))")
    return [sys.executable, "-c", code]


def external_table(repeat: int) -> None:
    print(f"\nwhole process vs other tools on a comparable GEMM (CPU s, median of {repeat}; "
          "ratio = other / tilewright)")
    hdr = (f"{'tool':<11} {'GEMM':<22} {'other CPU s':>11} {'tilewright CPU s':>16} "
           f"{'ratio':>7}  cycles (other / tilewright)")
    print(hdr)
    print("-" * len(hdr))
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))

    rows, cols, df, m, k, n = SS_GEMM
    what = f"{m}x{k}x{n} {rows}x{cols} {df.upper()}"
    py = _venv_python("SCALESIM_PYTHON", "/tmp/scalesim_venv/bin/python", "scalesim")
    if py is None:
        print(f"{'SCALE-Sim':<11} {what:<22} not installed (see benchmarks/vs_scalesim.py for "
              "its venv); no figure")
    else:
        ss, out = median_cpu([str(py), str(HERE / "_scalesim_runner.py"), *map(str, SS_GEMM)],
                             repeat, cwd=tmp)
        ss_cycles = json.loads(out.strip().splitlines()[-1])["total_cycles"]
        tw, tw_out = median_cpu(_tilewright() + ["cycles", "--arch", "ws8x8", "-m", str(m), "-k",
                                                 str(k), "-n", str(n), "--convention",
                                                 "scalesim", "--json"], repeat)
        tw_cycles = json.loads(tw_out)["cycles"]
        print(f"{'SCALE-Sim':<11} {what:<22} {ss:>11.3f} {tw:>16.3f} {ss / tw:>6.1f}x  "
              f"{ss_cycles} / {tw_cycles}", flush=True)

    m, k, n = ZZ_GEMM
    what = f"{m}x{k}x{n} 32x32 tpu_like"
    py = _venv_python("ZIGZAG_PYTHON", "/tmp/zigzag_venv/bin/python", "zigzag")
    if py is None:
        print(f"{'ZigZag':<11} {what:<22} not installed (see benchmarks/vs_zigzag.py for its "
              "venv); no figure")
    else:
        zz, out = median_cpu([str(py), str(HERE / "_zigzag_runner.py"), str(m), str(k), str(n)],
                             repeat, cwd=tmp)
        zz_cycles = json.loads(out.strip().splitlines()[-1])["latency_cycles"]
        tw, tw_out = median_cpu(_tw_mapper_cmd(m, k, n), repeat)
        print(f"{'ZigZag':<11} {what:<22} {zz:>11.3f} {tw:>16.3f} {zz / tw:>6.1f}x  "
              f"{zz_cycles:.0f} / {tw_out.strip()}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="runs per tilewright command")
    ap.add_argument("--external-repeat", type=int, default=3, help="runs per external tool")
    ap.add_argument("--no-external", action="store_true", help="skip SCALE-Sim and ZigZag")
    args = ap.parse_args()
    startup_table(args.repeat)
    if not args.no_external:
        external_table(args.external_repeat)


if __name__ == "__main__":
    main()
