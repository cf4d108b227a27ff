"""Local storage in each PE (``tensor_engine.pe_storage``): its area, access energy and leakage by
hand on a 2x2 design against Aladdin's typed register figures and Horowitz's SRAM curve, the
dataflow rule for accesses per MAC and stated accesses (``accesses_per_mac``), hashes of designs
without them, and bad input in one line."""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys

import pytest

from tilewright.arch import ArchSpec, ArchSpecError, load_arch
from tilewright.dataflow_sim.energy_area import (area_breakdown, energy_breakdown, layout_fit,
                                                 load_tech, static_power)

# Aladdin's 40 nm library, 2 ns column, typed from harvard-acc/ALADDIN common/power_func.h:
# REG_2ns_dynamic_energy, REG_2ns_area (per bit); ADD_2ns_dynamic_energy, ADD_2ns_area (32-bit)
REG_PJ, REG_UM2, ADD_PJ, ADD_UM2 = 9.011432e-03, 5.981433, 8.575164e-02, 179.4430
# 45 nm table as its sources give it: Horowitz's 32-bit add 0.1 pJ and 64-bit reads of 8 KB
# 10 pJ / 32 KB 20 pJ; Aladdin's 32-bit adder area x (45/40)^2; Intel's 0.346 um2 cell / 0.6
H14_ADD_PJ, H14_8KB_PJ, H14_32KB_PJ = 0.1, 10.0, 20.0
ADD_45_UM2 = ADD_UM2 * (45 / 40) ** 2
SRAM_BIT_UM2 = 0.346 / 0.6
LOGIC_MW_PER_MM2, SRAM_PW_PER_BIT = 8.524, 4916.0


def _spec(dataflow: str = "ws", storage: dict | None = None, **engine) -> ArchSpec:
    te = {"rows": 2, "cols": 2, "dataflow": dataflow, **engine}
    if storage is not None:
        te["pe_storage"] = storage
    # 1000 MHz is the 45 nm curve's nominal point: dynamic energy at v_nom (x 1)
    return ArchSpec.from_dict({"name": "t", "clock_mhz": 1000.0, "tensor_engine": te,
                               "memory": {"scratchpad_kib": 8, "accumulator_kib": 8}})


def test_area_and_leakage_by_hand():
    """4 PEs x (4 B of registers + 64 B of SRAM): registers are logic cells at Aladdin's bit area
    scaled like the int32 adder (x (45/40)^2 at 45 nm), laid out with the compute factor; the SRAM
    is bit cells / array efficiency, laid out with the SRAM factor; the uncore share follows."""
    t = load_tech("45nm")
    a0, a1 = _spec(), _spec(storage={"register_bytes": 4, "sram_bytes": 64})
    b0, b1 = area_breakdown(a0, t), area_breakdown(a1, t)
    reg = 4 * 4 * 8 * REG_UM2 / ADD_UM2 * ADD_45_UM2
    assert reg == pytest.approx(4 * 32 * REG_UM2 * (45 / 40) ** 2, rel=1e-4)
    spad = 4 * 64 * 8 * SRAM_BIT_UM2
    assert b1["pe_registers_cells_um2"] == pytest.approx(reg, rel=1e-4)
    assert b1["pe_sram_cells_um2"] == pytest.approx(spad, rel=1e-9)
    assert b1["pe_array_cells_um2"] - b0["pe_array_cells_um2"] == pytest.approx(reg, rel=1e-4)
    assert b1["sram_cells_um2"] - b0["sram_cells_um2"] == pytest.approx(spad, rel=1e-9)
    k = layout_fit()
    laid = k.compute * reg + k.sram * spad
    assert (b1["area_mm2"] - b0["area_mm2"]) * 1e6 == pytest.approx(laid * (1 + k.uncore),
                                                                      rel=1e-4)
    leak = reg * 1e-6 * LOGIC_MW_PER_MM2 * 1e-3 + 4 * 64 * 8 * SRAM_PW_PER_BIT * 1e-12
    d = static_power(a1, t)["leakage_w"] - static_power(a0, t)["leakage_w"]
    assert d == pytest.approx(leak, rel=1e-3)


@pytest.mark.parametrize("dataflow,storage,pj", [
    # ws: one read of the 8-bit weight word from a 64 B SRAM: 8/64 of the 64-bit read, which the
    # 8-32 KB segment of Horowitz's curve (slope ln 2 / ln 4 = 1/2) gives at 1/16 KiB
    ("ws", {"sram_bytes": 64}, 8 / 64 * H14_8KB_PJ * math.sqrt((64 / 1024) / 8)),
    # is: one read of the 8-bit input word from the register file
    ("is", {"register_bytes": 16}, 8 * REG_PJ / ADD_PJ * H14_ADD_PJ),
    # os: a read and a write of the 32-bit psum word
    ("os", {"register_bytes": 16}, 2 * 32 * REG_PJ / ADD_PJ * H14_ADD_PJ),
    # word_bits overrides the format: one 16-bit read
    ("ws", {"register_bytes": 8, "word_bits": 16}, 16 * REG_PJ / ADD_PJ * H14_ADD_PJ),
    # with both parts, the stationary word sits in the SRAM
    ("ws", {"register_bytes": 8, "sram_bytes": 64}, 8 / 64 * H14_8KB_PJ * math.sqrt(1 / 128)),
])
def test_access_energy_per_mac_by_hand(dataflow, storage, pj):
    assert math.log(H14_32KB_PJ / H14_8KB_PJ) / math.log(4) == pytest.approx(0.5)
    t, macs = load_tech("45nm"), 1e6
    e0 = energy_breakdown(_spec(dataflow), t, macs=macs)
    e1 = energy_breakdown(_spec(dataflow, storage), t, macs=macs)
    assert e1["voltage_v"] == pytest.approx(0.9, abs=1e-9)
    assert e1["mac_pj"] - e0["mac_pj"] == pytest.approx(macs * pj, rel=1e-6)
    assert e1["sram_pj"] == e0["sram_pj"]


REG16_PJ = 16 * REG_PJ / ADD_PJ * H14_ADD_PJ          # one 16-bit register access, 45 nm
SRAM16_64B_PJ = 16 / 64 * H14_8KB_PJ * math.sqrt((64 / 1024) / 8)   # one 16-bit read of 64 B


@pytest.mark.parametrize("accesses,pj", [
    # a row-stationary-like PE: a filter read from its SRAM, an ifmap read and a psum read and
    # write in its registers, 16 bits each
    ({"sram_reads": 1, "register_reads": 2, "register_writes": 1}, SRAM16_64B_PJ + 3 * REG16_PJ),
    # an SRAM write is charged as a read of the same width; fractions count
    ({"sram_reads": 1, "sram_writes": 1}, 2 * SRAM16_64B_PJ),
    ({"register_reads": 0.5}, 0.5 * REG16_PJ),
    ({}, 0.0),                               # storage that costs area and leakage only
])
def test_stated_accesses_by_hand(accesses, pj):
    t, macs = load_tech("45nm"), 1e6
    storage = {"register_bytes": 8, "sram_bytes": 64, "word_bits": 16,
               "accesses_per_mac": accesses}
    e0 = energy_breakdown(_spec("ws"), t, macs=macs)
    e1 = energy_breakdown(_spec("ws", storage), t, macs=macs)
    assert e1["mac_pj"] - e0["mac_pj"] == pytest.approx(macs * pj, rel=1e-6, abs=1e-9)
    assert e1["sram_pj"] == e0["sram_pj"]


def test_stated_accesses_that_match_the_rule_cost_what_the_rule_does():
    """os in a 16 B register file, 32-bit psum: the rule (no accesses_per_mac) and the same
    accesses stated (one read, one write of 32 bits) are both 2 x 32 x the register bit, by
    hand; the rule's figure does not move when the field exists."""
    t, macs = load_tech("45nm"), 1e6
    hand = macs * 2 * 32 * REG_PJ / ADD_PJ * H14_ADD_PJ
    base = energy_breakdown(_spec("os"), t, macs=macs)["mac_pj"]
    rule = energy_breakdown(_spec("os", {"register_bytes": 16}), t, macs=macs)["mac_pj"]
    stated = energy_breakdown(_spec("os", {"register_bytes": 16, "word_bits": 32,
                                           "accesses_per_mac": {"register_reads": 1,
                                                                "register_writes": 1}}),
                              t, macs=macs)["mac_pj"]
    assert rule - base == pytest.approx(hand, rel=1e-6)
    assert stated - base == pytest.approx(hand, rel=1e-6)


def test_designs_without_the_section_keep_their_yaml_and_hash():
    a = load_arch("ws8x8")
    data = a.model_dump(mode="json", exclude_none=True)
    assert "pe_storage" not in data["tensor_engine"] and "pe_storage" not in a.to_yaml()
    canon = json.dumps(data, sort_keys=True, separators=(",", ":"))
    assert a.content_hash() == hashlib.sha256(canon.encode()).hexdigest()[:16]
    b = _spec(storage={"sram_bytes": 64})
    assert b.content_hash() != _spec().content_hash()
    assert ArchSpec.from_yaml(b.to_yaml()) == b
    assert "register_bytes" not in b.to_yaml() and "word_bits" not in b.to_yaml()
    assert "accesses_per_mac" not in b.to_yaml()
    c = _spec(storage={"sram_bytes": 64, "word_bits": 16,
                       "accesses_per_mac": {"sram_reads": 1, "register_writes": 0}})
    assert ArchSpec.from_yaml(c.to_yaml()) == c and "register_writes" not in c.to_yaml()
    assert c.content_hash() != _spec(storage={"sram_bytes": 64, "word_bits": 16}).content_hash()


BAD = [
    ("pe_storage: {register_bytes: -1}", "tensor_engine.pe_storage.register_bytes = -1"),
    ("pe_storage: {sram_bytes: 64, word_bits: 0}", "tensor_engine.pe_storage.word_bits = 0"),
    ("pe_storage: {}", "register_bytes = 0 and sram_bytes = 0"),
    ("pe_storage: {register_bytes: 8, word_bits: 16, accesses_per_mac: {register_reads: -1}}",
     "tensor_engine.pe_storage.accesses_per_mac.register_reads = -1"),
    ("pe_storage: {register_bytes: 8, accesses_per_mac: {register_reads: 1}}",
     "accesses_per_mac given without word_bits"),
    ("pe_storage: {register_bytes: 8, word_bits: 16, accesses_per_mac: {sram_reads: 1}}",
     "accesses_per_mac has sram accesses but sram_bytes = 0"),
    ("pe_storage: {sram_bytes: 8, word_bits: 16, accesses_per_mac: {register_writes: 1}}",
     "accesses_per_mac has register accesses but register_bytes = 0"),
    ("pe_storage: {sram_bytes: 8, word_bits: 16, accesses_per_mac: {sram_loads: 1}}",
     "sram_loads"),
]


@pytest.mark.parametrize("extra,needle", BAD)
def test_bad_storage_is_one_line(extra, needle):
    with pytest.raises(ArchSpecError) as info:
        ArchSpec.from_yaml(f"tensor_engine: {{rows: 2, cols: 2, dataflow: ws, {extra}}}",
                           source="b.yaml")
    assert "\n" not in str(info.value) and needle in str(info.value)
    with pytest.raises(ArchSpecError, match="pe_storage given for kind 'cube'"):
        ArchSpec.from_yaml("tensor_engine: {kind: cube, rows: 2, depth: 2, cols: 2, "
                           "pe_storage: {sram_bytes: 64}}", source="b.yaml")
    # a mesh core's SRAM is mesh.core_sram_kib: the section is refused there, not ignored
    with pytest.raises(ArchSpecError, match="tensor_engine.pe_storage: not read by a mesh"):
        ArchSpec.from_yaml("tensor_engine: {rows: 1, cols: 4, dataflow: os, "
                           "pe_storage: {sram_bytes: 64}}\nmesh: {rows: 2, cols: 2}",
                           source="b.yaml")


def test_cli_refuses_bad_storage_in_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    for storage, needle in (
            ("{sram_bytes: -8}", "tensor_engine.pe_storage.sram_bytes = -8"),
            ("{sram_bytes: 8, word_bits: 16, accesses_per_mac: {sram_writes: -0.5}}",
             "tensor_engine.pe_storage.accesses_per_mac.sram_writes = -0.5")):
        bad.write_text(f"tensor_engine: {{rows: 2, cols: 2, dataflow: ws, "
                       f"pe_storage: {storage}}}\n")
        proc = subprocess.run([sys.executable, "-m", "tilewright.app.cli.main", "arch",
                               str(bad)], capture_output=True, text=True, timeout=60)
        lines = [x for x in proc.stderr.strip().splitlines() if x.strip()]
        assert proc.returncode == 2 and "Traceback" not in proc.stderr + proc.stdout
        assert len(lines) == 1 and needle in lines[0], proc.stderr
