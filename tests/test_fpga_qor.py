"""Quality-of-results regression of `tilewright fpga` against tests/qor_baselines/*.json, on a real
Yosys + nextpnr place-and-route.

CI runs one place-and-route: the int8 2x2 preset on iCE40 (UP5K). ``TILEWRIGHT_QOR=all`` adds
every other baseline (ECP5, xc7 estimate, the 4x4 preset; marked slow). A design that grows more
than 10 % in LUTs/FFs/DSPs/BRAMs, or loses more than 10 % of its Fmax, fails until the baseline
is re-measured on purpose with ``python -m tilewright.app.eda.fpga --update-baseline``.

Besides the baseline, each run is checked against what is known independently of the flow: one
multiplier block per PE, iCE40 block RAM at least the buffers' capacity, logic cells holding
every LUT, and the Fmax equal to 1 / (sum of the delays along nextpnr's own critical path).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.test_cli import tw as cli

from tilewright.arch import load_arch
from tilewright.app.eda.fpga import compare_qor, qor_of

BASE = Path(__file__).parent / "qor_baselines"
CI_CASE = "int8_2x2_ice40"


def _cases() -> list:
    every = sorted(p.stem for p in BASE.glob("*_*.json"))
    if os.environ.get("TILEWRIGHT_QOR", "") != "all":
        return [CI_CASE]
    return [c if c == CI_CASE else pytest.param(c, marks=pytest.mark.slow) for c in every]


def tw(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return cli(*args, cwd=cwd, timeout=1800, columns=200)


@pytest.fixture(scope="module", params=_cases())
def run(request, tmp_path_factory):
    """The flow on one baseline's preset and target, through the CLI."""
    case = request.param
    baseline = json.loads((BASE / f"{case}.json").read_text())
    d = tmp_path_factory.mktemp(case)
    proc = tw("fpga", "--arch", str(BASE / f"{baseline['preset']}.yaml"), "--target",
              baseline["target"], "-o", "out", cwd=d)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    out = d / "out"
    return case, baseline, out, json.loads((out / "manifest.json").read_text())


def test_qor_within_baseline(run):
    case, baseline, _, m = run
    assert m["arch"]["hash"] == baseline["arch_hash"], (
        f"{case}: the preset {baseline['preset']}.yaml changed since the baseline was measured; "
        f"re-measure with: {baseline['update_with']}")
    assert m["fpga"]["part"] == baseline["part"], (
        f"{case}: the flow chose {m['fpga']['part']}, the baseline {baseline['part']}; if this "
        f"is intended, re-measure with: {baseline['update_with']}")
    bad = compare_qor(qor_of(m), baseline)
    assert not bad, (f"{case}: quality of results regressed beyond 10 %: {'; '.join(bad)}. "
                     f"If this is intended, re-measure the baseline with: "
                     f"{baseline['update_with']} (and commit tests/qor_baselines/{case}.json)")


def test_resources_match_the_design(run):
    _, baseline, _, m = run
    spec = load_arch(BASE / f"{baseline['preset']}.yaml")
    f = m["fpga"]
    te, mem = spec.tensor_engine, spec.memory
    pes = te.rows * te.cols
    if f["part"] != "iCE40HX8K-CT256":                  # the HX parts have no DSP
        assert f["dsps"] == pes                         # one int8 multiplier block per PE
    if m["target"] == "ice40":      # no LUT RAM on iCE40: every buffer bit is in SB_RAM40_4K
        assert f["brams"] * 4096 >= (mem.scratchpad_bytes + mem.accumulator_bytes) * 8
    if "pnr" in f:
        assert f["logic_cells"] >= f["synthesis"]["luts"]
        assert f["pnr"]["utilization"] and all(
            u["used"] <= u["available"] for u in f["pnr"]["utilization"].values())


def test_fmax_is_the_critical_path(run):
    """nextpnr's achieved Fmax equals 1000 / (sum of the delays, ns, of its worst
    register-to-register path on that clock)."""
    _, _, out, m = run
    if "pnr" not in m["fpga"]:
        assert m["target"] == "xc7"
        return
    report = json.loads((out / f"pnr_{m['target']}.json").read_text())
    (clock, fmax), = m["fpga"]["pnr"]["fmax_by_clock"].items()
    paths = [p for p in report["critical_paths"]
             if p["from"] == f"posedge {clock}" and p["to"] == f"posedge {clock}"]
    assert paths
    period_ns = max(sum(seg["delay"] for seg in p["path"]) for p in paths)
    assert fmax == pytest.approx(1000 / period_ns, abs=0.01)
    assert m["fpga"]["fmax_mhz"] == fmax


def test_manifest_hashes_and_fusesoc_core(run, tmp_path):
    from fusesoc.capi2.coreparser import Core2Parser
    from fusesoc.core import Core
    _, _, out, m = run
    for e in m["files"]:
        assert hashlib.sha256((out / e["path"]).read_bytes()).hexdigest() == e["sha256"]
    core = Core(Core2Parser(), out / m["handoff"]["fusesoc_core"])
    synth = {"target": "synth", "is_toplevel": True}
    files = [f["name"] for f in core.get_files(synth)]
    assert all((out / n).is_file() for n in files) and m["verilog"]["path"] in files
    if m["target"] == "xc7":
        return
    assert core.get_toplevel(synth) == m["fpga"]["harness"]
    assert core.get_flow(synth) == {"ice40": "icestorm", "ecp5": "trellis"}[m["target"]]
    # edalize's own flow accepts the EDAM and writes its Makefile with our nextpnr options
    from edalize.flows.icestorm import Icestorm
    from edalize.flows.trellis import Trellis
    edam = json.loads((out / m["handoff"]["edam"]).read_text())
    for f in edam["files"]:
        f["name"] = str(out / f["name"])
    opts = edam.pop("tool_options")
    edam["flow_options"] = {**opts["nextpnr"], **opts["yosys"]}
    flow = (Icestorm if m["target"] == "ice40" else Trellis)(edam, str(tmp_path))
    flow.configure()
    makefile = (tmp_path / "Makefile").read_text()
    assert " ".join(opts["nextpnr"]["nextpnr_options"]) in makefile
