"""The RTL mesh router's FPGA cost: Yosys LUT/FF and nextpnr Fmax on iCE40 and ECP5.

Generates one :class:`tilewright.rtl.mesh_router.MeshRouter` (32-bit flits, alpha = beta = 1, the
mesh4x4 preset's 8 route ids, input FIFOs of :func:`~tilewright.compiler.mesh_isa.buffer_depth`)
and runs the project's FPGA flow on it (:func:`tilewright.app.eda.fpga_pnr.run_family`: the pin
harness, Yosys, the smallest part that fits, nextpnr with a fixed seed). The harness's own
flip-flops (a shift register per port bit) are reported and subtracted. Prints one row per
family, next to the figures recorded for the static-route router it replaced (same flow, same
flit width and latencies; measured at commit 46962b0 on 2026-12-02 with this script's flow).

    /work/venv/bin/python benchmarks/mesh_router_synth.py [--routes 8] [--work DIR]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from amaranth.back import verilog

from tilewright.app.eda.fpga_pnr import run_family
from tilewright.rtl.mesh_router import MeshRouter

#: the static-route router (per-phase source masks, no buffers, injection delays computed by the
#: host), measured with this flow at commit 46962b0: family -> (LUTs, FFs incl. harness,
#: harness FFs, Fmax MHz)
STATIC_ROUTER = {"ice40": (827, 626, 428, 52.19), "ecp5": (823, 626, 428, 171.26)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--routes", type=int, default=8, help="route-table entries (colours)")
    ap.add_argument("--work", default=None, help="folder for the Verilog and tool logs")
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="tw_router_"))
    work.mkdir(parents=True, exist_ok=True)
    r = MeshRouter(flit_bits=32, hop_cycles=1, eject_cycles=1, routes=args.routes)
    vfile = work / "tw_router.v"
    vfile.write_text(verilog.convert(r, name="tw_router", emit_src=False))
    print(f"router: 32-bit flits, {args.routes} route ids, FIFOs of {r.depth} flits; "
          f"work folder {work}")
    print(f"{'family':7} {'router':>10} {'part':>20} {'LUTs':>6} {'FFs':>6} {'Fmax MHz':>9}")
    for fam in ("ice40", "ecp5"):
        res = run_family(work, vfile, "tw_router", fam, 100.0)
        luts, ffs, hff, fmax = STATIC_ROUTER[fam]
        print(f"{fam:7} {'static':>10} {'(recorded)':>20} {luts:>6} {ffs - hff:>6} {fmax:>9.1f}")
        print(f"{fam:7} {'arbitrated':>10} {res['part']:>20} {res['luts']:>6} "
              f"{res['ffs'] - res['harness_ffs']:>6} {res['fmax_mhz']:>9.1f}")


if __name__ == "__main__":
    main()
