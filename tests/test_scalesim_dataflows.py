"""The ``scalesim`` cycle convention against SCALE-Sim 3.0.0 itself, for all three dataflows
(``is`` included) and arrays up to 512x512.

SCALE-Sim breaks on numpy 2, so it runs in its own venv through ``benchmarks/_scalesim_runner.py``
(CALC interface bandwidth: no memory stalls), exactly as ``benchmarks/vs_scalesim.py`` runs it;
the venv is ``$SCALESIM_PYTHON`` or ``/tmp/scalesim_venv/bin/python``. Set it up with::

    python3 -m venv /tmp/scalesim_venv
    /tmp/scalesim_venv/bin/pip install scalesim==3.0.0 numpy==1.26.4 pandas==2.2.3

Without it the tests skip (saying so). Small GEMMs keep each SCALE-Sim run about a second.
"""

from __future__ import annotations

import json
import os
import subprocess
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


def _scalesim_python() -> str | None:
    p = os.environ.get("SCALESIM_PYTHON", "/tmp/scalesim_venv/bin/python")
    if not Path(p).exists():
        return None
    ok = subprocess.run([p, "-c", "import scalesim"], capture_output=True).returncode == 0
    return p if ok else None


PY = _scalesim_python()


@pytest.mark.skipif(PY is None, reason="SCALE-Sim 3.0.0 venv not found ($SCALESIM_PYTHON or "
                    "/tmp/scalesim_venv; see this module's docstring)")
@pytest.mark.parametrize("rows,cols,dataflow,m,k,n", CASES)
def test_scalesim_convention_equals_scalesim(rows, cols, dataflow, m, k, n):
    out = subprocess.run([PY, str(RUNNER), str(rows), str(cols), dataflow, str(m), str(k),
                          str(n)], capture_output=True, text=True, timeout=300, check=True)
    ss = json.loads(out.stdout.strip().splitlines()[-1])
    assert ss["stall_cycles"] == 0
    ours = int(gemm_cycles_array(m, k, n, rows, cols, dataflow, "scalesim")[0])
    assert ours == ss["total_cycles"]
