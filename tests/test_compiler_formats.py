"""The compiler's format and mapping facts: the mapper's choice recorded per GEMM in the Program and
costed in the Report, formats visible per tensor, the vector unit's transcendental passes, and
``tilewright compile --format`` really compiling for the format.

References: :func:`tilewright.compiler.gemm_mapper.map_gemm` / ``cost_of`` called here directly for the
mapping and its cost; closed forms written here for vector cycles and element bytes.
"""

from __future__ import annotations

import json
import math

import pytest

from tilewright.arch import ArchSpec, ArchSpecError, load_arch
from tilewright.dataflow_sim.compile_flow import compile_llm
from tilewright.compiler.gemm_mapper import GemmOp, Mapping, cost_of, map_gemm
from tilewright.compiler.operand_formats import arch_for_format
from tilewright.compiler.program import BgemmTask, QuantizeTask, VectorTask

from tests.test_cli import REPO, tw


@pytest.fixture(scope="module")
def llama8b_int8():
    return compile_llm("llama3-8b", load_arch("ws16x16"), seq=512, fmt="int8")


def test_mapping_recorded_per_gemm_is_the_mappers_best(llama8b_int8):
    arch = arch_for_format(load_arch("ws16x16"), "int8")
    df = llama8b_int8.report.set_index("task")
    gemms = [t for t in llama8b_int8.program.tasks if isinstance(t, BgemmTask)]
    assert len(gemms) == 7                                   # q, k, v, o, gate, up, down
    for t in gemms:
        op = GemmOp(t.name, t.m, t.k, t.n, batch=t.batch_size, elem_bytes=1, out_bytes=4)
        best = map_gemm(op, arch)
        mp = best.mapping
        assert (t.tile_m, t.tile_k, t.tile_n, t.order, t.dataflow) == \
            (mp.m_t, mp.k_t, mp.n_t, mp.order, mp.dataflow)
        cost = cost_of(op, arch, Mapping(t.tile_m, t.tile_k, t.tile_n, t.order, t.dataflow))
        row = df.loc[t.name]
        assert row["cycles"] == cost.core_cycles and row["bytes"] == cost.dram_bytes
        assert row["time_cycles"] == math.ceil(cost.cycles)
        assert row["scratchpad_bytes"] == cost.scratchpad_bytes
        assert row["accumulator_bytes"] == cost.accumulator_bytes
        assert row["mapping"] == f"{t.tile_m}x{t.tile_k}x{t.tile_n} {t.order} {t.dataflow}"


def test_formats_visible_and_quantize_explicit(llama8b_int8):
    prog = llama8b_int8.program
    assert prog.meta["format"] == "int8" and prog.meta["accumulator"] == "int32"
    for t in prog.tasks:
        if isinstance(t, BgemmTask):
            assert prog.tensors[t.a].format == prog.tensors[t.b].format == "int8"
            assert prog.tensors[t.a_scale].format == prog.tensors[t.b_scale].format == "fp32"
            assert t.acc == "int32" and t.k_block == 16
    quant = [t for t in prog.tasks if isinstance(t, QuantizeTask)]
    # one per distinct activation operand: x (shared by q/k/v), attention out, norm out, ffn act,
    # plus q, k, v of the attention cascade
    assert quant and all(t.granularity == "tensor" for t in quant)
    assert len({t.x for t in quant}) == len(quant)


def test_format_changes_bytes_and_tiling():
    arch = load_arch("ws16x16")
    res = {f: compile_llm("llama3-8b", arch, seq=512, fmt=f) for f in ("fp32", "bf16", "int8")}
    w = {f: sum(t.k * t.n for t in r.program.tasks if isinstance(t, BgemmTask))
         for f, r in res.items()}
    assert w["fp32"] == w["int8"]
    byt = {f: int(r.report["bytes"].sum()) for f, r in res.items()}
    assert byt["fp32"] > byt["bf16"] > byt["int8"]
    tiles = {f: [t.tile_k * t.tile_n for t in r.program.tasks if isinstance(t, BgemmTask)]
             for f, r in res.items()}
    assert sum(tiles["int8"]) > sum(tiles["fp32"])          # 1-byte operands: bigger tiles fit


def test_mx_needs_rows_multiple_of_32():
    with pytest.raises(ArchSpecError, match="multiple of 32"):
        arch_for_format(load_arch("ws16x16"), "mxfp8")


def test_transcendental_passes_from_vector_unit():
    base = {"name": "v", "tensor_engine": {"rows": 8, "cols": 8, "dataflow": "ws"}}
    with_vu = ArchSpec.from_dict({**base, "vector_unit": {"lanes": 32,
                                                          "transcendental_passes": 7}})
    for arch, lanes, passes in ((ArchSpec.from_dict(base), 8, 4), (with_vu, 32, 7)):
        res = compile_llm("tiny-llama", arch, seq=8, execute=False)
        df = res.report.set_index("task")
        exps = [t for t in res.program.tasks if isinstance(t, VectorTask)
                and t.op in ("exp", "rsqrt", "silu", "sigmoid")]
        assert exps
        for t in exps:
            n = max(math.prod(res.program.tensors[x].shape) for x in (*t.inputs, t.out))
            assert df.loc[t.name, "cycles"] == passes * -(-n // lanes), t.name


def test_cli_format_json_changes_with_format(tmp_path):
    """The format comes from the ArchSpec: the same 16x16 WS array described for fp32 and for
    int8 (the ws16x16 preset) compiles with that format and its accumulator."""
    fp32 = tmp_path / "ws16x16_fp32.yaml"
    preset = (REPO / "configs" / "ws16x16.yaml").read_text()   # int8 by the field default
    assert "format" not in preset
    fp32.write_text(preset.replace("name: ws16x16", "name: ws16x16-fp32").replace(
        "  dataflow: ws\n", "  dataflow: ws\n  input_format: fp32\n  weight_format: fp32\n"
        "  accumulator_format: fp32\n"))
    out = {}
    for fmt, arch in (("fp32", str(fp32)), ("int8", "ws16x16")):
        proc = tw("compile", "--model", "llama3-8b", "--arch", arch, "--seq", "256", "--json")
        assert proc.returncode == 0, proc.stderr
        out[fmt] = json.loads(proc.stdout)
        assert out[fmt]["format"] == fmt
    assert out["int8"]["accumulator"] == "int32"
    assert out["fp32"]["layer"]["bytes"] > out["int8"]["layer"]["bytes"]
    assert out["fp32"]["total_cycles"] > out["int8"]["total_cycles"] > 0
    mx = tmp_path / "mx16.yaml"
    mx.write_text("tensor_engine: {rows: 16, cols: 16, dataflow: ws, input_format: mxfp8, "
                  "weight_format: mxfp8, accumulator_format: fp32}\n")
    proc = tw("compile", "--model", "tiny-llama", "--arch", str(mx))
    assert proc.returncode == 2 and "multiple of 32" in proc.stderr
