"""benchmarks/format_tradeoff.py: its ``--fast`` path (Yosys through the FPGA flow's wrapper)
on the smallest designs gives real, format-dependent resource counts, and its GEMM error column
equals the error of an independent torch computation (bf16)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import format_tradeoff   # noqa: PLC0415  (the benchmark script, not a package)
    finally:
        sys.path.pop(0)
    return format_tradeoff


@pytest.mark.nightly      # two Yosys runs (~30 s); run_family's synthesis runs in CI via test_fpga_flow
def test_fast_path_counts_differ_between_int8_and_fp8(tmp_path, capsys):
    """1x1 int8 and fp8-e4m3 cores on iCE40, synthesis only: every row fits a part, has LUTs
    and no Fmax, and the fp8 core (fp8 multiplier, fp32 adders, output scaling) needs more
    LUTs than the int8 one. The printed table holds both rows."""
    rows = _bench().main(["--fast", "--shape", "1x1", "--formats", "int8,fp8-e4m3",
                          "--targets", "ice40", "--no-error", "--cache", str(tmp_path)])
    assert [r["format"] for r in rows] == ["int8", "fp8-e4m3"]
    ice = {r["format"]: r["ice40"] for r in rows}
    for fmt, f in ice.items():
        assert f["fits"] and f["part"].startswith("iCE40"), (fmt, f)
        assert f["luts"] > 0 and f["fmax_mhz"] is None, (fmt, f)
    assert ice["fp8-e4m3"]["luts"] > ice["int8"]["luts"]
    assert ice["fp8-e4m3"]["top"] == "tw_fp8_gemm_core" and ice["int8"]["top"] == "tw_gemm_core"
    out = capsys.readouterr().out
    assert f"| fp8-e4m3 | {ice['fp8-e4m3']['part']} | {ice['fp8-e4m3']['luts']:,} |" in out
    # a second run answers from the cache, keyed by the Verilog's hash
    again = _bench().main(["--fast", "--shape", "1x1", "--formats", "int8", "--targets", "ice40",
                           "--no-error", "--cache", str(tmp_path)])
    assert again[0]["ice40"] == ice["int8"]


def test_gemm_error_matches_torch_bf16():
    """The GEMM error column for bf16 against torch's own bf16 rounding: a and b rounded to
    bfloat16 by torch, multiplied in fp64 (bf16 products are exact, so only the fp32 summation
    of the engine differs, at ~1e-7 relative), compared to torch fp32 ``a @ b``."""
    m, k, n = _bench().GEMM_MKN
    rng = np.random.default_rng(0)      # the benchmark's operands (its docstring)
    a = torch.from_numpy(rng.standard_normal((m, k)).astype(np.float32))
    b = torch.from_numpy((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32))
    ref = (a @ b).double()
    ours = (a.bfloat16().double() @ b.bfloat16().double())
    expect = float(torch.linalg.norm(ours - ref) / torch.linalg.norm(ref))
    got = _bench().gemm_rel_l2("bf16", k_block=32)
    assert 1e-3 < expect < 1e-2         # bf16's 8-bit significand: a visible, bounded error
    assert abs(got - expect) <= 0.01 * expect, (got, expect)
