"""FPGA resource predictor vs Yosys: held-out error and speed.

Prints, for every target with a shipped data set (iCE40, ECP5),
1. the leave-one-shape-out error of every candidate model per metric (median APE, MAPE, max APE,
   in %; ``*`` marks the model ``tilewright.app.sweep.resource_model.CHOSEN[target]`` uses);
2. one real run of a design kept out of the data sets, measured in this run the way the target's
   data set was made (iCE40: Verilog + Yosys; ECP5: the whole ``tilewright fpga`` flow with
   nextpnr, so Fmax too) against the prediction: counts and the time ratio;
and once, the time of a prediction (first call in the process, then per design, then per design
in a batch).

Run: ``python benchmarks/resource_predictor.py`` (``--no-synth`` skips the Yosys anchors).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from tilewright.app.sweep import resource_data as rd
from tilewright.app.sweep import resource_model as rm


def _timing(arch) -> float:
    """Print prediction times; return seconds per predict_resources call."""
    t0 = time.perf_counter()
    rm.predict_resources(arch)     # first call in this process: import scipy, read the CSV, fit
    first_s = time.perf_counter() - t0
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        rm.predict_resources(arch)
    per_s = (time.perf_counter() - t0) / n
    archs = [rd.arch_for(r, c, df, 4, 4) for r in range(1, 17) for c in range(1, 17)
             for df in ("ws", "os")]
    t0 = time.perf_counter()
    rm.predict_frame(archs)
    batch_s = (time.perf_counter() - t0) / len(archs)
    print(f"prediction (ice40): first call (load + fit) {first_s * 1e3:.1f} ms, then "
          f"{per_s * 1e3:.2f} ms per design (predict_resources, {n} calls), "
          f"{batch_s * 1e3:.3f} ms per design in a batch of {len(archs)} (predict_frame)")
    return per_s


def _holdout(target: str, per_s: float) -> None:
    data = rm.load_data(target)
    shapes = (data["rows"].astype(str) + "x" + data["cols"].astype(str)).nunique()
    secs = data["synth_seconds"] + (data["pnr_seconds"] if "pnr_seconds" in data else 0.0)
    med = statistics.median(secs)
    flow = "Yosys + nextpnr" if "pnr_seconds" in data else "Yosys"
    print(f"\n== {target}: {len(data)} designs, {shapes} array shapes, {flow} "
          f"(Yosys {data['yosys_version'].iloc[0]}); median tool time {med:.1f} s per design "
          f"(= {med / per_s:,.0f} x one prediction); error = leave-one-shape-out")
    rep = rm.holdout_report(data, target)
    print(f"{'metric':7} {'model':14} {'median APE %':>12} {'MAPE %':>8} {'max APE %':>10}")
    for r in rep.itertuples():
        mark = "*" if r.chosen else " "
        print(f"{r.metric:7} {r.model + mark:14} {r.median_ape:12.2f} {r.mape:8.2f} "
              f"{r.max_ape:10.2f}")


def _anchor(target: str, arch, per_s: float) -> None:
    pred = rm.predict_resources(arch, target)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        pnr = "fmax_mhz" in pred
        meas = (rd.measure_pnr if pnr else rd.measure)(arch, target, work_dir=tmp)
        synth_s = time.perf_counter() - t0
    flow = "the tilewright fpga flow (Yosys + nextpnr)" if pnr else "Verilog + Yosys"
    print(f"anchor in this run ({target}): {arch.name}, {flow} {synth_s:.1f} s; one "
          f"prediction is {synth_s / per_s:,.0f} x faster")
    print(f"{'metric':7} {'measured':>9} {'predicted':>10} {'APE %':>7}")
    for m in pred:
        ape = 100 * abs(pred[m] - meas[m]) / max(meas[m], 1)
        print(f"{m:8} {meas[m]:9g} {pred[m]:10.1f} {ape:7.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-synth", action="store_true", help="skip the Yosys timing anchors")
    args = ap.parse_args()
    arch = rd.arch_for(*rd.HELD_OUT[0])
    per_s = _timing(arch)
    for target in rm.CHOSEN:
        _holdout(target, per_s)
        if not args.no_synth:
            _anchor(target, arch, per_s)


if __name__ == "__main__":
    main()
