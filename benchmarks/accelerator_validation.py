"""Predicted vs published area, peak TOPS and power of published accelerators described as
ArchSpecs (``configs/validation/*.yaml``).

    python benchmarks/accelerator_validation.py [--json]

For each chip: the model's area (``area_mm2``: PE array, SRAM, vector unit, fixed, off-chip PHY),
peak TOPS (``2 * MACs per cycle * clock``) and power at peak (one second at the full MAC rate with
no DRAM traffic — the dynamic ``mac`` + ``sram`` terms of ``energy_breakdown`` at the supply the
clock needs — plus ``static_power``), each against the published figure with the error
``predicted / published - 1``.

Calibration (which constant was fitted to which figure):

* ``leakage.logic_mw_per_mm2`` of configs/tech/28nm.yaml (and through it, by Stillmaker & Baas,
  the 45 nm and 7 nm densities and every table's per-bit SRAM figure) was fitted to TPU v1's idle
  die power: its static power equals ``IDLE_W`` below.
* ``DIE_FACTOR`` (this file only; not in the tables) = TPU v1's published die area / the model's
  area: what the model leaves out of a die (IO, PCIe, host interface, control, wiring, layout
  utilisation). The ``area x die factor`` column applies it to the other chips.

TPU v4i and TPU v4 are held out: none of their area or power figures set a constant (their
published 1050 MHz clock is the 7 nm curve's nominal-supply point, configs/tech/7nm.yaml).

Published figures (``PUBLISHED``): TPU v1 — Jouppi et al., "In-Datacenter Performance Analysis of
a Tensor Processing Unit", ISCA 2017 (confirmed: abstract at research.google/pubs — 65,536 8-bit
MACs, 92 TOPS, 28 MiB; a reproduction of the paper's figures at maltsystem.ru/en/news/271-goo —
28 nm, 700 MHz, 24 MiB unified buffer, 34 GB/s, 40 W drawn, 75 W TDP; the die floor plan at
news.mynavi.jp/article/20170411-tpu/2 — unified buffer 29 %, matrix unit 24 %, accumulators 6 %
of the die. As remembered, unconfirmed: die <= 331 mm², idle 28 W); TPU v4i — Jouppi et al.,
"Ten Lessons From Three Generations Shaped Google's TPUv4i", ISCA 2021 (Table 1 as remembered,
unconfirmed: < 400 mm², 1050 MHz, 138 TFLOPS bf16, TDP 175 W); TPU v4 — Google Cloud TPU v4
documentation (confirmed: 275 TFLOPS, measured min/mean/max power 90/170/192 W; no die area
published there, so none is compared). Power: TPU v1 and v4i publish TDPs (the most a board is
built for), TPU v4 its measured maximum; each is compared with the model's power at the full
MAC rate.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

from tilewright.arch import ArchSpec
from tilewright.dataflow_sim.energy_area import (area_breakdown, area_mm2, energy_breakdown,
                                                 load_tech, static_power)

VALIDATION_DIR = Path(__file__).resolve().parent.parent / "configs" / "validation"

PUBLISHED = {
    "tpu_v1": {"tech": "28nm", "role": "calibration", "area_mm2": 331.0, "tops": 92.0,
               "power_w": 75.0, "cite": "Jouppi et al., ISCA 2017, abstract and Table 2"},
    "tpu_v4i": {"tech": "7nm", "role": "held out", "area_mm2": 400.0, "tops": 138.0,
                "power_w": 175.0, "cite": "Jouppi et al., ISCA 2021, Table 1"},
    "tpu_v4": {"tech": "7nm", "role": "held out", "area_mm2": None, "tops": 275.0,
               "power_w": 192.0, "cite": "cloud.google.com/tpu/docs/v4 (measured max power)"},
}
IDLE_W = {"tpu_v1": 28.0}
"""published idle die power (W) the 28 nm leakage density was fitted to"""


def load_chip(name: str) -> ArchSpec:
    return ArchSpec.from_dict(yaml.safe_load((VALIDATION_DIR / f"{name}.yaml").read_text()),
                              source=str(VALIDATION_DIR / f"{name}.yaml"))


def peak_tops(arch: ArchSpec) -> float:
    """2 operations per MAC x MACs per cycle x clock, in 1e12 op/s."""
    return 2 * arch.tensor_engine.macs_per_cycle * arch.clock_mhz * 1e6 / 1e12


def peak_power_w(arch: ArchSpec, tech: str) -> dict[str, float]:
    """Dynamic power at the full MAC rate (no DRAM traffic) and static power, in W."""
    t = load_tech(tech)
    e = energy_breakdown(arch, t, macs=arch.peak_macs_per_s, latency_s=1.0)
    dyn = (e["mac_pj"] + e["sram_pj"]) * 1e-12
    return {"dynamic_w": dyn, "static_w": e["static_pj"] * 1e-12,
            "power_w": dyn + e["static_pj"] * 1e-12, "voltage_v": e["voltage_v"]}


FLOORPLAN_TPU_V1 = {"sram": 0.29 + 0.06, "pe_array": 0.24}
"""shares of TPU v1's die: unified buffer + accumulators, and the matrix unit (floor plan)"""


def floorplan_ratio() -> tuple[float, float]:
    """TPU v1's SRAM / PE-array area: the model's and the published floor plan's."""
    ab = area_breakdown(load_chip("tpu_v1"), load_tech("28nm"))
    return (ab["sram_um2"] / ab["pe_array_um2"],
            FLOORPLAN_TPU_V1["sram"] / FLOORPLAN_TPU_V1["pe_array"])


def die_factor() -> float:
    """Published / modelled area of the calibration chip (TPU v1)."""
    return PUBLISHED["tpu_v1"]["area_mm2"] / area_mm2(load_chip("tpu_v1"), load_tech("28nm"))


def rows() -> list[dict]:
    """One row per chip: predicted, published and error of area, peak TOPS and power."""
    k = die_factor()
    out = []
    for name, pub in PUBLISHED.items():
        arch = load_chip(name)
        area = area_mm2(arch, load_tech(pub["tech"]))
        p = peak_power_w(arch, pub["tech"])
        pa = pub["area_mm2"]
        r = {"chip": name, "tech": pub["tech"], "role": pub["role"], "cite": pub["cite"],
             "area_mm2": area, "area_pub_mm2": pa, "area_err": area / pa - 1 if pa else None,
             "area_die_mm2": area * k, "area_die_err": area * k / pa - 1 if pa else None,
             "tops": peak_tops(arch), "tops_pub": pub["tops"],
             "tops_err": peak_tops(arch) / pub["tops"] - 1,
             "power_w": p["power_w"], "dynamic_w": p["dynamic_w"], "static_w": p["static_w"],
             "voltage_v": p["voltage_v"], "power_pub_w": pub["power_w"],
             "power_err": p["power_w"] / pub["power_w"] - 1}
        if name in IDLE_W:
            r["idle_pub_w"], r["idle_err"] = IDLE_W[name], p["static_w"] / IDLE_W[name] - 1
        out.append(r)
    return out


def table(rs: list[dict]) -> str:
    head = (f"{'chip':8} {'role':11} {'area mm2':>9} {'pub':>5} {'err':>6} {'x die':>6} "
            f"{'err':>6} | {'TOPS':>6} {'pub':>5} {'err':>6} | {'W':>6} {'pub':>5} {'err':>6} "
            f"({'dyn':>5} + {'static':>6} W at {'V':>5})")
    lines = [head, "-" * len(head)]
    def pct(x: float | None) -> str:
        return f"{x:+6.1%}" if x is not None else f"{'-':>6}"

    for r in rs:
        pub = f"{r['area_pub_mm2']:5.0f}" if r["area_pub_mm2"] else f"{'-':>5}"
        lines.append(
            f"{r['chip']:8} {r['role']:11} {r['area_mm2']:9.1f} {pub} "
            f"{pct(r['area_err'])} {r['area_die_mm2']:6.0f} {pct(r['area_die_err'])} | "
            f"{r['tops']:6.1f} {r['tops_pub']:5.0f} {r['tops_err']:+6.1%} | "
            f"{r['power_w']:6.1f} {r['power_pub_w']:5.0f} {r['power_err']:+6.1%} "
            f"({r['dynamic_w']:5.1f} + {r['static_w']:6.1f} W at {r['voltage_v']:.3f})")
    lines.append(f"die factor (TPU v1 published / model area) = {die_factor():.3f}")
    m, p = floorplan_ratio()
    lines.append(f"TPU v1 SRAM / PE-array area: model {m:.3f}, floor plan {p:.3f} "
                 f"(err {m / p - 1:+.1%})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args(argv)
    rs = rows()
    print(json.dumps(rs, indent=1) if args.json else table(rs))


if __name__ == "__main__":
    main()
