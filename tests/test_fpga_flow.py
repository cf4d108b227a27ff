"""`tilewright fpga`: the xc7 hand-off (Yosys estimate, Vivado TCL, XDC), FuseSoC/edalize files
checked with fusesoc's and edalize's own parsers, manifest hashes, the pin harness, part choice,
and the user errors (unknown target/top, a design too big for every part, atomic output).

The one real place-and-route of CI (iCE40) runs in tests/test_fpga_qor.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_cli import tw as cli

from tilewright.arch import ArchSpecError, ArchSpec, load_arch
from tilewright.app.eda.fpga import UnknownFpgaTarget, compare_qor, run_fpga
from tilewright.app.eda.fpga_pnr import (FLOWS, PARTS, DoesNotFitPart, choose_part, harness_verilog,
                                 parse_report, top_ports)

BASE = Path(__file__).parent / "qor_baselines"
PRESET = BASE / "int8_2x2.yaml"


def tw(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return cli(*args, cwd=cwd, timeout=900, columns=200)


@pytest.fixture(scope="module")
def xc7_run(tmp_path_factory):
    """One CLI run: the 2x2 preset for xc7 at 125 MHz (Yosys xilinx estimate + Vivado files)."""
    d = tmp_path_factory.mktemp("xc7")
    proc = tw("fpga", "--arch", str(PRESET), "--target", "xc7", "--freq", "125", "-o", "out",
              cwd=d)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    out = d / "out"
    return out, json.loads((out / "manifest.json").read_text()), proc.stdout


def test_xc7_vivado_script_and_xdc(xc7_run):
    out, m, stdout = xc7_run
    part = m["fpga"]["part"]
    assert part == "xc7a35tcpg236-1"          # 4 DSP48, a few hundred LUTs: the smallest part
    tcl = (out / "vivado.tcl").read_text()
    top = m["top_module"]
    assert re.search(rf"^create_project -force {top} .* -part {part}$", tcl, re.M)
    assert f"synth_design -top {top} -part {part} -mode out_of_context" in tcl
    order = [tcl.index(s) for s in ("add_files -norecurse", "synth_design", "opt_design",
                                    "place_design", "route_design", "report_utilization",
                                    "report_timing")]
    assert order == sorted(order)
    assert f"[file join $here {top}.v]" in tcl and f"[file join $here {top}.xdc]" in tcl
    xdc = (out / f"{top}.xdc").read_text()
    period = float(re.search(r"create_clock -period ([\d.]+) -name clk \[get_ports clk\]",
                             xdc).group(1))
    assert period == pytest.approx(1000 / 125)      # 8 ns
    assert m["fpga"]["clock_period_ns"] == pytest.approx(8.0)
    assert "vivado -mode batch -source vivado.tcl" in stdout


def test_xc7_estimate_counts(xc7_run):
    _, m, _ = xc7_run
    f = m["fpga"]
    assert f["estimate"] is True
    assert f["dsps"] == 2 * 2                   # one DSP48E1 per int8 PE
    assert f["luts"] == sum(n for t, n in f["synthesis"]["cells_by_type"].items()
                            if t.startswith(("$lut", "LUT")))
    assert "fmax_mhz" not in f                  # no timing without Vivado


def test_manifest_hashes_match_files(xc7_run):
    out, m, _ = xc7_run
    listed = {e["path"]: e for e in m["files"]}
    on_disk = {p.name for p in out.iterdir()} - {"manifest.json"}
    assert set(listed) == on_disk
    for name, e in listed.items():
        data = (out / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == e["sha256"] and len(data) == e["bytes"]
    assert m["verilog"]["sha256"] == hashlib.sha256((out / m["verilog"]["path"]).read_bytes()
                                                    ).hexdigest()
    spec = load_arch(PRESET)
    assert m["arch"]["hash"] == spec.content_hash()
    assert ArchSpec.from_yaml(m["arch"]["yaml"]) == spec
    assert m["tools"]["yosys"] == "0.70" or re.fullmatch(r"\d+\.\d+.*", m["tools"]["yosys"])
    assert not list(out.parent.glob(".out.*"))       # the staging folder is gone


def test_fusesoc_parses_the_core(xc7_run):
    from fusesoc.capi2.coreparser import Core2Parser
    from fusesoc.core import Core
    out, m, _ = xc7_run
    core = Core(Core2Parser(), out / m["handoff"]["fusesoc_core"])
    assert str(core.name) == m["handoff"]["vlnv"]
    assert (core.name.vendor, core.name.library, core.name.name) == ("tilewright", "accel",
                                                                     "int8_2x2")
    top = m["top_module"]
    for target in ("default", "lint", "synth"):
        assert core.get_toplevel({"target": target}) == top
    synth = {"target": "synth", "is_toplevel": True}   # as `fusesoc run --target synth`
    names = [f["name"] for f in core.get_files(synth)]
    assert names == [f"{top}.v", f"{top}.xdc"]
    assert all((out / n).is_file() for n in names)
    assert core.get_flow(synth) == "vivado"
    assert core.get_flow({"target": "lint"}) == "lint"
    assert [f["name"] for f in core.get_files({})] == [f"{top}.v"]   # as a dependency


def test_fusesoc_runs_the_lint_target(xc7_run, tmp_path):
    """`fusesoc run --target lint` on the generated core: fusesoc + edalize drive Verilator."""
    from tilewright.cosim.verilator import verilator_bin_dir
    out, m, _ = xc7_run
    env = {**os.environ, "PATH": f"{verilator_bin_dir()}{os.pathsep}{os.environ['PATH']}"}
    env.pop("VERILATOR_ROOT", None)
    fusesoc = [sys.executable, "-m", "fusesoc.main"]
    proc = subprocess.run([*fusesoc, "--cores-root", str(out), "run", "--target", "lint",
                           m["handoff"]["vlnv"]], cwd=tmp_path, capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "V e r i l a t i o n   R e p o r t" in proc.stdout + proc.stderr   # it really ran


def test_edam_and_file_list_configure_with_edalize(xc7_run, tmp_path):
    """edalize's own Vivado flow accepts the EDAM and writes its project TCL from it."""
    from edalize.flows.vivado import Vivado
    out, m, _ = xc7_run
    edam = json.loads((out / m["handoff"]["edam"]).read_text())
    for f in edam["files"]:                     # edalize reads paths relative to work_root
        f["name"] = str(out / f["name"])
    edam["flow_options"] = edam.pop("tool_options")["vivado"]
    Vivado(edam, str(tmp_path), verbose=False).configure()
    tcl = (tmp_path / f"{edam['name']}.tcl").read_text()
    assert m["fpga"]["part"] in tcl and f"{m['top_module']}.v" in tcl
    lines = (out / m["handoff"]["file_list"]).read_text().splitlines()
    assert lines == [m["verilog"]["path"], f"--top-module {m['top_module']}"]


def test_preset_too_big_for_ice40_fails_fast_without_traceback(tmp_path):
    """ws8x8 carries 128 KiB of buffers: 256 SB_RAM40_4K at least (iCE40 has no LUT RAM),
    the HX8K has 32. The CLI says so in one line before running any tool."""
    proc = tw("fpga", "--arch", "ws8x8", "--target", "ice40", "-o", "o", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    need = (64 + 64) * 1024 * 8 // 4096
    assert proc.stderr.strip().splitlines() == [
        f"error: the buffers of ws8x8 (64 KiB scratchpad + 64 KiB accumulator) do not fit any "
        f"ice40 part: brams {need} > 32 on the largest, iCE40HX8K-CT256 (at least {need} block "
        f"RAMs of 4096 bits; ice40 has no LUT RAM)"]
    assert not (tmp_path / "o").exists() and not list(tmp_path.glob(".o.*"))


def test_bridge_memory_beyond_any_ecp5_part_fails_fast(tmp_path):
    """ECP5 has LUT RAM as well as block RAM, but not without bound: 2**20 bridge words of 32 B
    (ws8x8's memory-port beat, as the message states) plus 128 KiB of
    buffers exceed the LFE5U-85F's 208 x 18 kbit block RAM + 669 kbit LUT RAM (datasheet), so
    the flow refuses in one line before running any tool (it used to hand Yosys the memory)."""
    proc = tw("fpga", "--arch", "ws8x8", "--target", "ecp5", "--top", "uart-accel",
              "--mem-words", str(1 << 20), "-o", "o", cwd=tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    cap = 208 * 18 * 1024 + 669 * 1024
    need = (64 + 64) * 1024 * 8 + (1 << 20) * 32 * 8
    assert (f"do not fit any ecp5 part: {need} bits > {cap} on the largest, "
            f"LFE5U-85F-CABGA381") in lines[0]
    assert not (tmp_path / "o").exists() and not list(tmp_path.glob(".o.*"))


def _main(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    """Run the CLI in this process; return (exit status, stderr)."""
    from tilewright.app.cli import main as cli
    monkeypatch.setattr(sys, "argv", ["tilewright", *args])
    with pytest.raises(SystemExit) as exc:
        cli.main()
    return exc.value.code, capsys.readouterr().err.strip()


def test_unknown_target_and_top_are_one_line_errors(tmp_path, monkeypatch, capsys):
    code, err = _main(monkeypatch, capsys, "fpga", "--arch", str(PRESET), "--target",
                      "virtex2", "-o", str(tmp_path / "o"))
    assert (code, err) == (2, "error: --target 'virtex2' is unknown; accepted: ice40, ecp5, xc7")
    code, err = _main(monkeypatch, capsys, "fpga", "--arch", str(PRESET), "--target", "ice40",
                      "--top", "soc", "-o", str(tmp_path / "o"))
    # the canonical top names (docs/design.md "CLI conventions"), not the flow's own
    assert (code, err) == (2, "error: --top 'soc' is unknown; accepted: core, axi-core, "
                              "axi-accel, uart-accel")
    assert not (tmp_path / "o").exists()


def _fake_synth(counts):
    """A stand-in for Yosys: ``counts``, with no DSP when the flow maps none (plain ice40)."""
    def synthesize(vfile, top, target, timeout_s=0.0, *, extra_sources=(), netlist_json=None):
        dsps = counts["dsps"] if "-dsp" in target.script or "ice40" not in target.name else 0
        return {"cells": 1, "yosys_version": "0.70", "wall_seconds": 0.0,
                "cells_by_type": {}, **counts, "dsps": dsps}
    return synthesize


def test_design_too_big_is_one_line_error_and_leaves_no_manifest(tmp_path, monkeypatch,
                                                                   capsys):
    """Yosys stubbed with counts beyond the largest iCE40 (HX8K: 7680 LCs, 32 BRAMs)."""
    import tilewright.app.eda.fpga_pnr as pnr
    monkeypatch.setattr(pnr, "synthesize", _fake_synth(
        {"luts": 1000, "ffs": 1000, "dsps": 16, "brams": 40}))
    out = tmp_path / "o"
    out.mkdir()
    (out / "manifest.json").write_text("{}")      # an earlier run's manifest
    code, err = _main(monkeypatch, capsys, "fpga", "--arch", str(PRESET), "--target", "ice40",
                      "--no-pnr", "-o", str(out))
    assert code == 2
    assert "\n" not in err and "Traceback" not in err
    assert err.startswith("error: tw_gemm_core does not fit any ice40 part: brams 40 > 32 on "
                          "the largest, iCE40HX8K-CT256")
    assert (out / "manifest.json").read_text() == "{}"    # untouched: nothing was published
    assert not list(tmp_path.glob(".o.*"))



def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path -> content)."""
    return {str(f.relative_to(folder)): f.read_bytes() for f in folder.rglob("*") if f.is_file()}


XC7_COUNTS = {"luts": 500, "ffs": 400, "dsps": 4, "brams": 4}   # fits the xc7a35t


def _fake_xc7_synth(vfile, top, target, *args, **kwargs):
    """A stand-in for Yosys' xilinx estimate: :data:`XC7_COUNTS`."""
    assert target == "xilinx"
    return {"cells": 1, "yosys_version": "0.70", "wall_seconds": 0.0, "cells_by_type": {},
            "flow": "synth_xilinx (stub)", **XC7_COUNTS}


def test_fpga_output_is_whole_or_untouched(tmp_path, monkeypatch, capsys):
    """`fpga -o DIR`: a flow that fails after writing the Verilog and the hand-off files leaves
    an earlier DIR byte for byte as it was and no staging folder; a flow that succeeds replaces
    DIR whole (an earlier run's stray file is gone). Yosys is stubbed (xc7 counts)."""
    import tilewright.app.eda.fpga as fpga
    from tilewright.app.eda.fpga import FpgaError
    monkeypatch.setattr(fpga, "synthesize", _fake_xc7_synth)
    out = tmp_path / "o"
    (out / "sub").mkdir(parents=True)
    for name, text in (("manifest.json", "{}"), ("stray.txt", "old"), ("sub/x.v", "old")):
        (out / name).write_text(text)
    before = _snapshot(out)
    real_handoff, staged = fpga._handoff, []

    def handoff_then_fail(work, *args):
        real_handoff(work, *args)
        staged.extend(sorted(f.name for f in work.iterdir()))
        raise FpgaError("injected failure after the hand-off files were written")

    monkeypatch.setattr(fpga, "_handoff", handoff_then_fail)
    code, err = _main(monkeypatch, capsys, "fpga", "--arch", str(PRESET), "--target", "xc7",
                      "-o", str(out))
    assert (code, err) == (2, "error: injected failure after the hand-off files were written")
    assert {"tw_gemm_core.v", "vivado.tcl", "int8_2x2_xc7.core"} <= set(staged)  # it did write
    assert _snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]      # no staging folder left

    monkeypatch.setattr(fpga, "_handoff", real_handoff)
    from tilewright.app.cli import main as cli
    monkeypatch.setattr(sys, "argv", ["tilewright", "fpga", "--arch", str(PRESET), "--target",
                                      "xc7", "-o", str(out)])
    cli.main()                                   # returns: the run succeeded
    m = json.loads((out / "manifest.json").read_text())
    assert {p.name for p in out.iterdir()} == {e["path"] for e in m["files"]} | {"manifest.json"}
    assert "stray.txt" not in m["files"] and m["fpga"]["luts"] == XC7_COUNTS["luts"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]


def test_fpga_output_that_is_a_file_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    out = tmp_path / "o"
    out.write_text("keep")
    code, err = _main(monkeypatch, capsys, "fpga", "--arch", str(PRESET), "--target", "xc7",
                      "-o", str(out))
    assert code == 2 and err.startswith(f"error: {out}: is a file; -o takes a folder")
    assert out.read_text() == "keep"


def test_part_choice_by_resource():
    """Smallest part that holds the need; the DSP flow only on the UltraPlus part."""
    small = {"luts": 800, "ffs": 800, "dsps": 4, "brams": 10, "ios": 4}
    assert choose_part(small, "ice40", "ice40-dsp").name == "iCE40UP5K-SG48"
    assert choose_part({**small, "dsps": 9}, "ice40", "ice40-dsp") is None
    assert choose_part({**small, "dsps": 0, "luts": 6000}, "ice40", "ice40").name \
        == "iCE40HX8K-CT256"
    assert choose_part({**small, "luts": 30000}, "ecp5", "ecp5").name == "LFE5U-45F-CABGA381"
    assert choose_part({**small, "dsps": 100}, "ecp5", "ecp5").name == "LFE5U-85F-CABGA381"
    assert choose_part({**small, "brams": 209}, "ecp5", "ecp5") is None
    assert {p.flow for p in PARTS} <= set(FLOWS)


def _xor_tree_ffs(n_out: int) -> int:
    """Flip-flops of the harness's registered XOR tree over ``n_out`` output bits, by hand:
    ceil(n/4) per level while more than 4 bits remain, then ``so``."""
    tree, n = 0, n_out
    while n > 4:
        n = -(-n // 4)
        tree += n
    return tree + 1


def test_top_ports_match_the_amaranth_signature(tmp_path):
    """Ports parsed from the Verilog text equal the ones write_rtl records from the Amaranth
    signature (plus clk and rst)."""
    from tilewright.rtl.verilog import TOP_NAME, write_rtl
    m = write_rtl(load_arch(PRESET), tmp_path)
    ports = top_ports((tmp_path / f"{TOP_NAME}.v").read_text(), TOP_NAME)
    got = {n: (d, w) for d, n, w in ports}
    want = {p["name"]: (p["direction"], p["width_bits"]) for p in m["ports"]}
    assert got == {**want, "clk": ("input", 1), "rst": ("input", 1)}
    text, ffs = harness_verilog(TOP_NAME, ports)
    n_in = sum(w for d, w in want.values() if d == "input")
    n_out = sum(w for d, w in want.values() if d == "output")
    assert ffs == n_in + n_out + _xor_tree_ffs(n_out)
    assert text.count("<= ^") == _xor_tree_ffs(n_out) and "so <= ^xq" in text
    assert f"reg [{n_in - 1}:0] sr;" in text and f"reg [{n_out - 1}:0] oq;" in text
    with pytest.raises(ValueError, match="no output"):
        harness_verilog("x", [("input", "a", 3)])


@pytest.mark.parametrize("top,module,bus_ports", [
    ("axi", "tw_axi_gemm_top", {"s_axil_awaddr", "s_axil_wdata", "s_axil_rdata"}),
    ("axi-accel", "tw_axi_accel_top", {"s_axil_awaddr", "s_axil_rdata", "m_axi_araddr",
                                       "m_axi_rdata", "m_axi_wlast", "m_axi_bvalid", "irq"})])
def test_axi_tops_through_the_registry(tmp_path, top, module, bus_ports):
    """--top axi / axi-accel: the registry's generator writes the top's Verilog; the harness
    wraps all of its ports (AXI4-Lite / AXI4 signals as they appear in the Verilog)."""
    from tilewright.app.eda.fpga import _generate_top
    arch = load_arch(PRESET)
    if top == "axi-accel":     # the preset's 320 B/cycle would be a 2048-bit AXI4 beat (>1024)
        with pytest.raises(ArchSpecError, match="offchip.bandwidth_gbps=16.0 .* accepts 1 to 128"):
            _generate_top(arch, top, tmp_path, "ecp5")
        arch = arch.model_copy(update={"offchip": arch.offchip.model_copy(
            update={"bandwidth_gbps": 0.4})})                  # 8-byte beats at 50 MHz
    vfile, got = _generate_top(arch, top, tmp_path, "ecp5")
    assert (vfile.name, got) == (f"{module}.v", module)
    assert f"{module}.v" in [p.name for p in tmp_path.iterdir()]
    ports = top_ports(vfile.read_text(), module)
    names = {n for _, n, _ in ports}
    assert {"clk", "rst"} | bus_ports <= names
    text, ffs = harness_verilog(module, ports)
    n_out = sum(w for d, n, w in ports if d == "output")
    assert ffs == sum(w for _, n, w in ports if n not in ("clk", "rst")) + _xor_tree_ffs(n_out)
    assert all(f".{n}(" in text for n in names)


def test_parse_report_takes_the_slowest_clock():
    rep = {"utilization": {t: {"used": u, "available": 100} for t, u in
                           (("ICESTORM_LC", 50), ("ICESTORM_DSP", 2), ("ICESTORM_RAM", 3),
                            ("SB_IO", 4))},
           "fmax": {"a": {"achieved": 30.004, "constraint": 12}, "b": {"achieved": 80.0}}}
    r = parse_report(rep, "ice40")
    assert (r["logic_cells"], r["dsps"], r["brams"], r["ios"]) == (50, 2, 3, 4)
    assert r["fmax_mhz"] == 30.0
    from tilewright.app.eda.fpga_pnr import PnrError
    with pytest.raises(PnrError, match="no clock"):
        parse_report({**rep, "fmax": {}}, "ice40")
    hx = {**rep, "utilization": {t: u for t, u in rep["utilization"].items()
                                 if t != "ICESTORM_DSP"}}          # the HX parts have no DSP
    assert parse_report(hx, "ice40")["dsps"] == 0
    with pytest.raises(PnrError, match="ICESTORM_LC"):
        parse_report({**rep, "utilization": {}}, "ice40")


def test_compare_qor_tolerances():
    base = {"luts": 100, "ffs": 200, "dsps": 4, "brams": 0, "fmax_mhz": 50.0}
    assert compare_qor({"luts": 110, "ffs": 180, "dsps": 4, "brams": 0, "fmax_mhz": 45.0},
                       base) == []
    bad = compare_qor({"luts": 111, "ffs": 200, "dsps": 4, "brams": 1, "fmax_mhz": 44.9}, base)
    assert [b.split()[0] for b in bad] == ["luts", "brams", "fmax_mhz"]
    assert compare_qor({"luts": 100}, {"luts": 100, "fmax_mhz": 20}) == [
        "fmax_mhz: missing (baseline 20)"]


def test_run_fpga_rejects_bad_arguments(tmp_path):
    spec = load_arch(PRESET)
    with pytest.raises(UnknownFpgaTarget, match="accepted: ice40, ecp5, xc7"):
        run_fpga(spec, "gowin", tmp_path / "o")
    with pytest.raises(UnknownFpgaTarget, match="--freq"):
        run_fpga(spec, "xc7", tmp_path / "o", freq_mhz=0)
    with pytest.raises(UnknownFpgaTarget, match="--top 'nope' is unknown"):
        run_fpga(spec, "xc7", tmp_path / "o", top="nope")
    assert issubclass(DoesNotFitPart, ValueError)
