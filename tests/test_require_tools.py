"""TILEWRIGHT_REQUIRE_TOOLS=1 (CI) turns a skip into a failure; without it a skip stays a skip."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SKIPPING = "import pytest\n\ndef test_needs_tool():\n    pytest.skip('verilator not found')\n"


def test_skip_becomes_failure_when_tools_required(pytester, monkeypatch):
    pytester.makeconftest((REPO / "conftest.py").read_text())
    pytester.makepyfile(SKIPPING)
    monkeypatch.setenv("TILEWRIGHT_REQUIRE_TOOLS", "1")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*TILEWRIGHT_REQUIRE_TOOLS*verilator not found*"])


def test_skip_stays_skip_otherwise(pytester, monkeypatch):
    pytester.makeconftest((REPO / "conftest.py").read_text())
    pytester.makepyfile(SKIPPING)
    monkeypatch.delenv("TILEWRIGHT_REQUIRE_TOOLS", raising=False)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)


def test_skip_in_a_session_fixture_becomes_failure(pytester, monkeypatch):
    """The RTL benches skip from an autouse session fixture (tests/rtl_suite.py) when
    Verilator/cocotb are missing; under CI that skip must fail every test it covers."""
    pytester.makeconftest((REPO / "conftest.py").read_text() + '''

@pytest.fixture(scope="session", autouse=True)
def _tools():
    pytest.skip("RTL simulation tools missing: verilator")
''')
    pytester.makepyfile("def test_a():\n    assert True\n\ndef test_b():\n    assert True\n")
    monkeypatch.setenv("TILEWRIGHT_REQUIRE_TOOLS", "1")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=2)              # a failed setup is an error: the run fails
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*TILEWRIGHT_REQUIRE_TOOLS*verilator*"])


COLLECT_SKIP = ("import pytest\n\npytest.importorskip('tilewright_no_such_tool')\n\n"
                "def test_needs_tool():\n    assert True\n")


def test_a_module_skipped_at_collection_fails_when_tools_required(pytester, monkeypatch):
    """A module-level importorskip used to stay 'skipped' in CI (the hook saw only test runs)."""
    pytester.makeconftest((REPO / "conftest.py").read_text())
    pytester.makepyfile(COLLECT_SKIP)
    monkeypatch.setenv("TILEWRIGHT_REQUIRE_TOOLS", "1")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*TILEWRIGHT_REQUIRE_TOOLS*tilewright_no_such_tool*"])


def test_a_module_skipped_at_collection_stays_skipped_otherwise(pytester, monkeypatch):
    pytester.makeconftest((REPO / "conftest.py").read_text())
    pytester.makepyfile(COLLECT_SKIP)
    monkeypatch.delenv("TILEWRIGHT_REQUIRE_TOOLS", raising=False)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
