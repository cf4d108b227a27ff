"""What recording the accelerator's timeline costs in the C++ fast driver, and what it records.

    python benchmarks/accel_timeline.py [--arch ws8x8v] [--repeat 5]

Runs the same GEMM Program (tiled shapes: 128^3, 256x64x128, 64x512x64) on the accelerator
top's fast driver with and without ``timeline=True`` (segments sent as ``SEGT``: the driver
records each instruction's issue and every ``*_busy`` transition), ``--repeat`` times each. It
asserts the traced runs' records (cycles, retired, beats) and outputs equal the untraced ones'
and every RTL timeline equal to the cycle model's, then prints per mode: simulated cycles, the
driver's busy time around the segments (best of the repeats) as M cycles/s, and with the
timeline the events recorded and the Python time to turn them into timelines and compare them
with the model's. Timings are printed, never asserted (a shared machine's load moves them).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from tilewright.arch import load_arch
from tilewright.cosim import sim as cosim
from tilewright.cosim.program_jobs import timeline_comparison
from tilewright.cosim.suites import gemm_suite

SHAPES = [(128, 128, 128, "random"), (256, 64, 128, "random"), (64, 512, 64, "random")]
_SAME = ("task", "cycles", "retired", "read_beats", "write_beats")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="ws8x8v")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    arch = load_arch(args.arch)
    prog, inputs = gemm_suite(arch, SHAPES, seed=1)
    best: dict[bool, float] = {}
    runs = {}
    for _ in range(args.repeat):
        for timeline in (False, True):
            run = cosim.run("accel", prog, arch, driver="fast", inputs=inputs, timeline=timeline)
            busy = sum(r["run_seconds"] for r in run.records)
            best[timeline] = min(best.get(timeline, busy), busy)
            runs[timeline] = run
    plain, traced = runs[False], runs[True]
    assert [{k: r[k] for k in _SAME} for r in plain.records] == \
        [{k: r[k] for k in _SAME} for r in traced.records]
    assert all(np.array_equal(plain.outputs[k], traced.outputs[k]) for k in plain.outputs)
    t0 = time.perf_counter()
    rows = timeline_comparison(traced, arch)
    compare_s = time.perf_counter() - t0
    assert all(r["difference"] is None for r in rows), [r["difference"] for r in rows]
    cycles = sum(r["cycles"] for r in plain.records)
    events = sum(len(r["rtl"].issues) + 2 * len(r["rtl"].busy) for r in rows)
    print(f"{args.arch}: {len(SHAPES)} GEMMs, {cycles:,} cycles, best of {args.repeat}")
    for timeline in (False, True):
        print(f"  timeline={timeline!s:5}: driver busy {best[timeline] * 1e3:8.2f} ms = "
              f"{cycles / best[timeline] / 1e6:6.2f} M cycles/s")
    print(f"  recorded {events:,} events (issues + busy edges); model timelines and comparison "
          f"{compare_s * 1e3:.1f} ms; RTL == model on every run: yes")
    print(f"  cost of recording: {best[True] / best[False] - 1:+.1%} driver time")


if __name__ == "__main__":
    main()
