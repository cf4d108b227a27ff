"""Cycle model: closed forms against hand-derived fold counts and against the SCALE-Sim table of docs/design.md.

The exact agreement with the RTL is tested in tests/test_gemm_core_rtl.py; here the model is
checked against independent arithmetic: a literal loop over the folds the core visits.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from tilewright.arch import default_arch
from tilewright.cosim.suites import gemm_suite
from tilewright.dataflow_sim.cycle import gemm_cycles, gemm_cycles_array, gemm_report


def _loop_cycles(m, k, n, R, C, dataflow):
    """Walk the folds one by one, as the sequencer does, summing each fold's cycles."""
    total = 0
    if dataflow == "ws":
        folds = [(nb, kb) for nb in range(0, n, C) for kb in range(0, k, R)]
        total = R                                         # preload of the first fold's weights
        for f, _ in enumerate(folds):
            if f < len(folds) - 1:                        # stream M rows; reload the shadow
                total += max(m, (R + C - 2) + R)          # from R+C-2 cycles in, for R cycles
            else:
                total += m + 1 + (R + C - 1) + 1          # last fold: stream, latency, write
    else:
        folds = [(nb, mb) for nb in range(0, n, C) for mb in range(0, m, R)]
        for f, _ in enumerate(folds):
            if f == 0:
                total += k                                # stream the first tile
            else:                                         # stream, while the previous tile is
                total += max(k, 1 + (R + C - 1) + R)   # captured (wave), drained in the period
        total += 1 + (R + C - 2) + 1 + R - 1 + 1          # flush: capture + drain the last tile
    return total


@pytest.mark.parametrize("R,C,dataflow", list(itertools.product([1, 3, 8], [1, 5, 16], ["ws", "os"])))
def test_closed_form_equals_fold_walk(R, C, dataflow):
    arch = default_arch().with_engine(rows=R, cols=C, dataflow=dataflow)
    for m, k, n in [(1, 1, 1), (7, 13, 29), (64, 3, 2), (1, 100, 17)]:
        assert gemm_cycles(arch, m, k, n).cycles == _loop_cycles(m, k, n, R, C, dataflow)


def test_scalesim_convention_matches_design_table():
    # docs/design.md: F*P - 1; OS P = K + R + C - 2, WS P = M + 2R + C - 2, IS P = N + 2R + C - 2
    R, C, m, k, n = 8, 4, 30, 50, 20
    c, f = gemm_cycles_array(m, k, n, R, C, "os", "scalesim")
    assert int(f) == math.ceil(m / R) * math.ceil(n / C) and int(c) == int(f) * (k + R + C - 2) - 1
    c, f = gemm_cycles_array(m, k, n, R, C, "ws", "scalesim")
    assert int(f) == math.ceil(k / R) * math.ceil(n / C) and int(c) == int(f) * (m + 2 * R + C - 2) - 1
    c, f = gemm_cycles_array(m, k, n, R, C, "is", "scalesim")
    assert int(f) == math.ceil(k / R) * math.ceil(m / C) and int(c) == int(f) * (n + 2 * R + C - 2) - 1


def test_vectorized_equals_scalar_and_utilization_bounded():
    rng = np.random.default_rng(0)
    m, k, n = rng.integers(1, 300, (3, 200))
    for df in ("ws", "os"):
        arch = default_arch().with_engine(dataflow=df)
        cyc, _ = gemm_cycles_array(m, k, n, 8, 8, df)
        for i in range(0, 200, 37):
            g = gemm_cycles(arch, int(m[i]), int(k[i]), int(n[i]))
            assert g.cycles == cyc[i] and 0 < g.utilization <= 1


def test_bad_dataflow_or_convention_is_named():
    with pytest.raises(ValueError, match="convention 'gpu'"):
        gemm_cycles_array(1, 1, 1, 4, 4, "ws", "gpu")
    with pytest.raises(ValueError, match="dataflow 'xs'"):
        gemm_cycles_array(1, 1, 1, 4, 4, "xs")


def test_gemm_report_rows():
    arch = default_arch()
    prog, _ = gemm_suite(arch)
    df = gemm_report(prog, arch)
    assert list(df["op"]) == [g.name for g in prog.gemms()]
    assert (df["macs"] == [g.m * g.k * g.n for g in prog.gemms()]).all()
    assert df.attrs["convention"] == "tilewright"
    assert ((df["utilization"] > 0) & (df["utilization"] <= 1)).all()
