"""Quality-of-results regression of `tilewright fpga` against tests/qor_baselines/*.json, on a real
Yosys + nextpnr place-and-route.

Every baseline runs: the fast ones (:data:`CI_CASES`) in every CI run, the slow ones marked
``nightly`` — deselected by the ``-m "not nightly"`` of pytest's addopts (pyproject.toml) and
run by ``.ci/nightly`` (``pytest -m nightly``); docs/fpga.md says what runs where and how long it
takes. A design that grows more than 10 % in LUTs/FFs/DSPs/BRAMs, or loses more than 10 % of its
Fmax, fails until the baseline is re-measured on purpose with
``python -m tilewright.app.eda.fpga --update-baseline``. A design whose Fmax misses its own clock
(the ArchSpec's ``clock_mhz``) fails unless its baseline records the miss and why
(``meets_clock: false``, ``meets_clock_reason``; :func:`tilewright.app.eda.fpga.check_clock`).

Besides the baseline, each run is checked against what is known independently of the flow: one
multiplier block per PE, iCE40 block RAM at least the buffers' capacity, logic cells holding
every LUT, and the Fmax equal to 1 / (sum of the delays along nextpnr's own critical path).
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from tests.test_cli import tw as cli

from tilewright.arch import load_arch
from tilewright.app.eda.fpga import BASELINES, check_clock, compare_qor, qor_of

BASE = Path(__file__).parent / "qor_baselines"
#: the baselines every CI run places and routes (seconds for the whole flow measured on the
#: 2-core machine at load average ~1, docs/fpga.md); every other one is marked nightly
CI_CASES = ("int8_2x2_ice40", "int8_2x2_ecp5", "int8_2x2_xc7", "int8_4x4_xc7")
#: every committed baseline, by file name
EVERY = sorted(p.stem for p in BASE.glob("*_*.json"))


#: the families whose runs also pack a bitstream, with the unpacker of the same package and the
#: word every such bitstream carries (Lattice: iCE40 sync pattern 0x7EAA997E, "iCE40
#: Programming and Configuration" TN1248; ECP5 preamble 0xFFFFBDB3, "ECP5 and ECP5-5G sysCONFIG
#: Usage Guide" TN1260)
PACKED = {"ice40": ("iceunpack", "icepack", bytes.fromhex("7EAA997E")),
          "ecp5": ("ecpunpack", "ecppack", bytes.fromhex("FFFFBDB3"))}


def _cases() -> list:
    return [c if c in CI_CASES else pytest.param(c, marks=pytest.mark.nightly) for c in EVERY]


def tw(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return cli(*args, cwd=cwd, timeout=1800, columns=200)


@pytest.fixture(scope="module", params=_cases())
def run(request, tmp_path_factory):
    """The flow on one baseline's preset and target, through the CLI."""
    case = request.param
    baseline = json.loads((BASE / f"{case}.json").read_text())
    d = tmp_path_factory.mktemp(case)
    pack = ["--bitstream"] if baseline["target"] in PACKED else []
    top = ["--top", baseline["top"]] if "top" in baseline else []
    proc = tw("fpga", "--arch", str(BASE / f"{baseline['preset']}.yaml"), "--target",
              baseline["target"], "-o", "out", *top, *pack, cwd=d)
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



def test_meets_its_own_clock(run):
    """The flow aims at the ArchSpec's own clock and reaches it, or the baseline records the
    miss and why (then the run warns, so the report says so)."""
    case, baseline, _, m = run
    spec = load_arch(BASE / f"{baseline['preset']}.yaml")
    assert m["fpga"]["target_mhz"] == spec.clock_mhz
    problems, verdict = check_clock(m["fpga"], baseline)
    assert not problems, f"{case}: {'; '.join(problems)}"
    if "known miss" in verdict:
        warnings.warn(f"{case}: {verdict}", stacklevel=1)


def test_every_baseline_runs_somewhere():
    """Each preset x target of the update command has a baseline file, each file is one of
    them, and every CI case names a file (a typo would move it to no job at all)."""
    assert EVERY == sorted(f"{p}_{t}" for p, targets in BASELINES.items() for t in targets)
    assert set(CI_CASES) <= set(EVERY)
    nightly = [c for c in _cases() if not isinstance(c, str)]
    assert {c.values[0] for c in nightly} == set(EVERY) - set(CI_CASES)
    assert all(c.marks[0].name == "nightly" for c in nightly)


@pytest.mark.parametrize("case", EVERY)
def test_committed_baseline_records_its_clock(case):
    """Without place-and-route: a committed Fmax below the preset's clock_mhz carries a
    recorded, explained miss; one at or above it carries none."""
    baseline = json.loads((BASE / f"{case}.json").read_text())
    spec = load_arch(BASE / f"{baseline['preset']}.yaml")
    fpga = {"target_mhz": spec.clock_mhz, **({"fmax_mhz": baseline["fmax_mhz"]}
                                            if "fmax_mhz" in baseline else {})}
    problems, _ = check_clock(fpga, baseline)
    assert not problems, f"{case}: {'; '.join(problems)}"


def test_every_baseline_meets_its_clock():
    """Timing closure (docs/fpga.md): no committed baseline records a clock miss, and every
    placed-and-routed one reached its preset's clock_mhz."""
    for case in EVERY:
        baseline = json.loads((BASE / f"{case}.json").read_text())
        assert "meets_clock" not in baseline, f"{case} records a clock miss"
        if "fmax_mhz" in baseline:
            spec = load_arch(BASE / f"{baseline['preset']}.yaml")
            assert baseline["fmax_mhz"] >= spec.clock_mhz, case


# check_clock against hand-made results: 23.91 MHz on a 50 MHz clock is a miss, 51.62 is not
MISS, MEET, NO_FMAX = ({"fmax_mhz": 23.91, "target_mhz": 50.0},
                       {"fmax_mhz": 51.62, "target_mhz": 50.0}, {"target_mhz": 50.0})
KNOWN = {"meets_clock": False, "meets_clock_reason": "slow carry chains on the UP5K"}


@pytest.mark.parametrize("baseline", [{}, {"meets_clock": True}], ids=["silent", "claims-met"])
def test_a_miss_the_baseline_does_not_record_fails(baseline):
    problems, verdict = check_clock(MISS, {"fmax_mhz": 23.91, **baseline})
    assert verdict == "misses its clock (23.91 MHz < 50 MHz)"
    assert len(problems) == 1 and problems[0].startswith(verdict)


def test_a_recorded_miss_passes_and_says_why():
    problems, verdict = check_clock(MISS, KNOWN)
    assert problems == []
    assert verdict == ("misses its clock (23.91 MHz < 50 MHz): known miss, recorded in the "
                       "baseline: slow carry chains on the UP5K")


@pytest.mark.parametrize("fpga,baseline,needle", [
    (MISS, {"meets_clock": False}, "without a meets_clock_reason"),
    (MISS, {**KNOWN, "meets_clock_reason": "  "}, "without a meets_clock_reason"),
    (MEET, KNOWN, "meets its clock (51.62 MHz >= 50 MHz), but the baseline records"),
    (NO_FMAX, KNOWN, "measures no Fmax"),
    (MISS, {"meets_clock": "no"}, "accepted true or false"),
], ids=["no-reason", "blank-reason", "stale-record", "record-without-fmax", "not-a-bool"])
def test_a_wrong_clock_record_fails(fpga, baseline, needle):
    problems, _ = check_clock(fpga, baseline)
    assert len(problems) == 1 and needle in problems[0]


def test_clock_met_exactly_or_not_measured_passes():
    assert check_clock({"fmax_mhz": 50.0, "target_mhz": 50.0}, {}) == (
        [], "meets its clock (50 MHz >= 50 MHz)")
    assert check_clock(MEET, {"meets_clock": True}) == (
        [], "meets its clock (51.62 MHz >= 50 MHz)")
    assert check_clock(NO_FMAX, {}) == (
        [], "no Fmax (estimate only): the 50 MHz clock is not checked")


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
    # the path by name: its registers are signals of the generated Verilog (under the harness's
    # instance `core`) — one end may be a register of the pin harness itself (its output
    # register `oq` takes the top's outputs: a path through the top's output logic), never
    # both —, its delay the period, split into logic and routing
    cp = m["fpga"]["pnr"]["critical_path"]
    assert cp["delay_ns"] == pytest.approx(period_ns, abs=1e-3)
    assert cp["logic_ns"] + cp["routing_ns"] <= cp["delay_ns"] + 1e-6 and cp["logic_levels"] >= 1
    verilog = (out / m["verilog"]["path"]).read_text()
    harness = (out / f"{m['fpga']['harness']}.v").read_text()
    ends = (cp["from"], cp["to"])
    assert any(end.startswith("core.") for end in ends), cp
    for end in ends:
        if end.startswith("core."):
            assert re.search(rf"\b{re.escape(end.rsplit('.', 1)[-1])}\b", verilog), (end, cp)
        else:
            assert re.search(rf"^\s*reg\b[^;]*\b{re.escape(end)};", harness, re.M), (end, cp)


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


def _yowasp(family: str, tool: str, *args: str, cwd: Path) -> None:
    module = f"yowasp_nextpnr_{family}"
    proc = subprocess.run([sys.executable, "-c", f"import sys, {module} as m; "
                           f"sys.exit(m.run_{tool}(sys.argv[1:]))", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr + proc.stdout


def test_bitstream_unpacks_and_packs_back(run):
    """`--bitstream`: the file is a bitstream of the chosen part — it carries the family's sync
    word, unpacks with the family's own unpacker (icestorm/Trellis) to a configuration of the
    same device, and that configuration packs back to the identical file."""
    case, baseline, out, m = run
    family = baseline["target"]
    if family not in PACKED:
        assert "bitstream" not in m["fpga"]
        return
    unpack, pack, sync = PACKED[family]
    bs = m["fpga"]["bitstream"]
    data = (out / bs["path"]).read_bytes()
    assert len(data) == bs["bytes"] and sync in data[:4096], case
    _yowasp(family, unpack, bs["path"], "unpacked.txt", cwd=out)
    text = (out / "unpacked.txt").read_text()
    part = m["fpga"]["part"]        # iCE40UP5K-SG48 -> .device 5k; LFE5U-25F-CABGA381 -> LFE5U-25F
    ice40 = re.fullmatch(r"iCE40(?:UP|HX|LP)(\d+K)-\w+", part)
    device = ".device " + (ice40[1].lower() if family == "ice40" else part.rsplit("-", 1)[0])
    assert device in text.splitlines()[:5], (case, text[:200])
    _yowasp(family, pack, "unpacked.txt", "again" + Path(bs["path"]).suffix, cwd=out)
    assert (out / ("again" + Path(bs["path"]).suffix)).read_bytes() == data, case
