"""Hardware users study (issue 14 item 7): tensor engines up to 512x512, the input-stationary
dataflow, several engines per chip (``tensor_engine.count``), the TPU presets and the RTL's
one-line refusals.

References are independent of the code under test: literal walks over the folds the array
visits, the single-engine closed forms (checked against the RTL by tests/test_gemm_core_rtl.py)
for the several-engine splits, hand arithmetic from the presets' published figures, and
SCALE-Sim 3.0.0 itself (tests/test_scalesim_dataflows.py).
"""

from __future__ import annotations

import json
import math
from functools import partial

import numpy as np
import pytest

from tests.test_cli import tw_here
from tilewright.arch import (MAX_ARRAY_DIM, RTL_MAX_ARRAY_DIM, ArchSpec, ArchSpecError,
                             default_arch, load_arch)
from tilewright.compiler.core_timing import gemm_cycles_array
from tilewright.compiler.gemm_mapper import GemmOp, Mapping, cost_of, map_gemm
from tilewright.dataflow_sim.cycle import gemm_cycles
from tilewright.dataflow_sim.energy_area import area_breakdown, energy_breakdown, load_tech
from tilewright.dataflow_sim.tiled import simulate_tiled


@pytest.fixture
def tw(capsys):
    """Run the ``tilewright`` CLI in this process (its real entry point,
    :func:`tests.test_cli.tw_here`): ``tw(*args)`` returns ``(exit status, stdout, stderr)``."""
    return partial(tw_here, capsys)


def _ws_walk(m, k, n, R, C):
    """The WS core fold by fold (docs/design.md): preload R, every fold but the last a period
    max(M, 2R + C - 2), the last M + 1 + (R + C - 1) + 1."""
    folds = math.ceil(k / R) * math.ceil(n / C)
    total = R
    for f in range(folds):
        total += max(m, 2 * R + C - 2) if f < folds - 1 else m + 1 + (R + C - 1) + 1
    return total


def _is_walk(m, k, n, R, C):
    """Input-stationary by its definition: the K x M input tile held in the PEs (K on rows, M on
    columns), N filter columns streamed — fold over every (K block, M block), each streaming N."""
    total = R
    folds = [(kb, mb) for mb in range(0, m, C) for kb in range(0, k, R)]
    for f, _ in enumerate(folds):
        total += max(n, 2 * R + C - 2) if f < len(folds) - 1 else n + 1 + (R + C - 1) + 1
    return total


def _arch(**te):
    return default_arch().with_engine(**te)


# ---- the ArchSpec ----------------------------------------------------------------------------
def test_arrays_up_to_512_accepted_and_513_refused_by_name():
    assert MAX_ARRAY_DIM == 512 and RTL_MAX_ARRAY_DIM == 64
    spec = ArchSpec.from_dict({"name": "big", "tensor_engine": {"rows": 512, "cols": 512,
                                                                "dataflow": "is", "count": 4}})
    assert spec.tensor_engine.macs_per_cycle == 4 * 512 * 512
    assert spec.tensor_engine.engine_macs_per_cycle == 512 * 512
    with pytest.raises(ArchSpecError, match=r"tensor_engine.rows = 513: .*from 1 to 512"):
        ArchSpec.from_dict({"name": "t", "tensor_engine": {"rows": 513, "cols": 4,
                                                           "dataflow": "ws"}})
    with pytest.raises(ArchSpecError, match=r"tensor_engine.count = 0"):
        ArchSpec.from_dict({"name": "t", "tensor_engine": {"rows": 4, "cols": 4,
                                                           "dataflow": "ws", "count": 0}})


def test_count_one_keeps_the_yaml_and_hash():
    a = default_arch()
    b = ArchSpec.from_dict({**a.model_dump(mode="json", exclude_none=True),
                            "tensor_engine": {**a.tensor_engine.model_dump(), "count": 1}})
    assert "count" not in a.to_yaml() and a.content_hash() == b.content_hash()
    assert a.with_engine(count=2).content_hash() != a.content_hash()


# ---- input-stationary and big arrays: closed forms against fold walks ---------------------------
@pytest.mark.parametrize("R,C", [(1, 1), (3, 5), (8, 8), (128, 128), (512, 512), (256, 64)])
def test_is_closed_form_equals_its_fold_walk(R, C):
    for m, k, n in [(1, 1, 1), (7, 13, 29), (600, 1030, 70), (1, 4096, 3)]:
        assert int(gemm_cycles_array(m, k, n, R, C, "is")[0]) == _is_walk(m, k, n, R, C)


@pytest.mark.parametrize("R,C", [(128, 128), (512, 512), (512, 96)])
def test_ws_closed_form_at_big_arrays_equals_fold_walk(R, C):
    arch = _arch(rows=R, cols=C, dataflow="ws")
    for m, k, n in [(1, 1, 1), (512, 4096, 4096), (77, 1000, 513)]:
        assert gemm_cycles(arch, m, k, n).cycles == _ws_walk(m, k, n, R, C)


def test_is_scalesim_convention_folds_k_by_rows_and_m_by_cols():
    # scalesim/compute/systolic_compute_is.py: row_fold = ceil(Sr / rows), Sr = K;
    # col_fold = ceil(Sc / cols), Sc = M; T = N columns streamed; F * (T + 2R + C - 2) - 1
    R, C, m, k, n = 16, 8, 33, 70, 41
    c, f = gemm_cycles_array(m, k, n, R, C, "is", "scalesim")
    assert int(f) == 5 * 5 and int(c) == 25 * (41 + 2 * 16 + 8 - 2) - 1


# ---- several engines ----------------------------------------------------------------------------
def test_os_engines_share_output_tiles():
    # 64 output tiles of 8x8 over 4 engines: the busiest runs 16, as one engine on a 32x32 output
    one = gemm_cycles(_arch(rows=8, cols=8, dataflow="os"), 32, 100, 32).cycles
    four = gemm_cycles(_arch(rows=8, cols=8, dataflow="os", count=4), 64, 100, 64)
    assert four.cycles == one and four.folds == 64
    assert four.cycles == 100 + 15 * max(100, 2 * 8 + 8) + 2 * 8 + 8


@pytest.mark.parametrize("df", ["ws", "is"])
def test_ws_is_engines_take_the_best_group_split(df):
    """4 engines as 4 groups x 1, 2 x 2 or 1 x 4: a group takes a share of the array-column
    blocks, its engines a share of the streamed dimension — each split is one engine's GEMM."""
    R = C = 8
    m, k, n = (64, 40, 48) if df == "ws" else (48, 40, 64)   # 6 column blocks, 64 streamed
    single = _ws_walk if df == "ws" else _is_walk

    def engine(blocks, stream):
        return single(stream, k, blocks * C, R, C) if df == "ws" else \
            single(blocks * C, k, stream, R, C)
    want = min(engine(math.ceil(6 / g), math.ceil(64 / (4 // g))) for g in (4, 2, 1))
    got = gemm_cycles(_arch(rows=R, cols=C, dataflow=df, count=4), m, k, n)
    assert got.cycles == want and got.folds == 5 * 6


def test_tile_mac_engines_share_output_tiles():
    te = {"kind": "cube", "rows": 4, "depth": 4, "cols": 4}
    arch = ArchSpec.from_dict({**default_arch().model_dump(mode="json", exclude_none=True),
                               "tensor_engine": {**te, "count": 3}})
    # 25 x 10 output tiles over 3 engines: the busiest runs 84, each ceil(300/4) = 75 beats
    c = gemm_cycles(arch, 100, 300, 40)
    assert c.cycles == 84 * 75 + 2 + 2 and c.folds == 250
    assert c.utilization == pytest.approx(100 * 300 * 40 / (c.cycles * 3 * 64))


@pytest.mark.parametrize("df", ["ws", "os", "is"])
def test_engines_bounds(df):
    rng = np.random.default_rng(1)
    m, k, n = rng.integers(1, 3000, (3, 50))
    one, _ = gemm_cycles_array(m, k, n, 32, 32, df)
    eight, _ = gemm_cycles_array(m, k, n, 32, 32, df, count=8)
    assert np.all(eight <= one) and np.all(eight * 8 >= one - 8 * 200)


def test_energy_and_area_of_several_engines():
    tech = load_tech("28nm")
    a1, a4 = _arch(rows=64, cols=64, dataflow="ws"), _arch(rows=64, cols=64, dataflow="ws",
                                                            count=4)
    b1, b4 = area_breakdown(a1, tech), area_breakdown(a4, tech)
    assert b4["pe_array_um2"] == pytest.approx(4 * b1["pe_array_um2"])
    assert b4["sram_um2"] == b1["sram_um2"]          # the engines share the memories
    e1, e4 = (energy_breakdown(a, tech, macs=1e9) for a in (a1, a4))
    assert e1["mac_pj"] == e4["mac_pj"] and e1["sram_pj"] == e4["sram_pj"]


# ---- mapper and tiled cycle model --------------------------------------------------------------
def test_is_mapping_core_cycles_are_ws_on_the_transposed_problem():
    ws, is_ = _arch(rows=16, cols=8, dataflow="ws"), _arch(rows=16, cols=8, dataflow="is")
    c_is = cost_of(GemmOp("g", 100, 300, 70), is_, Mapping(48, 64, 70, "mkn", "is"))
    c_ws = cost_of(GemmOp("g", 70, 300, 100), ws, Mapping(70, 64, 48, "nkm", "ws"))
    assert c_is.core_cycles == c_ws.core_cycles and c_is.stream_cycles == c_ws.stream_cycles
    assert c_is.fill_cycles == c_ws.fill_cycles
    assert c_is.compulsory_bytes == 100 * 300 + 300 * 70 + 100 * 70 * 4


@pytest.mark.parametrize("df,count", [("is", 1), ("is", 8), ("ws", 8), ("os", 8)])
def test_mapper_on_the_tpu_v4_like_preset_agrees_with_tiled_model(df, count):
    arch = load_arch("tpu-v4-like").with_engine(dataflow=df, count=count)
    op = GemmOp("g", 512, 4096, 4096, elem_bytes=2)
    res = map_gemm(op, arch)
    tiled = simulate_tiled(op, arch, res.mapping)
    assert res.mapping.dataflow == df
    assert tiled.core_cycles == res.cost.core_cycles
    assert res.cost.cycles == pytest.approx(tiled.cycles, rel=0.1)
    assert res.cost.fill_cycles >= 0
    assert res.cost.macs == 512 * 4096 * 4096


# ---- presets ---------------------------------------------------------------------------------
def test_presets_match_their_published_figures():
    v1, v4 = load_arch("tpu-v1-like"), load_arch("tpu-v4-like")
    # TPU v1 (Jouppi et al., ISCA 2017): 65,536 MACs at 700 MHz = 92 TOPS, 28 MiB on chip,
    # 34 GB/s DDR3, int8
    assert v1.tensor_engine.macs_per_cycle == 65536 and v1.tensor_engine.count == 1
    assert 2 * v1.peak_macs_per_s / 1e12 == pytest.approx(92, rel=0.01)
    assert (v1.memory.scratchpad_kib + v1.memory.accumulator_kib) == 28 * 1024
    assert v1.offchip.bandwidth_gbps == 34 and v1.tensor_engine.input_format == "int8"
    # TPU v4 (cloud.google.com/tpu/docs/v4): 8 MXUs of 128x128, 275 TFLOPS bf16, 1200 GB/s
    te = v4.tensor_engine
    assert (te.count, te.rows, te.cols, te.input_format) == (8, 128, 128, "bf16")
    assert 2 * v4.peak_macs_per_s / 1e12 == pytest.approx(275, rel=0.01)
    assert v4.offchip.bandwidth_gbps == 1200 and v4.offchip.capacity_gib == 32


def test_presets_agree_with_the_validation_configs():
    """The presets restate configs/validation/tpu_v*.yaml (the same arrays and MACs):
    clock, peak MACs, memories, off-chip and vector figures must not contradict them."""
    from tilewright.arch import PRESET_DIR
    for preset, val in (("tpu-v1-like", "tpu_v1"), ("tpu-v4-like", "tpu_v4")):
        p, v = load_arch(preset), load_arch(PRESET_DIR / "validation" / f"{val}.yaml")
        assert p.clock_mhz == v.clock_mhz and p.memory == v.memory
        assert p.tensor_engine.macs_per_cycle == v.tensor_engine.macs_per_cycle
        assert p.tensor_engine.input_format == v.tensor_engine.input_format
        assert p.vector_unit == v.vector_unit
        assert p.offchip.bandwidth_gbps == v.offchip.bandwidth_gbps
        assert p.offchip.interface == v.offchip.interface


def test_acceptance_cycles_command_on_the_tpu_v4_like_preset(tw):
    code, out, err = tw("cycles", "--arch", "tpu-v4-like", "-m", "512", "-k", "4096", "-n",
                        "4096", "--dataflow", "is", "--json")
    assert code == 0, err
    d = json.loads(out)
    # IS, 8 engines of 128x128: 32 K blocks x 4 M blocks; best split 4 groups x 2 engines, each
    # engine 32 folds streaming N/2 = 2048 columns: R + 31 * 2048 + 2048 + R + C + 1
    assert d["folds"] == 128 and d["engine"] == "8 x 128x128 is"
    assert d["cycles"] == 128 + 31 * 2048 + 2048 + 128 + 128 + 1
    assert d["utilization"] == pytest.approx(512 * 4096 * 4096 / (d["cycles"] * 8 * 128 * 128),
                                             abs=1e-6)
    code, out, err = tw("cycles", "--arch", "configs/cube2x4x2v.yaml", "-m", "8", "-k",
                        "8", "-n", "8", "--dataflow", "is")
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "kind 'systolic' only" in err


# ---- RTL refusals ------------------------------------------------------------------------------
@pytest.mark.parametrize("argv,phrase", [
    (("rtl", "--arch", "tpu-v4-like", "-o", "OUT"), "tensor_engine.rows = 128"),
    (("fpga", "--arch", "tpu-v1-like", "--target", "ice40", "-o", "OUT"),
     "tensor_engine.rows = 256"),
    (("sim", "--model", "tiny-llama", "--arch", "IS8", "--rtl"), "tensor_engine.dataflow = 'is'"),
    (("demo", "--arch", "COUNT2"), "tensor_engine.count = 2"),
])
def test_rtl_flows_refuse_beyond_the_rtl_in_one_line(tw, tmp_path, argv, phrase):
    is8 = tmp_path / "is8.yaml"
    is8.write_text("name: is8\ntensor_engine: {rows: 8, cols: 8, dataflow: is}\n")
    c2 = tmp_path / "c2.yaml"
    c2.write_text("name: c2\ntensor_engine: {rows: 8, cols: 8, dataflow: ws, count: 2}\n")
    subst = {"OUT": str(tmp_path / "out"), "IS8": str(is8), "COUNT2": str(c2)}
    code, out, err = tw(*(subst.get(a, a) for a in argv))
    assert code == 2 and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert phrase in lines[0] and "the analytical levels accept this design" in lines[0]
    assert not (tmp_path / "out").exists()
