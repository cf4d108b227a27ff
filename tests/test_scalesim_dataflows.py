"""The ``scalesim`` cycle convention against SCALE-Sim 3.0.0 itself, for all three dataflows
(``is`` included) and arrays up to 512x512.

SCALE-Sim breaks on numpy 2, so it runs in its own venv through ``benchmarks/_scalesim_runner.py``
(CALC interface bandwidth: no memory stalls), exactly as ``benchmarks/vs_scalesim.py`` runs it.
The venv is ``$SCALESIM_PYTHON``, else ``/tmp/scalesim_venv/bin/python`` (the benchmark's), else
one this module builds once with pip under ``$TILEWRIGHT_CACHE`` (default ``~/.cache/tilewright``)::

    python3 -m venv DIR && DIR/bin/pip install scalesim==3.0.0 numpy==1.26.4 pandas==2.2.3

If that fails the tests skip, saying why (a failure under TILEWRIGHT_REQUIRE_TOOLS, as in CI).
Small GEMMs keep each SCALE-Sim run about a second.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tilewright.compiler.core_timing import gemm_cycles_array

RUNNER = Path(__file__).resolve().parents[1] / "benchmarks" / "_scalesim_runner.py"
CASES = [  # (rows, cols, dataflow, M, K, N)
    (8, 8, "is", 30, 50, 20), (8, 4, "is", 30, 50, 20), (4, 16, "is", 17, 9, 33),
    (16, 8, "is", 33, 70, 41), (128, 128, "is", 200, 256, 64), (512, 512, "is", 64, 600, 40),
    (256, 64, "ws", 70, 300, 100), (64, 256, "os", 300, 50, 300), (512, 512, "ws", 40, 600, 64),
    (512, 512, "os", 600, 40, 64),
]
PINS = ("scalesim==3.0.0", "numpy==1.26.4", "pandas==2.2.3")


def _works(python: Path) -> bool:
    return python.exists() and subprocess.run([str(python), "-c", "import scalesim"],
                                              capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def scalesim_python() -> str:
    """A python that imports SCALE-Sim 3.0.0 (module docstring), built once if none is found."""
    for p in (os.environ.get("SCALESIM_PYTHON"), "/tmp/scalesim_venv/bin/python"):
        if p and _works(Path(p)):
            return p
    cache = Path(os.environ.get("TILEWRIGHT_CACHE", Path.home() / ".cache" / "tilewright"))
    venv = cache / "scalesim_venv"
    py = venv / "bin" / "python"
    cache.mkdir(parents=True, exist_ok=True)
    # one builder at a time: parallel workers (pytest -n) each run this fixture, and a second
    # `venv --clear` would delete the venv the first is installing into
    with open(cache / "scalesim_venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _works(py):
            steps = ([sys.executable, "-m", "venv", "--clear", str(venv)],
                     [str(py), "-m", "pip", "install", "-q", *PINS])
            for cmd in steps:
                run = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
                if run.returncode != 0:
                    pytest.skip(f"SCALE-Sim venv: `{' '.join(cmd)}` failed: "
                                f"{(run.stderr or run.stdout).strip().splitlines()[-1:]}")
    return str(py)


@pytest.mark.parametrize("rows,cols,dataflow,m,k,n", CASES)
def test_scalesim_convention_equals_scalesim(scalesim_python, rows, cols, dataflow, m, k, n):
    argv = [str(x) for x in (rows, cols, dataflow, m, k, n)]
    out = subprocess.run([scalesim_python, str(RUNNER), *argv], capture_output=True, text=True,
                         timeout=300, check=True)
    ss = json.loads(out.stdout.strip().splitlines()[-1])
    assert ss["stall_cycles"] == 0
    ours = int(gemm_cycles_array(m, k, n, rows, cols, dataflow, "scalesim")[0])
    assert ours == ss["total_cycles"]
