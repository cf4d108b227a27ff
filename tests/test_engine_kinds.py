"""The tensor-engine families in ArchSpec (``tensor_engine.kind``) and everything that reads them.

References are independent of the code under test: cycles from the tile-MAC closed form written
out here with ``math`` (ceil(M/Tm)·ceil(N/Tn)·ceil(K/Tk) + 2 + ceil(log2 Tk), the contract that
``tests/test_engines_rtl.py`` checks against the RTL), the mapper's core cycles as an explicit
Python loop over its tile grid, port widths from the operand layout's definition (int8 A and B
tiles + two flags), and one Verilator run of a cube built from an ArchSpec.
"""

from __future__ import annotations

import json
import math
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from tests.test_cli import tw_here
from tilewright.arch import ArchSpec, ArchSpecError, load_arch
from tilewright.compiler.gemm_mapper import GemmOp, cost_of, map_gemm
from tilewright.dataflow_sim.cycle import gemm_cycles, gemm_report
from tilewright.dataflow_sim.energy_area import area_breakdown, energy_breakdown, load_tech

REPO = Path(__file__).resolve().parents[1]

#: kind -> tensor_engine mapping (equal peak: 64 MAC/cycle) and its (Tm, Tk, Tn)
KINDS = {
    "adder_tree": ({"kind": "adder_tree", "depth": 64}, (1, 64, 1)),
    "outer_product": ({"kind": "outer_product", "rows": 8, "cols": 8}, (8, 1, 8)),
    "cube": ({"kind": "cube", "rows": 4, "depth": 4, "cols": 4}, (4, 4, 4)),
}


def _arch(te: dict, name: str = "t") -> ArchSpec:
    return ArchSpec.from_dict({"name": name, "tensor_engine": te})


def _closed_form(shape: tuple[int, int, int], m: int, k: int, n: int) -> int:
    tm, tk, tn = shape
    latency = 2 + math.ceil(math.log2(tk)) if tk > 1 else 2
    return math.ceil(m / tm) * math.ceil(n / tn) * math.ceil(k / tk) + latency


@pytest.fixture
def tw(capsys):
    """Run the ``tilewright`` CLI in this process (its real entry point,
    :func:`tests.test_cli.tw_here`): ``tw(*args)`` returns ``(exit status, stdout, stderr)``."""
    return partial(tw_here, capsys)


# ---- ArchSpec --------------------------------------------------------------------------------
@pytest.mark.parametrize("te,field,accepted", [
    ({"kind": "tpu", "rows": 4, "cols": 4}, "tensor_engine.kind = 'tpu'", "'adder_tree'"),
    ({"kind": "adder_tree", "rows": 2, "depth": 8}, "tensor_engine.rows = 2", "must be 1"),
    ({"kind": "adder_tree", "cols": 3, "depth": 8}, "tensor_engine.cols = 3", "must be 1"),
    ({"kind": "outer_product", "rows": 4, "cols": 4, "depth": 2}, "tensor_engine.depth = 2",
     "must be 1"),
    ({"kind": "systolic", "rows": 4, "cols": 4, "dataflow": "ws", "depth": 4},
     "tensor_engine.depth = 4", "must be 1"),
    ({"kind": "systolic", "rows": 4, "cols": 4}, "tensor_engine.dataflow = (missing)",
     "'ws', 'os' or 'is'"),
    ({"kind": "cube", "rows": 4, "cols": 4, "depth": 513}, "tensor_engine.depth = 513",
     "from 1 to 512"),
    ({"kind": "cube", "rows": 2, "cols": 2, "depth": 16, "input_format": "mxint8",
      "weight_format": "mxint8", "accumulator_format": "fp32"}, "tensor_engine.depth = 16",
     "multiple of 32"),
])
def test_bad_engine_is_one_line_naming_field_and_accepted(te, field, accepted):
    with pytest.raises(ArchSpecError) as info:
        ArchSpec.from_dict({"tensor_engine": te}, source="bad.yaml")
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith("bad.yaml: ")
    assert field in msg and accepted in msg


@pytest.mark.parametrize("kind", KINDS)
def test_tile_mac_dimensions_and_peak(kind):
    te_dict, shape = KINDS[kind]
    te = _arch(te_dict).tensor_engine
    assert te.tile_shape == shape
    assert te.macs_per_cycle == math.prod(shape) == 64
    assert te.dataflow is None


def test_dataflow_is_dropped_for_tile_mac_kinds_and_depth_one_is_not_stored():
    with_df = _arch({"kind": "cube", "rows": 4, "depth": 4, "cols": 4, "dataflow": "os"})
    without = _arch({"kind": "cube", "rows": 4, "depth": 4, "cols": 4})
    assert with_df == without and with_df.content_hash() == without.content_hash()
    assert "dataflow" not in with_df.to_yaml()
    # depth 1 (the default) never appears in YAML or the hash: older specs keep theirs
    ws = load_arch("ws8x8")
    assert "depth" not in ws.to_yaml()
    explicit = ws.with_engine(depth=1)
    assert explicit.content_hash() == ws.content_hash()
    assert ws.with_engine(rows=16).content_hash() != ws.content_hash()
    # a YAML round trip keeps a cube's depth
    cube = _arch(KINDS["cube"][0])
    assert ArchSpec.from_yaml(cube.to_yaml()) == cube


# ---- cycle model -------------------------------------------------------------------------------
SHAPES = [(1, 1, 1), (7, 13, 5), (64, 64, 64), (100, 300, 9), (3, 1000, 129)]


@pytest.mark.parametrize("kind", KINDS)
def test_cycle_model_equals_closed_form(kind):
    te_dict, shape = KINDS[kind]
    arch = _arch(te_dict)
    for m, k, n in SHAPES:
        g = gemm_cycles(arch, m, k, n)
        want = _closed_form(shape, m, k, n)
        assert g.cycles == want, (m, k, n)
        assert g.folds == math.ceil(m / shape[0]) * math.ceil(n / shape[2])
        assert g.utilization == pytest.approx(m * k * n / (want * 64))


def test_gemm_report_vectorized_per_kind():
    from tilewright.compiler.program import GemmTask, Program

    tasks = [GemmTask(name=f"g{i}", a="a", b="b", out=f"c{i}", m=m, k=k, n=n)
             for i, (m, k, n) in enumerate(SHAPES)]
    prog = Program.model_construct(tasks=tasks)
    for kind, (te_dict, shape) in KINDS.items():
        df = gemm_report(prog, _arch(te_dict))
        want = [_closed_form(shape, *s) for s in SHAPES]
        assert df["cycles"].tolist() == want
        np.testing.assert_allclose(df["utilization"],
                                   [math.prod(s) / (c * 64) for s, c in zip(SHAPES, want)])


def test_scalesim_convention_is_refused_for_tile_mac_kinds():
    with pytest.raises(ArchSpecError, match="systolic"):
        gemm_cycles(_arch(KINDS["cube"][0]), 8, 8, 8, convention="scalesim")


def test_cli_cycles_for_a_cube(tmp_path, tw):
    f = tmp_path / "cube.yaml"
    f.write_text("name: c\ntensor_engine: {kind: cube, rows: 4, depth: 4, cols: 4}\n")
    code, out, err = tw("cycles", "--arch", str(f), "-m", "100", "-k", "300", "-n", "9", "--json")
    assert code == 0, err
    assert json.loads(out)["cycles"] == _closed_form((4, 4, 4), 100, 300, 9)
    code, out, err = tw("cycles", "--arch", str(f), "-m", "8", "-k", "8", "-n", "8",
                        "--convention", "scalesim")
    assert code == 2 and "Traceback" not in err
    assert "error: convention 'scalesim'" in err


# ---- mapper, report, energy/area ---------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_mapper_core_cycles_equal_closed_form_summed_over_tiles(kind):
    te_dict, shape = KINDS[kind]
    arch = _arch(te_dict)
    op = GemmOp("g", 200, 700, 90)
    res = map_gemm(op, arch, prune=True)
    mp = res.mapping
    assert mp.dataflow == kind
    total = 0
    for m0 in range(0, op.m, mp.m_t):
        for k0 in range(0, op.k, mp.k_t):
            for n0 in range(0, op.n, mp.n_t):
                total += _closed_form(shape, min(mp.m_t, op.m - m0), min(mp.k_t, op.k - k0),
                                      min(mp.n_t, op.n - n0))
    assert res.cost.core_cycles == total
    assert res.cost.utilization == pytest.approx(op.macs / (res.cost.cycles * 64))
    # tiles step by the engine tile (or take the whole extent) and fit the buffers, padded
    for t, ext, g in zip((mp.m_t, mp.k_t, mp.n_t), (op.m, op.k, op.n), shape):
        assert t == ext or t % g == 0
    pad = [math.ceil(t / g) * g for t, g in zip((mp.m_t, mp.k_t, mp.n_t), shape)]
    half = arch.memory.scratchpad_bytes // 2
    assert 2 * pad[0] * pad[1] <= half and 2 * pad[1] * pad[2] <= half
    assert 2 * 4 * pad[0] * pad[2] <= arch.memory.accumulator_bytes
    # another kind's dataflow is refused, with the accepted one named
    with pytest.raises(ValueError, match=kind):
        cost_of(op, arch, mp.__class__(mp.m_t, mp.k_t, mp.n_t, mp.order, "ws"))


def test_report_tiled_gemm_uses_the_engine_kind():
    from tilewright.dataflow_sim.report import tiled_gemm_cycles

    arch = _arch(KINDS["outer_product"][0])
    want = sum(_closed_form((8, 1, 8), mm, kk, nn)
               for mm in (32, 32, 6) for kk in (50,) for nn in (16, 16, 3))
    assert tiled_gemm_cycles(arch, 70, 50, 35, 32, 16, 50) == want


def test_energy_area_count_rows_cols_depth_pes():
    tech = load_tech("7nm")
    pe = tech.pe_um2("int8")
    for kind, (te_dict, _) in KINDS.items():
        arch = _arch(te_dict)
        assert area_breakdown(arch, tech)["pe_array_cells_um2"] == pytest.approx(64 * pe), kind
    # a dot-product tree re-reads both operands every beat: e·macs·(1/Tn + 1/Tm) scratchpad bytes
    at, op = _arch(KINDS["adder_tree"][0]), _arch(KINDS["outer_product"][0])
    e_at = energy_breakdown(at, tech, macs=1e6)["sram_pj"]
    e_op = energy_breakdown(op, tech, macs=1e6)["sram_pj"]
    assert e_at / e_op == pytest.approx((1 + 1) / (1 / 8 + 1 / 8))


# ---- RTL ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_cli_rtl_writes_the_engine_top_and_lints_clean(tmp_path, kind, tw):
    te_dict, (tm, tk, tn) = KINDS[kind]
    f = tmp_path / "a.yaml"
    f.write_text(_arch(te_dict, name=kind).to_yaml())
    code, out, err = tw("rtl", "--arch", str(f), "-o", str(tmp_path / "out"), "--lint")
    assert code == 0, out + err
    assert "clean" in out
    man = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert man["kind"] == kind and man["top"] == "tw_mac_engine"
    assert man["tile_mkn"] == [tm, tk, tn] and man["macs_per_cycle"] == 64
    ports = {p["name"]: p["width_bits"] for p in man["ports"]}
    assert ports["ops_in__payload"] == 8 * (tm * tk + tk * tn) + 2
    assert ports["c_out__payload"] == 32 * tm * tn
    assert (tmp_path / "out" / "tw_mac_engine.v").read_text().count("module tw_mac_engine") == 1


def test_cli_rtl_synth_ice40_maps_one_dsp_per_multiplier(tmp_path, tw):
    """The ice40 flow for engine tops (abc9 workaround in app/cli/main.py) runs, and the
    engine's Tm·Tk·Tn int8 multipliers become as many SB_MAC16 DSPs."""
    f = tmp_path / "a.yaml"
    f.write_text("name: at4\ntensor_engine: {kind: adder_tree, depth: 4}\n")
    code, out, err = tw("rtl", "--arch", str(f), "-o", str(tmp_path / "out"), "--synth", "ice40")
    assert code == 0, out + err
    s = json.loads((tmp_path / "out" / "manifest.json").read_text())["synthesis"]["ice40"]
    assert s["dsps"] == 4 and s["luts"] > 0 and s["ffs"] > 0 and s["estimate"] is True


def test_cli_rtl_refuses_non_int8_tile_mac_engine(tmp_path, tw):
    f = tmp_path / "a.yaml"
    f.write_text("tensor_engine: {kind: cube, rows: 2, depth: 2, cols: 2, input_format: bf16, "
                 "weight_format: bf16, accumulator_format: fp32}\n")
    code, out, err = tw("rtl", "--arch", str(f), "-o", str(tmp_path / "out"))
    assert code == 2 and "Traceback" not in err
    assert "bf16 -> fp32 on the cube engine" in err and "int8 -> int32" in err


def test_gemm_core_generator_refuses_tile_mac_kinds():
    from tilewright.rtl.verilog import generate_verilog

    with pytest.raises(ArchSpecError, match="kind = 'cube'"):
        generate_verilog(_arch(KINDS["cube"][0]))


def test_rtl_cube_from_archspec_matches_cycle_model():
    """One Verilator run (the 2x4x2 cube build tests/test_engines_rtl.py also uses, cached):
    the ArchSpec's (rows, depth, cols) reach the RTL as (Tm, Tk, Tn), and the RTL's cycles and
    results equal the cycle model and numpy."""
    from tilewright.cosim import sim as cosim
    from tilewright.cosim.engine_jobs import EngineParams

    arch = _arch({"kind": "cube", "rows": 2, "depth": 4, "cols": 2})
    te = arch.tensor_engine
    rng = np.random.default_rng(4)
    gemms = [(rng.integers(-128, 128, (m, k), dtype=np.int8),
              rng.integers(-128, 128, (k, n), dtype=np.int8)) for m, k, n in ((5, 9, 3), (2, 4, 2))]
    runs = cosim.run("engine", gemms, EngineParams.of(te.kind, te.engine_params)).records
    for (a, b), run in zip(gemms, runs):
        m, k, n = a.shape[0], a.shape[1], b.shape[1]
        assert run.cycles == gemm_cycles(arch, m, k, n).cycles == _closed_form((2, 4, 2), m, k, n)
        want = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)
        np.testing.assert_array_equal(run.c, want)


# ---- sweep -------------------------------------------------------------------------------------
def test_engine_family_sweep_runs_every_kind(tmp_path, tw):
    from tilewright.app.sweep.evaluate import evaluate_point
    from tilewright.app.sweep.spec import load_sweep

    spec = load_sweep(REPO / "configs" / "sweeps" / "engine_families.yaml")
    points = spec.grid_points()
    archs = [spec.arch_for(p) for p in points]
    assert sorted({a.tensor_engine.kind for a in archs}) == sorted(["systolic", *KINDS])
    assert {a.tensor_engine.macs_per_cycle for a in archs} == {64}
    gemm = spec.workloads_for(points[0])[0]["gemm"]
    for a in archs:
        out = evaluate_point(a.model_dump(mode="json"), spec.workloads_for(), spec.tech)
        assert out["status"] == "ok", out["error"]
        assert out["metrics"]["pes"] == 64
        best = map_gemm(GemmOp("g", *gemm, elem_bytes=1), a, prune=True).cost
        assert out["metrics"]["cycles"] == pytest.approx(best.cycles)
    # the CLI runs it end to end into a results store
    code, out, err = tw("sweep", str(REPO / "configs" / "sweeps" / "engine_families.yaml"),
                        "--db", str(tmp_path / "f.db"), "--workers", "1")
    assert code == 0, out + err
    assert f"{len(points)} points evaluated" in out
