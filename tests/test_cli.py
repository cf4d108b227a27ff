"""The CLI as a user meets it: real subprocesses, exit codes, one-line errors, no tracebacks."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def tw(*args: str, cwd: Path | None = None, timeout: int = 900,
       columns: int = 120) -> subprocess.CompletedProcess:
    """The installed ``tilewright`` CLI in a subprocess (``python -m tilewright.app.cli.main`` if it is not
    on PATH), with a terminal ``columns`` wide for rich's tables."""
    exe = shutil.which("tilewright")
    cmd = [exe, *args] if exe else [sys.executable, "-m", "tilewright.app.cli.main", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd or REPO, timeout=timeout,
                          env={**os.environ, "COLUMNS": str(columns)})


def tw_here(capsys, *args: str) -> tuple[int, str, str]:
    """The real entry point (its error path included) run in this process with ``args``:
    (exit code, stdout, stderr) of this command alone, as ``capsys`` captured them."""
    from tilewright.app.cli.main import main  # noqa: PLC0415  (lazy: only the in-process tests)
    old = sys.argv
    sys.argv = ["tilewright", *args]
    capsys.readouterr()                       # drop what earlier steps printed
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    finally:
        sys.argv = old
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("yaml_text,needle", [
    ("tensor_engine: {rows: 0, cols: 4, dataflow: ws}", "tensor_engine.rows = 0: must be an integer from 1 to 512"),
    ("tensor_engine: {rows: 4, cols: 4, dataflow: zz}", "tensor_engine.dataflow = 'zz'"),
    ("tensor_engine: {rows: 4, cols: 4, dataflow: ws}\nbogus: 1", "bogus = (unknown key)"),
    ("tensor_engine: {rows: x, cols: 4, dataflow: ws}", "tensor_engine.rows = 'x'"),
])
@pytest.mark.parametrize("command", [["arch"], ["rtl", "-o", "OUT", "--arch"]])
def test_bad_archspec_one_line_no_traceback(tmp_path, yaml_text, needle, command):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml_text)
    args = [str(tmp_path / "out") if a == "OUT" else a for a in command] + [str(bad)]
    proc = tw(*args)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], proc.stderr
    assert not (tmp_path / "out").exists()


def test_unknown_preset_and_bad_option_are_user_errors():
    proc = tw("cycles", "--arch", "nope", "-m", "1", "-k", "1", "-n", "1")
    assert proc.returncode == 2 and "presets are:" in proc.stderr and "Traceback" not in proc.stderr
    proc = tw("cycles", "--arch", "ws8x8", "-m", "0", "-k", "1", "-n", "1")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_cycles_json_matches_closed_form():
    proc = tw("cycles", "--arch", "ws8x8", "-m", "100", "-k", "70", "-n", "20", "--json")
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    folds = -(-70 // 8) * -(-20 // 8)
    assert d["folds"] == folds and d["cycles"] == 8 + (folds - 1) * 100 + 100 + 8 + 8 + 1


@pytest.mark.verilator
@pytest.mark.parametrize("preset,rows", [("ws8x8", 8), ("os16x16", 16)])
def test_rtl_writes_verilog_manifest_and_lints_clean(tmp_path, preset, rows):
    out = tmp_path / "out"
    proc = tw("rtl", "--arch", f"configs/{preset}.yaml", "-o", str(out), "--lint")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "lint-only -Wall: clean" in proc.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    vfile = out / manifest["files"][0]["path"]
    import hashlib
    assert hashlib.sha256(vfile.read_bytes()).hexdigest() == manifest["files"][0]["sha256"]
    assert manifest["arch"]["tensor_engine"]["rows"] == rows and manifest["generator_version"]
    names = {p["name"]: p for p in manifest["ports"]}
    assert names["start"]["direction"] == "input" and names["busy"]["direction"] == "output"
    assert names["acc_rd_data"]["width_bits"] == rows * 32
    assert "module tw_gemm_core" in vfile.read_text()


def test_failed_demo_exits_nonzero(monkeypatch):
    """`raise typer.Exit(1)` inside a command must reach the shell as status 1 (click returns,
    rather than raises, the code when standalone_mode is off)."""
    import sys

    import tilewright.app.flows.demo as demo_flow  # the demo command imports run_demo lazily
    from tilewright.app.cli.main import main
    monkeypatch.setattr(demo_flow, "run_demo", lambda **kw: False)
    monkeypatch.setattr(sys, "argv", ["tilewright", "demo"])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 1
