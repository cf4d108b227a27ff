"""Speed of the accelerator top's C++ fast driver per Verilator/g++ build recipe, on a real
workload: the command streams of ``generate --rtl --fast`` (tiny-llama, 4 prompt tokens + N
generated; its GEMMs and, on a vector ArchSpec, its vector kernels).

    python benchmarks/fast_driver_speed.py [--archs ws8x8v,ws16x16] [--tokens 1] [--repeat 7]
                                           [--recipes default,gcc-O3,native,threads2,lto]

Per ArchSpec: ``generate`` runs once on the default build (its checks — every GEMM and kernel
bit-exact with numpy / the functional model, RTL cycles == the cycle model — must pass) while
the driver's command streams are recorded. Then each recipe of
:data:`tilewright.cosim.driver_process.FAST_RECIPES` builds the same Verilog (ccache off, so build
seconds are real) and replays the streams ``--repeat`` times; its result records (cycles, retired,
beats, every word read back) must equal the default build's byte for byte (only the timing field
differs); its build time is given as wall and as CPU seconds (Verilator + make + g++; the
load-independent figure). Simulated cycles per second = the segments' cycles / the driver's busy
time around them (best of the repeats; on a shared machine this wall-clock rate falls with the
load), and "M cycles/CPU-s" = cycles / the replay process's CPU seconds (user + system, the
whole process: start, reset and program load included — what an unloaded core gives, a lower
bound).
Ratios are against the "default" recipe in the same run. Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from tilewright.app.cli.tables import Column, print_table
from tilewright.app.flows.generate import generate
from tilewright.arch import load_arch
from tilewright.compiler.codegen import beat_bytes
from tilewright.cosim import fast_runs
from tilewright.cosim.driver_process import FAST_RECIPES, RECIPE_ENV, build_driver_exe
from tilewright.cosim.tops import get_top
from tilewright.cosim.verilator import verilator_env

PROMPT = [1, 2, 3, 4]
MAGIC_RESULT = 0x544C5352  # "RSLT" (cosim/fast_driver/driver_util.h)


def record_streams(arch, tokens: int) -> tuple[Path, list[bytes], list[bytes]]:
    """Run ``generate --rtl --fast`` on ``arch`` with the default recipe, recording every driver
    process's command and result stream; returns the executable, the command and result
    streams. Exits if any of generate's checks fails."""
    os.environ.pop(RECIPE_ENV, None)
    sent, received, exes = [], [], set()
    original = fast_runs.run_driver

    def recording(executable, what, run_name, body, keep_dir=None):
        def body_and_record(pipe):
            body(pipe)
            sent.append(bytes(pipe.sent))
            received.append(bytes(pipe.received))
            exes.add(Path(executable))
        return original(executable, what, run_name, body_and_record, keep_dir)

    fast_runs.run_driver = recording
    try:
        res = generate("tiny-llama", arch, PROMPT, tokens, rtl=True, driver="fast",
                       vector=arch.vector_unit is not None)
    finally:
        fast_runs.run_driver = original
    if not res.ok:
        raise SystemExit(f"{arch.name}: generate --rtl --fast failed its checks: "
                         f"{[c for c in res.checks if not c[1]]}")
    (exe,) = exes
    return exe, sent, received


def parse(received: bytes, chunks: int) -> tuple[list[tuple[int, ...]], bytes, int]:
    """A result stream's records without their timing words, the words read back, and the
    total busy nanoseconds (driver_util.h / accel_main.cpp record layout)."""
    w = np.frombuffer(received, dtype="<u4")
    i, heads, words, ns = 0, [], [], 0
    while i < len(w):
        if w[i] != MAGIC_RESULT:
            raise SystemExit(f"bad result record at word {i}")
        head = [int(x) for x in w[i:i + 11]]
        ns += head[8] | (head[9] << 32)
        heads.append(tuple(head[:8] + head[10:]))
        words.append(w[i + 11:i + 11 + head[10] * chunks].tobytes())
        i += 11 + head[10] * chunks
    return heads, b"".join(words), ns


def _child_cpu() -> float:
    """CPU seconds (user + system) of the finished child processes so far."""
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def build_recipe_exe(anchor_exe: Path, arch, name: str, folder: Path
                     ) -> tuple[Path, float, float]:
    """Build the anchor build's Verilog with recipe ``name`` into ``folder``; (exe, wall
    seconds, CPU seconds of Verilator, make and g++)."""
    fast = get_top("accel").fast
    top = get_top("accel").module
    (folder / "rtl").mkdir(parents=True)
    shutil.copy(anchor_exe.parents[1] / "rtl" / f"{top}.v", folder / "rtl" / f"{top}.v")
    t0, c0 = time.perf_counter(), _child_cpu()
    with verilator_env():
        os.environ["CCACHE_DISABLE"] = "1"
        try:
            build_driver_exe(folder, top=top, source=fast.sources[0],
                             executable=fast.executable, cflags=fast.cflags(arch),
                             prefix=fast.prefix, what=f"{name} build",
                             recipe=FAST_RECIPES[name])
        finally:
            os.environ.pop("CCACHE_DISABLE", None)
    return folder / "obj" / fast.executable, time.perf_counter() - t0, _child_cpu() - c0


def replay(exe: Path, commands: list[Path], reference: list[bytes], chunks: int,
           repeat: int) -> tuple[int, float, float, float, bool]:
    """Replay every stream ``repeat`` times; (cycles, best busy s, best wall s, best process CPU
    s, same results)."""
    cycles, busy, wall, cpu, same = 0, 0.0, 0.0, 0.0, True
    for cmd, ref in zip(commands, reference):
        ref_heads, ref_words, _ = parse(ref, chunks)
        runs = []
        for _ in range(repeat):
            out = cmd.with_suffix(".out")
            t0, c0 = time.perf_counter(), _child_cpu()
            subprocess.run([str(exe), str(cmd), str(out)], check=True)
            runs_wall, runs_cpu = time.perf_counter() - t0, _child_cpu() - c0
            heads, words, ns = parse(out.read_bytes(), chunks)
            same &= heads == ref_heads and words == ref_words
            runs.append((ns * 1e-9, runs_wall, runs_cpu))
        cycles += sum(h[1] for h in ref_heads)
        busy += min(r[0] for r in runs)
        wall += min(r[1] for r in runs)
        cpu += min(r[2] for r in runs)
    return cycles, busy, wall, cpu, same


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--archs", default="ws8x8v,ws16x16")
    ap.add_argument("--recipes", default=",".join(FAST_RECIPES))
    ap.add_argument("--tokens", type=int, default=1, help="generated tokens after the prompt")
    ap.add_argument("--repeat", type=int, default=7, help="replays per recipe (best is kept)")
    args = ap.parse_args()
    recipes = ["default", *(r for r in args.recipes.split(",") if r != "default")]
    unknown = [r for r in recipes if r not in FAST_RECIPES]
    if unknown:
        raise SystemExit(f"--recipes: unknown {unknown}; accepted: {', '.join(FAST_RECIPES)}")
    rows = []
    work = Path(tempfile.mkdtemp(prefix="tw-fast-recipes-"))
    try:
        for arch_name in args.archs.split(","):
            arch = load_arch(arch_name)
            chunks = (beat_bytes(arch) + 3) // 4   # uint32 chunks per external word
            anchor, sent, received = record_streams(arch, args.tokens)
            commands = []
            for i, data in enumerate(sent):
                commands.append(work / f"{arch_name}-{i}.cmd")
                commands[-1].write_bytes(data)
            base = None
            for name in recipes:
                exe, build_s, build_cpu = build_recipe_exe(anchor, arch, name,
                                                           work / f"{arch_name}-{name}")
                cycles, busy, wall, cpu, same = replay(exe, commands, received, chunks,
                                                       args.repeat)
                rate, cpu_rate = cycles / busy / 1e6, cycles / cpu / 1e6
                base = base or (build_cpu, rate, cpu_rate)
                rows.append((arch_name, name, build_s, build_cpu, build_cpu / base[0], cycles,
                             busy, rate, rate / base[1], cpu_rate, cpu_rate / base[2], wall,
                             "yes" if same else "NO"))
                print("done:", *rows[-1], flush=True)   # progress (the table follows)
                shutil.rmtree(work / f"{arch_name}-{name}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_table(f"accelerator top, C++ fast driver: tiny-llama {len(PROMPT)} prompt + "
                f"{args.tokens} generated tokens (ratios vs the default recipe)",
                [Column("ArchSpec"), Column("recipe"), Column("build wall s", True, "{:.0f}"),
                 Column("build CPU s", True, "{:.0f}"),
                 Column("build CPU ratio", True, "{:.2f}"), Column("sim cycles", True, "{:,}"),
                 Column("busy s", True, "{:.3f}"), Column("M cycles/s", True, "{:.2f}"),
                 Column("speed ratio", True, "{:.2f}"),
                 Column("M cycles/CPU-s", True, "{:.2f}"), Column("CPU ratio", True, "{:.2f}"),
                 Column("replay wall s", True, "{:.2f}"), Column("same results")], rows)
    for name in recipes:
        r = FAST_RECIPES[name]
        print(f"{name}: verilator {' '.join(r.verilator)}; g++ <top's flags> {r.cflags}"
              + (f"; link {r.ldflags}" if r.ldflags else ""))
    if any(r[-1] != "yes" for r in rows):
        raise SystemExit("a recipe's results differ from the default build's")


if __name__ == "__main__":
    main()
