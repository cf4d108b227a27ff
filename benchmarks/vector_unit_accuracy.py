"""Accuracy of the vector unit's Q8.8 non-linear functions against torch, and RTL throughput.

Usage:  python benchmarks/vector_unit_accuracy.py [--lanes 4] [--beats 2048] [--no-rtl]

Accuracy: every Q8.8 input x (65536 values; rsqrt: x > 0) through the bit-exact reference
:mod:`tilewright.dataflow_sim.vector_numerics` (which the RTL matches bit for bit, see
tests/test_vector_unit_rtl.py), against torch float64 clipped to the Q8.8 range (saturation is
part of the spec). Columns: max |err|, max |err| in Q8.8 LSBs (2**-8; the "ULP" of a fixed-point
format), max relative error where |exact| >= 1/16, and the largest err / documented bound ratio
(<= 1 means the documented bound holds; the closer to 1 the tighter it is).

Throughput: ``--beats`` beats of each op class streamed through the Verilated RTL unit with
``results.ready`` held high; cycles per element = (cycle of last result - cycle of first operand
+ 1) / elements, next to the ideal 1 / lanes. Printed, never asserted.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from tilewright.arch import ArchSpec, load_arch
from tilewright.dataflow_sim import vector_numerics as vn

TORCH = {"exp": torch.exp, "recip": torch.reciprocal, "rsqrt": torch.rsqrt,
         "silu": torch.nn.functional.silu, "softplus": torch.nn.functional.softplus}


def accuracy_table() -> Table:
    raw = np.arange(-32768, 32768, dtype=np.int64)
    tab = Table(title="vector unit (Q8.8) vs torch float64, every representable input")
    for col in ("function", "inputs", "max |err|", "max err [LSB]", "max rel (|y|>=1/16)",
                "err / bound (max)"):
        tab.add_column(col, justify="right")
    for op, fn in TORCH.items():
        a = raw[raw > 0] if op == "rsqrt" else raw
        x = a / 256.0
        exact = np.clip(fn(torch.tensor(x, dtype=torch.float64)).numpy(), vn.Q_MIN / 256,
                        vn.Q_MAX / 256)
        got = vn.from_fixed(vn.elementwise(op, a))
        err = np.abs(got - exact)
        big = np.abs(exact) >= 1 / 16
        rel = np.max(err[big] / np.abs(exact[big]))
        ratio = np.max(err / vn.error_bound(op, x))
        tab.add_row(op, f"{len(a)}", f"{err.max():.3e}", f"{err.max() * 256:.2f}", f"{rel:.2e}",
                    f"{ratio:.3f}")
    return tab


def throughput_table(lanes: int, beats: int) -> Table:
    from tilewright.cosim import sim as cosim  # noqa: PLC0415
    from tilewright.cosim.vector_jobs import VectorBeats  # noqa: PLC0415
    arch = load_arch("configs/ws8x8.yaml")
    arch = ArchSpec.model_validate({**arch.model_dump(), "vector_unit": {"lanes": lanes}})
    rng = np.random.default_rng(0)
    groups = {"add": ["add"], "exp": ["exp"], "rsqrt": ["rsqrt"], "silu": ["silu"],
              "sum (one run)": ["sum"]}
    ops, last, spans = [], [], []
    for name, (op,) in groups.items():
        spans.append((name, len(ops), beats))
        ops += [op] * beats
        last += [False] * (beats - 1) + [op in vn.REDUCTION_OPS]
    a = rng.integers(-32768, 32768, (len(ops), lanes))
    run = cosim.run("vector", VectorBeats(ops, a, np.zeros_like(a), last), arch).records[0]
    tab = Table(title=f"RTL vector unit, {lanes} lanes, results.ready held high (Verilator)")
    for col in ("ops", "elements", "cycles", "cycles / element", "ideal 1/lanes"):
        tab.add_column(col, justify="right")
    out_idx = 0
    for name, start, n in spans:
        n_out = 1 if "sum" in name else n
        first_in = run.in_cycles[start]
        last_out = run.out_cycles[out_idx + n_out - 1]
        out_idx += n_out
        cycles = int(last_out - first_in + 1)
        tab.add_row(name, f"{n * lanes}", f"{cycles}", f"{cycles / (n * lanes):.4f}",
                    f"{1 / lanes:.4f}")
    return tab


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lanes", type=int, default=4)
    ap.add_argument("--beats", type=int, default=2048)
    ap.add_argument("--no-rtl", action="store_true", help="skip the Verilator throughput run")
    args = ap.parse_args()
    con = Console()
    con.print(accuracy_table())
    if not args.no_rtl:
        con.print(throughput_table(args.lanes, args.beats))


if __name__ == "__main__":
    main()
