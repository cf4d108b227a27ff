"""Energy/area model: the technology tables against the published figures (typed here from the
retrieved copies cited in each table's ``sources``), the scaling rules, and the model's closed
forms, including SRAM banking."""

from __future__ import annotations

import math
import re

import pytest

from tilewright.arch import ArchSpec, load_arch
from tilewright.dataflow_sim.energy_area import (TECH_DIR, TechError, area_breakdown,
                                                 energy_breakdown, layout_fit, load_tech,
                                                 sram_bank_kib, sram_pj_per_byte)

# Horowitz, ISSCC 2014, 45 nm 0.9 V energy table, pJ (DRAM: nJ range per 64-bit access).
H14_PJ = {"add8": 0.03, "add32": 0.1, "mult8": 0.2, "mult32": 3.1, "fadd16": 0.4, "fmult16": 1.1,
          "fadd32": 0.9, "fmult32": 3.7, "sram_8k": 10.0, "sram_32k": 20.0, "sram_1m": 100.0}
H14_DRAM_NJ = (1.3, 2.6)
# Jouppi et al., ISCA 2021, Table 2, 7 nm column, pJ (SRAM per 64-bit read; HBM2 range).
J21_PJ = {"add8": 0.007, "add32": 0.03, "mult8": 0.07, "fmult16": 0.34, "fadd32": 0.38,
          "fmult32": 1.31, "sram_8k": 7.5, "sram_32k": 8.5, "sram_1m": 14.0}
J21_HBM2_PJ = (250.0, 450.0)
# Keckler et al., IEEE Micro 2011, Table 1: 40 nm 256 bits over 10 mm; wire fJ/bit/mm.
K11_PJ_256B_10MM_40NM, K11_FJ_40NM, K11_FJ_10NM = 310.0, 240.0, 150.0
BITCELL_45NM_UM2, BITCELL_7NM_UM2 = 0.346, 0.027      # Intel 2006; Chang et al., ISSCC 2017
# Aladdin (Shao et al., ISCA 2014), harvard-acc/ALADDIN common/power_func.h: commercial 40 nm
# functional units, um^2, 2 ns column (32-bit integer add and multiply, 3-stage fp32/fp64 units).
AL14_40NM_2NS_UM2 = {"add32": 179.4430, "mult32": 5137.736, "fadd32": 3007.087,
                     "fmult32": 6153.321, "fmult64": 18060.79}
# Stillmaker & Baas, Integration 2017, area factor 45 nm -> 7 nm (hwcomponents AREA_SCALING).
SB17_AREA_45_TO_7 = 0.059
# benchmarks/energy_area_vs_yosys.py, 2026-11-30: transistors per PE of the generated int8 cores
# (pooled ws+os slope) and of a lone 8x8 multiplier and 32-bit adder.
YC_TRANSISTORS_PER_PE, YC_MULT8, YC_ADD32 = 7372, 2972, 1158
# benchmarks/format_units_vs_yosys.py, 2026-12-02 (same flow): transistors of the RTL's format
# units (rtl/fp_arith.py Fp8Mul, Fp32Add; rtl/mx_core.py Pow2Scale).
YF_FP8MUL = {"fp8-e4m3": 1288, "fp8-e5m2": 1100}
YF_FP32ADD, YF_POW2SCALE_INT, YF_POW2SCALE_FP = 13802, 6856, 6342
# 500 MHz presets: below f(v_min) on both curves (45 nm: 538 MHz at 0.6 V; 7 nm: 667 MHz at
# 0.55 V, by the alpha-power law, tests/test_power_validation.py), so they run at v_min and the
# dynamic energies scale by (v_min / v_nom)^2.
V45_500MHZ, S45_500MHZ = 0.6, (0.6 / 0.9) ** 2
S7_500MHZ = (0.55 / 0.75) ** 2


def _sram_points(t) -> dict[float, float]:
    return {p.kib: p.pj for p in t.sram_pj_per_64b}


@pytest.mark.parametrize("tech", ["45nm", "7nm", "16nm", "28nm", "65nm"])
def test_tables_load_and_cover_every_format(tech):
    from tilewright.formats import FORMATS
    t = load_tech(tech)
    assert set(FORMATS) <= set(t.mac_pj) and set(FORMATS) <= set(t.area_um2.pe)


@pytest.mark.parametrize("tech", ["16nm", "28nm", "45nm", "65nm", "7nm"])
def test_every_cited_key_is_in_the_sources_block(tech):
    text = (TECH_DIR / f"{tech}.yaml").read_text()
    cited = set(re.findall(r"\[([A-Z][A-Z0-9]+)\]", text))
    assert cited and cited <= set(load_tech(tech).sources), cited - set(load_tech(tech).sources)


def test_45nm_table_is_horowitz():
    t = load_tech("45nm")
    assert (t.mac_pj["int8"].mult, t.mac_pj["int8"].add) == (H14_PJ["mult8"], H14_PJ["add32"])
    assert (t.mac_pj["fp32"].mult, t.mac_pj["fp32"].add) == (H14_PJ["fmult32"], H14_PJ["fadd32"])
    assert t.mac_pj["bf16"].mult == H14_PJ["fmult16"]          # fp16 figure used for bf16
    assert t.vector_op_pj == H14_PJ["fadd32"]
    assert _sram_points(t) == {8: H14_PJ["sram_8k"], 32: H14_PJ["sram_32k"],
                               1024: H14_PJ["sram_1m"]}
    assert t.dram_pj_per_byte == pytest.approx(sum(H14_DRAM_NJ) / 2 * 1000 / 8)
    assert t.hop_pj_per_byte_mm == pytest.approx(K11_PJ_256B_10MM_40NM / (32 * 10), rel=0.01)
    assert t.area_um2.sram_bitcell == BITCELL_45NM_UM2


@pytest.mark.parametrize("tech", ["45nm", "7nm"])
def test_pe_overhead_is_the_yosys_calibration(tech):
    implied = YC_TRANSISTORS_PER_PE / (YC_MULT8 + YC_ADD32)
    assert load_tech(tech).area_um2.pe_overhead == pytest.approx(implied, abs=0.05)


def test_7nm_table_is_jouppi_and_scaled_rules():
    t, t45 = load_tech("7nm"), load_tech("45nm")
    assert (t.mac_pj["int8"].mult, t.mac_pj["int8"].add) == (J21_PJ["mult8"], J21_PJ["add32"])
    assert (t.mac_pj["fp32"].mult, t.mac_pj["fp32"].add) == (J21_PJ["fmult32"], J21_PJ["fadd32"])
    assert t.mac_pj["bf16"].mult == J21_PJ["fmult16"]
    assert t.vector_op_pj == J21_PJ["fadd32"]
    assert _sram_points(t) == {8: J21_PJ["sram_8k"], 32: J21_PJ["sram_32k"],
                               1024: J21_PJ["sram_1m"]}
    assert t.dram_pj_per_byte == pytest.approx(sum(J21_HBM2_PJ) / 2 / 8)
    assert t.hop_pj_per_byte_mm == pytest.approx(
        K11_PJ_256B_10MM_40NM / (32 * 10) * K11_FJ_10NM / K11_FJ_40NM, rel=0.01)
    assert t.area_um2.sram_bitcell == BITCELL_7NM_UM2
    for fmt, pair in t45.area_um2.pe.items():           # logic areas: 45 nm x area factor
        assert t.area_um2.pe[fmt].mult == pytest.approx(pair.mult * SB17_AREA_45_TO_7, rel=0.002)
        assert t.area_um2.pe[fmt].add == pytest.approx(pair.add * SB17_AREA_45_TO_7, rel=0.002)
    for field in ("vector_lane", "fixed"):
        assert getattr(t.area_um2, field) == pytest.approx(
            getattr(t45.area_um2, field) * SB17_AREA_45_TO_7, rel=0.002)


def test_45nm_areas_are_aladdin_40nm_scaled():
    """int8: 8x8 multiplier = 32-bit one x (8/32)^2, int32 accumulator adder; fp32 as published;
    bf16 multiplier by the area-vs-width power law through Aladdin's fp32 and fp64 multipliers;
    every 40 nm figure x (45/40)^2."""
    al, node = AL14_40NM_2NS_UM2, (45 / 40) ** 2
    pe = load_tech("45nm").area_um2.pe
    assert pe["int8"].mult == pytest.approx(al["mult32"] * (8 / 32) ** 2 * node, rel=1e-3)
    assert pe["int8"].add == pytest.approx(al["add32"] * node, rel=1e-3)
    assert (pe["fp32"].mult, pe["fp32"].add) == pytest.approx(
        (al["fmult32"] * node, al["fadd32"] * node), rel=1e-3)
    k = math.log(al["fmult64"] / al["fmult32"]) / math.log(64 / 32)
    assert pe["bf16"].mult == pytest.approx(al["fmult32"] * (16 / 32) ** k * node, rel=1e-3)
    assert pe["int8"].mult < pe["bf16"].mult < pe["fp32"].mult
    for fmt in ("bf16", "fp8-e4m3", "fp8-e5m2", "mxfp8", "mxfp8-e5m2"):
        assert pe[fmt].add == pe["fp32"].add                # fp32 adder in every PE
    assert pe["mxint8"] == pe["int8"]                       # the MXINT8 array is the int8 one
    assert load_tech("45nm").area_um2.vector_lane == pytest.approx(
        (al["fmult32"] + al["fadd32"]) * node, rel=1e-3)


@pytest.mark.parametrize("tech", ["45nm", "7nm"])
def test_no_area_figure_is_unconfirmed(tech):
    """Issue 7: the area figures rest on retrieved sources; remembered (unconfirmed) figures may
    appear only in a comment-only "Cross-checks" block."""
    lines = (TECH_DIR / f"{tech}.yaml").read_text().split("\narea_um2:")[1].splitlines()
    in_cross_check = False
    for line in lines:
        comment_only = line.lstrip().startswith("#")
        in_cross_check = comment_only and (in_cross_check or "# Cross-checks" in line)
        if "unconfirmed" in line or "remembered" in line:
            assert in_cross_check, line


def test_sram_interpolation_hits_table_points_and_is_loglog_between():
    t = load_tech("45nm")
    assert sram_pj_per_byte(t, 8) == pytest.approx(10 / 8)
    assert sram_pj_per_byte(t, 32) == pytest.approx(20 / 8)
    assert sram_pj_per_byte(t, 1024) == pytest.approx(100 / 8)
    assert sram_pj_per_byte(t, 16) == pytest.approx(math.sqrt(10 * 20) / 8)   # geometric mean
    assert sram_pj_per_byte(t, 4) == pytest.approx(10 * 0.5 ** 0.5 / 8)      # end slope 0.5


def test_area_closed_form_45nm_ws16x16():
    a = load_arch("ws16x16")          # int8, 128 KiB scratchpad + 128 KiB accumulator, no VU
    got = area_breakdown(a, load_tech("45nm"))
    pe = 256 * (406.4 + 227.1) * 1.8
    sram = 256 * 8192 * 0.346 / 0.6
    vec = 16 * (7787.8 + 3805.8)
    phy = 16.0 * 150000                 # 16 GB/s of the default DDR4 PHY, um^2 per GB/s
    assert got["pe_array_cells_um2"] == pytest.approx(pe)
    assert got["sram_cells_um2"] == pytest.approx(sram)
    assert got["vector_cells_um2"] == pytest.approx(vec)
    assert got["phy_cells_um2"] == pytest.approx(phy)
    assert got["area_cells_mm2"] == pytest.approx((pe + sram + vec + 500000 + phy) / 1e6)
    # laid out: the layout factors (checked by hand in tests/test_area_layout.py) per block
    k = layout_fit()
    core = k.compute * (pe + vec) + k.sram * sram
    assert got["pe_array_um2"] == pytest.approx(k.compute * pe)
    assert got["sram_um2"] == pytest.approx(k.sram * sram)
    assert got["phy_um2"] == pytest.approx(phy)
    assert got["area_mm2"] == pytest.approx((core * (1 + k.uncore) + 500000 + phy) / 1e6)


def test_energy_closed_form_ws_and_os():
    t = load_tech("45nm")
    ws = load_arch("ws16x16")
    macs, vops, dram = 1e9, 1e6, 1e7
    e = energy_breakdown(ws, t, macs=macs, vector_ops=vops, dram_bytes=dram)
    sp = sram_pj_per_byte(t, 64)      # each scratchpad half: 64 KiB
    acc = sram_pj_per_byte(t, 128)
    assert e["voltage_v"] == V45_500MHZ
    assert e["mac_pj"] == pytest.approx(macs * 0.3 * S45_500MHZ)
    assert e["dram_pj"] == pytest.approx(dram * 243.75)          # DRAM's own supply: unscaled
    assert e["sram_pj"] == pytest.approx((macs * (1 / 16 * sp + 8 / 16 * acc) + dram * sp
                                          + vops * 8 * sp) * S45_500MHZ)
    assert e["energy_j"] == pytest.approx((e["mac_pj"] + e["sram_pj"] + e["vector_pj"]
                                           + e["dram_pj"]) * 1e-12)
    os_ = load_arch("os16x16")
    eo = energy_breakdown(os_, t, macs=macs)
    sp_o = sram_pj_per_byte(t, os_.memory.scratchpad_kib / 2)
    assert eo["sram_pj"] == pytest.approx(macs * (1 / 16 + 1 / 16) * sp_o * S45_500MHZ)


def _banked(name: str, sp_banks: int, acc_banks: int) -> ArchSpec:
    data = load_arch(name).model_dump(mode="json", exclude_none=True)
    data["memory"].update(scratchpad_banks=sp_banks, accumulator_banks=acc_banks)
    return ArchSpec.from_dict(data)


def test_banked_sram_energy_reads_one_bank():
    t = load_tech("45nm")
    a = _banked("ws16x16", 4, 2)                  # 128 KiB scratchpad, 128 KiB accumulator
    assert sram_bank_kib(a) == (16, 64)           # 128 / 2 / 4 and 128 / 2
    macs, dram = 1e9, 1e7
    e = energy_breakdown(a, t, macs=macs, dram_bytes=dram)
    # 16 KiB: geometric mean of the 8 and 32 KiB points; 64 KiB: 20 * (64/32)^slope, slope of
    # the 32 KiB -> 1 MiB segment = log(100/20) / log(1024/32)
    sp = math.sqrt(10 * 20) / 8
    acc = 20 * 2 ** (math.log(5) / math.log(32)) / 8
    assert e["sram_pj"] == pytest.approx((macs * (1 / 16 * sp + 8 / 16 * acc) + dram * sp)
                                         * S45_500MHZ)
    one = energy_breakdown(load_arch("ws16x16"), t, macs=macs, dram_bytes=dram)
    assert e["sram_pj"] < one["sram_pj"] and e["mac_pj"] == one["mac_pj"]


def test_banked_sram_area_adds_bank_periphery():
    t = load_tech("45nm")
    base = area_breakdown(load_arch("ws16x16"), t)["sram_cells_um2"]
    periphery = 8 * 8192 * 0.346 * (1 / 0.6 - 1)          # an 8 KiB macro's non-cell share
    got = area_breakdown(_banked("ws16x16", 4, 2), t)["sram_cells_um2"]
    assert got == pytest.approx(base + (2 * 3 + 1) * periphery)
    assert area_breakdown(_banked("ws16x16", 1, 1), t) == area_breakdown(load_arch("ws16x16"), t)


def test_format_rows_follow_the_rtl_and_the_yosys_ratios():
    """Issue 20: the fp8 and MX rows are what the RTL builds — fp8 PE = Fp8Mul + Fp32Add, MXINT8
    PE = the int8 PE, MXFP8 PE = the fp8-e4m3 PE; at each column's end an fp32 accumulator adder
    and the format's scale unit — each new unit's figure = a cited unit's x the Yosys transistor
    ratio (fp8 mult to the 8x8 mult, the MX block scale to the fp32 adder)."""
    for tech, mult8_pj, fadd_pj in (("45nm", H14_PJ["mult8"], H14_PJ["fadd32"]),
                                    ("7nm", J21_PJ["mult8"], J21_PJ["fadd32"])):
        t = load_tech(tech)
        pe, col, col_pj = t.area_um2.pe, t.area_um2.column, t.column_pj
        for fmt, mx in (("fp8-e4m3", "mxfp8"), ("fp8-e5m2", "mxfp8-e5m2")):
            ratio = YF_FP8MUL[fmt] / YC_MULT8
            assert pe[fmt].mult == pytest.approx(pe["int8"].mult * ratio, rel=2e-3)
            assert t.mac_pj[fmt].mult == pytest.approx(mult8_pj * ratio, rel=2e-3)
            assert (pe[mx], t.mac_pj[mx]) == (pe[fmt], t.mac_pj[fmt])
            assert col[fmt].scale == pe["fp32"].mult            # the output-scale multiplier
            assert col_pj[fmt].scale == 0                       # once per output, not per psum
        assert (pe["mxint8"], t.mac_pj["mxint8"]) == (pe["int8"], t.mac_pj["int8"])
        for mx, p2s in (("mxint8", YF_POW2SCALE_INT), ("mxfp8", YF_POW2SCALE_FP),
                        ("mxfp8-e5m2", YF_POW2SCALE_FP)):
            assert col[mx].scale == pytest.approx(pe["fp32"].add * p2s / YF_FP32ADD, rel=2e-3)
            assert col_pj[mx].scale == pytest.approx(fadd_pj * p2s / YF_FP32ADD, rel=2e-3)
        for fmt in ("bf16", "fp8-e4m3", "fp8-e5m2", "mxint8", "mxfp8", "mxfp8-e5m2"):
            assert col[fmt].add == pe["fp32"].add and col_pj[fmt].add == fadd_pj
        assert "int8" not in col and "int8" not in col_pj       # int32 adders: inside [YC]


def test_format_closed_form_45nm_ws32x4():
    """The 32x4 WS design of benchmarks/format_tradeoff.py at 100 MHz (0.6 V): PE array and
    energy per MAC by hand for int8, MXINT8 and fp8-e4m3; the three differ."""
    t = load_tech("45nm")
    ws = ArchSpec.from_dict({
        "name": "ws32x4", "clock_mhz": 100,
        "tensor_engine": {"kind": "systolic", "rows": 32, "cols": 4, "dataflow": "ws",
                          "input_format": "int8", "weight_format": "int8",
                          "accumulator_format": "int32"},
        "memory": {"scratchpad_kib": 4, "accumulator_kib": 4},
        "offchip": {"bandwidth_gbps": 16.0, "latency_ns": 100.0}})
    s = S45_500MHZ                                  # 100 MHz also runs at v_min = 0.6 V
    mx = ws.with_engine(input_format="mxint8", weight_format="mxint8", accumulator_format="fp32")
    f8 = ws.with_engine(input_format="fp8-e4m3", weight_format="fp8-e4m3",
                        accumulator_format="fp32")
    want = {  # format: (PE array cell um^2, pJ per MAC at 0.6 V)
        ws: (128 * (406.4 + 227.1) * 1.8, 0.3 * s),
        mx: (128 * (406.4 + 227.1) * 1.8 + 4 * (1890.5 + 3805.8),
             (0.3 + (0.4471 + 0.9) / 32) * s),
        f8: (128 * (176.1 + 3805.8) * 1.8 + 4 * (7787.8 + 3805.8), (0.0867 + 0.9 + 0.9 / 32) * s),
    }
    for arch, (um2, pj) in want.items():
        assert area_breakdown(arch, t)["pe_array_cells_um2"] == pytest.approx(um2)
        assert energy_breakdown(arch, t, macs=1.0)["mac_pj"] == pytest.approx(pj)
    assert len({round(area_breakdown(a, t)["pe_array_cells_um2"]) for a in want}) == 3


def test_energy_scales_with_format_and_node():
    ws = load_arch("ws16x16")
    bf = ws.with_engine(input_format="bf16", weight_format="bf16", accumulator_format="fp32")
    for tech in ("45nm", "7nm"):
        t = load_tech(tech)
        assert energy_breakdown(bf, t, macs=1e6)["mac_pj"] > energy_breakdown(ws, t, macs=1e6)["mac_pj"]
        assert area_breakdown(bf, t)["pe_array_um2"] > area_breakdown(ws, t)["pe_array_um2"]
    assert energy_breakdown(ws, load_tech("7nm"), macs=1e9)["energy_j"] < \
        energy_breakdown(ws, load_tech("45nm"), macs=1e9)["energy_j"]


def test_mesh_area_and_hop_energy():
    m = load_arch("mesh4x4")
    t = load_tech("7nm")
    a = area_breakdown(m, t)
    pe = m.mesh.core_macs_per_cycle * t.pe_um2(m.tensor_engine.input_format)
    sram = m.mesh.core_sram_kib * t.sram_um2_per_kib
    assert a["mesh_cells_um2"] == pytest.approx(16 * (pe + sram + t.area_um2.fixed / 64))
    k = layout_fit()                 # laid out: PEs and SRAM x their factors, + uncore share
    core = (k.compute * pe + k.sram * sram) * (1 + k.uncore) + t.area_um2.fixed / 64
    # the mesh alone: no host core's array, scratchpad, vector unit or controller is counted
    assert a["area_mm2"] == pytest.approx(16 * core / 1e6)
    assert a["pe_array_um2"] == a["sram_um2"] == a["vector_um2"] == a["fixed_um2"] == 0
    # an SRAM access reads one core's 16 KiB (the 7 nm table interpolated there)
    e_sram = energy_breakdown(m, t, macs=4096)["sram_pj"]
    te = m.tensor_engine                                    # 1x4 os: e/cols + e/rows bytes a MAC
    assert e_sram == pytest.approx(4096 * (1 / te.cols + 1 / te.rows) * sram_pj_per_byte(t, 16)
                                   * S7_500MHZ)
    e = energy_breakdown(m, t, macs=0, byte_hops=1000)
    assert e["mesh_pj"] == pytest.approx(1000 * (0.606 * math.sqrt(core) / 1e3 + 0.94)
                                         * S7_500MHZ)
    with pytest.raises(TechError, match="no mesh"):
        energy_breakdown(load_arch("ws16x16"), t, macs=0, byte_hops=1)


def test_unknown_tech_one_line():
    with pytest.raises(TechError, match="3nm: no such file .or tech preset; tech presets are: 16nm, 28nm, 45nm, 65nm, 7nm."):
        load_tech("3nm")
