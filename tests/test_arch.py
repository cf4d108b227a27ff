"""ArchSpec: presets load, round-trip through YAML, and every malformed field gets one clear line."""

from __future__ import annotations

import pytest

from tilewright.arch import PRESET_DIR, ArchSpec, ArchSpecError, default_arch, load_arch

GOOD = {"name": "t", "tensor_engine": {"rows": 4, "cols": 8, "dataflow": "os"}}


def test_presets_load_and_round_trip(tmp_path):
    names = sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))
    assert {"ws8x8", "os16x16"} <= set(names)
    for name in names:
        a = load_arch(name)
        path = tmp_path / f"{name}.yaml"
        a.save(path)
        b = load_arch(path)
        assert a == b and a.content_hash() == b.content_hash()


def test_frozen_and_hash_tracks_content():
    a = ArchSpec.from_dict(GOOD)
    with pytest.raises(Exception):
        a.clock_mhz = 1.0
    b = a.with_engine(rows=5)
    assert b.tensor_engine.rows == 5 and a.tensor_engine.rows == 4
    assert a.content_hash() != b.content_hash()
    assert a.content_hash() == ArchSpec.from_dict(GOOD).content_hash()


def test_defaults_and_derived_units():
    a = default_arch()
    assert a.tensor_engine.macs_per_cycle == 64
    assert a.peak_macs_per_s == 64 * 500e6
    assert a.memory.scratchpad_bytes == 64 * 1024


@pytest.mark.parametrize("text,field,accepted", [
    ("tensor_engine: {rows: 0, cols: 4, dataflow: ws}", "tensor_engine.rows = 0", "from 1 to 64"),
    ("tensor_engine: {rows: 4, cols: 65, dataflow: ws}", "tensor_engine.cols = 65", "from 1 to 64"),
    ("tensor_engine: {rows: four, cols: 4, dataflow: ws}", "tensor_engine.rows = 'four'", "integer"),
    ("tensor_engine: {rows: 4, cols: 4, dataflow: diag}", "tensor_engine.dataflow = 'diag'",
     "'ws' or 'os'"),
    ("tensor_engine: {rows: 4, cols: 4, dataflow: ws, input_format: fp4}",
     "tensor_engine.input_format = 'fp4'", "'int8'"),
    ("tensor_engine: {rows: 4, cols: 4, dataflow: ws}\ncolour: red", "colour = (unknown key)",
     "not an ArchSpec field"),
    ("tensor_engine: {rows: 4, cols: 4, dataflow: ws, rowz: 3}", "tensor_engine.rowz", "not an ArchSpec field"),
    ("clock_mhz: 500", "tensor_engine = (missing)", "required"),
    ("clock_mhz: -3\ntensor_engine: {rows: 4, cols: 4, dataflow: ws}", "clock_mhz = -3", "number"),
    ("- 1\n- 2", "expected a mapping", "got list"),
    ("tensor_engine: [1, 2", "not valid YAML", "line"),
])
def test_malformed_spec_one_line_naming_field(text, field, accepted):
    with pytest.raises(ArchSpecError) as info:
        ArchSpec.from_yaml(text, source="bad.yaml")
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith("bad.yaml")
    assert field in msg and accepted in msg, msg


def test_missing_file_names_presets():
    with pytest.raises(ArchSpecError, match="no such file.*ws8x8"):
        load_arch("does/not/exist.yaml")


def test_mesh_section_presets_and_errors():
    wse2 = load_arch("wse2")
    assert wse2.mesh is not None and (wse2.mesh.rows, wse2.mesh.cols) == (750, 994)
    assert wse2.mesh.cores * wse2.mesh.core_sram_kib * 1024 > 36e9     # ~40 GB of SRAM
    assert load_arch("ws8x8").mesh is None
    with pytest.raises(ArchSpecError, match=r"mesh.rows = 0: must be an integer from 1 to 4096"):
        ArchSpec.from_yaml("tensor_engine: {rows: 1, cols: 4, dataflow: os}\nmesh: {rows: 0, cols: 3}",
                           source="m.yaml")
    with pytest.raises(ArchSpecError, match=r"mesh.hops = \(unknown key\)"):
        ArchSpec.from_yaml("tensor_engine: {rows: 1, cols: 4, dataflow: os}\n"
                           "mesh: {rows: 2, cols: 3, hops: 1}", source="m.yaml")


def test_optional_sections_do_not_change_existing_hashes():
    a = load_arch("ws8x8")
    assert "mesh" not in a.to_yaml()
    assert a.content_hash() == ArchSpec.from_yaml(a.to_yaml()).content_hash()


@pytest.mark.parametrize("engine,needle", [
    ("{rows: 4, cols: 4, dataflow: ws, input_format: bf16, weight_format: bf16}",
     "tensor_engine.accumulator_format = 'int32': must be 'fp32' for bf16 operands"),
    ("{rows: 4, cols: 4, dataflow: ws, input_format: bf16, weight_format: int8, accumulator_format: fp32}",
     "tensor_engine.input_format = 'bf16' and weight_format = 'int8': must be the same format"),
    ("{rows: 4, cols: 4, dataflow: ws, input_format: mxfp8, weight_format: mxfp8, accumulator_format: fp32}",
     "tensor_engine.rows = 4: must be a multiple of 32"),
])
def test_format_combinations_are_checked(engine, needle):
    with pytest.raises(ArchSpecError) as info:
        ArchSpec.from_yaml(f"tensor_engine: {engine}", source="f.yaml")
    assert str(info.value).startswith("f.yaml: ") and needle in str(info.value)


def test_float_formats_validate_and_rtl_refuses_them():
    from tilewright.rtl.gemm_core import GemmCore
    a = ArchSpec.from_yaml("tensor_engine: {rows: 32, cols: 8, dataflow: ws, input_format: mxfp8,"
                           " weight_format: mxfp8, accumulator_format: fp32}\n"
                           "vector_unit: {lanes: 32}")
    assert a.vector_unit.lanes == 32
    with pytest.raises(ValueError, match="int8 x int8 -> int32 only.*'mxfp8'"):
        GemmCore(a)
