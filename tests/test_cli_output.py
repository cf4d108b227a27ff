"""The CLI's output (issue 21, item 4): tables that never cut numbers (folded on a terminal,
tab-separated with full numbers when piped), integers as integers, ``cycles`` as a table,
``compile``'s format from the ArchSpec, listings of every model and preset with its real shape,
``cluster``'s default plan and ``--dp auto`` on every cluster preset, ``-v``/``-q`` logging."""

from __future__ import annotations

import io
import json
import math
import re

import pandas as pd
import pytest
import yaml
from rich.console import Console

from tests.test_cli import REPO, tw
from tilewright.app.cli import tables
from tilewright.app.cli.tables import Column, fmt_value, print_table

CLUSTERS = sorted((REPO / "configs" / "clusters").glob("*.yaml"))


def _rows(stdout: str) -> dict[str, list[str]]:
    """Plain layout: first cell of each tab-separated line -> the other cells."""
    return {line.split("\t")[0]: line.split("\t")[1:] for line in stdout.splitlines()
            if "\t" in line}


# ---- the table helper -------------------------------------------------------------------------

def test_fmt_value_integers_as_integers():
    assert fmt_value(10_000.0) == "10,000" and fmt_value(10_000.0, sep=False) == "10000"
    assert fmt_value(2**40) == "1,099,511,627,776"
    assert fmt_value(0.5) == "0.5" and fmt_value(None) == "-" and fmt_value(True) == "True"
    assert fmt_value(1 / 3, "{:.2f}") == "0.33"


def test_terminal_table_folds_instead_of_cutting(monkeypatch):
    """A 12-character count in a 14-column terminal: rich folds it, every digit is printed."""
    monkeypatch.setattr(tables, "plain_output", lambda: False)
    buf = io.StringIO()
    con = Console(file=buf, width=14, force_terminal=False, color_system=None)
    print_table(None, [Column("n", numeric=True)], [[34_359_738_368]], con)
    out = buf.getvalue()
    assert "…" not in out
    assert "".join(re.findall(r"\d", out)) == "34359738368"


def test_piped_table_is_tab_separated_full_numbers(capsys):
    print_table("t", ["a", Column("b", numeric=True)], [["x", 34_359_738_368.0], ["y", 0.25]])
    out = capsys.readouterr().out.splitlines()
    assert out == ["# t", "a\tb", "x\t34359738368", "y\t0.25"]


# ---- cycles -----------------------------------------------------------------------------------

def test_cycles_prints_a_table_with_full_numbers_when_piped():
    """The largest GEMM ``cycles`` takes (2**20 cubed) on ws8x8: the WS closed form of
    docs/design.md, R + (F-1)·max(M, 2R+C-2) + M + R + C + 1 with F = ceil(K/R)·ceil(N/C),
    printed whole (11 digits, once cut to '34,359,…'), not as a Python dict."""
    m = k = n = 2**20
    r = c = 8
    proc = tw("cycles", "--arch", "ws8x8", "-m", str(m), "-k", str(k), "-n", str(n))
    assert proc.returncode == 0, proc.stderr
    assert "{" not in proc.stdout and "'cycles'" not in proc.stdout and "…" not in proc.stdout
    f = -(-k // r) * -(-n // c)
    rows = _rows(proc.stdout)
    assert rows["folds"] == [str(f)]
    assert rows["cycles"] == [str(r + (f - 1) * max(m, 2 * r + c - 2) + m + r + c + 1)]


# ---- compile ----------------------------------------------------------------------------------

def test_compile_takes_the_archspec_format_and_refuses_another(tmp_path):
    base = (REPO / "configs" / "ws8x8.yaml").read_text()
    assert "input_format: int8\n  weight_format: int8\n  accumulator_format: int32" in base
    proc = tw("compile", "--model", "tiny-llama", "--arch", "ws8x8", "--json")
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert d["format"] == "int8" and "input_format" in d["format_source"]
    fp32 = tmp_path / "fp32.yaml"
    fp32.write_text(base.replace("input_format: int8\n  weight_format: int8\n  accumulator_"
                                 "format: int32", "input_format: fp32\n  weight_format: fp32\n"
                                 "  accumulator_format: fp32"))
    proc = tw("compile", "--model", "tiny-llama", "--arch", str(fp32), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["format"] == "fp32"
    # a bf16 design compiles its layer and its whole model (a bf16 embedding table exports)
    bf16 = tmp_path / "bf16.yaml"
    bf16.write_text(fp32.read_text().replace("input_format: fp32\n  weight_format: fp32",
                                             "input_format: bf16\n  weight_format: bf16"))
    proc = tw("compile", "--model", "tiny-llama", "--arch", str(bf16), "--json")
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert d["format"] == "bf16" and "whole_model_not_computed" not in d
    assert d["whole_model"]["cycles"] > d["layer"]["total_cycles"] > 0
    proc = tw("compile", "--model", "tiny-llama", "--arch", "ws8x8", "--format", "fp32")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--format fp32" in lines[0] and "input_format int8" in lines[0]


def test_compile_table_piped_has_whole_integer_cells():
    proc = tw("compile", "--model", "tiny-llama", "--arch", "ws8x8")
    assert proc.returncode == 0, proc.stderr
    lines = [ln.split("\t") for ln in proc.stdout.splitlines() if "\t" in ln]
    head, body = lines[0], lines[1:]
    assert head[:6] == ["task", "kind", "op", "macs", "cycles", "bytes"] and body
    for row in body:
        for col in ("macs", "cycles", "bytes", "time_cycles"):
            assert re.fullmatch(r"\d+", row[head.index(col)]), (col, row)
    assert "int8 from the ArchSpec's tensor_engine.input_format" in proc.stdout


# ---- listings ---------------------------------------------------------------------------------

def test_models_lists_llms_and_the_demo_mlps():
    from tilewright.models.llm_shapes import LLM_CONFIGS
    proc = tw("models")
    assert proc.returncode == 0, proc.stderr
    rows = _rows(proc.stdout)
    for name in (*LLM_CONFIGS, "mlp-tiny", "mlp-small"):
        assert name in rows, name
    # mlp-tiny 32->64->64->16: three Linear layers, i*o weights + o biases each
    assert rows["mlp-tiny"][-1] == str(32 * 64 + 64 + 64 * 64 + 64 + 64 * 16 + 16)
    assert rows["mlp-tiny"][-2] == "3"


def test_arch_lists_each_preset_with_its_real_shape():
    proc = tw("arch")
    assert proc.returncode == 0, proc.stderr
    rows = _rows(proc.stdout)
    for path in sorted((REPO / "configs").glob("*.yaml")):
        y = yaml.safe_load(path.read_text())
        te = y["tensor_engine"]
        kind = te.get("kind", "systolic")
        default = 1 if kind != "systolic" else None
        shape = f"{te.get('rows', default)}x{te.get('cols', default)}x{te.get('depth', 1)}"
        if te.get("count", 1) > 1:                       # several engines per chip
            shape = f"{te['count']} x {shape}"
        row = rows[path.stem]
        assert row[0] == kind and row[1] == shape, (path.stem, row)
        assert row[2] == (te["dataflow"] if kind == "systolic" else "-")
        if "mesh" in y:
            ms = y["mesh"]
            grid = f"{ms['rows']}x{ms['cols']} cores"
            assert row[-1].startswith(grid), row
            if ms.get("spare_cols") or ms.get("spare_rows"):
                assert f"({ms['rows'] - ms.get('spare_rows', 0)}x"\
                       f"{ms['cols'] - ms.get('spare_cols', 0)} logical)" in row[-1]
        else:
            assert row[-1] == "-"
    assert rows["wse2"][-1] == "750x1133 cores (750x994 logical)"
    assert rows["cube2x4x2v"][:3] == ["cube", "2x2x4", "-"]


# ---- cluster ----------------------------------------------------------------------------------

@pytest.mark.parametrize("path", CLUSTERS, ids=lambda p: p.stem)
def test_simplest_cluster_run_works_on_every_preset(path):
    """``cluster --cluster P --model llama3-8b`` exits 0 (short sequences, few requests to stay
    fast): training uses every chip (dp = chips / (tp·pp·sp) = chips), a cluster with P/D pools
    serves."""
    y = yaml.safe_load(path.read_text())
    chips = y.get("nodes", 1) * y.get("chips_per_node", 1)
    extra = []
    if path.stem == "torus-1024":
        # a 1024-way ring all-reduce per 25 MiB gradient bucket is ~2M SimPy events each: one
        # all-reduce after the backward keeps this test under a minute
        extra = ["--grad-bucket-mb", "0"]
    elif chips >= 64 and "pools" not in y:
        # the default (auto) level simulates 64 chips at event level: ~2M messages, 31 s; the
        # event level is run here on the 8-chip preset and checked against the flow level in
        # tests/test_cluster_network.py
        extra = ["--network", "flow"]
    proc = tw("cluster", "--cluster", path.stem, "--model", "llama3-8b", "--seq-len", "256",
              "--requests", "16", "--json", *extra, timeout=600)
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    if "pools" in y:
        assert d["mode"] == "serve" and d["finished"] == 16
    else:
        assert d["mode"] == "train" and d["plan"].startswith(f"dp={chips} tp=1 pp=1 sp=1")
        assert d["bubble_s"] == 0.0        # pp = 1: no pipeline bubble, no float residue


def test_dp_auto_divides_or_is_refused():
    proc = tw("cluster", "--cluster", "h100-8x-nvlink", "--model", "llama3-8b", "--seq-len",
              "256", "--tp", "2", "--dp", "auto", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["plan"].startswith("dp=4 tp=2 ")        # 8 / 2
    proc = tw("cluster", "--cluster", "h100-8x-nvlink", "--model", "llama3-8b", "--tp", "3",
              "--dp", "auto")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "dp=auto" in lines[0] and "8" in lines[0]
    proc = tw("cluster", "--cluster", "h100-8x-nvlink", "--model", "llama3-8b", "--dp", "x")
    assert proc.returncode == 2 and "--dp" in proc.stderr and "Traceback" not in proc.stderr


def test_bubble_is_zero_not_float_residue():
    from tilewright.dataflow_sim.cluster.training import _bubble
    assert 0.3 - 0.1 - 0.2 < 0                       # the residue this guards against
    assert _bubble(0.3, 0.1, 0.2) == 0.0
    assert _bubble(1.0, 0.5, 0.25) == 0.25


def test_export_writes_counts_as_integers(tmp_path):
    from tilewright.app.sweep.store import counts_as_integers
    df = pd.DataFrame({"cycles": [1234.4999, math.nan], "w:mem_cycles": [3.0, 4.0],
                       "latency_s": [0.5, 1.25]})
    text = counts_as_integers(df).to_csv(index=False)
    assert text.splitlines() == ["cycles,w:mem_cycles,latency_s", "1234,3,0.5", ",4,1.25"]


# ---- logging and progress ---------------------------------------------------------------------

def test_verbose_logs_steps_quiet_silences_them():
    args = ["compile", "--model", "tiny-llama", "--arch", "ws8x8", "--json"]
    loud = tw("-vv", *args)
    assert loud.returncode == 0, loud.stderr
    assert "INFO: compiling one layer of tiny-llama" in loud.stderr
    assert re.search(r"DEBUG: compiling one layer of tiny-llama for ws8x8: [\d.]+ s", loud.stderr)
    quiet = tw("-q", *args)
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert json.loads(quiet.stdout)["total_cycles"] == json.loads(loud.stdout)["total_cycles"]


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_quiet_silences_the_spinner(monkeypatch):
    from tilewright import progress as pg
    for quiet, drawn in ((False, True), (True, False)):
        fake = _Tty()
        monkeypatch.setattr("sys.stderr", fake)
        pg.set_quiet(quiet)
        try:
            with pg.progress("working"):
                pass
        finally:
            pg.set_quiet(False)
        assert ("working" in fake.getvalue()) == drawn, quiet


def test_a_step_inside_a_step_shows_on_the_outer_spinner(monkeypatch):
    """A P&R or Verilator step inside a command's own step is drawn (``outer › inner``) on the
    one spinner instead of being hidden by it; the outer text comes back when it ends."""
    from tilewright import progress as pg
    seen: list[str] = []

    class _Status:                         # records what the spinner would draw
        def __init__(self, text):
            seen.append(text)

        def start(self):
            pass

        def stop(self):
            pass

        def update(self, text):
            seen.append(text)

    class _Console:
        def __init__(self, **_kw):
            pass

        def status(self, text):
            return _Status(text)

    monkeypatch.setattr("sys.stderr", _Tty())
    monkeypatch.setattr("rich.console.Console", _Console)
    with pg.progress("FPGA flow"):
        with pg.progress("synthesis with Yosys (ice40)"):
            pass
        with pg.progress("place and route"):
            with pg.progress("deeper"):
                pass
    assert seen == ["FPGA flow", "FPGA flow › synthesis with Yosys (ice40)", "FPGA flow",
                    "FPGA flow › place and route", "FPGA flow › place and route › deeper",
                    "FPGA flow › place and route", "FPGA flow"]
    assert pg._STATE["status"] is None and pg._STATE["texts"] == []
