"""Power and area closed forms by hand (alpha-power V-f curve, leakage, off-chip PHY), the 28 nm
table's derivation, tokens/J across the curve, the clock refusal, and the published-chip check of
benchmarks/accelerator_validation.py."""

from __future__ import annotations

import importlib.util
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tilewright.arch import ArchSpec, load_arch
from tilewright.dataflow_sim.energy_area import (TechError, area_breakdown, between_nodes,
                                                 energy_breakdown, load_tech, operating_voltage,
                                                 static_power)

ROOT = Path(__file__).resolve().parent.parent

# Stillmaker & Baas 2017 via hwcomponents techscaling.py: energy polynomial (a, b, c) of
# E(V) = a V^2 + b V + c per node, and area factors from 45 nm.
SB17_E = {65: (3.755, -4.398, 1.975), 45: (1.103, -0.362, 0.2767), 32: (0.9559, -0.7823, 0.471),
          20: (0.373, -0.1582, 0.04104), 16: (0.2958, -0.1241, 0.03024),
          7: (0.1776, -0.09097, 0.02447)}
SB17_AREA_FROM_45 = {65: 1.5, 32: 0.46, 20: 0.21, 16: 0.19, 7: 0.059}
# The int8 MAC (multiply, int32 accumulate) in pJ: Horowitz ISSCC 2014 at 45 nm (8b mult 0.2,
# 32b add 0.1) and Jouppi et al. ISCA 2021 Table 2 at 7 nm (int8 mult 0.07, int32 add 0.03). The
# 16 and 28 nm tables interpolate log-log in feature size between them, not by [SB17].
INT8_45, INT8_7 = (0.2, 0.1), (0.07, 0.03)
BETWEEN_45_AND_7 = ("int8", "mxint8", "int16")   # int16: tests/test_int16.py


def _int8_between(node: float) -> tuple[float, float]:
    """(mult, add) pJ at ``node`` nm on the straight line through the 45 and 7 nm points in
    (ln node, ln pJ), written out: e = e45 (e7 / e45)^x, x = ln(45 / node) / ln(45 / 7)."""
    x = math.log(45 / node) / math.log(45 / 7)
    return (INT8_45[0] * (INT8_7[0] / INT8_45[0]) ** x, INT8_45[1] * (INT8_7[1] / INT8_45[1]) ** x)


def _e(node: int, v: float) -> float:
    a, b, c = SB17_E[node]
    return a * v * v + b * v + c


def _with(arch: ArchSpec, **top) -> ArchSpec:
    data = arch.model_dump(mode="json", exclude_none=True)
    for k, v in top.items():
        if isinstance(v, dict):
            data[k] = {**data.get(k, {}), **v}
        else:
            data[k] = v
    return ArchSpec.from_dict(data)


# ---- V-f curve ----------------------------------------------------------------------------------

def test_alpha_power_curve_by_hand():
    """45 nm: f(V) = 1000 MHz ((V - 0.35) / 0.55)^1.3 * 0.9 / V."""
    vf = load_tech("45nm").vf
    assert vf.f_mhz(0.9) == pytest.approx(1000.0)
    assert vf.f_mhz(0.6) == pytest.approx(1000 * (0.25 / 0.55) ** 1.3 * 1.5)      # 538.4
    assert vf.f_mhz(1.1) == pytest.approx(1000 * (0.75 / 0.55) ** 1.3 * 0.9 / 1.1)  # 1223.6


@pytest.mark.parametrize("tech,clock", [("45nm", 700.0), ("45nm", 1200.0), ("7nm", 1050.0),
                                        ("7nm", 1400.0), ("28nm", 700.0)])
def test_operating_voltage_is_the_lowest_supply_reaching_the_clock(tech, clock):
    t = load_tech(tech)
    v = operating_voltage(_with(load_arch("ws16x16"), clock_mhz=clock), t)
    assert t.vf.v_min < v <= t.vf.v_max
    assert t.vf.f_mhz(v) == pytest.approx(clock, rel=1e-6)
    assert t.vf.f_mhz(v - 1e-3) < clock                 # lower supply: clock not reached


def test_slow_clock_runs_at_v_min_and_fast_clock_is_refused():
    t7 = load_tech("7nm")       # f(1.05 V) = 1050 ((1.05 - 0.3) / 0.45)^1.3 * 0.75 / 1.05
    assert t7.vf.f_mhz(1.05) == pytest.approx(1050 * (0.75 / 0.45) ** 1.3 * 0.75 / 1.05)
    with pytest.raises(TechError, match=r"clock_mhz = 2000: beyond the 7nm"):
        operating_voltage(_with(load_arch("ws16x16"), clock_mhz=2000.0), t7)
    t = load_tech("45nm")
    assert operating_voltage(_with(load_arch("ws16x16"), clock_mhz=200.0), t) == 0.6
    with pytest.raises(TechError) as exc:
        operating_voltage(_with(load_arch("ws16x16"), clock_mhz=2000.0), t)
    msg = str(exc.value)
    assert "\n" not in msg and "clock_mhz = 2000" in msg and "1224 MHz" in msg and "1.1 V" in msg


def test_clock_beyond_the_curve_exits_2_with_one_line(tmp_path):
    spec = tmp_path / "c.yaml"
    spec.write_text("name: c\nchip:\n  kind: arch\n  arch: {name: t16, clock_mhz: 5000.0, "
                    "tensor_engine: {rows: 16, cols: 16, dataflow: ws}, offchip: "
                    "{bandwidth_gbps: 50.0, capacity_gib: 16}}\n")
    exe = Path(sys.executable).parent / "tilewright"
    res = subprocess.run([str(exe), "cluster", "--cluster", str(spec), "--model", "tiny-llama",
                          "--mode", "train", "--seq", "16", "--micro-batches", "2",
                          "--cost-source", "table", "--tech", "7nm"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 2, res.stderr
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1 and "clock_mhz = 5000" in err and "Traceback" not in err


def test_a_curve_out_of_order_is_refused_in_one_line(tmp_path):
    """A tech table whose lowest supply lies below the threshold voltage has no curve there:
    refused in one line naming the file, the field, its value and the bound it breaks."""
    bad = tmp_path / "bad_vf.yaml"
    text = (ROOT / "configs" / "tech" / "7nm.yaml").read_text()
    assert "\n  v_min: 0.55 " in text
    bad.write_text(text.replace("\n  v_min: 0.55 ", "\n  v_min: 0.2 "))
    with pytest.raises(TechError) as exc:
        load_tech(str(bad))
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(str(bad))
    assert msg.endswith("vf.v_min = 0.2 V is out of order with v_t = 0.3 V: the curve needs "
                        "v_t < v_min <= v_nom <= v_max")


def test_dynamic_energy_scales_with_v_squared():
    t = load_tech("7nm")
    a = _with(load_arch("ws16x16"), clock_mhz=1400.0)
    v = operating_voltage(a, t)
    lo = energy_breakdown(load_arch("ws16x16"), t, macs=1e9, dram_bytes=1e6)   # 500 MHz: v_min
    hi = energy_breakdown(a, t, macs=1e9, dram_bytes=1e6)
    assert hi["mac_pj"] / lo["mac_pj"] == pytest.approx((v / 0.55) ** 2)
    assert hi["sram_pj"] / lo["sram_pj"] == pytest.approx((v / 0.55) ** 2)
    assert hi["dram_pj"] == lo["dram_pj"]


@pytest.mark.parametrize("tech,fast", [("7nm", 1400.0), ("45nm", 1200.0)])
def test_tokens_per_joule_follow_the_curve(tech, fast):
    """Same work and cycles at 500 MHz and near the curve's top (2 GHz is beyond both curves:
    refused above): tokens/J = tokens / (dynamic at the table's supply x (V/v_nom)^2 + DRAM +
    static power x cycles / clock), by hand."""
    t = load_tech(tech)
    tokens, macs, dram, cycles = 1000, 5e11, 2e9, 1e9
    got = {}
    for clock in (500.0, fast):
        a = _with(load_arch("ws16x16"), clock_mhz=clock)
        v = t.vf.v_min if clock <= t.vf.f_mhz(t.vf.v_min) else operating_voltage(a, t)
        lat = cycles / (clock * 1e6)
        nominal = energy_breakdown(_with(a, clock_mhz=t.vf.f_nom_mhz), t, macs=macs,
                                   dram_bytes=dram)                  # at v_nom: unscaled terms
        dyn = (nominal["mac_pj"] + nominal["sram_pj"]) * (v / t.vf.v_nom) ** 2 + nominal["dram_pj"]
        ref = tokens / ((dyn + static_power(a, t)["static_w"] * lat * 1e12) * 1e-12)
        e = energy_breakdown(a, t, macs=macs, dram_bytes=dram, latency_s=lat)
        got[clock] = tokens / e["energy_j"]
        assert got[clock] == pytest.approx(ref, rel=1e-8)
    assert got[500.0] != pytest.approx(got[fast], rel=0.01)


# ---- leakage, PHY -------------------------------------------------------------------------------

def test_static_power_by_hand_45nm_ws16x16():
    t = load_tech("45nm")
    a = load_arch("ws16x16")                       # 500 MHz: v_min 0.6 V; 16 GB/s DDR4 PHY
    pe = 256 * (406.4 + 227.1) * 1.8
    vec = 16 * (7787.8 + 3805.8)
    logic_mm2 = (pe + vec + 500000) / 1e6          # area - SRAM - PHY
    leak = (logic_mm2 * 8.524e-3 + 256 * 8192 * 4916e-12) * 0.6 / 0.9
    phy = 16.0 * 5.0e-3
    p = static_power(a, t)
    assert p["leakage_w"] == pytest.approx(leak)
    assert p["phy_w"] == pytest.approx(phy)
    assert p["background_w"] == 0
    assert static_power(_with(a, offchip={"background_w": 3.5}), t)["static_w"] == \
        pytest.approx(leak + phy + 3.5)


def test_static_energy_is_static_power_times_latency():
    t = load_tech("7nm")
    a = load_arch("ws16x16")
    e = energy_breakdown(a, t, macs=1e6, latency_s=0.25)
    assert e["static_pj"] == pytest.approx(static_power(a, t)["static_w"] * 0.25 * 1e12)
    assert "static_pj" not in energy_breakdown(a, t, macs=1e6)


def test_phy_area_and_power_grow_with_bandwidth():
    """200 and 3,200 GB/s of HBM2 differ by 3,000 GB/s x the table's um^2 and mW per GB/s."""
    t = load_tech("7nm")
    a200 = _with(load_arch("ws16x16"), offchip={"bandwidth_gbps": 200.0, "interface": "hbm2"})
    a3200 = _with(load_arch("ws16x16"), offchip={"bandwidth_gbps": 3200.0, "interface": "hbm2"})
    d_area = area_breakdown(a3200, t)["area_mm2"] - area_breakdown(a200, t)["area_mm2"]
    assert d_area == pytest.approx(3000 * 47000 / 1e6)               # 141 mm^2
    assert static_power(a3200, t)["phy_w"] - static_power(a200, t)["phy_w"] == \
        pytest.approx(3000 * 1.0e-3)
    hbm3 = _with(a3200, offchip={"interface": "hbm3"})
    assert area_breakdown(hbm3, t)["phy_um2"] == pytest.approx(3200 * 15000)
    with pytest.raises(TechError, match=r"offchip.interface = 'gddr6': tech 7nm has a PHY for"):
        area_breakdown(_with(a200, offchip={"interface": "gddr6"}), t)


# ---- 28 nm table and the leakage derivation ----------------------------------------------------

def test_28nm_table_is_45nm_scaled_by_stillmaker_baas():
    t45, t28 = load_tech("45nm"), load_tech("28nm")
    area = SB17_AREA_FROM_45[32] + (SB17_AREA_FROM_45[20] - SB17_AREA_FROM_45[32]) * 4 / 12
    e28 = _e(32, 0.9) + (_e(20, 0.9) - _e(32, 0.9)) * 4 / 12
    energy = e28 / _e(45, 0.9)
    for fmt, pair in t45.mac_pj.items():
        if fmt not in BETWEEN_45_AND_7:          # the int8 MAC: test_int8_mac_between_...
            assert t28.mac_pj[fmt].mult == pytest.approx(pair.mult * energy, rel=1e-3)
    for p45, p28 in zip(t45.sram_pj_per_64b, t28.sram_pj_per_64b):
        assert p28.pj == pytest.approx(p45.pj * energy, rel=1e-3)
    for fmt, pair in t45.area_um2.pe.items():
        assert t28.area_um2.pe[fmt].add == pytest.approx(pair.add * area, rel=1e-3)
    for fmt, col in t45.column_pj.items():            # the column's scale unit and adder
        assert t28.column_pj[fmt].total == pytest.approx(col.total * energy, rel=1e-3)
        assert t28.area_um2.column[fmt].total == pytest.approx(
            t45.area_um2.column[fmt].total * area, rel=1e-3)
    assert set(t28.column_pj) == set(t45.column_pj) == set(t28.area_um2.column)
    assert t28.area_um2.sram_bitcell == pytest.approx(0.346 * area, rel=1e-3)


def _assert_scaled_from_45(t45, t, energy: float, area: float) -> None:
    """Every SRAM, vector, PE-area, column, fixed-area and leakage entry of table ``t`` is the
    45 nm table's times ``energy`` (energies) or ``area`` (areas); leakage per mm^2 x energy /
    area, per SRAM bit from the bit cell's laid-out area."""
    for p45, pt in zip(t45.sram_pj_per_64b, t.sram_pj_per_64b):
        assert (pt.kib, pt.pj) == (p45.kib, pytest.approx(p45.pj * energy, rel=2e-3))
    assert t.vector_op_pj == pytest.approx(t45.vector_op_pj * energy, rel=2e-3)
    for fmt, pair in t45.area_um2.pe.items():
        assert t.area_um2.pe[fmt].mult == pytest.approx(pair.mult * area, rel=2e-3)
        assert t.area_um2.pe[fmt].add == pytest.approx(pair.add * area, rel=2e-3)
    for fmt, col in t45.column_pj.items():
        assert t.column_pj[fmt].total == pytest.approx(col.total * energy, rel=2e-3)
        assert t.area_um2.column[fmt].total == pytest.approx(
            t45.area_um2.column[fmt].total * area, rel=2e-3)
    assert set(t.column_pj) == set(t45.column_pj) == set(t.area_um2.column)
    for key in ("vector_lane", "sram_bitcell", "fixed"):
        assert getattr(t.area_um2, key) == pytest.approx(getattr(t45.area_um2, key) * area,
                                                           rel=2e-3)
    assert t.leakage.logic_mw_per_mm2 == pytest.approx(
        t45.leakage.logic_mw_per_mm2 * energy / area, rel=2e-3)
    bit_um2 = t.area_um2.sram_bitcell / t.area_um2.sram_array_efficiency
    assert t.leakage.sram_pw_per_bit == pytest.approx(
        t.leakage.logic_mw_per_mm2 * 1e3 * bit_um2, rel=2e-3)


def test_16nm_table_is_45nm_scaled_by_stillmaker_baas():
    """16 nm is a column of [SB17]: area x 0.19, energy x E16(0.8) / E45(0.9) (all but the int8
    MAC); its leakage density is the 45 nm cell figure x E16(0.8)/E45(0.9) / 0.19."""
    t45, t16 = load_tech("45nm"), load_tech("16nm")
    area, energy = SB17_AREA_FROM_45[16], _e(16, 0.8) / _e(45, 0.9)
    for fmt, pair in t45.mac_pj.items():
        if fmt in BETWEEN_45_AND_7:              # the int8 MAC: test_int8_mac_between_...
            continue
        assert t16.mac_pj[fmt].mult == pytest.approx(pair.mult * energy, rel=2e-3)
        assert t16.mac_pj[fmt].add == pytest.approx(pair.add * energy, rel=2e-3)
    _assert_scaled_from_45(t45, t16, energy, area)


def test_int8_mac_at_16_and_28nm_lies_between_the_published_45_and_7nm_figures():
    """The 16 and 28 nm int8 MAC, by hand: x = ln(45/16) / ln(45/7) = 0.5557, multiply 0.2 x
    (0.07/0.2)^x = 0.1116, add 0.1 x (0.03/0.1)^x = 0.05122, 0.1628 pJ in all (28 nm: x = 0.2550,
    0.2266 pJ); mxint8 (the int8 PE) the same. Ordered by node: 7 < 16 < 28 < 45 nm, which
    [SB17]'s factor broke (16 nm 0.3 x E16(0.8)/E45(0.9) = 0.0427 pJ, below 7 nm's 0.10)."""
    x16 = math.log(45 / 16) / math.log(45 / 7)
    assert x16 == pytest.approx(0.5557, abs=1e-4)
    t = {n: load_tech(n) for n in ("45nm", "28nm", "16nm", "7nm")}
    m16, a16 = t["16nm"].mac_pj["int8"].mult, t["16nm"].mac_pj["int8"].add
    assert m16 == pytest.approx(0.2 * 0.35 ** x16, rel=1e-12)
    assert a16 == pytest.approx(0.1 * 0.3 ** x16, rel=1e-12)
    assert m16 + a16 == pytest.approx(0.1628, abs=1e-4)
    assert t["28nm"].mac_pj["int8"].total == pytest.approx(0.2266, abs=1e-4)
    for node in (16, 28):
        pair = t[f"{node}nm"].mac_pj
        assert (pair["int8"].mult, pair["int8"].add) == pytest.approx(_int8_between(node),
                                                                      rel=1e-12)
        assert pair["mxint8"] == pair["int8"]
    assert (t["45nm"].mac_pj["int8"].mult, t["45nm"].mac_pj["int8"].add) == INT8_45
    assert (t["7nm"].mac_pj["int8"].mult, t["7nm"].mac_pj["int8"].add) == INT8_7
    for part in ("mult", "add", "total"):
        e = [getattr(t[n].mac_pj["int8"], part) for n in ("7nm", "16nm", "28nm", "45nm")]
        assert e == sorted(e) and len(set(e)) == 4, part
    assert 0.3 * _e(16, 0.8) / _e(45, 0.9) < INT8_7[0] + INT8_7[1]


def test_between_nodes_is_a_line_in_log_node_and_log_figure():
    """between_nodes: the end figures at the end nodes, the geometric mean of the figures at the
    geometric mean of the nodes (sqrt(45 x 7) = 17.75 nm: sqrt(0.3 x 0.1) = 0.1732 pJ)."""
    assert between_nodes(45, 45, 0.3, 7, 0.1) == pytest.approx(0.3, rel=1e-12)
    assert between_nodes(7, 45, 0.3, 7, 0.1) == pytest.approx(0.1, rel=1e-12)
    assert between_nodes(math.sqrt(45 * 7), 45, 0.3, 7, 0.1) == pytest.approx(
        math.sqrt(0.03), rel=1e-12)
    assert between_nodes(16, 7, 0.1, 45, 0.3) == pytest.approx(between_nodes(16, 45, 0.3, 7, 0.1))


@pytest.mark.parametrize("edit,says", [
    (("node_nm: 16\n", "node_nm: 50\n"), "node_nm 50 is not strictly between 45nm (45 nm) and "
                                         "7nm (7 nm)"),
    (("int8: {between: [45nm, 7nm]}", "int8: {between: [45nm]}"), "must be the only key, a list "
                                                                 "of two tech tables"),
    (("int8: {between: [45nm, 7nm]}", "int8: {between: [45nm, 3nm]}"), "3nm: no such file"),
])
def test_a_bad_between_entry_is_refused_in_one_line(tmp_path, edit, says):
    text = (ROOT / "configs" / "tech" / "16nm.yaml").read_text()
    assert edit[0] in text
    bad = tmp_path / "bad_between.yaml"
    bad.write_text(text.replace(edit[0], edit[1]))
    with pytest.raises(TechError) as exc:
        load_tech(str(bad))
    msg = str(exc.value)
    assert "\n" not in msg and says in msg


def test_between_references_in_a_cycle_are_refused_in_one_line(tmp_path):
    """Two user tables that each interpolate from the other: one line, not a recursion error."""
    text = (ROOT / "configs" / "tech" / "16nm.yaml").read_text()
    (tmp_path / "a.yaml").write_text(text.replace("int8: {between: [45nm, 7nm]}",
                                                  "int8: {between: [b.yaml, 7nm]}"))
    (tmp_path / "b.yaml").write_text(text.replace("node_nm: 16\n", "node_nm: 30\n").replace(
        "int8: {between: [45nm, 7nm]}", "int8: {between: [a.yaml, 45nm]}"))
    with pytest.raises(TechError) as exc:
        load_tech(str(tmp_path / "a.yaml"))
    assert "\n" not in str(exc.value) and "form a cycle" in str(exc.value)


# Aladdin's 40 nm cell library (harvard-acc/ALADDIN common/power_func.h, 2 ns column; "All the
# power numbers are in mW", areas in um^2): integer multiplier and adder leakage and area.
ALADDIN_MUL_LEAK_MW, ALADDIN_MUL_UM2 = 4.831147e-2, 5137.736
ALADDIN_ADD_LEAK_MW, ALADDIN_ADD_UM2 = 2.380803e-3, 179.443


def test_leakage_density_is_aladdins_cell_leakage():
    """45 nm cell leakage = an int8 PE's (32-bit multiplier x (8/32)^2 + 32-bit adder) leakage
    over its area in Aladdin's 40 nm library, the area grown by (45/40)^2 with the leakage held:
    ~8.5 mW/mm^2 — not TPU v1's idle power over its area (~30x more)."""
    mw = ALADDIN_MUL_LEAK_MW / 16 + ALADDIN_ADD_LEAK_MW
    um2 = (ALADDIN_MUL_UM2 / 16 + ALADDIN_ADD_UM2) * (45 / 40) ** 2
    assert load_tech("45nm").leakage.logic_mw_per_mm2 == pytest.approx(mw / um2 * 1e6, rel=1e-3)


def test_leakage_densities_follow_the_45nm_cell_figure():
    """28, 16 and 7 nm densities = 45 nm x E_node(v_nom)/E45(0.9) / (area factor from 45 nm)
    (leakage scales as energy in [SB17]); per SRAM bit = density x one bit's macro area."""
    e28 = _e(32, 0.9) + (_e(20, 0.9) - _e(32, 0.9)) * 4 / 12
    a28 = SB17_AREA_FROM_45[32] + (SB17_AREA_FROM_45[20] - SB17_AREA_FROM_45[32]) * 4 / 12
    l45 = load_tech("45nm").leakage.logic_mw_per_mm2
    want = {"28nm": l45 * e28 / _e(45, 0.9) / a28,
            "16nm": l45 * _e(16, 0.8) / _e(45, 0.9) / SB17_AREA_FROM_45[16],
            "7nm": l45 * _e(7, 0.75) / _e(45, 0.9) / SB17_AREA_FROM_45[7]}
    for name, dens in want.items():
        assert load_tech(name).leakage.logic_mw_per_mm2 == pytest.approx(dens, rel=2e-3)
    for name in ("28nm", "45nm", "16nm", "7nm"):
        t = load_tech(name)
        bit_um2 = t.area_um2.sram_bitcell / t.area_um2.sram_array_efficiency
        assert t.leakage.sram_pw_per_bit == pytest.approx(
            t.leakage.logic_mw_per_mm2 * 1e3 * bit_um2, rel=2e-3)


# ---- published chips ------------------------------------------------------------------------------

def _bench():
    spec = importlib.util.spec_from_file_location(
        "accelerator_validation", ROOT / "benchmarks" / "accelerator_validation.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_nvdla_points_as_the_primer_describes_them():
    """Every primer row becomes an ArchSpec with its MAC count (peak 2 x MACs x 1 GHz), its
    conv-buffer size as the scratchpad and its SDRAM bandwidth; the two confirmed configurations
    have the scalability page's buffers: nv_large 16 banks x 64 B x 512 = 512 KB, nv_small 32
    banks x 8 B x 512 = 128 KB. The compared area leaves the DDR PHY out (the IP's cell area):
    the model's cell total minus bandwidth x the table's PHY um2 per GB/s; laid out, the model's
    total minus that PHY and the uncore share."""
    b = _bench()
    assert [r[0] for r in b.NVDLA_PRIMER] == [2048, 1024, 512, 256, 128, 64, 32]
    assert 16 * 64 * 512 == 512 * 1024 and 32 * 8 * 512 == 128 * 1024
    for macs, kb, gbps, *_ in b.NVDLA_PRIMER:
        a = b.nvdla_arch(macs, kb, gbps)
        assert b.peak_tops(a) == pytest.approx(2 * macs * 1e9 / 1e12, rel=1e-12)
        assert a.memory.scratchpad_kib == kb and a.offchip.bandwidth_gbps == gbps
        t = load_tech("28nm")
        ab = area_breakdown(a, t)
        assert b.core_area_mm2(a, "28nm", False) == pytest.approx(
            ab["area_cells_mm2"] - gbps * 150000 / 1e6, rel=1e-9)
        assert b.core_area_mm2(a, "28nm", True) == pytest.approx(
            ab["area_mm2"] - gbps * 150000 / 1e6 - ab["uncore_um2"] / 1e6, rel=1e-9)
    rows = b.nvdla_rows()
    assert len(rows) == 7 and all(math.isfinite(r["peak_err"]) for r in rows)


def test_peak_tops_closed_form():
    """TPU v1: 65,536 MACs x 700 MHz x 2 = 91.75 TOPS; TPU v4i: 65,536 x 1050 MHz x 2; TPU v4:
    eight 128x128 MXUs x 1050 MHz x 2."""
    b = _bench()
    assert b.peak_tops(b.load_chip("tpu_v1")) == 2 * 65536 * 700e6 / 1e12
    assert b.peak_tops(b.load_chip("tpu_v4i")) == 2 * 65536 * 1050e6 / 1e12
    assert b.peak_tops(b.load_chip("tpu_v4")) == 2 * 131072 * 1050e6 / 1e12   # 275.25


def test_tpu_v1_idle_splits_into_cell_leakage_phy_and_a_fitted_background():
    """TPU v1 at 700 MHz (the 28 nm curve's nominal point, 0.9 V), by hand: cell leakage = logic
    area (PEs, vector lanes, fixed, 255 extra accumulator banks' periphery) x 11.46 mW/mm^2 +
    28 MiB x 8192 bits x 2490 pW; PHY = 34 GB/s x 5 mW; background = the measured 28 W idle
    minus both (fitted). The cells explain ~1 W of the 28: the rest is the board."""
    b = _bench()
    logic_um2 = (65536 * (153.1 + 85.54) * 1.8 + 256 * 4367.0 + 188300.0
                 + 255 * 8 * 8192 * 0.1303 * (1 / 0.6 - 1))
    leak = logic_um2 / 1e6 * 11.46e-3 + (24576 + 4096) * 8192 * 2490e-12
    phy = 34.0 * 5.0e-3
    p = static_power(b.load_chip("tpu_v1"), load_tech("28nm"))
    assert p["leakage_w"] == pytest.approx(leak, rel=2e-3)
    assert p["phy_w"] == pytest.approx(phy) and p["background_w"] == 0
    assert b.background_fit() == pytest.approx(28.0 - leak - phy, rel=2e-3)
    assert 0.5 < leak < 1.5 and 26 < b.background_fit() < 27.5
    with_bg = static_power(b.chip_with_background("tpu_v1"), load_tech("28nm"))
    assert with_bg["static_w"] == pytest.approx(28.0, rel=1e-9)


def test_no_held_out_chip_is_used_in_a_fit(monkeypatch):
    """Every fitted constant (the model's layout factors, die factor, class factors, background)
    reads only the calibration chips' ArchSpecs and published figures: the chips it loads are CALIBRATION's, and doubling
    every held-out published figure (TPU v4i/v4 area, power, mean; every NVDLA number; Eyeriss'
    core area, peak and AlexNet figures) leaves each constant unchanged."""
    from tilewright.dataflow_sim import energy_area as ea
    b = _bench()
    assert {c for c, p in b.PUBLISHED.items() if p["role"] == "calibration"} == set(b.CALIBRATION)
    assert (ea.CALIBRATION_CHIP["name"],) == b.CALIBRATION
    assert all(r["chip"] not in b.CALIBRATION for r in b.nvdla_rows())

    def fits():
        return (b.die_factor(), tuple(sorted(b.class_factors().items())), b.background_fit(),
                ea.layout_fit.__wrapped__())       # the model's layout factors, not cached

    before = fits()
    loaded = []
    real, real_ea = b.load_chip, ea.load_validation_chip
    monkeypatch.setattr(b, "load_chip", lambda name: loaded.append(name) or real(name))
    monkeypatch.setattr(ea, "load_validation_chip",
                        lambda name: loaded.append(name) or real_ea(name))
    held = {c: {**p, "area_mm2": 2 * p["area_mm2"], "power_w": 2 * p["power_w"],
                "tops": 2 * p["tops"]} if c not in b.CALIBRATION else p
            for c, p in b.PUBLISHED.items()}
    monkeypatch.setattr(b, "PUBLISHED", held)
    monkeypatch.setattr(b, "MEAN_W", {c: 2 * w for c, w in b.MEAN_W.items()})
    monkeypatch.setattr(b, "NVDLA_PRIMER", [(m, kb, gb, *(2 * x for x in pub))
                                            for m, kb, gb, *pub in b.NVDLA_PRIMER])
    assert b.EYERISS["role"] == "held out" and "eyeriss" not in b.CALIBRATION
    monkeypatch.setattr(b, "EYERISS", {**b.EYERISS, "core_mm2": 2 * b.EYERISS["core_mm2"],
                                       "peak_gmacs": tuple(2 * x for x in b.EYERISS["peak_gmacs"])})
    monkeypatch.setattr(b, "EYERISS_ALEXNET", {k: 2 * v for k, v in b.EYERISS_ALEXNET.items()})
    assert fits() == before
    assert loaded and set(loaded) == set(b.CALIBRATION)


def _printed_errors(out: str, chip: str) -> list[float]:
    line = next(ln for ln in out.splitlines() if ln.startswith(chip + " "))
    return [float(x) / 100 for x in re.findall(r"([+-]\d+\.\d)%", line)]


def test_printed_errors_are_the_models_and_held_out_bounds(capsys):
    """The errors printed for the held-out chips are recomputed here from the model's cell areas,
    TPU v1's floor plan and the published figures (typed in this test): area (cells, cells x the
    TPU-v1 die factor, and laid out: the layout factors by hand), power at the full MAC rate =
    MAC + SRAM dynamic + static over one second."""
    b = _bench()
    b.main([])
    out = capsys.readouterr().out
    t28 = load_tech("28nm")
    v1 = area_breakdown(b.load_chip("tpu_v1"), t28)
    k = 331.0 / v1["area_cells_mm2"]
    assert math.isclose(b.die_factor(), k)
    # Figure 2 of the TPU v1 paper: data buffers 37 %, compute 30 % of a <= 331 mm2 die; the
    # rest (33 %) beyond the modelled PHY and fixed block as a share of those 67 %
    k_buf = 0.37 * 331.0 / (v1["sram_cells_um2"] / 1e6)
    k_cmp = 0.30 * 331.0 / ((v1["pe_array_cells_um2"] + v1["vector_cells_um2"]) / 1e6)
    k_unc = (0.33 * 331.0 - (v1["phy_cells_um2"] + v1["fixed_cells_um2"]) / 1e6) / (0.67 * 331.0)
    t = load_tech("7nm")
    want = {}
    for chip, macs, area_pub, power_pub in (("tpu_v4i", 65536, 400.0, 175.0),
                                            ("tpu_v4", 131072, 600.0, 192.0)):
        a = b.with_background(b.load_chip(chip), b.background_fit())
        ab = area_breakdown(a, t)
        cells = ab["area_cells_mm2"]
        core = (k_buf * ab["sram_cells_um2"]
                + k_cmp * (ab["pe_array_cells_um2"] + ab["vector_cells_um2"])) / 1e6
        area = core * (1 + k_unc) + (ab["phy_cells_um2"] + ab["fixed_cells_um2"]) / 1e6
        assert ab["area_mm2"] == pytest.approx(area, rel=1e-9)
        e = energy_breakdown(a, t, macs=macs * 1050e6, latency_s=1.0)
        power = (e["mac_pj"] + e["sram_pj"] + e["static_pj"]) * 1e-12
        # + the HBM streamed in full: its bytes x (DRAM pJ/B + one scratchpad write each)
        bw = a.offchip.bandwidth_gbps * 1e9
        sp = energy_breakdown(a, t, macs=0.0, dram_bytes=1.0)["sram_pj"]     # pJ per byte filled
        with_dram = power + bw * (t.dram_pj_per_byte + sp) * 1e-12
        errs = _printed_errors(out, chip)
        assert len(errs) == 6
        assert errs[0] == pytest.approx(cells / area_pub - 1, abs=6e-4)
        assert errs[1] == pytest.approx(cells * k / area_pub - 1, abs=6e-4)
        assert errs[2] == pytest.approx(area / area_pub - 1, abs=6e-4)
        assert errs[4] == pytest.approx(power / power_pub - 1, abs=6e-4)
        assert errs[5] == pytest.approx(with_dram / power_pub - 1, abs=6e-4)
        want[chip] = (cells * k / area_pub - 1, area / area_pub - 1, power / power_pub - 1)
    # the bounds reached (goal 25 %, docs/power_validation.md), against upper-bound die areas:
    # the model's laid-out area +12.1 % (v4i) and +21.7 % (v4) — the HBM PHYs (28.9 / 56.4 mm2)
    # on top of the uncore share; single die factor +24 % / +34 % (TPU v1 with its 256
    # accumulator RAMs); TPU v4 power (cell leakage + TPU v1's fitted board background) -18.5 %
    # of its measured maximum; TPU v4i power 48 % below its TDP (a design limit, not a
    # measurement)
    assert 0.10 <= want["tpu_v4i"][1] <= 0.14 and 0.20 <= want["tpu_v4"][1] <= 0.23
    assert max(abs(want[c][1]) for c in want) <= 0.25
    assert 0.23 <= want["tpu_v4i"][0] <= 0.25 and 0.33 <= want["tpu_v4"][0] <= 0.35
    assert -0.20 <= want["tpu_v4"][2] <= -0.17
    assert -0.50 <= want["tpu_v4i"][2] <= -0.46


def test_tpu_v1_busy_power_against_its_measurement(capsys):
    """TPU v1 running CNN0 at 100 % load: 40 W per die, 86 TOPS (Jouppi et al. 2017, section 6
    and Table 3). Model: MACs at 86e12 / 2 per second x the 28 nm int8 MAC energy, scratchpad
    bytes 1/256 per MAC (WS, 256 columns) and accumulator bytes 8/256 per MAC (4 + 4 bytes per
    row fold of 256) at the table's interpolated pJ/byte of one of the 256 accumulator RAMs
    (16 KiB), plus the 28 W fitted static power; and the accumulator term again as one 4 MiB
    bank (how the ArchSpec had to describe it while accumulator_banks stopped at 64)."""
    b = _bench()
    b.main([])
    out = capsys.readouterr().out
    t = load_tech("28nm")
    macs = 86e12 / 2
    assert b.load_chip("tpu_v1").memory.accumulator_banks == 256

    def pj_per_byte(kib):          # log-log interpolation of the table by hand
        pts = sorted((p.kib, p.pj) for p in t.sram_pj_per_64b)
        (x0, y0), (x1, y1) = (pts[0], pts[1]) if kib <= pts[1][0] else (pts[1], pts[2])
        return y0 * (kib / x0) ** (math.log(y1 / y0) / math.log(x1 / x0)) / 8

    mac = macs * sum(_int8_between(28))        # 0.1530 + 0.07357 pJ
    sp = macs / 256 * pj_per_byte(24576 / 2)
    acc = macs * 8 / 256 * pj_per_byte(4096 / 256)
    static = 28.0                  # the measured idle power (Table 2): what static is fitted to
    busy = (mac + sp + acc) * 1e-12 + static
    m = re.search(r"CNN0's 86 TOPS (\d+\.\d) W vs measured busy 40 W \(([+-]\d+\.\d)%\)", out)
    assert float(m.group(1)) == pytest.approx(busy, abs=0.06)
    assert float(m.group(2)) / 100 == pytest.approx(busy / 40 - 1, abs=6e-4)
    one = macs * 8 / 256 * pj_per_byte(4096) * 1e-12
    m = re.search(r"accumulator reads (\d+\.\d) W .* 4 MiB bank (\d+\.\d) W -> busy (\d+\.\d) W",
                  out)
    assert float(m.group(1)) == pytest.approx(acc * 1e-12, abs=0.06)
    assert float(m.group(2)) == pytest.approx(one, abs=0.06)
    assert float(m.group(3)) == pytest.approx(busy - acc * 1e-12 + one, abs=0.06)
    # the calibration chip's measured busy power (not fitted): +5.8 % with the int8 MAC between
    # the published 45 and 7 nm figures (-2.2 % with [SB17]'s 0.152 pJ)
    assert abs(busy / 40 - 1) <= 0.06


def test_tpu_v4_full_rate_power_against_its_measured_mean(capsys):
    """TPU v4's measured mean power, 170 W (cloud.google.com/tpu/docs/v4): MAC + SRAM at the
    full rate + cell leakage + HBM PHY + TPU v1's fitted background (the held-out chip's own
    figures set nothing)."""
    b = _bench()
    b.main([])
    out = capsys.readouterr().out
    a, t = b.load_chip("tpu_v4"), load_tech("7nm")
    e = energy_breakdown(a, t, macs=131072 * 1050e6)
    st = static_power(a, t)
    assert st["background_w"] == 0
    power = (e["mac_pj"] + e["sram_pj"]) * 1e-12 + st["leakage_w"] + st["phy_w"] \
        + b.background_fit()
    m = re.search(r"tpu_v4: power at the full MAC rate (\d+\.\d) W vs measured mean 170 W "
                  r"\(([+-]\d+\.\d)%\)", out)
    assert float(m.group(1)) == pytest.approx(power, abs=0.06)
    assert float(m.group(2)) / 100 == pytest.approx(power / 170 - 1, abs=6e-4)
    assert -0.09 <= power / 170 - 1 <= -0.07          # measured -8.2 %


def test_printed_floorplan_ratio_is_the_models(capsys):
    """TPU v1's floor plan (unified buffer 29 %, accumulators 6 %, matrix unit 24 % of the die):
    the printed SRAM / PE-array ratio is the model's cell areas against (29 + 6) / 24."""
    b = _bench()
    b.main([])
    out = capsys.readouterr().out
    ab = area_breakdown(b.load_chip("tpu_v1"), load_tech("28nm"))
    model, published = ab["sram_cells_um2"] / ab["pe_array_cells_um2"], (0.29 + 0.06) / 0.24
    m = re.search(r"model (\d+\.\d+), floor plan (\d+\.\d+) \(err ([+-]\d+\.\d)%\)", out)
    assert float(m.group(1)) == pytest.approx(model, abs=6e-4)
    assert float(m.group(2)) == pytest.approx(published, abs=6e-4)
    assert float(m.group(3)) / 100 == pytest.approx(model / published - 1, abs=6e-4)
    # +28 %: the 255 extra accumulator banks' periphery (an 8 KiB macro's each, an assumption)
    # is SRAM area
    assert abs(model / published - 1) <= 0.30


def test_extra_sram_banks_leak_as_logic():
    """Each bank beyond the first adds an 8 KiB macro's periphery (45 nm: 8 * 8192 * 0.346 *
    (1/0.6 - 1) um^2), which leaks at the logic density."""
    t = load_tech("45nm")
    a = load_arch("ws16x16")
    banked = _with(a, memory={"scratchpad_banks": 4, "accumulator_banks": 2})   # 2*3 + 1 extra
    periphery_mm2 = 7 * 8 * 8192 * 0.346 * (1 / 0.6 - 1) / 1e6
    d = static_power(banked, t)["leakage_w"] - static_power(a, t)["leakage_w"]
    assert d == pytest.approx(periphery_mm2 * 8.524e-3 * 0.6 / 0.9)


def test_nvdla_power_is_the_ip_without_a_board():
    """An NVDLA-class IP carries no board background: its static power is the cells' leakage
    alone, by hand for nv_large (16 nm, 1 GHz = the curve's nominal point, 0.8 V): logic (2048
    int8 PEs, 32 vector lanes, fixed, 2 x 7 extra scratchpad banks' periphery: the conv
    buffer's 16 banks as 8 per A/B buffer) x 6.391 mW/mm^2
    + (512 + 32) KiB x 8192 bits x 700.2 pW. Held-out errors at the figures measured (goal
    25 %): average power (ResNet-50 rate) mean |error| 21.5 % (within), peak 37.1 % (not) —
    peak too low on every row."""
    b = _bench()
    rows = {r["chip"]: r for r in b.nvdla_rows()}
    logic_um2 = (2048 * (77.22 + 43.15) * 1.8 + 32 * 2203.0 + 95000.0
                 + 14 * 8 * 8192 * 0.06574 * (1 / 0.6 - 1))
    leak_mw = (logic_um2 / 1e6 * 6.391e-3 + (512 + 32) * 8192 * 700.2e-12) * 1e3
    assert rows["nvdla_2048"]["static_mw"] == pytest.approx(leak_mw, rel=2e-3)
    avg = sum(abs(r["avg_err"]) for r in rows.values()) / 7
    peak = sum(abs(r["peak_err"]) for r in rows.values()) / 7
    assert 0.21 <= avg <= 0.22 and 0.365 <= peak <= 0.38
    assert all(r["peak_err"] < 0 for r in rows.values())


def test_pe_register_diagnostic_by_hand():
    """The PE-register term the benchmark prints (not in the model), by hand: Aladdin's 40 nm
    register bit 9.011432 fJ per cycle over its 32-bit add 85.75164 fJ (power_func.h, 2 ns
    column), times the table's int32 add (16 nm 0.1 x 0.3^x = 0.05122 pJ, x = ln(45/16) /
    ln(45/7); 7 nm 0.03 pJ); nv_large: 2048 PEs x
    (8 + 8 + 32) bits x 1 GHz at 16 nm's nominal supply; TPU v4: 131,072 PEs x (16 + 16 + 32)
    bits x 1.05 GHz at 7 nm's nominal supply; gated to half the MAC rate it is half."""
    b = _bench()
    bit16 = 9.011432e-3 / 8.575164e-2 * _int8_between(16)[1]
    bit7 = 9.011432e-3 / 8.575164e-2 * 0.03
    assert b.register_pj_per_bit("16nm") == pytest.approx(bit16, rel=1e-9)
    nv = b.nvdla_arch(2048, 512, 20.0)
    assert b.pe_register_bits(nv) == 48
    assert b.register_w(nv, "16nm") == pytest.approx(2048 * 48 * bit16 * 1e-12 * 1e9, rel=1e-9)
    assert b.register_w(nv, "16nm", 2048e9 / 2) == pytest.approx(
        b.register_w(nv, "16nm") / 2, rel=1e-12)
    v4 = b.load_chip("tpu_v4")
    assert b.pe_register_bits(v4) == 64
    assert b.register_w(v4, "7nm") == pytest.approx(131072 * 64 * bit7 * 1e-12 * 1.05e9,
                                                    rel=1e-6)
    s = b.register_sensitivity()
    row = s["nvdla"][0]
    r0 = b.nvdla_rows()[0]
    assert row["peak_err"] == pytest.approx((r0["peak_mw"] + 2048 * 48 * bit16) / 766.0 - 1,
                                            rel=1e-6)
    # Eyeriss (65 nm int32 add 0.1 x 1.332 / 0.84433 pJ): 168 PEs x 64 bits (int16 weight and
    # input, int32 psum) x 200 MHz clocked every cycle; gated: x 23.1 G MAC/s / (168 x 200 MHz)
    bit65 = 9.011432e-3 / 8.575164e-2 * 0.1 * 1.332 / 0.84433
    e = s["eyeriss"]
    assert e["reg_mw"] == pytest.approx(168 * 64 * bit65 * 1e-12 * 200e6 * 1e3, rel=1e-3)
    assert e["reg_gated_mw"] == pytest.approx(
        e["reg_mw"] * (2.666e9 / 0.1153) / (168 * 200e6), rel=1e-9)
    p_eye = b.eyeriss_row()["power_mw"]
    assert e["power_err"] == pytest.approx((p_eye + e["reg_mw"]) / 278.0 - 1, rel=1e-9)


def test_7nm_density_check_by_hand():
    """7 nm TOPS per mm2, by hand: an int8 PE is (23.98 + 13.40) um^2 x 1.8 = 67.28 um^2 of cells,
    so a PE array at 1050 MHz gives 2 x 1.05e9 / 67.28e-6 mm^2 = 31.2 TOPS/mm^2; the published
    lower bounds are TOPS over the die upper bound (TPU v4i 138 / 400, TPU v4 275 / 600); the
    model's chip density is its peak TOPS over its area (cells, or laid out); RaPiD's 36 mm2
    brackets 26.2 / 36 = 0.728 (FP8) to 104.9 / 36 = 2.914 (INT4) TOPS/mm2."""
    b = _bench()
    assert b.pe_tops_per_mm2("7nm", "int8", 1050.0) == pytest.approx(
        2 * 1.05e9 / 1e12 / ((23.98 + 13.40) * 1.8 / 1e6), rel=1e-9)
    rows = {r["chip"]: r for r in b.density_rows()}
    assert rows["tpu_v4i"]["pub_min"] == pytest.approx(138 / 400)
    assert rows["tpu_v4"]["pub_min"] == pytest.approx(275 / 600)
    v4i = b.chip_with_background("tpu_v4i")
    tops = 2 * 65536 * 1050e6 / 1e12
    ab = area_breakdown(v4i, load_tech("7nm"))
    assert rows["tpu_v4i"]["raw"] == pytest.approx(tops / ab["area_cells_mm2"], rel=1e-9)
    assert rows["tpu_v4i"]["model"] == pytest.approx(tops / ab["area_mm2"], rel=1e-9)
    assert rows["tpu_v4i"]["raw_x"] > 2.5 and rows["tpu_v4"]["raw_x"] > 2.5
    # laid out, both held-out TPUs within 25 % of their published bounds (measured -11.1 / -17.7 %)
    assert all(abs(r["model_err"]) <= 0.25 for r in rows.values())
    assert b.RAPID_7NM["fp8_tflops"] / b.RAPID_7NM["area_mm2"] == pytest.approx(0.7278, rel=1e-3)


def test_nvdla_power_moves_with_the_int8_mac_energy_by_hand():
    """nv_large at the full rate (2048e9 MAC/s, 16 nm nominal supply) burns 2048e9 x the MAC
    energy difference more with the 16 nm table's int8 MAC (0.2 x 0.35^x + 0.1 x 0.3^x, x =
    ln(45/16) / ln(45/7)) than with [SB17]'s (0.3 pJ x E16(0.8) / E45(0.9) = 0.0427 pJ): the
    benchmark's power reads the table's MAC energy, nothing else moves."""
    b = _bench()
    t = load_tech("16nm")
    f = _e(16, 0.8) / _e(45, 0.9)
    sb = type(t.mac_pj["int8"])(mult=0.2 * f, add=0.1 * f)
    old = b.nvdla_rows(power_tech=t.model_copy(update={"mac_pj": {**t.mac_pj, "int8": sb}}))[0]
    new = b.nvdla_rows()[0]
    extra_mw = 2048e9 * (sum(_int8_between(16)) - 0.3 * f) * 1e-12 * 1e3
    assert new["peak_mw"] - old["peak_mw"] == pytest.approx(extra_mw, rel=1e-9)


# ---- 65 nm table (for Eyeriss) -----------------------------------------------------------------

def test_65nm_table_is_45nm_scaled_by_stillmaker_baas():
    """65 nm is a column of [SB17] (hwcomponents techscaling.py): area x 1.5 (AREA_SCALING
    45 -> 65 nm), energy x E65(1.0) / E45(0.9) = 1.332 / 0.84433 = 1.5776, every format (the
    int8 MAC too: 65 nm lies outside the published 45-7 nm line). Two entries by hand, then
    every entry."""
    t45, t65 = load_tech("45nm"), load_tech("65nm")
    area, energy = SB17_AREA_FROM_45[65], _e(65, 1.0) / _e(45, 0.9)
    assert _e(65, 1.0) == pytest.approx(3.755 - 4.398 + 1.975)            # 1.332
    assert energy == pytest.approx(1.332 / (1.103 * 0.81 - 0.362 * 0.9 + 0.2767))
    # by hand: the int8 multiply (Horowitz 45 nm 0.2 pJ) and the fp32 adder's area (Aladdin
    # 40 nm 3007.087 um^2 x (45/40)^2 = 3805.8 at 45 nm)
    assert t65.mac_pj["int8"].mult == pytest.approx(0.2 * 1.332 / 0.84433, rel=1e-3)   # 0.3155
    assert t65.area_um2.pe["fp32"].add == pytest.approx(3805.8 * 1.5, rel=1e-3)        # 5709
    for fmt, pair in t45.mac_pj.items():
        assert t65.mac_pj[fmt].mult == pytest.approx(pair.mult * energy, rel=2e-3)
        assert t65.mac_pj[fmt].add == pytest.approx(pair.add * energy, rel=2e-3)
    assert t65.router_pj_per_byte == pytest.approx(t45.router_pj_per_byte * energy, rel=2e-3)
    _assert_scaled_from_45(t45, t65, energy, area)
    # the supply range is Eyeriss' published core supply (JSSC 2017 Table IV: 0.82-1.17 V)
    assert (t65.vf.v_min, t65.vf.v_max) == (0.82, 1.17)


def test_eyeriss_published_figures_as_the_sources_give_them():
    """Y.-H. Chen, T. Krishna, J. Emer, V. Sze, IEEE JSSC 52(1) 2017, Table IV (OCR'd in
    github.com/cucapra/fodlam raw/eyeriss-tableIV.txt): TSMC 65nm LP, chip 4.0 x 4.0 mm, core
    3.5 x 3.5 mm, 168 PEs, on-chip SRAM 181.5 KB, global buffer 108.0 KB, scratch pads per PE
    448 B filter SRAM / 24 B ifmap / 48 B psum registers, core 0.82-1.17 V, 100-250 MHz, peak
    16.8-42.0 GMACS, 16-bit fixed point; Table V total row (raw/eyeriss-tableV.txt): AlexNet
    CONV layers 278 mW, 115.3 ms (103.5 ms processing), 2.666 G MACs at batch 4, 208.5 MB of
    global-buffer accesses; the abstract:
    35 frames/s at 278 mW, N = 4; ISSCC 2016: 666 million MACs per AlexNet image. The 200 MHz
    of the measurement is second hand (RVME, ICCD 2025, Table IV)."""
    b = _bench()
    e, a = b.EYERISS, b.EYERISS_ALEXNET
    assert e["tech"] == "65nm" and e["pes"] == 168 and e["array"] == (12, 14) and e["bits"] == 16
    assert e["core_mm2"] == pytest.approx(12.25) and e["chip_mm2"] == pytest.approx(16.0)
    assert (e["glb_kb"], e["onchip_sram_kb"]) == (108.0, 181.5)
    assert e["spad_bytes"] == {"filter": 448, "ifmap": 24, "psum": 48}
    assert (e["peak_gmacs"], e["clock_mhz"], e["supply_v"]) == ((16.8, 42.0), (100.0, 250.0),
                                                                (0.82, 1.17))
    assert (a["power_mw"], a["latency_ms"], a["processing_ms"], a["macs"], a["batch"]) == \
        (278.0, 115.3, 103.5, 2.666e9, 4)
    assert a["clock_mhz"] == 200.0 and a["glb_mb"] == 208.5
    # the figures agree with each other: SRAM = buffer + 168 filter pads (KB of 1024 B); peak =
    # 168 MACs x the clock range; 224 / 12 / 24 16-bit words per pad; 4 images in 115.3 ms is
    # the abstract's 35 frames/s; 4 x 666 M MACs is Table V's total
    assert 108.0 + 168 * 448 / 1024 == 181.5
    assert (168 * 100e6 / 1e9, 168 * 250e6 / 1e9) == pytest.approx((16.8, 42.0))
    assert (448 // 2, 24 // 2, 48 // 2) == (224, 12, 24)
    assert 4 / 0.1153 == pytest.approx(35, abs=0.5)
    assert 4 * 666e6 == pytest.approx(2.666e9, rel=1e-3)
    arch = b.load_chip("eyeriss")
    assert (arch.tensor_engine.rows, arch.tensor_engine.cols) == (12, 14)
    assert arch.tensor_engine.macs_per_cycle == 168 and arch.clock_mhz == 200.0
    assert arch.memory.scratchpad_kib == 108 and arch.memory.accumulator_kib == 8
    # the filter (448 B SRAM) and ifmap (24 B registers) pads of 16-bit words as pe_storage; the
    # psum pads (168 x 48 B = 7.875 KiB) are the 8 KiB accumulator
    st = arch.tensor_engine.pe_storage
    assert (st.sram_bytes, st.register_bytes, st.word_bits) == (448, 24, 16)
    # 16-bit fixed point (Table IV) as int16 operands with the int32 accumulator
    te = arch.tensor_engine
    assert (te.input_format, te.weight_format, te.accumulator_format) == ("int16", "int16", "int32")
    assert 168 * 48 / 1024 == 7.875
    assert b.eyeriss_mac_rate() == pytest.approx(2.666e9 / 0.1153)


def test_eyeriss_printed_errors_are_predicted_minus_published_over_published(capsys):
    """The Eyeriss line's errors are (predicted - published) / published with the predictions
    recomputed from the model's blocks and the published figures typed here: core area = the
    laid-out area minus the off-chip PHY (and minus the uncore share; and the cells without
    PHY) against 12.25 mm2; peak = 2 x 168 x 250 MHz against 2 x 42.0 GMACS; power = MAC + SRAM
    dynamic at 2.666 G MACs / 115.3 ms plus cell leakage (no PHY, no background) against 278 mW."""
    b = _bench()
    b.main([])
    out = capsys.readouterr().out
    arch, t = b.load_chip("eyeriss"), load_tech("65nm")
    ab = area_breakdown(arch, t)
    area = ab["area_mm2"] - ab["phy_um2"] / 1e6
    ip = area - ab["uncore_um2"] / 1e6
    cells = ab["area_cells_mm2"] - ab["phy_cells_um2"] / 1e6
    peak = 2 * 168 * 250e6 / 1e9
    rate = 2.666e9 / 0.1153
    e = energy_breakdown(arch, t, macs=rate)
    power_mw = (e["mac_pj"] + e["sram_pj"]) * 1e-9 + static_power(arch, t)["leakage_w"] * 1e3
    want = [(area - 12.25) / 12.25, (ip - 12.25) / 12.25, (cells - 12.25) / 12.25,
            (peak - 84.0) / 84.0, (power_mw - 278.0) / 278.0]
    line = next(ln for ln in out.splitlines() if ln.startswith("eyeriss  held out"))
    got = [float(x) / 100 for x in re.findall(r"([+-]\d+\.\d)%", line)]
    assert got == pytest.approx(want, abs=6e-4)
    assert f"{area:5.2f} 12.25" in line and f"{power_mw:5.1f}  278" in line
    # against the 25 % goal (docs/power_validation.md): in int16 with the row-stationary PE's
    # stated accesses the core area is within it (+12.5 %), the power is not (-48.5 %)
    assert 0.10 < want[0] < 0.15 and -0.52 < want[4] < -0.45


def test_eyeriss_pe_storage_by_hand():
    """Eyeriss' per-PE pads by hand at 65 nm: area = 168 x (448 B x 8 x the SRAM bit's macro
    area + 24 B x 8 x a register bit) — the register bit Aladdin's 40 nm 5.981433 um2 scaled
    like the int32 adder (45 nm: x (45/40)^2; 65 nm: Stillmaker & Baas' area factor 1.5);
    energy = AlexNet's MAC rate x (one 16-bit filter read per MAC from a 448 B SRAM on the 65 nm
    table's curve (Horowitz's 8 / 32 KB points x E65(1.0)/E45(0.9), slope 1/2 below 32 KB) + an
    ifmap read and a psum read and write of 16 bits in registers: Aladdin's register bit : 32-bit
    adder energy x the 65 nm int32 add 0.1 x E65(1.0)/E45(0.9)) at 200 MHz = the curve's nominal
    1.0 V; the row-stationary accesses as configs/validation/eyeriss.yaml states them."""
    b = _bench()
    t = load_tech("65nm")
    f = _e(65, 1.0) / _e(45, 0.9)
    sram_bit = 0.346 * 1.5 / 0.6
    reg_bit = 5.981433 * (45 / 40) ** 2 * 1.5
    cells = 168 * (448 * 8 * sram_bit + 24 * 8 * reg_bit)
    r = b.eyeriss_row()
    assert r["pe_storage_cells_mm2"] * 1e6 == pytest.approx(cells, rel=2e-3)
    e64 = 10.0 * f * math.sqrt((448 / 1024) / 8)          # pJ per 64-bit read at 448 B
    reg = 9.011432e-3 / 8.575164e-2 * 0.1 * f              # pJ per register bit, 65 nm
    mw = 2.666e9 / 0.1153 * (16 / 64 * e64 + 3 * 16 * reg) * 1e-9
    acc = b.load_chip("eyeriss").tensor_engine.pe_storage.accesses_per_mac
    assert (acc.sram_reads, acc.register_reads, acc.register_writes, acc.sram_writes) == \
        (1, 2, 1, 0)
    assert r["pe_storage_mw"] == pytest.approx(mw, rel=2e-3)
    assert r["voltage_v"] == pytest.approx(1.0, abs=1e-9)
    assert t.sram_pj_per_64b[0].pj == pytest.approx(10.0 * f, rel=1e-3)


def test_eyeriss_sram_split_by_hand():
    """Eyeriss' SRAM term at AlexNet's rate, by hand: operands 2 B / 14 columns per MAC from a
    108 / 2 / 16 = 3.375 KiB global-buffer bank, psums (int32, read + write) 8 B / 12 rows per
    MAC in the 8 KiB accumulator, each at Horowitz's 8 / 32 KB curve x E65(1.0)/E45(0.9) (slope
    1/2 below 8 KB) at 1.0 V; the two parts sum to the SRAM term."""
    b = _bench()
    f = _e(65, 1.0) / _e(45, 0.9)
    rate = 2.666e9 / 0.1153
    r = b.eyeriss_row()
    operand = rate * 2 / 14 * 10.0 * f * math.sqrt(3.375 / 8) / 8 * 1e-9
    psum = rate * 8 / 12 * 10.0 * f / 8 * 1e-9
    assert r["sram_operand_mw"] == pytest.approx(operand, rel=2e-3)
    assert r["sram_psum_mw"] == pytest.approx(psum, rel=2e-3)
    assert r["sram_mw"] == pytest.approx(r["sram_operand_mw"] + r["sram_psum_mw"], rel=1e-9)


def test_nvdla_linear_bound_from_the_primer_alone():
    """No power linear in the MAC rate with static >= 0 meets the primer's peak and average:
    P(peak) / P(avg) <= 1 / u (u = fps x 3.8 G MACs / (MACs x 1 GHz)), while the primer's
    peak / average is larger on every row. Recomputed from the typed primer rows."""
    b = _bench()
    rows = {2048: (269, 766, 291), 1024: (153, 375, 143), 512: (93, 210, 80), 256: (46, 135, 48),
            128: (20, 82, 31), 64: (7.3, 55, 21), 32: (3.6, 45, 17)}
    got = {r["chip"]: r for r in b.nvdla_linear_bound()}
    for macs, (fps, peak, avg) in rows.items():
        u = fps * 3.8e9 / (macs * 1e9)
        c = avg / (u * peak)
        r = got[f"nvdla_{macs}"]
        assert peak / avg > 1 / u
        assert r["peak_err_if_avg_exact"] == pytest.approx(c - 1, rel=1e-9)
        assert r["balanced"] == pytest.approx((1 - c) / (1 + c), rel=1e-9)
    # 2048 MACs: u = 269 x 3.8 / 2048 = 0.4991, rho = 766 / 291 = 2.632: peak >= -23.9 % short
    assert got["nvdla_2048"]["peak_err_if_avg_exact"] == pytest.approx(-0.239, abs=1e-3)
