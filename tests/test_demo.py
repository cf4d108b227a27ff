"""The main job, end to end, exactly as the README promises: `tilewright demo` exits 0 and prints
the summary (every cross-check PASS). Runs the real compiler, Verilator build and cocotb bench."""

from __future__ import annotations

import pytest

from tests.test_cli import tw


@pytest.mark.verilator
@pytest.mark.slow
def test_tilewright_demo_end_to_end():
    proc = tw("demo", timeout=1200)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    for needle in ("cross-checks", "RTL cycles == cycle model", "RTL GEMM outputs == functional",
                   "functional == torch integer", "wall time per stage", "all cross-checks passed"):
        assert needle in out, needle
    assert "FAIL" not in out
