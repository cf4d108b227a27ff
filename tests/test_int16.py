"""int16 (16-bit fixed point, int32 accumulator) as a format: the registry's closed forms, the MAC
energy and PE area at every node by hand from the tables' multiplier width rule (energy and area
~ width_a x width_b, hwcomponents' AladdinMultiplier: a 16 x 16 multiplier is 4 x the 8 x 8 one),
a design's MAC energy and PE-array cells by hand, the GEMM against numpy's int64 product, and the
RTL flows' one-line refusal (exit 2) while the analytical levels accept it."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from tilewright.arch import ArchSpec, ArchSpecError
from tilewright.dataflow_sim.energy_area import (area_breakdown, energy_breakdown, load_tech,
                                                 operand_bytes)
from tilewright.dataflow_sim.numerics import gemm
from tilewright.formats import FORMATS, bits_of, quantize, round_to_element

# published figures, typed: Horowitz ISSCC 2014 (45 nm, 0.9 V) 8b mult 0.2, 32b add 0.1 pJ;
# Jouppi et al. ISCA 2021 Table 2 (7 nm) int8 mult 0.07, int32 add 0.03 pJ; Aladdin's 40 nm
# 2 ns MUL (32-bit) 5137.736 and ADD (32-bit) 179.443 um^2, scaled to 45 nm by (45/40)^2
H14_MULT8, H14_ADD32 = 0.2, 0.1
J21_MULT8, J21_ADD32 = 0.07, 0.03
AL14_MUL32, AL14_ADD32, N45 = 5137.736, 179.443, (45 / 40) ** 2
# Stillmaker & Baas 2017: 45 -> 65 nm energy E65(1.0) / E45(0.9), area 1.5; 45 -> 7 nm area 0.059
F65 = (3.755 - 4.398 + 1.975) / (1.103 * 0.81 - 0.362 * 0.9 + 0.2767)
A65, A7 = 1.5, 0.059
WIDTH_RULE = (16 / 8) ** 2      # multiplier energy and area ~ width_a x width_b


def test_int16_format_closed_forms():
    f = FORMATS["int16"]
    assert (f.kind, f.bits, f.max_code, f.max_finite, f.default_acc) == \
        ("int", 16, 2 ** 15 - 1, 32767.0, "int32")
    assert bits_of("int16") == 16 and np.dtype(f.dtype) == np.int16
    # amax = 32767 / 1024: the scale 1/1024 is exact, so the codes are x * 1024 rounded (RNE)
    x = np.array([32767, -16384, 1000.4, 2.5, 3.5, -0.5], np.float64) / 1024
    q = quantize(x, "int16")
    assert q.scales.reshape(-1)[0] == np.float32(1 / 1024)
    assert q.values.tolist() == [32767, -16384, 1000, 2, 4, 0]
    assert q.values.dtype == np.int16
    # symmetric saturation: -32768 is never produced
    assert round_to_element(np.array([4e4, -4e4, -32767.6]), "int16").tolist() == \
        [32767, -32767, -32767]


def _mac(node: int) -> tuple[float, float]:
    """(mult, add) pJ of the int16 MAC at ``node`` nm, by hand."""
    m45, m7 = H14_MULT8 * WIDTH_RULE, J21_MULT8 * WIDTH_RULE
    if node == 45:
        return m45, H14_ADD32
    if node == 7:
        return m7, J21_ADD32
    if node == 65:
        return m45 * F65, H14_ADD32 * F65
    x = math.log(45 / node) / math.log(45 / 7)      # log-log line between 45 and 7 nm
    return m45 * (m7 / m45) ** x, H14_ADD32 * (J21_ADD32 / H14_ADD32) ** x


@pytest.mark.parametrize("node", [7, 16, 28, 45, 65])
def test_int16_mac_energy_and_pe_area_by_the_width_rule(node):
    """45 nm: 0.2 x 4 = 0.8 pJ + the int32 add 0.1; 7 nm 0.07 x 4 = 0.28 + 0.03; 65 nm the 45 nm
    pair x E65(1.0)/E45(0.9); 16 and 28 nm on the log-log line between 45 and 7 nm. Area: the
    32-bit multiplier x (16/32)^2 x (45/40)^2 = 1625.6 um^2 + the 32-bit adder x (45/40)^2 at
    45 nm, x 1.5 at 65 nm, x 0.059 at 7 nm."""
    t = load_tech(f"{node}nm")
    mult, add = _mac(node)
    assert t.mac_pj["int16"].mult == pytest.approx(mult, rel=2e-3)
    assert t.mac_pj["int16"].add == pytest.approx(add, rel=2e-3)
    assert t.mac_pj["int16"].mult == pytest.approx(WIDTH_RULE * t.mac_pj["int8"].mult, rel=2e-3)
    assert t.mac_pj["int16"].add == t.mac_pj["int8"].add          # the same int32 accumulator
    a45 = (AL14_MUL32 * (16 / 32) ** 2 * N45, AL14_ADD32 * N45)
    assert a45[0] == pytest.approx(1625.6, abs=0.05)
    scale = {45: 1.0, 65: A65, 7: A7}.get(node)
    pe = t.area_um2.pe["int16"]
    if scale is not None:
        assert (pe.mult, pe.add) == pytest.approx((a45[0] * scale, a45[1] * scale), rel=2e-3)
    assert pe.mult == pytest.approx(WIDTH_RULE * t.area_um2.pe["int8"].mult, rel=2e-3)
    assert pe.add == t.area_um2.pe["int8"].add


def test_an_int16_design_by_hand():
    """A 2 x 2 ws int16 array at 45 nm, 1000 MHz (the curve's nominal 0.9 V): 2 operand bytes;
    MAC energy = MACs x (0.8 + 0.1) pJ (no column unit: the int32 accumulator is inside the PE,
    as for int8); PE-array cells = 4 PEs x (1625.6 + 227.1) um^2 x pe_overhead 1.8."""
    spec = ArchSpec.from_dict({
        "name": "i16", "clock_mhz": 1000.0,
        "tensor_engine": {"rows": 2, "cols": 2, "dataflow": "ws", "input_format": "int16",
                          "weight_format": "int16", "accumulator_format": "int32"},
        "memory": {"scratchpad_kib": 8, "accumulator_kib": 8}})
    t = load_tech("45nm")
    assert operand_bytes(spec) == 2
    e = energy_breakdown(spec, t, macs=1e6)
    assert e["voltage_v"] == pytest.approx(0.9, abs=1e-9)
    assert e["mac_pj"] == pytest.approx(1e6 * (0.2 * 4 + 0.1), rel=1e-9)
    cells = 4 * (AL14_MUL32 / 4 * N45 + AL14_ADD32 * N45) * 1.8
    assert area_breakdown(spec, t)["pe_array_cells_um2"] == pytest.approx(cells, rel=2e-4)
    with pytest.raises(ArchSpecError, match="accumulator_format = 'fp32': must be 'int32' for "
                                            "int16 operands"):
        ArchSpec.from_dict({**spec.model_dump(mode="json", exclude_none=True),
                            "tensor_engine": {**spec.tensor_engine.model_dump(
                                mode="json", exclude_none=True), "accumulator_format": "fp32"}})


def test_int16_gemm_is_numpys_int64_product_wrapped_to_int32():
    """Unscaled int16 codes: the int32 accumulator = numpy's int64 product (exact here) modulo
    2**32; four products of 32767**2 sum to 4,294,705,156, which wraps to -262,140."""
    rng = np.random.default_rng(0)
    a = rng.integers(-1000, 1001, (5, 64)).astype(np.int16)
    b = rng.integers(-1000, 1001, (64, 3)).astype(np.int16)
    out = gemm(a, b, "int16", k_block=8)
    assert out.dtype == np.int32
    assert np.array_equal(out, a.astype(np.int64) @ b.astype(np.int64))
    big = np.full((1, 4), 32767, np.int16)
    d = 4 * 32767 ** 2
    assert d == 4_294_705_156 and (d + 2 ** 31) % 2 ** 32 - 2 ** 31 == -262_140
    assert gemm(big, big.T.copy(), "int16", k_block=4).tolist() == [[-262_140]]


def test_rtl_refuses_int16_in_one_line_exit_2_and_the_cycle_model_accepts_it(tmp_path):
    arch = tmp_path / "i16.yaml"
    arch.write_text("name: i16\ntensor_engine: {rows: 4, cols: 4, dataflow: ws, input_format: "
                    "int16, weight_format: int16, accumulator_format: int32}\n")
    cli = [sys.executable, "-m", "tilewright.app.cli.main"]
    proc = subprocess.run([*cli, "rtl", "--arch", str(arch), "-o", str(tmp_path / "v")],
                          capture_output=True, text=True, timeout=60)
    lines = [x for x in proc.stderr.strip().splitlines() if x.strip()]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr + proc.stdout
    assert len(lines) == 1 and "tensor_engine formats int16 -> int32" in lines[0], proc.stderr
    ok = subprocess.run([*cli, "cycles", "--arch", str(arch), "-m", "8", "-k", "8", "-n", "8"],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
