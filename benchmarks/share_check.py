"""What leaving Yosys' ``share`` pass out changes: one format's GEMM core (as
``benchmarks/format_tradeoff.py`` builds it, behind the FPGA flow's pin harness) synthesized
three ways on one family, cell counts side by side.

    nice -n 19 python benchmarks/share_check.py --format int8 --shape 32x4 --target ecp5
    python benchmarks/share_check.py --format int8 --shape 2x2 --target ice40   # seconds

* **stock**: Yosys' own flow (``synth_ecp5`` / ``synth_ice40 -dsp``, :data:`FLOWS`), unsplit;
* **split**: the same wrapper split at its ``-run`` labels around ``coarse`` with every
  command of ``coarse`` kept (:func:`script_without` with ``drop=None``);
* **no share**: the split without ``share`` (``tilewright fpga --no-share``,
  ``format_tradeoff.py --no-share``).

*split* against *no share* isolates ``share``: where it merges nothing the two are equal cell
for cell. *stock* against *split* is the split alone, which runs the same commands but not
always to the same netlist (the order later passes visit cells; see
:func:`tilewright.app.eda.yosys_script.script_without`). Each run is cached as JSON under
``--cache`` (default ``$TILEWRIGHT_CACHE/share_check``) by the Verilog's sha256 and the
script, and printed as it finishes; runs go one at a time.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from format_tradeoff import FORMAT_ROWS, design_arch, write_core  # noqa: E402

from tilewright.app.eda.fpga_pnr import (FLOWS, HARNESS_TOP, harness_verilog,  # noqa: E402
                                         top_ports)
from tilewright.app.eda.synth import synthesize  # noqa: E402
from tilewright.app.eda.yosys_script import script_without  # noqa: E402

#: the family -> its flow in :data:`FLOWS` (the one the smallest parts use)
FAMILY_FLOW = {"ice40": "ice40-dsp", "ecp5": "ecp5"}
#: the counts compared
KEYS = ("cells", "luts", "ffs", "dsps", "brams")


def run(vfile: Path, harness: Path, flow: str, script: str, cache: Path) -> dict[str, Any]:
    """Synthesize ``vfile`` + ``harness`` with ``script`` (``{top}``: the harness), cached."""
    digest = hashlib.sha256(vfile.read_bytes() + harness.read_bytes()
                            + script.encode()).hexdigest()[:16]
    key = cache / f"{vfile.stem}_{flow}_{digest}.json"
    if key.is_file():
        return json.loads(key.read_text())
    out = synthesize(vfile, HARNESS_TOP, dataclasses.replace(FLOWS[flow], script=script),
                     extra_sources=(harness,), timeout_s=6 * 3600)
    cache.mkdir(parents=True, exist_ok=True)
    key.write_text(json.dumps(out, indent=1) + "\n")
    return out


def main(argv: list[str] | None = None) -> dict[str, dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--format", default="int8", choices=FORMAT_ROWS)
    ap.add_argument("--shape", default="32x4", help="ROWSxCOLS (default 32x4)")
    ap.add_argument("--target", default="ecp5", choices=sorted(FAMILY_FLOW))
    ap.add_argument("--runs", default="stock,split,noshare",
                    help="which of stock, split, noshare to run, in this order")
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get(
        "TILEWRIGHT_CACHE", Path.home() / ".cache" / "tilewright")) / "share_check")
    args = ap.parse_args(argv)
    shape = re.fullmatch(r"(\d+)x(\d+)", args.shape.lower())
    runs = args.runs.split(",")
    if shape is None or not set(runs) <= {"stock", "split", "noshare"}:
        print(f"--shape {args.shape!r} / --runs {args.runs!r}: accepted ROWSxCOLS and a "
              f"comma-separated subset of stock,split,noshare", file=sys.stderr)
        raise SystemExit(2)
    flow = FAMILY_FLOW[args.target]
    stock = FLOWS[flow].script
    scripts = {"stock": stock, "split": script_without(stock, drop=None),
               "noshare": script_without(stock)}
    arch = design_arch(args.format, int(shape[1]), int(shape[2]), 100.0)
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="share-check-") as d:
        vfile, top = write_core(arch, Path(d))
        text, _ = harness_verilog(top, top_ports(vfile.read_text(), top))
        harness = Path(d) / f"{HARNESS_TOP}.v"
        harness.write_text(text)
        print(f"{arch.name} on {args.target} ({flow}), Yosys cell counts")
        for name in runs:
            r = run(vfile, harness, flow, scripts[name], args.cache)
            results[name] = r
            print(f"{name:8s} " + ", ".join(f"{k} {r[k]:,}" for k in KEYS)
                  + f"  ({r['wall_seconds']:.0f} s, Yosys {r['yosys_version']})", flush=True)
    for a, b in (("split", "noshare"), ("stock", "split")):
        if a in results and b in results:
            ta, tb = results[a]["cells_by_type"], results[b]["cells_by_type"]
            diff = {t: tb.get(t, 0) - ta.get(t, 0) for t in sorted(set(ta) | set(tb))
                    if ta.get(t, 0) != tb.get(t, 0)}
            print(f"{b} - {a}: " + (", ".join(f"{t} {v:+,}" for t, v in diff.items())
                                    or "identical, cell type by cell type"))
    return results


if __name__ == "__main__":
    main()
