"""Light commands do not import heavy packages (issue 21, "Fast start-up").

``tilewright --help``, ``arch``, ``cycles`` and ``models`` need none of torch, pandas, ml_dtypes,
Ray, Dask, Amaranth, matplotlib, SciPy, scikit-learn or pyarrow; importing one of them costs
0.3-3 s of CPU (``benchmarks/startup.py`` measures the commands). Each check runs in a fresh
interpreter and reads ``sys.modules`` after the command: no timing is asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.test_cli import REPO

#: packages a light command must not import (top-level module names)
HEAVY = ("torch", "pandas", "ml_dtypes", "ray", "dask", "distributed", "amaranth", "matplotlib",
         "scipy", "sklearn", "pyarrow", "cocotb", "simpy", "optuna", "hls4ml")

_RUN = """
import atexit, json, sys
heavy = {heavy!r}
atexit.register(lambda: sys.stderr.write(
    "\\nIMPORTED " + json.dumps(sorted(m for m in heavy if m in sys.modules)) + "\\n"))
sys.argv = ["tilewright", *{argv!r}]
from tilewright.app.cli.main import main
main()
"""


def _imported_by(argv: list[str]) -> tuple[int, list[str], str]:
    """(exit status, heavy modules imported, stdout) of ``tilewright *argv`` in a fresh python."""
    p = subprocess.run([sys.executable, "-c", _RUN.format(heavy=HEAVY, argv=argv)],
                       capture_output=True, text=True, cwd=REPO, timeout=300)
    line = [x for x in p.stderr.splitlines() if x.startswith("IMPORTED ")]
    assert line, p.stderr
    return p.returncode, json.loads(line[-1].removeprefix("IMPORTED ")), p.stdout


@pytest.mark.parametrize("argv", [
    ["--help"],
    ["arch", "ws8x8"],
    ["arch"],
    ["cycles", "--arch", "ws8x8", "-m", "64", "-k", "64", "-n", "64"],
    ["models"],
])
def test_light_commands_import_no_heavy_package(argv):
    code, heavy, out = _imported_by(argv)
    assert code == 0, out
    assert heavy == [], f"tilewright {' '.join(argv)} imported {heavy}"


def test_the_light_commands_still_answer():
    """``cycles`` on the lazy path gives the WS closed form of docs/design.md ("Timing
    conventions"): R + (F - 1) * max(M, 2R + C - 2) + M + R + C + 1 with F = ceil(K/R) ceil(N/C)."""
    m, k, n, r, c = 64, 96, 40, 8, 8                                  # ws8x8: 8 x 8 array
    code, heavy, out = _imported_by(["cycles", "--arch", "ws8x8", "-m", str(m), "-k", str(k),
                                     "-n", str(n), "--json"])
    assert code == 0 and heavy == []
    d = json.loads(out)
    f = -(-k // r) * -(-n // c)
    assert d["folds"] == f == 12 * 5
    assert d["cycles"] == r + (f - 1) * max(m, 2 * r + c - 2) + m + r + c + 1


def test_models_lists_every_config_without_torch():
    from tilewright.models.llm_shapes import LLM_CONFIGS
    code, heavy, out = _imported_by(["models"])
    assert code == 0 and heavy == []
    for name in LLM_CONFIGS:
        assert name in out


_FORMATS = """
import json, sys
from tilewright.formats import FORMATS
from tilewright.compiler.program import FORMAT_DTYPES
checks = {"names": sorted(FORMATS), "int8_bits": FORMATS["int8"].bits,
          "mx_block": FORMATS["mxfp8"].block_size, "bf16_known": "bf16" in FORMAT_DTYPES}
before = "ml_dtypes" in sys.modules
bf16 = FORMATS["bf16"]
print(json.dumps({**checks, "before": before, "bf16_max": bf16.max_finite,
                  "bf16_bits": bf16.bits, "e4m3": [FORMATS["fp8-e4m3"].max_finite,
                  FORMATS["fp8-e4m3"].mantissa_bits, FORMATS["fp8-e4m3"].emin],
                  "after": "ml_dtypes" in sys.modules}))
"""


def test_formats_import_ml_dtypes_only_for_float_limits():
    p = subprocess.run([sys.executable, "-c", _FORMATS], capture_output=True, text=True,
                       cwd=REPO, timeout=300)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["before"] is False and d["after"] is True
    assert d["int8_bits"] == 8 and d["mx_block"] == 32 and d["bf16_known"]
    # bf16: 8 exponent bits, 7 fraction bits -> max (2 - 2**-7) * 2**127 (IEEE-style, bias 127)
    assert d["bf16_max"] == (2 - 2 ** -7) * 2.0 ** 127 and d["bf16_bits"] == 16
    # OCP 8-bit FP spec v1.0, table 1: E4M3 max normal 448, 3 mantissa bits, emin -6
    assert d["e4m3"] == [448.0, 3, -6]
