"""The error contract of the command line (docs/design.md, "The error path") and outputs that
appear whole or not at all.

Before: ``rtl -o`` onto an existing file or an unwritable folder was a traceback, and a
``manifest.json`` that could not be written left the Verilog and a ``manifest.json.tmp`` behind;
any error that was not on a hand-kept list was a traceback.
"""

from __future__ import annotations

import sys

import pytest

from tests.test_cli import tw
from tilewright.app.output_folder import OutputError, output_folder


def test_output_folder_replaces_whole_on_success(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "old.txt").write_text("old")
    with output_folder(out) as work:
        (work / "new.txt").write_text("new")
        assert not (out / "new.txt").exists()         # nothing visible until the end
    assert sorted(p.name for p in out.iterdir()) == ["new.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["o"]  # no temporary left beside it


def test_output_folder_leaves_the_previous_output_on_failure(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "old.txt").write_text("old")
    with pytest.raises(RuntimeError, match="tool failed"):
        with output_folder(out) as work:
            (work / "half.v").write_text("module")
            raise RuntimeError("tool failed")
    assert sorted(p.name for p in out.iterdir()) == ["old.txt"]
    assert (out / "old.txt").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["o"]


def test_output_folder_refuses_a_file(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(OutputError, match="is a file; -o takes a folder"):
        with output_folder(f):
            pass
    assert f.read_text() == "x"


def test_cli_rtl_onto_a_file_exit_2_one_line(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    res = tw("rtl", "--arch", "ws8x8", "-o", str(f))
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "is a file" in res.stderr and f.read_text() == "x"


def _main_with(monkeypatch, argv, exc):
    """Run the CLI's main() on ``argv`` with the ``arch`` command raising ``exc``."""
    import tilewright.app.cli.main as cli_main

    def boom(*args, **kwargs):
        raise exc
    monkeypatch.setattr(cli_main, "load_arch", boom)
    monkeypatch.setattr(sys, "argv", ["tilewright", *argv])
    return cli_main.main


@pytest.mark.parametrize("exc,code,line", [
    (RuntimeError("Verilator build of x failed (exit 2)"), 1,
     "error: RuntimeError: Verilator build of x failed (exit 2)"),
    (PermissionError(13, "Permission denied", "/x/y"), 2, "error: /x/y: Permission denied"),
])
def test_cli_error_exit_codes_and_lines(monkeypatch, capsys, exc, code, line):
    main = _main_with(monkeypatch, ["arch", "ws8x8"], exc)
    with pytest.raises(SystemExit) as ex:
        main()
    assert ex.value.code == code
    err = capsys.readouterr().err
    assert err.startswith(line) and "Traceback" not in err


def test_cli_debug_shows_the_traceback(monkeypatch):
    main = _main_with(monkeypatch, ["--debug", "arch", "ws8x8"], RuntimeError("a bug"))
    with pytest.raises(RuntimeError, match="a bug"):
        main()


def test_cli_report_appears_whole_or_not_at_all(tmp_path, monkeypatch):
    """`sweep report -o DIR`: a report that fails half-way leaves the previous DIR as it was; one
    that succeeds replaces it whole (before, the plots were written straight into DIR)."""
    import typer
    from typer.testing import CliRunner

    import tilewright.app.sweep.report as report_mod
    from tilewright.app.cli.sweep import report
    app = typer.Typer()
    app.command("report")(report)
    app.command("noop")(lambda: None)
    out = tmp_path / "rep"
    out.mkdir()
    (out / "index.html").write_text("previous report")

    def half_then_fail(db, where, sweep=None):
        (where / "a_pareto.png").write_bytes(b"png")
        raise RuntimeError("matplotlib failed")
    monkeypatch.setattr(report_mod, "write_report", half_then_fail)
    res = CliRunner().invoke(app, ["report", str(tmp_path / "r.db"), "-o", str(out)])
    assert isinstance(res.exception, RuntimeError)
    assert sorted(p.name for p in out.iterdir()) == ["index.html"]
    assert (out / "index.html").read_text() == "previous report"
    assert [p.name for p in tmp_path.iterdir()] == ["rep"]     # no temporary left beside it

    def whole(db, where, sweep=None):
        (where / "index.html").write_text("new report")
        return where / "index.html"
    monkeypatch.setattr(report_mod, "write_report", whole)
    res = CliRunner().invoke(app, ["report", str(tmp_path / "r.db"), "-o", str(out)])
    assert res.exit_code == 0, res.output
    # rich wraps a long path over lines: compare with the line breaks taken out
    assert (out / "index.html").read_text() == "new report"
    assert str(out / "index.html") in res.output.replace("\n", "")
