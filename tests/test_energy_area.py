"""Energy/area model against hand-computed closed forms from the technology tables."""

from __future__ import annotations

import math

import pytest

from tilewright.arch import load_arch
from tilewright.dataflow_sim.energy_area import (TechError, area_breakdown, energy_breakdown,
                                                 load_tech, sram_pj_per_byte)


@pytest.mark.parametrize("tech", ["45nm", "7nm"])
def test_tables_load_and_cover_every_format(tech):
    from tilewright.formats import FORMATS
    t = load_tech(tech)
    assert set(FORMATS) <= set(t.mac_pj) and set(FORMATS) <= set(t.area_um2.pe)


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
    pe = 256 * (282 + 137) * 1.5
    sram = 256 * 8192 * 0.346 / 0.6
    vec = 16 * (7700 + 4184)
    assert got["pe_array_um2"] == pytest.approx(pe)
    assert got["sram_um2"] == pytest.approx(sram)
    assert got["vector_um2"] == pytest.approx(vec)
    assert got["area_mm2"] == pytest.approx((pe + sram + vec + 500000) / 1e6)


def test_energy_closed_form_ws_and_os():
    t = load_tech("45nm")
    ws = load_arch("ws16x16")
    macs, vops, dram = 1e9, 1e6, 1e7
    e = energy_breakdown(ws, t, macs=macs, vector_ops=vops, dram_bytes=dram)
    sp = sram_pj_per_byte(t, 64)      # each scratchpad half: 64 KiB
    acc = sram_pj_per_byte(t, 128)
    assert e["mac_pj"] == pytest.approx(macs * 0.3)
    assert e["dram_pj"] == pytest.approx(dram * 243.75)
    assert e["sram_pj"] == pytest.approx(macs * (1 / 16 * sp + 8 / 16 * acc) + dram * sp
                                         + vops * 8 * sp)
    assert e["energy_j"] == pytest.approx((e["mac_pj"] + e["sram_pj"] + e["vector_pj"]
                                           + e["dram_pj"]) * 1e-12)
    os_ = load_arch("os16x16")
    eo = energy_breakdown(os_, t, macs=macs)
    sp_o = sram_pj_per_byte(t, os_.memory.scratchpad_kib / 2)
    assert eo["sram_pj"] == pytest.approx(macs * (1 / 16 + 1 / 16) * sp_o)


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
    core = m.mesh.core_macs_per_cycle * t.pe_um2(m.tensor_engine.input_format) \
        + m.mesh.core_sram_kib * t.sram_um2_per_kib + t.area_um2.fixed / 64
    assert a["mesh_um2"] == pytest.approx(16 * core)
    e = energy_breakdown(m, t, macs=0, byte_hops=1000)
    assert e["mesh_pj"] == pytest.approx(1000 * (0.625 * math.sqrt(core) / 1e3 + 0.94))
    with pytest.raises(TechError, match="no mesh"):
        energy_breakdown(load_arch("ws16x16"), t, macs=0, byte_hops=1)


def test_unknown_tech_one_line():
    with pytest.raises(TechError, match="3nm: no such file .or tech preset; tech presets are: 45nm, 7nm."):
        load_tech("3nm")
