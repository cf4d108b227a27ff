"""The RTL suite's ArchSpecs (array sizes x dataflows) and its session fixtures (tool check, build
cache). A test module that runs the suite imports the fixtures by name to make them active."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tilewright.arch import ArchSpec, default_arch

#: (rows, cols) of the array sizes every RTL test runs: non-square, small square, the demo's 8x8
RTL_SIZES = [(3, 5), (4, 4), (8, 8)]
DATAFLOWS = ["ws", "os"]


def suite_arch(rows: int, cols: int, dataflow: str) -> ArchSpec:
    """The ArchSpec of one RTL-suite point. 8x8 WS is exactly the demo's design (shared build)."""
    base = default_arch()
    if (rows, cols, dataflow) == (8, 8, "ws"):
        return base
    return ArchSpec.from_dict({
        **base.model_dump(mode="json"), "name": f"{dataflow}{rows}x{cols}",
        "tensor_engine": {**base.tensor_engine.model_dump(mode="json"),
                          "rows": rows, "cols": cols, "dataflow": dataflow},
        "memory": {"scratchpad_kib": 32, "accumulator_kib": 16},
    })


@pytest.fixture(scope="session", autouse=True)
def _tool_check():
    """Skip (a failure under TILEWRIGHT_REQUIRE_TOOLS) when the simulation tools are missing."""
    missing = [t for t in ("g++", "make") if shutil.which(t) is None]
    try:
        import cocotb_tools.runner  # noqa: F401
        from tilewright.cosim.verilator import verilator_bin_dir
        verilator_bin_dir()
    except Exception as exc:  # noqa: BLE001
        missing.append(f"verilator/cocotb ({exc})")
    if missing:
        pytest.skip(f"RTL simulation tools missing: {', '.join(missing)}")


@pytest.fixture(scope="session", autouse=True)
def _cache_dir(tmp_path_factory):
    """Keep Verilator builds for the whole run (TILEWRIGHT_CACHE if set, else a run-local dir,
    one for all pytest-xdist workers of the run: builds are made under a file lock, so workers
    share them instead of each building its own)."""
    if "TILEWRIGHT_CACHE" not in os.environ:
        base = tmp_path_factory.getbasetemp()
        if os.environ.get("PYTEST_XDIST_WORKER"):     # basetemp is <run root>/<worker id>
            base = base.parent
        cache = base / "tw_cache"
        cache.mkdir(exist_ok=True)
        os.environ["TILEWRIGHT_CACHE"] = str(cache)
    yield Path(os.environ["TILEWRIGHT_CACHE"])
