"""A sweep point is one design (issue: every answer is to the question asked).

Before: with an axis ``tensor_engine.input_format: [int8, fp32, bf16]`` and an fp32 workload, all
three points got the fp32 array's cycles and bytes but their own format's area and energy; the
shipped ``tiny_llama_tpe`` (fp32 on int8 ws8x8), ``llama_layer_nsga2`` (fp32 on int8 ws16x16) and
``mesh_gemv_size`` (bf16 on int8 mesh4x4) drew fronts of designs that do not exist; fields a
workload kind does not read were accepted and ignored; a cluster-only sweep optimised the area of
an ArchSpec no workload used.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tilewright.app.sweep import ResultsStore, SweepError, load_sweep, run_sweep, sweep_from_dict
from tilewright.app.sweep.spec import apply_point
from tilewright.compiler.gemm_mapper import GemmOp, map_gemm
from tilewright.formats import FORMATS

REPO = Path(__file__).resolve().parents[1]
BASE = {"name": "d", "base": "ws16x16", "tech": "45nm",
        "axes": {"tensor_engine.rows,tensor_engine.cols": [8, 16]},
        "workloads": [{"gemm": [64, 256, 256]}], "objectives": ["latency", "energy"]}


def _spec(**changes):
    return sweep_from_dict({**json.loads(json.dumps(BASE)), **changes}, source="t.yaml")


@pytest.mark.parametrize("workload,needle", [
    ({"gemm": [64, 256, 256], "format": "fp32"},
     "workloads[0].format = 'fp32' disagrees with the design's tensor_engine.input_format = "
     "'int8': a point is one design"),
    ({"model": "tiny-llama", "seq": 16, "format": "bf16"}, "'bf16' disagrees"),
])
def test_a_workload_format_other_than_the_designs_is_refused(workload, needle):
    with pytest.raises(SweepError) as exc:
        _spec(workloads=[workload])
    assert needle in str(exc.value) and "t.yaml" in str(exc.value)


def test_a_format_fixed_while_an_axis_varies_it_is_refused():
    with pytest.raises(SweepError, match=r"fixed while axis tensor_engine.input_format varies"):
        _spec(axes={"tensor_engine.input_format": ["int8", "bf16"]},
              workloads=[{"gemm": [64, 256, 256], "format": "int8"}])


def test_each_point_runs_in_its_own_format(tmp_path):
    """int8 and bf16 points of one sweep: each workload's bytes are the mapper's for that
    point's own element size (bf16 moves more bytes than int8 on the same array)."""
    spec = _spec(axes={"tensor_engine.input_format": ["int8", "bf16"]})
    run_sweep(spec, tmp_path / "f.db", workers=1)
    with ResultsStore(tmp_path / "f.db") as s:
        df = s.frame("d")
    by_fmt = {}
    for _, row in df.iterrows():
        fmt = row["p:tensor_engine.input_format"]
        arch = apply_point(spec.base, {"tensor_engine.input_format": fmt})
        ref = map_gemm(GemmOp("gemm", 64, 256, 256, elem_bytes=FORMATS[fmt].bits // 8), arch).cost
        assert row["dram_bytes"] == pytest.approx(ref.dram_bytes)
        by_fmt[fmt] = row["dram_bytes"]
    assert by_fmt["bf16"] > by_fmt["int8"]


@pytest.mark.parametrize("workload,field", [
    ({"gemm": [8, 8, 8], "seq": 64}, "seq"),
    ({"gemm": [8, 8, 8], "phase": "decode"}, "phase"),
    ({"gemm": [8, 8, 8], "layers": 4}, "layers"),
    ({"mesh_gemv": [64, 64], "batch": 2}, "batch"),
    ({"cluster": "h100-8x-nvlink", "model": "llama3-8b", "batch": 4}, "batch"),
    ({"cluster": "h100-8x-nvlink", "model": "llama3-8b", "format": "fp32"}, "format"),
])
def test_a_field_the_workload_kind_does_not_read_is_refused(workload, field):
    with pytest.raises(SweepError, match=rf"workloads\[0\]\.{field} = .*does not read it"):
        _spec(workloads=[workload])


def test_archspec_axes_without_a_workload_that_uses_the_archspec_are_refused():
    with pytest.raises(SweepError, match=r"axes.tensor_engine.rows: no workload uses the ArchSpec"):
        _spec(workloads=[{"cluster": "h100-8x-nvlink", "model": "llama3-8b"}])


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "configs" / "sweeps").glob("*.yaml")))
def test_shipped_sweeps_are_one_design_per_point(name):
    spec = load_sweep(REPO / "configs" / "sweeps" / name)
    for w in spec.workloads:
        assert w.format in (None, spec.base.tensor_engine.input_format)
