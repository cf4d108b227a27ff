"""Read a Verilator VCD waveform (``dump.vcd`` of a traced cocotb run) into a per-cycle table.

:func:`sample_vcd` samples chosen signals at every rising edge of the clock (the value each
register input holds when the edge samples it — i.e. the value *before* the edge), parsed with
``vcdvcd``. Signal names are Verilog names relative to the top module (``busy``,
``array.pe_0_0.acc``); the top's ports and its internal nets are both found.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from tilewright.extras import require

__all__ = ["sample_vcd", "vcd_signals"]


def vcd_signals(path: str | Path) -> list[str]:
    """Every signal name in the VCD (scope-qualified, e.g. ``tw_gemm_core.busy``)."""
    VCDVCD = require("vcdvcd").VCDVCD

    return list(VCDVCD(str(path), only_sigs=True).signals)


def _resolve(names: list[str], wanted: str) -> str:
    """The VCD name of ``wanted``: exact, or the shortest-scoped name ending in ``.wanted``
    (vector names carry their range, ``cycles[31:0]``)."""
    def base(n: str) -> str:
        return n.split("[", 1)[0] if n.endswith("]") else n
    hits = [n for n in names if base(n) == wanted or base(n).endswith("." + wanted)]
    if hits:
        return min(hits, key=lambda n: (n.count("."), n.startswith("$"), n))
    raise KeyError(f"signal {wanted!r} is not in the waveform; e.g. "
                   f"{', '.join(sorted(names)[:8])} ...")


def _value(v: str) -> int:
    """A VCD value string (binary, maybe with x/z) as an int; x/z read as 0."""
    return int(v.replace("x", "0").replace("z", "0"), 2) if v else 0


def sample_vcd(path: str | Path, signals: list[str], *, clock: str = "clk") -> pd.DataFrame:
    """One row per rising clock edge (``cycle`` 0, 1, ...; ``time`` in the VCD's units), one column
    per signal (unsigned ints) holding its value just before that edge."""
    VCDVCD = require("vcdvcd").VCDVCD

    names = vcd_signals(path)
    full = {s: _resolve(names, s) for s in [clock, *signals]}
    vcd = VCDVCD(str(path), signals=sorted(set(full.values())), store_tvs=True)
    clk = vcd[full[clock]].tv
    edges = [t for (t, v), (_, prev) in zip(clk[1:], clk[:-1]) if v == "1" and prev == "0"]
    out = {"cycle": np.arange(len(edges)), "time": np.array(edges, np.int64)}
    for s in signals:
        tv = vcd[full[s]].tv
        times = np.array([t for t, _ in tv], np.int64)
        vals = [_value(v) for _, v in tv]
        # value just before each edge: the last change strictly earlier than the edge
        idx = np.searchsorted(times, out["time"], side="left") - 1
        out[s] = [vals[i] if i >= 0 else 0 for i in idx]
    return pd.DataFrame(out)
