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
    ("tensor_engine: {rows: 0, cols: 4, dataflow: ws}", "tensor_engine.rows = 0", "from 1 to 512"),
    ("tensor_engine: {rows: 4, cols: 513, dataflow: ws}", "tensor_engine.cols = 513", "from 1 to 512"),
    ("tensor_engine: {rows: four, cols: 4, dataflow: ws}", "tensor_engine.rows = 'four'", "integer"),
    ("tensor_engine: {rows: 4, cols: 4, dataflow: diag}", "tensor_engine.dataflow = 'diag'",
     "'ws', 'os' or 'is'"),
    ("tensor_engine: {rows: 4, cols: 4, dataflow: ws, input_format: fp4}",
     "tensor_engine.input_format = 'fp4'", "'int8'"),
    ("tensor_engine: {rows: 4, cols: 4, dataflow: ws}\ncolour: red", "colour = (unknown key)",
     "not an ArchSpec field"),
    ("tensor_engine: {rows: 4, cols: 4, dataflow: ws, rowz: 3}", "tensor_engine.rowz", "not an ArchSpec field"),
    ("clock_mhz: 500", "tensor_engine = (missing)", "required"),
    ("clock_mhz: -3\ntensor_engine: {rows: 4, cols: 4, dataflow: ws}", "clock_mhz = -3", "number"),
    ("- 1\n- 2", "the top level must be a mapping", "got a list"),
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
    assert wse2.mesh is not None and wse2.mesh.logical_shape == (750, 994)
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


# ---- SRAM banks (memory.scratchpad_banks / accumulator_banks) ---------------------------------

@pytest.mark.parametrize("field,top,listed", [
    ("scratchpad_banks", 64, "1, 2, 4, 8, 16, 32 or 64"),
    ("accumulator_banks", 256, "1, 2, 4, 8, 16, 32, 64, 128 or 256")])
@pytest.mark.parametrize("value", [0, 3, 48, "top*2"])
def test_banks_must_be_a_power_of_two_up_to_the_cap(field, top, listed, value):
    value = 2 * top if value == "top*2" else value
    with pytest.raises(ArchSpecError) as info:
        ArchSpec.from_yaml(f"tensor_engine: {{rows: 4, cols: 4, dataflow: ws}}\n"
                           f"memory: {{{field}: {value}}}", source="b.yaml")
    assert str(info.value) == (f"b.yaml: memory.{field} = {value}: must be a power of two "
                               f"from 1 to {top} ({listed})")


def test_banks_accept_powers_of_two_and_default_to_one():
    for n in (1, 2, 4, 8, 16, 32, 64):
        m = ArchSpec.from_dict({**GOOD, "memory": {"scratchpad_banks": n,
                                                   "accumulator_banks": n}}).memory
        assert (m.scratchpad_banks, m.accumulator_banks) == (n, n)
    for n in (128, 256):    # TPU v1's 256 accumulator RAMs (ISCA 2017, section 2)
        assert ArchSpec.from_dict({**GOOD, "memory": {"accumulator_banks": n}}
                                  ).memory.accumulator_banks == n
    mem = default_arch().memory
    assert (mem.scratchpad_banks, mem.accumulator_banks) == (1, 1)


def test_one_bank_leaves_yaml_and_hash_of_existing_specs_unchanged():
    one_bank = 0
    for name in sorted(p.stem for p in PRESET_DIR.glob("*.yaml")):
        a = load_arch(name)
        if (a.memory.scratchpad_banks, a.memory.accumulator_banks) != (1, 1):
            continue                    # tpu-v1-like: its 256 accumulator RAMs, stated
        one_bank += 1
        data = a.model_dump(mode="json", exclude_none=True)
        assert "scratchpad_banks" not in data["memory"] and "banks" not in a.to_yaml()
        data["memory"].update(scratchpad_banks=1, accumulator_banks=1)
        explicit = ArchSpec.from_dict(data)
        assert explicit.to_yaml() == a.to_yaml() and explicit.content_hash() == a.content_hash()
    assert one_bank >= 8                # the one-bank presets were all checked
    banked = ArchSpec.from_dict({**GOOD, "memory": {"accumulator_banks": 4}})
    assert "accumulator_banks: 4" in banked.to_yaml() and "scratchpad_banks" not in banked.to_yaml()
    assert banked.content_hash() != ArchSpec.from_dict(GOOD).content_hash()
    assert ArchSpec.from_yaml(banked.to_yaml()) == banked


def test_rtl_generates_banked_srams_lint_clean(tmp_path, monkeypatch, capsys):
    """memory.*_banks > 1: `tilewright rtl` writes the core with that many SRAM banks per buffer
    (their behaviour is checked in Verilator by tests/test_banked_rtl.py) and lints it clean."""
    from tilewright.app.cli.main import main
    path = tmp_path / "b.yaml"
    ArchSpec.from_dict({**GOOD, "name": "b2", "memory": {"accumulator_banks": 2,
                                                         "scratchpad_banks": 4}}).save(path)
    monkeypatch.setattr("sys.argv", ["tilewright", "rtl", "--arch", str(path), "-o",
                                     str(tmp_path / "out"), "--lint"])
    main()                                       # returns on success (no SystemExit)
    out = capsys.readouterr()
    assert "lint-only -Wall: clean" in " ".join(out.out.split()), out.out + out.err
    text = (tmp_path / "out" / "tw_gemm_core.v").read_text()
    assert "mem_acc_bank1" in text and "mem_acc_bank2" not in text
    assert "mem_a_bank3" in text and "mem_b_bank3" in text and "mem_a_bank4" not in text
