"""FPGA resource predictor (tilewright.app.sweep.resource_model) against real Yosys syntheses.

References: the measured data set (Yosys runs, leave-one-shape-out so every prediction is for an
array shape the fit never saw), one fresh Yosys synthesis of a design kept out of the data set,
and closed forms that do not come from the fit (one SB_MAC16 per PE; block RAMs from the
SB_RAM40_4K aspect ratios).
"""

from __future__ import annotations

import csv

import numpy as np
import pytest

from tilewright.arch import ArchSpec
from tilewright.app.sweep import resource_data as rd
from tilewright.app.sweep import resource_model as rm

#: the design kept out of the data set, synthesized afresh by the test below
FRESH = rd.HELD_OUT[0]
# Tolerance of the fresh synthesis against the prediction, in % of the measured count: the
# leave-one-shape-out max APE of the chosen LUT and FF models on the shipped data is below
# these (see test_holdout_errors_bound_fresh_tolerance), so a fresh held-out design outside them
# would be worse than every held-out design of the data set.
FRESH_TOL_PCT = {"luts": 15.0, "ffs": 15.0}


#: targets with a shipped data set; each has its own tests of the held-out error
TARGETS = ("ice40", "ecp5")


@pytest.fixture(scope="module", params=TARGETS)
def target(request):
    return request.param


@pytest.fixture(scope="module")
def data(target):
    return rm.load_data(target)


@pytest.fixture(scope="module")
def chosen_holdout(data, target):
    """Leave-one-shape-out predictions of the chosen model of every metric."""
    cands = {m: (rm._candidate(m, name),) for m, name in rm.CHOSEN[target].items()}
    return rm.holdout_predictions(data, target, candidates=cands)


def test_every_target_with_data_has_a_model():
    assert sorted(rm.CHOSEN) == sorted(TARGETS)
    assert sorted(p.stem.removeprefix("gemm_core_") for p in rd.DATA_DIR.glob("*.csv")) == \
        sorted(TARGETS)


def test_data_set_is_real_yosys_and_spans_the_space(data, target):
    assert (data["target"] == target).all() and data["yosys_version"].astype(str).str.match(
        r"0\.\d+").all()
    assert len(data) >= 40 and data["arch_hash"].is_unique
    assert set(data["dataflow"]) == {"ws", "os"}
    assert data["rows"].max() >= 8 and data["cols"].max() >= 8 and data["rows"].min() == 1
    assert (data["rows"].astype(str) + "x" + data["cols"].astype(str)).nunique() >= 15
    held = {tuple(r) for r in data[["rows", "cols", "dataflow", "scratchpad_kib",
                                    "accumulator_kib"]].itertuples(index=False)}
    assert FRESH not in held


def test_holdout_lut_median_ape_within_10_percent(chosen_holdout):
    rep = chosen_holdout.groupby("metric")["ape"].median()
    assert rep["luts"] <= 10.0, rep
    assert rep["ffs"] <= 10.0, rep
    if "fmax_mhz" in rep:                 # ECP5: nextpnr's Fmax, one seed
        assert rep["fmax_mhz"] <= 10.0, rep


def test_chosen_fmax_model_beats_the_constant_baseline():
    """The chosen ECP5 Fmax model must predict held-out shapes better than the data set's
    median does (otherwise it would be no model at all)."""
    data = rm.load_data("ecp5")
    assert {"fmax_mhz", "part", "harness_ffs"} <= set(data.columns)
    assert data["fmax_mhz"].between(5, 500).all() and data["part"].str.startswith("LFE5U").all()
    name = rm.CHOSEN["ecp5"]["fmax_mhz"]
    assert name != "median"
    cands = {"fmax_mhz": (rm._candidate("fmax_mhz", name), rm._candidate("fmax_mhz", "median"))}
    rep = rm.holdout_report(data, "ecp5", cands).set_index("model")["median_ape"]
    assert rep[name] < rep["median"], rep


def test_holdout_errors_bound_fresh_tolerance():
    """The fresh synthesis below is for ice40: its tolerance bounds every ice40 held-out error."""
    data = rm.load_data("ice40")
    cands = {m: (rm._candidate(m, name),) for m, name in rm.CHOSEN["ice40"].items()}
    worst = rm.holdout_predictions(data, "ice40", candidates=cands).groupby("metric")["ape"].max()
    for metric, tol in FRESH_TOL_PCT.items():
        assert worst[metric] < tol, (metric, worst[metric])


def test_dsps_one_per_pe_and_brams_match_measured(data, chosen_holdout, target):
    # independent closed forms: each PE's 8x8 multiply on one DSP (SB_MAC16 / MULT18X18D)
    assert (data["dsps"] == data["rows"] * data["cols"]).all()
    dsp = chosen_holdout[chosen_holdout["metric"] == "dsps"]
    np.testing.assert_allclose(dsp["predicted"], dsp["measured"], rtol=1e-6)
    # block RAMs: the measured counts equal the block-RAM tiling of the three buffers
    np.testing.assert_array_equal(rm.bram_estimate(data, target), data["brams"].to_numpy(float))


@pytest.mark.parametrize("dataflow", ["ws", "os"])
def test_predictions_monotone_in_pe_count(dataflow, target):
    def pred(r, c):
        return rm.predict_resources(rd.arch_for(r, c, dataflow, 4, 4), target)
    for metric in ("luts", "ffs", "dsps"):
        along_rows = [pred(r, 4)[metric] for r in range(1, 17)]
        along_cols = [pred(4, c)[metric] for c in range(1, 17)]
        square = [pred(n, n)[metric] for n in range(1, 17)]
        for seq in (along_rows, along_cols, square):
            assert np.all(np.diff(seq) > 0), (metric, seq)


def test_fresh_ecp5_place_and_route_of_held_out_design(tmp_path):
    """One real ECP5 flow (Yosys + nextpnr) of a design no fit has seen (3x2 WS, 1 + 1 KiB):
    counts within the tolerances, Fmax within the worst held-out Fmax error of the data set."""
    arch = rd.arch_for(*FRESH)
    measured = rd.measure_pnr(arch, "ecp5", work_dir=tmp_path)
    pred = rm.predict_resources(arch, "ecp5")
    assert pred["dsps"] == pytest.approx(measured["dsps"], abs=0.01)
    assert pred["brams"] == pytest.approx(measured["brams"], abs=0.01)
    data = rm.load_data("ecp5")
    cands = {m: (rm._candidate(m, n),) for m, n in rm.CHOSEN["ecp5"].items()}
    worst = rm.holdout_predictions(data, "ecp5", candidates=cands).groupby("metric")["ape"].max()
    for metric in ("luts", "ffs", "fmax_mhz"):
        ape = 100 * abs(pred[metric] - measured[metric]) / measured[metric]
        assert ape <= max(FRESH_TOL_PCT.get(metric, 0.0), worst[metric]), (metric, pred, measured)


def test_fresh_yosys_synthesis_of_held_out_design(tmp_path):
    """One real synthesis of a design no fit has seen (3x2 WS, 1 + 1 KiB)."""
    arch = rd.arch_for(*FRESH)
    measured = rd.measure(arch, "ice40", work_dir=tmp_path)
    pred = rm.predict_resources(arch)
    assert pred["dsps"] == pytest.approx(measured["dsps"], abs=0.01)
    assert pred["brams"] == pytest.approx(measured["brams"], abs=0.01)
    for metric, tol in FRESH_TOL_PCT.items():
        ape = 100 * abs(pred[metric] - measured[metric]) / measured[metric]
        assert ape <= tol, (metric, pred[metric], measured[metric])


def test_bad_input_is_one_line_error():
    fp = ArchSpec.from_dict({"tensor_engine": {"rows": 4, "cols": 4, "dataflow": "ws",
                                               "input_format": "bf16", "weight_format": "bf16",
                                               "accumulator_format": "fp32"}})
    with pytest.raises(rm.ResourceModelError, match=r"input_format = 'bf16'.*accepted: 'int8'"):
        rm.predict_resources(fp)
    banked = ArchSpec.from_dict({"tensor_engine": {"rows": 4, "cols": 4, "dataflow": "ws"},
                                 "memory": {"scratchpad_banks": 4}})
    with pytest.raises(rm.ResourceModelError, match=r"memory.scratchpad_banks = 4.*accepted: 1"):
        rm.predict_resources(banked)
    cube = ArchSpec.from_dict({"tensor_engine": {"kind": "cube", "rows": 4, "cols": 4,
                                                 "depth": 4}})
    with pytest.raises(rm.ResourceModelError, match=r"kind = 'cube'.*accepted: 'systolic'"):
        rm.predict_resources(cube)
    assert np.isnan(rm.fpga_metrics(cube)["fpga_luts_ice40"])
    with pytest.raises(rm.ResourceModelError, match=r"target 'vu9p'.*accepted: " + ", ".join(sorted(TARGETS))):
        rm.predict_resources(rd.arch_for(2, 2, "ws", 1, 1), target="vu9p")


def test_generator_appends_row_by_row_and_resumes(tmp_path, monkeypatch):
    points = [rd.arch_for(r, 1, "ws", 1, 1) for r in (1, 2, 3)]
    calls = []

    def fake_measure(arch, target="ice40", work_dir=None):
        if len(calls) == 2:
            raise KeyboardInterrupt          # interrupted while the third design runs
        calls.append(arch.name)
        return {k: 0 for k in rd.COLUMNS} | {"arch_hash": arch.content_hash(), "target": target}
    monkeypatch.setattr(rd, "measure", fake_measure)
    out = tmp_path / "d.csv"
    with pytest.raises(KeyboardInterrupt):
        rd.generate(out, points=points, progress=lambda s: None)
    assert len(rd.done_keys(out)) == 2          # both finished rows survived the interrupt
    calls.clear()
    assert rd.generate(out, points=points, progress=lambda s: None) == 1
    assert calls == [points[2].name]
    with out.open() as f:
        lines = [ln for ln in f if not ln.startswith("#")]
    assert [r["arch_hash"] for r in csv.DictReader(lines)] == [p.content_hash() for p in points]


def test_sweep_constraint_on_predicted_luts(tmp_path):
    """A sweep constraint ``fpga_luts_ice40 <= T`` skips the workloads of the points over T."""
    from tilewright.app.sweep import ResultsStore, run_sweep, sweep_from_dict
    from tilewright.app.sweep.spec import STATIC_METRICS
    archs = {n: rd.arch_for(n, n, "ws", 4, 4) for n in (2, 4, 8)}
    luts = {n: rm.predict_resources(a)["luts"] for n, a in archs.items()}
    limit = (luts[4] + luts[8]) / 2
    assert "fpga_luts_ice40" in STATIC_METRICS
    spec = sweep_from_dict({
        "name": "fpga", "base": "ws8x8", "tech": "45nm",
        "axes": {"tensor_engine.rows,tensor_engine.cols": [2, 4, 8],
                 "memory.scratchpad_kib,memory.accumulator_kib": [4]},
        "workloads": [{"gemm": [64, 64, 64], "format": "int8"}],
        "objectives": ["latency"], "constraints": [f"fpga_luts_ice40 <= {limit}"]},
        source="fpga.yaml")
    run_sweep(spec, tmp_path / "f.db", workers=1)
    df = ResultsStore(tmp_path / "f.db").frame("fpga").set_index("pes")
    for n in (2, 4, 8):
        row = df.loc[float(n * n)]
        assert row["fpga_luts_ice40"] == pytest.approx(luts[n], rel=1e-9)
        assert row["fpga_dsps_ice40"] == pytest.approx(n * n, rel=1e-6)
        assert row["status"] == ("skipped" if n == 8 else "ok")
        assert bool(row["feasible"]) == (n != 8)
