"""Repository-wide pytest setup.

``TILEWRIGHT_REQUIRE_TOOLS=1`` (set by ``.ci/run``) turns every skipped test into a failure: in CI
a missing Verilator, cocotb, Yosys or compiler is an error, never a silent skip.
"""

from __future__ import annotations

import os

import pytest


def _require_tools() -> bool:
    return os.environ.get("TILEWRIGHT_REQUIRE_TOOLS", "") not in ("", "0", "false", "no")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if _require_tools() and report.skipped:
        reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = (f"skipped test turned into a failure because TILEWRIGHT_REQUIRE_TOOLS "
                           f"is set: {reason}")


pytest_plugins = ["pytester"]
