"""Predicted vs published area, peak TOPS and power of published accelerators described as
ArchSpecs (``configs/validation/*.yaml``).

    python benchmarks/accelerator_validation.py [--json]

For each chip: the model's area (``area_mm2``: PE array, SRAM, vector unit, fixed, off-chip PHY,
uncore, laid out with the layout factors fitted on TPU v1 — dataflow_sim/energy_area.py
``layout_fit`` — and its cell area ``area_cells_mm2``),
peak TOPS (``2 * MACs per cycle * clock``) and power at peak (one second at the full MAC rate with
no DRAM traffic — the dynamic ``mac`` + ``sram`` terms of ``energy_breakdown`` at the supply the
clock needs — plus ``static_power``), each against the published figure with the error
``predicted / published - 1``. The TPUs' matrix units are described as they are: weight-stationary
systolic arrays (TPU v1 one 256x256; TPU v4i four, TPU v4 eight 128x128), so the SRAM energy
follows their reuse.

Eyeriss (JSSC 2017, 65 nm; held out, :func:`eyeriss_row`) follows the NVDLA table: its core
area, peak throughput at its top clock and its power on AlexNet's CONV layers (at the published
MAC rate) against the published figures (:data:`EYERISS`, :data:`EYERISS_ALEXNET`: sources and
status there). configs/validation/eyeriss.yaml describes it in 16-bit fixed point (int16,
int32 accumulator) as a 12x14 weight-stationary array (the array's timing and SRAM reuse: the
row-stationary dataflow itself cannot be described) whose PEs hold the published filter SRAM
and ifmap registers as ``tensor_engine.pe_storage`` and make the row-stationary PE's accesses
per MAC, stated in ``pe_storage.accesses_per_mac`` (a filter SRAM read, an ifmap register read,
a psum register read and write).
:func:`nvdla_linear_bound` shows from the primer's figures alone why no power linear in the
MAC rate meets NVDLA's peak and average together.

Two more blocks follow. A 7 nm density check (:func:`density_rows`): the
model's TOPS per mm2 (cells and laid out) of the held-out TPU v4i/v4 against the published lower
bound (TOPS over the die-area upper bound), of the largest RTL-able int8 array
(:func:`largest_rtl_int8_cube`), the int8 PE array alone, and IBM RaPiD's published 7 nm chip
(:data:`RAPID_7NM`). A diagnostic of NVDLA's missing power, not in the model:
:func:`register_sensitivity` (the PEs' pipeline registers, Aladdin's register energy), which
prints what the term would do to every power check. (The int8 MAC energy at 16 and 28 nm, once a
diagnostic here, is now the tables' own: interpolated log-log between the published 45 and 7 nm
figures, configs/tech/16nm.yaml.)

What each published figure IS. Every die area is an upper bound (TPU v1 "<= half the Haswell
die", TPU v4i "< 400 mm2", TPU v4 "< 600 mm2"). TPU v1 and v4i publish TDPs — the most the part
is built for, an upper bound on busy power; TPU v1 also its measured idle (28 W) and busy power
(40 W per die running CNN0 at 100 % load, which runs at 86 of the 92 TOPS): the model's power at
86 TOPS is the like-for-like check. TPU v4 publishes measured min/mean/max power (90/170/192 W):
the model's full-rate power is compared with the maximum and the mean. TPU v4i publishes no
measured power: its error against the TDP is a bound, not a miss of a measurement.

Static power is split (``static_power``): cell leakage per mm2 of logic and per SRAM bit (the
tables' figures, from Aladdin's 40 nm cell library, configs/tech/45nm.yaml — not fitted), the
off-chip PHY, and a per-chip background (board, I/O, PLL, clock tree, DRAM idle:
``offchip.background_w``).

Calibration (which constant was fitted to which figure; TPU v1 only, :data:`CALIBRATION`):

* :func:`background_fit` = TPU v1's measured idle power (``IDLE_W``) minus its modelled cell
  leakage and PHY: TPU v1's board-level background, set on TPU v1 and carried unchanged to the
  other datacenter chips (TPU v4i, v4: an assumption — the same class of card); an NVDLA-class
  IP block has no board: background 0.
* The layout factors (in the model: ``energy_area.layout_fit``, every area the project quotes):
  TPU v1's floor plan by class (data buffers 37 %, compute 30 % of its die) over the model's SRAM
  and PE + vector cell area at 28 nm, and an ``uncore`` share (the rest of TPU v1's die beyond
  the modelled PHY and fixed block, as a share of the buffers and compute) — so TPU v1's model
  area is its die. The ``area`` column is the model's; ``cells`` is the cell area, ``x die`` the
  cell area times :func:`die_factor` (TPU v1's die / its cell area, one factor for everything: a
  diagnostic). The I/O and control class factors are printed, not used (the I/O factor, DDR3 +
  PCIe pads over a per-GB/s DDR PHY, is not carried to HBM PHYs).

TPU v4i and TPU v4 are held out: none of their area or power figures set a constant (their
published 1050 MHz clock is the 7 nm curve's nominal-supply point, configs/tech/7nm.yaml);
tests/test_power_validation.py perturbs every held-out figure and checks no fitted constant
moves.

Sources and status of each published figure:

* TPU v1 — Jouppi et al., "In-Datacenter Performance Analysis of a Tensor Processing Unit", ISCA
  2017, arXiv:1704.04760. Confirmed in a retrieved text copy of the arXiv paper: Table 2 (28 nm,
  700 MHz, TDP 75 W, measured idle 28 W / busy 40 W, 92 TOPS, 34 GB/s, 28 MiB; die "NA*": "The TPU
  die is <= half the Haswell die size", Haswell 662 mm2, so <= 331 mm2), section 2 (256x256 MACs,
  4 MiB accumulators in 256 RAMs, 24 MiB unified buffer), Figure 2 caption (data buffers 37 %,
  compute 30 %, I/O 10 %, control 2 % of the die), Table 3 (CNN0 86 TOPS), section 6 (40 W per die
  incremental at 100 % CNN0 load). Floor plan blocks (unified buffer 29 %, matrix unit 24 %,
  accumulators 6 %): news.mynavi.jp/article/20170411-tpu/2, which reproduces the paper's figure.
* TPU v4i — Jouppi et al., "Ten Lessons From Three Generations Shaped Google's TPUv4i", ISCA 2021.
  No copy of the paper retrieved; its Table 1 is quoted by two public summaries found by text
  search (a paper note: 138 TFLOPS, 1050 MHz, 175 W chip TDP, < 400 mm2, 7 nm, 144 MB on-chip
  SRAM, 614 GB/s, four 128x128 MXUs, 128 MiB CMEM, two ICI links; a second note: TDP 450 W (TPUv3)
  -> 175 W, 123 -> 138 TFLOPS, 32 -> 144 MB of SRAM). Confirmed at second hand only.
* TPU v4 — Google Cloud TPU v4 documentation, confirmed: 275 TFLOPS, HBM2 1200 GB/s, measured
  min/mean/max power 90/170/192 W. Die < 600 mm2, 128 MiB CMEM, 16 MiB VMEM per TensorCore: the
  ISCA 2023 paper's Table 4 as public code comments transcribe it (second hand).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

from tilewright.arch import ArchSpec
from tilewright.formats import bits_of
from tilewright.compiler.engine_timing import sram_bytes_per_mac
from tilewright.dataflow_sim import energy_area
from tilewright.dataflow_sim.energy_area import (TPU_V1_FLOORPLAN, TechSpec, area_breakdown,
                                                 dynamic_scale, energy_breakdown, layout_fit,
                                                 load_tech, operand_bytes, operating_voltage,
                                                 pe_storage_accesses,
                                                 pe_storage_pj_per_mac, sram_bank_kib,
                                                 sram_pj_per_byte,
                                                 static_power)

VALIDATION_DIR = Path(__file__).resolve().parent.parent / "configs" / "validation"

PUBLISHED = {
    "tpu_v1": {"tech": "28nm", "role": "calibration", "area_mm2": TPU_V1_FLOORPLAN["die_mm2"],
               "tops": 92.0,
               "power_w": 75.0, "power_kind": "TDP",
               "cite": "Jouppi et al., ISCA 2017 (arXiv:1704.04760), Table 2"},
    "tpu_v4i": {"tech": "7nm", "role": "held out", "area_mm2": 400.0, "tops": 138.0,
                "power_w": 175.0, "power_kind": "TDP",
                "cite": "Jouppi et al., ISCA 2021, Table 1"},
    "tpu_v4": {"tech": "7nm", "role": "held out", "area_mm2": 600.0, "tops": 275.0,
               "power_w": 192.0, "power_kind": "measured max",
               "cite": "cloud.google.com/tpu/docs/v4; Jouppi et al., ISCA 2023, Table 4"},
}
"""Published figures (module doc for each source and its status). Every area is an upper bound
(TPU v1 "<= half the Haswell die" of 662 mm2, TPU v4i "< 400", TPU v4 "< 600"); ``power_w`` is
the figure of ``power_kind``: a TDP is an upper bound on busy power, TPU v4's is its measured
maximum."""
IDLE_W = {"tpu_v1": 28.0}
"""published idle power per die (W), Table 2 of the TPU v1 paper; :func:`background_fit` is
fitted to it"""
CALIBRATION = ("tpu_v1",)
"""the chips whose published figures set a constant (layout factors — in the model,
``energy_area.CALIBRATION_CHIP`` —, die factor, background); every other chip and every NVDLA row
is held out"""
MEAN_W = {"tpu_v4": 170.0}
"""published measured mean power (W): cloud.google.com/tpu/docs/v4"""
BUSY_V1 = {"power_w": 40.0, "tops": 86.0}
"""TPU v1 running CNN0 at 100 % load: 40 W per die incremental (server power over 4 TPUs, host
left out; section 6 and Figure 10) at 86 TOPS (Table 3): a measured busy power at a known MAC
rate, the like-for-like figure for the model's power at that rate"""


def load_chip(name: str) -> ArchSpec:
    """The chip's ArchSpec as its YAML states it (no background)."""
    return ArchSpec.from_dict(yaml.safe_load((VALIDATION_DIR / f"{name}.yaml").read_text()),
                              source=str(VALIDATION_DIR / f"{name}.yaml"))


def with_background(arch: ArchSpec, watts: float) -> ArchSpec:
    """``arch`` with ``offchip.background_w = watts``."""
    data = arch.model_dump(mode="json", exclude_none=True)
    data["offchip"] = {**data["offchip"], "background_w": watts}
    return ArchSpec.from_dict(data, source=f"{arch.name} + background {watts:g} W")


def background_fit() -> float:
    """W: TPU v1's measured idle power minus its modelled cell leakage and PHY power (28 nm, at
    its supply) — the board-level background (DDR3 and DRAM idle, PCIe, PLL, clock tree) the
    cells do not explain. Fitted on the calibration chip only."""
    (cal,) = CALIBRATION
    st = static_power(load_chip(cal), load_tech(PUBLISHED[cal]["tech"]))
    return IDLE_W[cal] - st["leakage_w"] - st["phy_w"]


def chip_with_background(name: str) -> ArchSpec:
    """A TPU as the validation runs it: its YAML plus :func:`background_fit` (module doc)."""
    return with_background(load_chip(name), background_fit())


def peak_tops(arch: ArchSpec) -> float:
    """2 operations per MAC x MACs per cycle x clock, in 1e12 op/s."""
    return 2 * arch.tensor_engine.macs_per_cycle * arch.clock_mhz * 1e6 / 1e12


def _tech(tech: str | TechSpec) -> TechSpec:
    return tech if isinstance(tech, TechSpec) else load_tech(tech)


def peak_power_w(arch: ArchSpec, tech: str | TechSpec,
                 macs_per_s: float | None = None) -> dict[str, float]:
    """Dynamic power at ``macs_per_s`` (default the full MAC rate; no DRAM traffic) and static
    power, in W, with the dynamic ``mac`` and ``sram`` terms apart; ``with_dram_w`` adds the
    off-chip bandwidth streamed in full (DRAM device energy plus the scratchpad fill of every
    byte), the most the model can burn: the like-for-like figure for a TDP. ``tech``: a preset
    name or a table."""
    t = _tech(tech)
    rate = arch.peak_macs_per_s if macs_per_s is None else macs_per_s
    e = energy_breakdown(arch, t, macs=rate, latency_s=1.0)
    dyn = (e["mac_pj"] + e["sram_pj"]) * 1e-12
    full = energy_breakdown(arch, t, macs=rate, dram_bytes=arch.offchip.bandwidth_gbps * 1e9,
                            latency_s=1.0)
    st = static_power(arch, t)
    return {"mac_w": e["mac_pj"] * 1e-12, "sram_w": e["sram_pj"] * 1e-12, "dynamic_w": dyn,
            "static_w": e["static_pj"] * 1e-12, "power_w": dyn + e["static_pj"] * 1e-12,
            "leakage_w": st["leakage_w"], "phy_w": st["phy_w"],
            "background_w": st["background_w"],
            "with_dram_w": full["energy_j"], "voltage_v": e["voltage_v"]}


FLOORPLAN_TPU_V1 = {"sram": 0.29 + 0.06, "pe_array": 0.24}
"""shares of TPU v1's die: unified buffer + accumulators, and the matrix unit (floor plan)"""

CLASSES = {"buffers": ("sram",), "compute": ("pe_array", "vector"), "io": ("phy",),
           "control": ("fixed",)}
"""TPU v1's die classes (``energy_area.TPU_V1_FLOORPLAN``, Figure 2 caption) as the model's
blocks"""


def model_classes(arch: ArchSpec, tech: str) -> dict[str, float]:
    """The model's cell area (mm2) in the classes of :data:`CLASSES`."""
    ab = area_breakdown(arch, load_tech(tech))
    return {c: sum(ab[f"{b}_cells_um2"] for b in bs) / 1e6 for c, bs in CLASSES.items()}


def class_factors() -> dict[str, float]:
    """Published / modelled cell area of each class on the calibration chip (TPU v1): buffers and
    compute are the model's layout factors (``layout_fit``), I/O and control a diagnostic."""
    k = layout_fit()
    m = model_classes(load_chip("tpu_v1"), "28nm")
    die = PUBLISHED["tpu_v1"]["area_mm2"]
    return {"buffers": k.sram, "compute": k.compute,
            **{c: TPU_V1_FLOORPLAN[c] * die / m[c] for c in ("io", "control")}}


def floorplan_ratio() -> tuple[float, float]:
    """TPU v1's SRAM / PE-array cell area: the model's and the published floor plan's."""
    ab = area_breakdown(load_chip("tpu_v1"), load_tech("28nm"))
    return (ab["sram_cells_um2"] / ab["pe_array_cells_um2"],
            FLOORPLAN_TPU_V1["sram"] / FLOORPLAN_TPU_V1["pe_array"])


def die_factor() -> float:
    """Published die / modelled cell area of the calibration chip (TPU v1)."""
    return PUBLISHED["tpu_v1"]["area_mm2"] / area_breakdown(load_chip("tpu_v1"),
                                                            load_tech("28nm"))["area_cells_mm2"]


ACC_RAMS_TPU_V1 = 256
"""TPU v1's accumulators are 256 accumulator RAMs (section 2 and Figure 4 of the paper), 4 MiB
in all: tpu_v1.yaml has ``memory.accumulator_banks: 256``."""


def v1_accumulator_sensitivity() -> dict[str, float]:
    """TPU v1 at CNN0's 86 TOPS: the accumulator's share of the SRAM power (W) as modelled (each
    access reads one of the 256 RAMs of 16 KiB) and as it would be with one 4 MiB bank (how
    earlier versions had to describe it), and the busy power of each — a diagnostic, not used
    for any other figure. The background fit is on the banked chip either way (its static power
    is the measured idle power)."""
    arch, t = chip_with_background("tpu_v1"), load_tech("28nm")
    macs = BUSY_V1["tops"] * 1e12 / 2
    _, psum_b = sram_bytes_per_mac(arch.tensor_engine, operand_bytes(arch))
    s = dynamic_scale(t, operating_voltage(arch, t))
    acc_kib = arch.memory.accumulator_kib
    rams = macs * psum_b * sram_pj_per_byte(t, acc_kib / arch.memory.accumulator_banks) * s * 1e-12
    one = macs * psum_b * sram_pj_per_byte(t, acc_kib) * s * 1e-12
    busy = peak_power_w(arch, "28nm", macs_per_s=macs)["power_w"]
    return {"acc_w": rams, "acc_one_bank_w": one, "busy_w": busy,
            "busy_one_bank_w": busy - rams + one}


# ---- NVDLA-class designs (all held out) ---------------------------------------------------------
NVDLA_CITE = ("NVDLA Primer, 'Example Area and Performance with NVDLA' (nvdla.org/primer.html; "
              "nvdla/nvdla.github.io primer.html)")
NVDLA_PRIMER = [
    # MACs, conv. buffer KB, SDRAM GB/s, cell area mm2 28 nm, 16 nm, ResNet-50 fps, peak mW, avg mW
    (2048, 512, 20.0, 5.5, 3.3, 269.0, 766.0, 291.0),
    (1024, 256, 15.0, 3.0, 1.8, 153.0, 375.0, 143.0),
    (512, 256, 10.0, 2.3, 1.4, 93.0, 210.0, 80.0),
    (256, 256, 5.0, 1.7, 1.0, 46.0, 135.0, 48.0),
    (128, 256, 2.0, 1.4, 0.84, 20.0, 82.0, 31.0),
    (64, 128, 1.0, 0.91, 0.55, 7.3, 55.0, 21.0),
    (32, 128, 0.5, 0.85, 0.51, 3.6, 45.0, 17.0),
]
"""The primer's table, confirmed in the retrieved page: "estimated synthesis area, and include
all memories required" (cell area of the IP: no SDRAM PHY, no pads), power (peak / average, 16 nm)
and ResNet-50 int8 frames/s "shown for a 1GHz frequency". Estimates by NVIDIA, not silicon
measurements."""
NVDLA_ATOMIC = {2048: (64, 32), 1024: (32, 32), 512: (32, 16), 256: (16, 16), 128: (16, 8),
                64: (8, 8), 32: (8, 4)}
"""MAC atomic sizes (C input channels x K kernels per cycle) per MAC count. Confirmed on
nvdla.org/hw/v2/scalability.html: nv_large C 64, K 32 (2048 MACs) with 16 conv-buffer banks of
64 B x 512, and nv_small C 8, K 8 (64 MACs) with 32 banks of 8 B x 512 (= 512 KB and 128 KB, the
primer's buffers for those rows). The other rows' splits are assumptions (the area model reads
only C x K)."""
RESNET50_MACS = 3.8e9
"""multiply-adds per 224x224 ResNet-50 inference: He et al., "Deep Residual Learning for Image
Recognition", CVPR 2016 (arXiv:1512.03385), Table 1: 3.8 x 10^9 FLOPs, counted as multiply-adds
(their footnote). Not retrieved in this session: marked unconfirmed."""


def nvdla_arch(macs: int, cbuf_kb: int, gbps: float) -> ArchSpec:
    """An NVDLA-class core as an ArchSpec: the convolution MAC array as a weight-stationary
    C x K array (:data:`NVDLA_ATOMIC`; NVDLA's CMAC holds each of K kernels' C weights in a MAC
    cell and broadcasts C input features to all K cells per cycle — WS reuse: a feature byte
    serves K MACs, a partial sum leaves the array once per C MACs; the primer describes no
    systolic skew, which changes cycles, not area or energy), the convolution buffer as the
    scratchpad (nv_large's 16 banks of 64 B, nv_small's 32 of 8 B; other rows 16 of 64 B —
    assumption), 32 KiB of accumulator (CACC assembly buffer; assumption), a K-lane vector unit
    (SDP/PDP/CDP; assumption), 1 GHz, int8, DDR at the primer's bandwidth."""
    c, k = NVDLA_ATOMIC[macs]
    banks, width = (32, 8) if macs == 64 else (16, 64)
    return ArchSpec.from_dict({
        "name": f"nvdla_{macs}", "clock_mhz": 1000.0,
        "tensor_engine": {"kind": "systolic", "rows": c, "cols": k, "dataflow": "ws",
                          "input_format": "int8", "weight_format": "int8",
                          "accumulator_format": "int32"},
        "memory": {"scratchpad_kib": cbuf_kb, "accumulator_kib": 32,
                   "scratchpad_banks": banks // 2, "bank_width_bytes": width},
        "offchip": {"bandwidth_gbps": gbps, "interface": "ddr4"},
        "vector_unit": {"lanes": k}}, source=f"nvdla_arch({macs})")


def core_area_mm2(arch: ArchSpec, tech: str, laid_out: bool) -> float:
    """The model's area of what an IP's cell area holds (no off-chip PHY): its cell area, or laid
    out (the model's ``area_mm2``) without the PHY and the ``uncore`` share (I/O, pads and TPU
    v1's unshaded area, which a synthesis cell area does not contain)."""
    ab = area_breakdown(arch, load_tech(tech))
    if not laid_out:
        return ab["area_cells_mm2"] - ab["phy_cells_um2"] / 1e6
    return ab["area_mm2"] - (ab["phy_um2"] + ab["uncore_um2"]) / 1e6


def nvdla_rows(power_tech: TechSpec | None = None) -> list[dict]:
    """One row per primer configuration: area at 28 and 16 nm (cells, and laid out with the
    model's layout factors, no PHY or uncore) and power at 16 nm and 1 GHz — at the full MAC rate against the primer's
    peak, and at ResNet-50's MAC rate (fps x :data:`RESNET50_MACS`) against its average (no
    DRAM device energy and no DDR PHY: the IP's power; static = the core's cell leakage, no board
    background — an IP block has no board). Nothing here was fitted: every row is held out.
    ``power_tech``: the table the power is computed with (default the 16 nm preset)."""
    out = []
    for macs, kb, gbps, a28, a16, fps, peak_mw, avg_mw in NVDLA_PRIMER:
        arch = nvdla_arch(macs, kb, gbps)
        r = {"chip": f"nvdla_{macs}", "macs": macs, "cbuf_kb": kb}
        for node, pub in (("28nm", a28), ("16nm", a16)):
            cells, lay = core_area_mm2(arch, node, False), core_area_mm2(arch, node, True)
            r[f"area_cells_{node}"], r[f"area_{node}"], r[f"area_pub_{node}"] = cells, lay, pub
            r[f"area_cells_err_{node}"], r[f"area_err_{node}"] = cells / pub - 1, lay / pub - 1
        t = power_tech or load_tech("16nm")
        st = static_power(arch, t)
        phy_j = st["phy_w"]              # one second of the DDR PHY: outside the IP
        peak = energy_breakdown(arch, t, macs=arch.peak_macs_per_s,
                                latency_s=1.0)["energy_j"] - phy_j
        avg = energy_breakdown(arch, t, macs=fps * RESNET50_MACS,
                               latency_s=1.0)["energy_j"] - phy_j
        r.update(peak_mw=peak * 1e3, peak_pub_mw=peak_mw, peak_err=peak * 1e3 / peak_mw - 1,
                 avg_mw=avg * 1e3, avg_pub_mw=avg_mw, avg_err=avg * 1e3 / avg_mw - 1,
                 static_mw=(st["static_w"] - st["phy_w"]) * 1e3,
                 dynamic_peak_mw=(peak - (st["static_w"] - phy_j)) * 1e3)
        out.append(r)
    return out


def nvdla_linear_bound() -> list[dict]:
    """What any power model linear in the MAC rate can reach on the primer's rows (no model
    involved): with P(rate) = static + k x rate, static >= 0, k >= 0, the ratio P(peak) /
    P(ResNet-50) is at most 1 / u, u = fps x :data:`RESNET50_MACS` / (MACs x 1 GHz) the
    ResNet-50 utilization; the primer's peak / average ratio rho exceeds 1 / u on every row, so
    (1 + peak error) / (1 + average error) <= 1 / (u rho) < 1 for every such model. ``ceiling``
    is that bound c = 1 / (u rho), ``peak_err_if_avg_exact`` the peak error such a model has at
    best when its average is exact (c - 1), ``balanced`` the smallest max(|peak error|,
    |average error|) it can have on the row ((1 - c) / (1 + c): peak -x, average +x)."""
    out = []
    for macs, _kb, _gbps, _a28, _a16, fps, peak_mw, avg_mw in NVDLA_PRIMER:
        u = fps * RESNET50_MACS / (macs * 1e9)
        rho = peak_mw / avg_mw
        out.append({"chip": f"nvdla_{macs}", "utilization": u, "rate_ratio": 1 / u,
                    "power_ratio": rho, "ceiling": 1 / (u * rho),
                    "peak_err_if_avg_exact": 1 / (u * rho) - 1,
                    "balanced": (1 - 1 / (u * rho)) / (1 + 1 / (u * rho))})
    return out


def _mean_abs(xs: list[float]) -> float:
    return sum(abs(x) for x in xs) / len(xs)


def nvdla_table(rs: list[dict]) -> str:
    head = (f"{'NVDLA':10} {'MACs':>5} {'CBUF':>5} | {'28nm':>5} {'pub':>5} {'err':>6} "
            f"{'cells':>5} {'err':>6} | {'16nm':>5} {'pub':>5} {'err':>6} {'cells':>5} "
            f"{'err':>6} | {'peak':>5} {'pub':>4} {'err':>6} | {'avg':>5} {'pub':>4} "
            f"{'err':>6} | {'static':>6} mW")
    lines = [head, "-" * len(head)]
    for r in rs:
        lines.append(
            f"{r['chip']:10} {r['macs']:5d} {r['cbuf_kb']:5d} | {r['area_28nm']:5.2f} "
            f"{r['area_pub_28nm']:5.2f} {_pct(r['area_err_28nm'])} {r['area_cells_28nm']:5.2f} "
            f"{_pct(r['area_cells_err_28nm'])} | {r['area_16nm']:5.2f} {r['area_pub_16nm']:5.2f} "
            f"{_pct(r['area_err_16nm'])} {r['area_cells_16nm']:5.2f} "
            f"{_pct(r['area_cells_err_16nm'])} | {r['peak_mw']:5.0f} {r['peak_pub_mw']:4.0f} "
            f"{_pct(r['peak_err'])} | {r['avg_mw']:5.0f} {r['avg_pub_mw']:4.0f} "
            f"{_pct(r['avg_err'])} | {r['static_mw']:6.1f}")
    lines.append("mean |error| (all held out; area: the model's laid out without PHY and uncore, "
                 "and its cell area): " + ", ".join(
                     f"{k} {_mean_abs([r[k] for r in rs]):.1%}" for k in
                     ("area_err_28nm", "area_cells_err_28nm", "area_err_16nm",
                      "area_cells_err_16nm", "peak_err", "avg_err")))
    bound = nvdla_linear_bound()
    balanced = ", ".join(f"{b['balanced']:.1%}" for b in bound)
    lines.append("primer peak / average power vs peak / ResNet-50 MAC rate (no model): " + ", ".join(
        f"{b['chip'][6:]} {b['power_ratio']:.2f} vs {b['rate_ratio']:.2f}" for b in bound)
        + "; a power linear in the MAC rate (static >= 0) with the average exact has peak error "
        "at best " + ", ".join(f"{_pct(b['peak_err_if_avg_exact']).strip()}" for b in bound)
        + f" (mean |.| {_mean_abs([b['peak_err_if_avg_exact'] for b in bound]):.1%}); balanced, "
        f"max(|peak|, |avg| error) >= {_mean_abs([b['balanced'] for b in bound]):.1%} on the mean "
        f"(rows {balanced})")
    return "\n".join(lines)




# ---- Eyeriss (held out) -------------------------------------------------------------------------
EYERISS_CITE = ("Chen, Krishna, Emer, Sze, 'Eyeriss: An Energy-Efficient Reconfigurable "
                "Accelerator for Deep Convolutional Neural Networks', IEEE JSSC 52(1) 2017, "
                "Tables IV and V")
EYERISS = {"tech": "65nm", "role": "held out", "pes": 168, "array": (12, 14),
           "core_mm2": 3.5 * 3.5, "chip_mm2": 4.0 * 4.0, "glb_kb": 108.0,
           "onchip_sram_kb": 181.5, "spad_bytes": {"filter": 448, "ifmap": 24, "psum": 48},
           "peak_gmacs": (16.8, 42.0), "clock_mhz": (100.0, 250.0), "supply_v": (0.82, 1.17),
           "bits": 16}
"""Eyeriss' published chip figures. Confirmed in JSSC Table IV as OCR'd in the public repository
cucapra/fodlam (raw/eyeriss-tableIV.txt, https://github.com/cucapra/fodlam; the OCR drops
decimal points — "35 mm x 35 mm", "16‘842‘0 GMACS" — read with the chip size 4.0 mm x 4.0 mm
beside it): TSMC 65nm LP 1P9M, chip 4.0 x 4.0 mm, core area 3.5 x 3.5 mm (12.25 mm2; RVME, ICCD
2025, Table IV quotes Eyeriss at 12.25 mm2), 168 PEs, on-chip SRAM 181.5 KB, global buffer 108.0
KB, scratch pads per PE: filter weights 448 B (SRAM, 224 x 16 b), feature maps 24 B (registers,
12 x 16 b), partial sums 48 B (registers, 24 x 16 b), core supply 0.82-1.17 V, core clock
100-250 MHz, peak throughput 16.8-42.0 GMACS, 16-bit fixed point. The 12 x 14 array: the JSSC
text as summarised in agastyaseth/agastyaseth.github.io (_posts/2024-02-05-eyeriss-...md); 168
PEs: the JSSC abstract (https://vdocuments.site/ieee-journal-of-solid-state-circuits-1-eyeriss-
an-dejan-markovic-y-h-chen-and.html). Consistency: 181.5 KB = 108 KB + 168 x 448 B (KB = 1024
B); 16.8 and 42.0 GMACS = 168 MACs x 100 and 250 MHz."""
EYERISS_ALEXNET = {"power_mw": 278.0, "latency_ms": 115.3, "processing_ms": 103.5,
                   "macs": 2.666e9, "batch": 4, "active_pes": 143, "zeros_in_ifmaps": 0.5753,
                   "glb_mb": 208.5, "clock_mhz": 200.0}
"""The published operating point: AlexNet's five CONV layers at batch 4 (JSSC Table V, Total
row, OCR'd in cucapra/fodlam raw/eyeriss-tableV.txt and data/eyeriss-alexnet.csv): 278 mW,
115.3 ms total latency (103.5 ms processing), 2.666 G MACs, 143 active PEs on average, 57.53 %
zeros in the ifmaps, 208.5 MB of global-buffer accesses. The abstract confirms "35 frames/s
... for AlexNet at 278 mW (batch size N = 4)" (4 / 115.3 ms = 34.7 frames/s) and the ISSCC
2016 paper's 666 million MACs per image
(https://scilit.com/publications/0afcbe89c9c50d7b58f32d3cfdaf8599; x 4 = 2.664 G). The 200 MHz
core clock of the measurement is confirmed at second hand only (yue831107/noc-knowledge-base
docs/08-case-studies/mit-eyeriss.md: 65nm, 168 PEs, 200 MHz, 278 mW; RVME, ICCD 2025, Table IV:
Eyeriss 65nm, 200 MHz); the supply of the measurement (1 V is often quoted) was not found in a
retrieved text and is not used: the model runs 200 MHz at the 65 nm curve's nominal 1.0 V
(configs/tech/65nm.yaml, an assumption)."""


def eyeriss_mac_rate() -> float:
    """MAC/s of the published AlexNet run: its MACs over its total latency (2.666 G / 115.3 ms
    = 23.1 G MAC/s, 0.69 of the 168 x 200 MHz peak) — the utilization the power check assumes."""
    a = EYERISS_ALEXNET
    return a["macs"] / (a["latency_ms"] * 1e-3)


def eyeriss_row(arch: ArchSpec | None = None) -> dict:
    """Eyeriss predicted vs published (nothing fitted on it): the core area (the model's laid-out
    area without the off-chip PHY — the chip has none; a die photo's core is laid out, so the
    uncore share is in; also without it, as the NVDLA IP, and the cells), peak throughput at the
    published top clock (250 MHz) and power at the AlexNet MAC rate (:func:`eyeriss_mac_rate`):
    the dynamic MAC + SRAM terms at 200 MHz (the 65 nm curve's nominal 1.0 V) plus cell
    leakage, no PHY and no board background (the published figure is the chip's). ``arch``:
    the ArchSpec (default configs/validation/eyeriss.yaml). Errors: predicted / published - 1."""
    arch = arch or load_chip("eyeriss")
    t, pub = load_tech(EYERISS["tech"]), EYERISS
    ab = area_breakdown(arch, t)
    area = ab["area_mm2"] - ab["phy_um2"] / 1e6
    ip, cells = core_area_mm2(arch, "65nm", True), core_area_mm2(arch, "65nm", False)
    top = pub["clock_mhz"][1]
    peak_gops = 2 * arch.tensor_engine.macs_per_cycle * top * 1e6 / 1e9
    rate = eyeriss_mac_rate()
    e = energy_breakdown(arch, t, macs=rate, latency_s=1.0)
    st = static_power(arch, t)
    power_mw = (e["energy_j"] - st["phy_w"]) * 1e3
    spad_mw = (rate * pe_storage_pj_per_mac(arch, t) * dynamic_scale(t, e["voltage_v"])
               * 1e-9)                   # part of mac_mw: the PEs' local-storage accesses
    pw = EYERISS_ALEXNET["power_mw"]
    # the SRAM term split (bare MACs: the engine's steady-state bytes per MAC): operands from the
    # scratchpad (the global buffer) and psum read-modify-writes in the accumulator (standing
    # for the psum scratchpads), at each bank's energy x (V / v_nom)^2
    operand_b, psum_b = sram_bytes_per_mac(arch.tensor_engine, operand_bytes(arch))
    sp_kib, acc_kib = sram_bank_kib(arch)
    vs = dynamic_scale(t, e["voltage_v"]) * rate * 1e-9
    return {"chip": "eyeriss", "tech": pub["tech"], "role": pub["role"], "cite": EYERISS_CITE,
            "format": arch.tensor_engine.input_format,
            "accumulator": arch.tensor_engine.accumulator_format,
            "pe_accesses": pe_storage_accesses(arch),
            "area_mm2": area, "area_pub_mm2": pub["core_mm2"],
            "area_err": area / pub["core_mm2"] - 1,
            "area_ip_mm2": ip, "area_ip_err": ip / pub["core_mm2"] - 1,
            "area_cells_mm2": cells, "area_cells_err": cells / pub["core_mm2"] - 1,
            "peak_gops": peak_gops, "peak_pub_gops": 2 * pub["peak_gmacs"][1],
            "peak_err": peak_gops / (2 * pub["peak_gmacs"][1]) - 1, "peak_clock_mhz": top,
            "mac_rate": rate, "utilization": rate / arch.peak_macs_per_s,
            "power_mw": power_mw, "power_pub_mw": pw, "power_err": power_mw / pw - 1,
            "mac_mw": e["mac_pj"] * 1e-9, "sram_mw": e["sram_pj"] * 1e-9,
            "sram_operand_mw": operand_b * sram_pj_per_byte(t, sp_kib) * vs,
            "sram_psum_mw": psum_b * sram_pj_per_byte(t, acc_kib) * vs,
            "psum_b_per_mac": psum_b,
            "pe_storage_mw": spad_mw,
            "pe_storage_cells_mm2": (ab["pe_registers_cells_um2"] + ab["pe_sram_cells_um2"]) / 1e6,
            "scratchpad_b_per_mac": sram_bytes_per_mac(arch.tensor_engine, operand_bytes(arch))[0],
            "glb_b_per_mac_pub": EYERISS_ALEXNET["glb_mb"] * 1e6 / EYERISS_ALEXNET["macs"],
            "leakage_mw": st["leakage_w"] * 1e3, "voltage_v": e["voltage_v"]}


def eyeriss_variant(fmt: str, stated_accesses: bool) -> ArchSpec:
    """configs/validation/eyeriss.yaml with operand format ``fmt`` (int8 or int16, int32
    accumulator) and with or without its stated ``pe_storage.accesses_per_mac`` (without: the ws
    rule, one filter read per MAC) — the steps between the int8 / ws-rule description and the
    row, a diagnostic of what each moved."""
    data = load_chip("eyeriss").model_dump(mode="json", exclude_none=True)
    te = {**data["tensor_engine"], "input_format": fmt, "weight_format": fmt,
          "accumulator_format": "int32"}
    if not stated_accesses:
        te["pe_storage"] = {k: v for k, v in te["pe_storage"].items() if k != "accesses_per_mac"}
    return ArchSpec.from_dict({**data, "tensor_engine": te}, source=f"eyeriss as {fmt}")


def eyeriss_table(r: dict) -> str:
    head = (f"{'Eyeriss':8} {'role':8} {'fmt':5} | {'core':>5} {'pub':>5} {'err':>6} "
            f"{'-uncore':>7} {'err':>6} {'cells':>5} {'err':>6} | {'GOPS':>5} {'pub':>5} "
            f"{'err':>6} | {'mW':>5} {'pub':>4} {'err':>6} ({'MAC':>4} [{'spad':>4}] + "
            f"{'SRAM':>4} + {'leak':>4} mW at {'V':>5})")
    lines = [head, "-" * len(head)]
    for x in (r,):
        lines.append(
            f"{x['chip']:8} {x['role']:8} {x['format']:5} | "
            f"{x['area_mm2']:5.2f} {x['area_pub_mm2']:5.2f} {_pct(x['area_err'])} "
            f"{x['area_ip_mm2']:7.2f} {_pct(x['area_ip_err'])} {x['area_cells_mm2']:5.2f} "
            f"{_pct(x['area_cells_err'])} | {x['peak_gops']:5.1f} {x['peak_pub_gops']:5.1f} "
            f"{_pct(x['peak_err'])} | {x['power_mw']:5.1f} {x['power_pub_mw']:4.0f} "
            f"{_pct(x['power_err'])} ({x['mac_mw']:4.1f} [{x['pe_storage_mw']:4.1f}] + "
            f"{x['sram_mw']:4.1f} + {x['leakage_mw']:4.1f} mW at {x['voltage_v']:.3f})")
    acc = r["pe_accesses"]
    lines.append(f"eyeriss: 65 nm, 12x14 ws systolic (the array's timing and SRAM reuse; "
                 f"row-stationary not describable), {r['format']} -> {r['accumulator']} for "
                 f"16-bit fixed point; power at AlexNet's {r['mac_rate'] / 1e9:.1f} G MAC/s "
                 f"(2.666 G MACs / 115.3 ms, "
                 f"utilization {r['utilization']:.2f} of 168 x 200 MHz), no PHY, no background; "
                 f"peak at {r['peak_clock_mhz']:.0f} MHz; the PEs' filter SRAM + ifmap registers "
                 f"(tensor_engine.pe_storage) {r['pe_storage_cells_mm2']:.2f} mm2 of cells, "
                 f"{r['pe_storage_mw']:.1f} mW of accesses ([spad], part of MAC: per MAC "
                 f"{acc.sram_reads:g} SRAM read, {acc.register_reads:g} register reads and "
                 f"{acc.register_writes:g} register write of {acc.bits} b, "
                 f"pe_storage.accesses_per_mac); scratchpad bytes per MAC: model "
                 f"{r['scratchpad_b_per_mac']:.3f} (12x14 WS reuse), published global-buffer "
                 f"accesses 208.5 MB / 2.666 G MACs = {r['glb_b_per_mac_pub']:.3f}; SRAM "
                 f"{r['sram_mw']:.1f} mW = operands {r['sram_operand_mw']:.1f} + accumulator "
                 f"psum read-modify-writes {r['sram_psum_mw']:.1f} ({r['psum_b_per_mac']:.3f} B "
                 f"per MAC; the accumulator stands for the psum scratchpads, whose per-MAC "
                 f"register accesses are also in [spad])")
    steps = []
    for fmt, stated in (("int8", False), ("int8", True), ("int16", False), ("int16", True)):
        x = eyeriss_row(eyeriss_variant(fmt, stated))
        steps.append(f"{fmt} {'RS accesses' if stated else 'ws rule'} {x['area_mm2']:.2f} mm2 "
                     f"({x['area_err']:+.1%}), {x['power_mw']:.1f} mW ({x['power_err']:+.1%}; "
                     f"{x['mac_mw']:.1f} [{x['pe_storage_mw']:.1f}] + {x['sram_mw']:.1f} + "
                     f"{x['leakage_mw']:.1f})")
    lines.append("eyeriss steps (diagnostic; the row is the last): " + "; ".join(steps))
    return "\n".join(lines)


# ---- 7 nm int8 density (TOPS per mm2) -----------------------------------------------------------
RAPID_7NM = {"area_mm2": 36.0, "fp8_tflops": 26.2, "int4_tops": 104.9}
"""IBM RaPiD, a 4-core AI chip in 7 nm EUV: "The 36mm2 RAPID chip fabricated in 7nm EUV
technology" (Venkataramani et al., ISCA 2021, abstract on research.ibm.com) and 26.2 TFLOPS
peak hybrid-FP8 / 104.9 TOPS peak INT4 (Agrawal et al., IEEE JSSC 2022, "A 7-nm four-core
mixed-precision AI chip ...", abstract on research.ibm.com); both abstracts read in this
session. No int8 mode: it brackets an int8 design's whole-chip density (an int8 MAC is larger
than an int4 one, and an FP8 FMA with its fp16/fp32 accumulation larger than an int8 MAC)."""
SAMSUNG_4NM_TOPS_PER_MM2 = 3.45
"""Samsung's 8K-MAC NPU in a 4 nm mobile SoC, int8, whole NPU: IEEE JSSC 58(1), 2023, pp.
189-202, doi:10.1109/JSSC.2022.3205713 (abstract on IEEE Xplore, read in this session): two
nodes newer than 7 nm, so an upper bound for a 7 nm design."""


def pe_tops_per_mm2(tech: str, fmt: str, clock_mhz: float) -> float:
    """TOPS per mm2 of PE cells alone: 2 x clock / (the table's PE cell area: (mult + add) x
    pe_overhead)."""
    return 2 * clock_mhz * 1e6 / 1e12 / (load_tech(tech).pe_um2(fmt) / 1e6)


def largest_rtl_int8_cube() -> ArchSpec:
    """The densest int8 design the RTL generators build: one 64x64x64 cube
    (``tilewright.arch.RTL_MAX_ARRAY_DIM`` per dimension) at the 7 nm curve's nominal 1050 MHz,
    8 MiB scratchpad, 2 MiB accumulator, 200 GB/s of DDR4 (as the density check of the previous
    session; the memories are an assumption), 64 vector lanes."""
    from tilewright.arch import RTL_MAX_ARRAY_DIM
    n = RTL_MAX_ARRAY_DIM
    return ArchSpec.from_dict({
        "name": f"cube{n}x{n}x{n}", "clock_mhz": 1050.0,
        "tensor_engine": {"kind": "cube", "rows": n, "depth": n, "cols": n,
                          "input_format": "int8", "weight_format": "int8",
                          "accumulator_format": "int32"},
        "memory": {"scratchpad_kib": 8192, "accumulator_kib": 2048},
        "offchip": {"bandwidth_gbps": 200.0, "interface": "ddr4"},
        "vector_unit": {"lanes": n}}, source="largest_rtl_int8_cube()")


def density_rows() -> list[dict]:
    """Whole-chip TOPS per mm2 of the held-out 7 nm TPUs: the model's (cell area, and laid out:
    ``area_mm2``) against the published lower bound (published TOPS over the die-area upper
    bound), and the error of each against that bound."""
    out = []
    for name in ("tpu_v4i", "tpu_v4"):
        pub, arch = PUBLISHED[name], chip_with_background(name)
        t, bound = pub["tech"], pub["tops"] / pub["area_mm2"]
        ab = area_breakdown(arch, load_tech(t))
        raw = peak_tops(arch) / ab["area_cells_mm2"]
        model = peak_tops(arch) / ab["area_mm2"]
        out.append({"chip": name, "pub_min": bound, "raw": raw, "model": model,
                    "raw_x": raw / bound, "model_err": model / bound - 1})
    return out


def cube_density() -> dict[str, float]:
    """TOPS per mm2 of :func:`largest_rtl_int8_cube` at 7 nm: cells and laid out."""
    arch = largest_rtl_int8_cube()
    ab = area_breakdown(arch, load_tech("7nm"))
    return {"tops": peak_tops(arch), "area_mm2": ab["area_mm2"],
            "area_cells_mm2": ab["area_cells_mm2"], "raw": peak_tops(arch) / ab["area_cells_mm2"],
            "model": peak_tops(arch) / ab["area_mm2"]}


def density_table() -> str:
    k = layout_fit().compute
    pe = pe_tops_per_mm2("7nm", "int8", 1050.0)
    lines = ["7 nm TOPS/mm2 (int8 = bf16 rate on the TPUs): model cells / laid out (area_mm2) "
             "vs published lower bound (TOPS / die upper bound)"]
    for r in density_rows():
        lines.append(f"{r['chip']:8} cells {r['raw']:.3f} ({r['raw_x']:.2f}x the bound), model "
                     f"{r['model']:.3f} ({r['model_err']:+.1%}) vs >= {r['pub_min']:.3f}")
    c = cube_density()
    lines.append(f"largest RTL int8 cube (64x64x64, 1050 MHz, 8+2 MiB, 200 GB/s DDR4): "
                 f"{c['tops']:.0f} TOPS on {c['area_mm2']:.1f} mm2 = {c['model']:.2f} TOPS/mm2 "
                 f"(cells {c['area_cells_mm2']:.1f} mm2, {c['raw']:.1f})")
    lines.append(f"int8 PE array alone at 7 nm, 1050 MHz: {pe:.1f} TOPS/mm2 cells, {pe / k:.1f} "
                 f"with the compute layout factor ({k:.2f}); whole chips published: RaPiD 7 nm "
                 f"{RAPID_7NM['fp8_tflops'] / RAPID_7NM['area_mm2']:.2f} (FP8) .. "
                 f"{RAPID_7NM['int4_tops'] / RAPID_7NM['area_mm2']:.2f} (INT4), Samsung 4 nm NPU "
                 f"{SAMSUNG_4NM_TOPS_PER_MM2:.2f} (int8)")
    return "\n".join(lines)

# ---- the PEs' pipeline registers: a diagnostic of the missing dynamic term (not in the model) ---
ALADDIN_REG_PJ_PER_BIT = energy_area.ALADDIN_40NM_2NS["reg_pj_per_bit"]
"""pJ per register bit per clock cycle, Aladdin's 40 nm library at a 2 ns clock
(``energy_area.ALADDIN_40NM_2NS``: ``REG_2ns_dynamic_energy``; its dynamic power 4.505785e-3 mW
is internal power 3.967495e-3 + switching 5.38193e-4, internal power a flip-flop draws on every
clock edge whatever its data)."""


def register_pj_per_bit(tech: str) -> float:
    """pJ per register bit per cycle at ``tech``'s nominal supply: the model's
    ``energy_area.register_pj_per_bit`` (Aladdin's register : 32-bit adder energy ratio times the
    table's int32 accumulator add; derived, not fitted)."""
    return energy_area.register_pj_per_bit(load_tech(tech))


def pe_register_bits(arch: ArchSpec) -> int:
    """Register bits a weight-stationary systolic PE clocks each cycle: the stationary weight,
    the input passed to the right and the partial sum passed down (weight + input + accumulator
    bits: int8 8 + 8 + 32 = 48; bf16 16 + 16 + 32 = 64). Double-buffered weight shadow
    registers are left out (a lower bound)."""
    te = arch.tensor_engine
    return bits_of(te.weight_format) + bits_of(te.input_format) + bits_of(te.accumulator_format)


def register_w(arch: ArchSpec, tech: str, macs_per_s: float | None = None) -> float:
    """W the PEs' registers burn: PEs x bits x :func:`register_pj_per_bit` x (V / v_nom)^2 x
    clock — every cycle (``macs_per_s`` None: no clock gating), or only on the cycles that do
    MACs (``macs_per_s`` given: the fraction ``macs_per_s / peak`` of the cycles, ideal gating)."""
    t = load_tech(tech)
    per_cycle = (arch.tensor_engine.macs_per_cycle * pe_register_bits(arch)
                 * register_pj_per_bit(tech) * dynamic_scale(t, operating_voltage(arch, t)))
    rate = arch.peak_macs_per_s if macs_per_s is None else macs_per_s
    return per_cycle * 1e-12 * rate / arch.tensor_engine.macs_per_cycle


def register_sensitivity() -> dict:
    """The errors with :func:`register_w` added, as a diagnostic (the model's figures are
    unchanged): NVDLA peak (registers clocked every cycle) and average (clocked every cycle, or
    gated to the ResNet-50 MAC rate); TPU v1 busy at CNN0's rate (its background, fitted on
    idle power, does not move: registers burn only when clocked); TPU v4 at the full MAC rate
    against its measured maximum and mean."""
    nv = []
    for r, (macs, kb, gbps, _a28, _a16, fps, peak_mw, avg_mw) in zip(nvdla_rows(),
                                                                      NVDLA_PRIMER):
        arch = nvdla_arch(macs, kb, gbps)
        reg = register_w(arch, "16nm") * 1e3
        gated = register_w(arch, "16nm", fps * RESNET50_MACS) * 1e3
        nv.append({"chip": r["chip"], "reg_mw": reg, "reg_gated_mw": gated,
                   "peak_err": (r["peak_mw"] + reg) / peak_mw - 1,
                   "avg_err": (r["avg_mw"] + reg) / avg_mw - 1,
                   "avg_gated_err": (r["avg_mw"] + gated) / avg_mw - 1})
    v1 = chip_with_background("tpu_v1")
    busy_rate = BUSY_V1["tops"] * 1e12 / 2
    busy = peak_power_w(v1, "28nm", macs_per_s=busy_rate)["power_w"]
    v4 = chip_with_background("tpu_v4")
    p4 = peak_power_w(v4, "7nm")["power_w"]
    reg1, reg4 = register_w(v1, "28nm"), register_w(v4, "7nm")
    eye, rate = load_chip("eyeriss"), eyeriss_mac_rate()
    p_eye = eyeriss_row(eye)["power_mw"]
    reg_e, reg_e_gated = register_w(eye, "65nm") * 1e3, register_w(eye, "65nm", rate) * 1e3
    pub_e = EYERISS_ALEXNET["power_mw"]
    return {"nvdla": nv,
            "mean_abs": {k: _mean_abs([x[k] for x in nv])
                         for k in ("peak_err", "avg_err", "avg_gated_err")},
            "tpu_v1": {"reg_w": reg1, "busy_w": busy + reg1,
                       "busy_err": (busy + reg1) / BUSY_V1["power_w"] - 1},
            "tpu_v4": {"reg_w": reg4, "power_w": p4 + reg4,
                       "max_err": (p4 + reg4) / PUBLISHED["tpu_v4"]["power_w"] - 1,
                       "mean_err": (p4 + reg4) / MEAN_W["tpu_v4"] - 1},
            "eyeriss": {"reg_mw": reg_e, "reg_gated_mw": reg_e_gated,
                        "power_err": (p_eye + reg_e) / pub_e - 1,
                        "power_gated_err": (p_eye + reg_e_gated) / pub_e - 1}}



def register_table(s: dict) -> str:
    fj = {n: register_pj_per_bit(n) * 1e3 for n in ("16nm", "28nm", "7nm")}
    lines = [f"PE registers (diagnostic, not in the model): {ALADDIN_REG_PJ_PER_BIT * 1e3:.3f} fJ "
             f"per bit per cycle at 40 nm (Aladdin) -> 16 nm {fj['16nm']:.3f}, 28 nm "
             f"{fj['28nm']:.3f}, 7 nm {fj['7nm']:.3f} fJ",
             f"{'NVDLA':10} {'reg mW':>6} {'peak err':>8} | {'avg err clocked':>15} "
             f"{'gated':>7}"]
    for x in s["nvdla"]:
        lines.append(f"{x['chip']:10} {x['reg_mw']:6.1f} {_pct(x['peak_err']):>8} | "
                     f"{_pct(x['avg_err']):>15} {_pct(x['avg_gated_err']):>7}")
    m = s["mean_abs"]
    lines.append(f"mean |error| with registers: peak {m['peak_err']:.1%}, average "
                 f"{m['avg_err']:.1%} (clocked every cycle) / {m['avg_gated_err']:.1%} (gated)")
    v1, v4 = s["tpu_v1"], s["tpu_v4"]
    lines.append(f"tpu_v1 busy with registers {v1['busy_w']:.1f} W (+{v1['reg_w']:.1f}) vs 40 W "
                 f"measured ({v1['busy_err']:+.1%}); tpu_v4 {v4['power_w']:.1f} W "
                 f"(+{v4['reg_w']:.1f}) vs 192 max ({v4['max_err']:+.1%}) / 170 mean "
                 f"({v4['mean_err']:+.1%})")
    e = s["eyeriss"]
    lines.append(f"eyeriss (65 nm, {register_pj_per_bit('65nm') * 1e3:.2f} fJ per bit) on "
                 f"AlexNet with registers: +{e['reg_mw']:.1f} mW clocked every cycle "
                 f"({e['power_err']:+.1%} of 278 mW) / +{e['reg_gated_mw']:.1f} mW gated to "
                 f"its MAC rate ({e['power_gated_err']:+.1%})")
    return "\n".join(lines)

def _err(x: float, pub: float | None) -> float | None:
    return x / pub - 1 if pub else None


def rows() -> list[dict]:
    """One row per chip: predicted, published and error of area (the model's, laid out; its
    cell area; the cell area x the TPU v1 die factor), peak TOPS and power."""
    k = die_factor()
    out = []
    for name, pub in PUBLISHED.items():
        arch = chip_with_background(name)
        ab = area_breakdown(arch, load_tech(pub["tech"]))
        area, cells = ab["area_mm2"], ab["area_cells_mm2"]
        p = peak_power_w(arch, pub["tech"])
        pa = pub["area_mm2"]
        r = {"chip": name, "tech": pub["tech"], "role": pub["role"], "cite": pub["cite"],
             "area_mm2": area, "area_pub_mm2": pa, "area_err": _err(area, pa),
             "area_cells_mm2": cells, "area_cells_err": _err(cells, pa),
             "area_die_mm2": cells * k, "area_die_err": _err(cells * k, pa),
             "tops": peak_tops(arch), "tops_pub": pub["tops"],
             "tops_err": peak_tops(arch) / pub["tops"] - 1,
             "power_w": p["power_w"], "mac_w": p["mac_w"], "sram_w": p["sram_w"],
             "dynamic_w": p["dynamic_w"], "static_w": p["static_w"],
             "leakage_w": p["leakage_w"], "phy_w": p["phy_w"], "background_w": p["background_w"],
             "with_dram_w": p["with_dram_w"],
             "with_dram_err": p["with_dram_w"] / pub["power_w"] - 1,
             "voltage_v": p["voltage_v"], "power_pub_w": pub["power_w"],
             "power_kind": pub["power_kind"], "power_err": p["power_w"] / pub["power_w"] - 1}
        if name in IDLE_W:
            r["idle_pub_w"], r["idle_err"] = IDLE_W[name], p["static_w"] / IDLE_W[name] - 1
        if name in MEAN_W:
            r["mean_pub_w"], r["mean_err"] = MEAN_W[name], p["power_w"] / MEAN_W[name] - 1
        if name == "tpu_v1":
            b = peak_power_w(arch, pub["tech"], macs_per_s=BUSY_V1["tops"] * 1e12 / 2)
            r["busy_w"], r["busy_pub_w"] = b["power_w"], BUSY_V1["power_w"]
            r["busy_err"] = b["power_w"] / BUSY_V1["power_w"] - 1
        out.append(r)
    return out


def _pct(x: float | None) -> str:
    return f"{x:+6.1%}" if x is not None else f"{'-':>6}"


def table(rs: list[dict]) -> str:
    head = (f"{'chip':8} {'role':11} {'cells':>8} {'<pub':>5} {'err':>6} {'x die':>5} "
            f"{'err':>6} {'area':>5} {'err':>6} | {'TOPS':>5} {'pub':>4} {'err':>6} | "
            f"{'W':>5} {'pub':>4} {'kind':12} {'err':>6} {'+DRAM':>5} {'err':>6} "
            f"({'MAC':>5} + {'SRAM':>5} + {'leak':>4} + {'PHY':>4} + {'bkgd':>4} W at "
            f"{'V':>5})")
    lines = [head, "-" * len(head)]
    for r in rs:
        lines.append(
            f"{r['chip']:8} {r['role']:11} {r['area_cells_mm2']:8.1f} {r['area_pub_mm2']:5.0f} "
            f"{_pct(r['area_cells_err'])} {r['area_die_mm2']:5.0f} {_pct(r['area_die_err'])} "
            f"{r['area_mm2']:5.0f} {_pct(r['area_err'])} | "
            f"{r['tops']:5.1f} {r['tops_pub']:4.0f} {r['tops_err']:+6.1%} | "
            f"{r['power_w']:5.1f} {r['power_pub_w']:4.0f} {r['power_kind']:12} "
            f"{r['power_err']:+6.1%} {r['with_dram_w']:5.1f} {r['with_dram_err']:+6.1%} "
            f"({r['mac_w']:5.1f} + {r['sram_w']:5.1f} + {r['leakage_w']:4.1f} + "
            f"{r['phy_w']:4.1f} + {r['background_w']:4.1f} W at {r['voltage_v']:.3f})")
    for r in rs:
        if "busy_w" in r:
            lines.append(f"{r['chip']}: power at CNN0's 86 TOPS {r['busy_w']:.1f} W vs measured "
                         f"busy {r['busy_pub_w']:.0f} W ({r['busy_err']:+.1%}); static "
                         f"{r['static_w']:.1f} W vs measured idle {r['idle_pub_w']:.0f} W "
                         f"(= cell leakage {r['leakage_w']:.2f} + PHY {r['phy_w']:.2f} + "
                         f"background {r['background_w']:.2f} W, the background fitted)")
        if "mean_pub_w" in r:
            lines.append(f"{r['chip']}: power at the full MAC rate {r['power_w']:.1f} W vs "
                         f"measured mean {r['mean_pub_w']:.0f} W ({r['mean_err']:+.1%})")
    a = v1_accumulator_sensitivity()
    lines.append(f"tpu_v1: accumulator reads {a['acc_w']:.1f} W of that (the paper's "
                 f"{ACC_RAMS_TPU_V1} RAMs of 16 KiB); as one 4 MiB bank "
                 f"{a['acc_one_bank_w']:.1f} W -> busy {a['busy_one_bank_w']:.1f} W "
                 f"({a['busy_one_bank_w'] / BUSY_V1['power_w'] - 1:+.1%})")
    lines.append(f"die factor (TPU v1 published / model cell area) = {die_factor():.3f}")
    k, m = class_factors(), model_classes(load_chip("tpu_v1"), "28nm")
    lines.append("TPU v1 area by class, model cells mm2 / floor plan mm2 (factor): " + ", ".join(
        f"{c} {m[c]:.1f} / {TPU_V1_FLOORPLAN[c] * PUBLISHED['tpu_v1']['area_mm2']:.1f} "
        f"({k[c]:.2f})" for c in CLASSES) + f"; layout factors (model): sram {layout_fit().sram:.2f}, "
        f"compute {layout_fit().compute:.2f}, uncore {layout_fit().uncore:.3f} (I/O, control, "
        f"unshaded 21 % beyond the modelled PHY and fixed block)")
    m, p = floorplan_ratio()
    lines.append(f"TPU v1 SRAM / PE-array area: model {m:.3f}, floor plan {p:.3f} "
                 f"(err {m / p - 1:+.1%})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args(argv)
    rs, nv = rows(), nvdla_rows()
    print(json.dumps({"chips": rs, "nvdla": nv, "calibration": list(CALIBRATION),
                      "background_fit_w": background_fit(), "density_7nm": density_rows(),
                      "eyeriss": eyeriss_row(), "nvdla_linear_bound": nvdla_linear_bound(),
                      "cube_7nm": cube_density(), "layout_factors": layout_fit()._asdict(),
                      "diagnostics": {"pe_registers": register_sensitivity()}},
                     indent=1) if args.json
          else table(rs) + "\n\n" + nvdla_table(nv) + "\n\n" + eyeriss_table(eyeriss_row())
          + "\n\n"
          + density_table() + "\n\n" + register_table(register_sensitivity()))


if __name__ == "__main__":
    main()
