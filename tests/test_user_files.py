"""Every user file is read one way (tilewright.validation): a key given twice, a folder, a binary
or non-UTF-8 file, an oversized file, a list or an empty file each get one line naming the file
(and both lines, for a repeated key) — from the library and through the CLI (exit 2, no traceback).

Before this reader, PyYAML kept the last of two equal keys silently: ``clock_mhz: 500`` then
``clock_mhz: 900`` compiled at 900 MHz, and ``rows: 8`` / ``rows: 64`` made an 8x8 array 64x8.
"""

from __future__ import annotations

import pytest

from tests.test_cli import tw
from tilewright.app.sweep import SweepError, load_sweep
from tilewright.arch import ArchSpecError, load_arch
from tilewright.dataflow_sim.cluster import ClusterSpecError, load_cluster, load_request_trace
from tilewright.dataflow_sim.energy_area import TechError, load_tech
from tilewright.validation import MAX_USER_FILE_BYTES

ARCH = "name: dup\ntensor_engine: {rows: 8, cols: 8, dataflow: ws}\n"


@pytest.mark.parametrize("text,key,lines", [
    (ARCH + "clock_mhz: 500\nclock_mhz: 900\n", "clock_mhz", (3, 4)),
    ("name: dup\ntensor_engine:\n  rows: 8\n  rows: 64\n  cols: 8\n", "rows", (3, 4)),
])
def test_arch_key_given_twice_names_both_lines(tmp_path, text, key, lines):
    p = tmp_path / "a.yaml"
    p.write_text(text)
    with pytest.raises(ArchSpecError) as exc:
        load_arch(p)
    msg = str(exc.value)
    assert f"'{key}' appears twice (line {lines[0]} and line {lines[1]})" in msg
    assert str(p) in msg and "\n" not in msg


def test_the_same_key_in_two_mappings_is_not_a_repeat(tmp_path):
    """Equal keys in different mappings are fine: only one mapping's keys must be unique."""
    p = tmp_path / "a.yaml"
    p.write_text("name: ok\ntensor_engine: {rows: 4, cols: 4, dataflow: ws}\n"
                 "memory: {scratchpad_kib: 64, accumulator_kib: 16}\n")
    spec = load_arch(p)
    assert (spec.tensor_engine.rows, spec.memory.scratchpad_kib) == (4, 64)


def test_cluster_sweep_and_tech_files_refuse_a_repeated_key(tmp_path):
    cluster = tmp_path / "c.yaml"
    cluster.write_text("name: c\nnodes: 1\nnodes: 2\n")
    with pytest.raises(ClusterSpecError, match=r"'nodes' appears twice \(line 2 and line 3\)"):
        load_cluster(cluster)
    sweep = tmp_path / "s.yaml"
    sweep.write_text("name: s\nbase: ws8x8\nbase: ws16x16\n")
    with pytest.raises(SweepError, match=r"'base' appears twice \(line 2 and line 3\)"):
        load_sweep(sweep)
    tech = tmp_path / "t.yaml"
    tech.write_text("name: t\nname: u\n")
    with pytest.raises(TechError, match=r"'name' appears twice \(line 1 and line 2\)"):
        load_tech(str(tech))


@pytest.mark.parametrize("content,needle", [
    (b"\x00\x01binary", "is a binary file; give an ArchSpec YAML file"),
    (b"name: caf\xe9\n", "line 1: byte 0xe9 is not UTF-8"),
    (b"- 1\n- 2\n", "the top level must be a mapping of keys to values (ArchSpec fields), got a list"),
    (b"", "got an empty file"),
])
def test_bad_arch_files_one_line(tmp_path, content, needle):
    p = tmp_path / "a.yaml"
    p.write_bytes(content)
    with pytest.raises(ArchSpecError) as exc:
        load_arch(p)
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_folder_and_oversized_file(tmp_path):
    with pytest.raises(ArchSpecError, match="is a folder; give an ArchSpec YAML file"):
        load_arch(tmp_path)
    big = tmp_path / "big.yaml"
    with open(big, "wb") as f:
        f.truncate(MAX_USER_FILE_BYTES + 1)
    with pytest.raises(ArchSpecError, match=f"{MAX_USER_FILE_BYTES + 1:,} bytes; an ArchSpec"):
        load_arch(big)


def test_exclusive_bound_is_stated_as_exclusive(tmp_path):
    """clock_mhz must be > 0: the message says 'above 0', never 'from 0'."""
    p = tmp_path / "a.yaml"
    p.write_text(ARCH + "clock_mhz: 0\n")
    with pytest.raises(ArchSpecError) as exc:
        load_arch(p)
    assert "clock_mhz = 0: must be a number above 0 and at most 10000" in str(exc.value)
    assert "from 0" not in str(exc.value)


@pytest.mark.parametrize("content", [
    b"name: x\nclock_mhz: 500\nclock_mhz: 900\n", b"\xff\xfe\x00", b"- a\n", b""])
def test_cli_bad_user_file_exit_2_one_line(tmp_path, content):
    p = tmp_path / "a.yaml"
    p.write_bytes(content)
    res = tw("cycles", "--arch", str(p), "-m", "8", "-k", "8", "-n", "8")
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("error: "), res.stderr
    assert "Traceback" not in res.stderr


def test_cli_folder_as_arch_exit_2(tmp_path):
    res = tw("arch", str(tmp_path))
    assert res.returncode == 2 and "is a folder" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("rows,needle", [
    ("-1000,8,4", "row 1: arrival_s = '-1000': must be a finite number of seconds ≥ 0"),
    ("0.5,8,4\nnan,8,4", "row 2: arrival_s = 'nan': must be a finite number of seconds ≥ 0"),
    ("0.5,8,4\n,8,4", "row 2: arrival_s = '': must be a finite number"),
    ("soon,8,4", "row 1: arrival_s = 'soon'"),
    ("0,0,4", "row 1: prompt_tokens = '0': must be a whole number ≥ 1"),
    ("0,8,2.5", "row 1: output_tokens = '2.5': must be a whole number ≥ 1"),
    ("0,8,inf", "row 1: output_tokens = 'inf'"),
])
def test_request_trace_checked_by_column_with_row_numbers(tmp_path, rows, needle):
    """Before: an arrival at -1000 s gave TTFT 1000 s, a NaN arrival vanished from the latency
    statistics, a word was a traceback."""
    p = tmp_path / "t.csv"
    p.write_text("arrival_s,prompt_tokens,output_tokens\n" + rows + "\n")
    with pytest.raises(ClusterSpecError) as exc:
        load_request_trace(p)
    assert needle in str(exc.value) and str(p) in str(exc.value)


def test_request_trace_refuses_unknown_columns_and_reads_a_good_one(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("arrival_s,prompt_tokens,output_tokens,priority\n0,8,4,1\n")
    with pytest.raises(ClusterSpecError, match=r"unknown \['priority'\]"):
        load_request_trace(p)
    p.write_text("arrival_s, prompt_tokens, output_tokens\n0.25, 8, 4\n0.0, 16, 2\n")
    df = load_request_trace(p)
    assert df.arrival_s.tolist() == [0.0, 0.25]            # sorted by arrival
    assert df.prompt_tokens.tolist() == [16, 8] and df.output_tokens.tolist() == [2, 4]
    assert str(df.prompt_tokens.dtype) == "int64"
