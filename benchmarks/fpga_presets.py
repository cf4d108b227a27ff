"""Place-and-route figures of the FPGA presets, one table: preset x target -> LUT, FF, DSP, BRAM,
Fmax and whether timing is met at the preset's own clock (``clock_mhz``).

    nice python benchmarks/fpga_presets.py            # every row (ws8x8 on ECP5 takes minutes)
    nice python benchmarks/fpga_presets.py --quick    # the QoR presets only (int8_2x2, int8_4x4)
    nice python benchmarks/fpga_presets.py --only int8_2x2:ice40 --markdown

Each row is one ``tilewright.app.eda.fpga.run_fpga`` (the code of ``tilewright fpga``: pin
harness, Yosys, nextpnr with seed 1 on the smallest part that fits; xc7 is Yosys' estimate, no
Fmax). ``timing met`` is nextpnr's Fmax >= the preset's clock. Rows run one at a time, and the
table prints as each finishes. The presets: ``tests/qor_baselines/int8_2x2.yaml``,
``int8_4x4.yaml`` (the QoR baselines) and ``ws8x8_pipelined.yaml`` (the demo's 8x8 core
with every ``tensor_engine.pipeline`` stage), aimed at 125 MHz on ECP5 as the GEMM core and as
the programmable accelerator behind AXI (``--top axi-accel``, the row ``ws8x8_pipelined/axi-accel``).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from tilewright.app.eda.fpga import run_fpga
from tilewright.arch import load_arch

ROOT = Path(__file__).resolve().parents[1]
QOR = ROOT / "tests" / "qor_baselines"
#: (preset name, ArchSpec file, targets, top of ``tilewright fpga --top``)
ROWS = [
    ("int8_2x2", QOR / "int8_2x2.yaml", ("ice40", "ecp5", "xc7"), "gemm"),
    ("int8_4x4", QOR / "int8_4x4.yaml", ("ice40", "ecp5", "xc7"), "gemm"),
    ("ws8x8_pipelined", QOR / "ws8x8_pipelined.yaml", ("ecp5",), "gemm"),
    ("ws8x8_pipelined/axi-accel", QOR / "ws8x8_pipelined.yaml", ("ecp5",), "axi-accel"),
]
_COLS = ("preset", "target", "part", "LUTs", "FFs", "DSPs", "BRAMs", "Fmax MHz", "clock MHz",
         "timing met", "critical path", "flow s")


def measure(path: Path, target: str, top: str = "gemm") -> tuple:
    """One row: the flow on ``path``'s ArchSpec for ``target``, top ``top``."""
    arch = load_arch(path)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        f = run_fpga(arch, target, Path(tmp) / "out", top=top)["fpga"]
    fmax = f.get("fmax_mhz")
    cp = f.get("pnr", {}).get("critical_path")
    path_text = (f"{cp['from']} -> {cp['to']} ({cp['logic_levels']} levels)" if cp else "—")
    met = "—" if fmax is None else ("yes" if fmax >= f["target_mhz"] else "no")
    return (f["part"], f["luts"], f["ffs"], f["dsps"], f["brams"],
            "— (estimate)" if fmax is None else f"{fmax:.2f}", f"{f['target_mhz']:g}", met,
            path_text, f"{time.perf_counter() - t0:.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the QoR presets only")
    ap.add_argument("--only", action="append", metavar="PRESET:TARGET",
                    help="run only these rows (repeatable)")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = ap.parse_args()
    rows = [(name, path, t, top) for name, path, targets, top in ROWS for t in targets
            if not (args.quick and name.startswith("ws8x8_pipelined"))
            and (not args.only or f"{name}:{t}" in args.only)]
    fmt = ((lambda v: "| " + " | ".join(map(str, v)) + " |") if args.markdown
           else (lambda v: "  ".join(f"{x!s:>10}" for x in v)))
    print(fmt(_COLS))
    if args.markdown:
        print("|" + "---|" * len(_COLS))
    for name, path, target, top in rows:
        print(fmt((name, target, *measure(path, target, top))), flush=True)


if __name__ == "__main__":
    main()
