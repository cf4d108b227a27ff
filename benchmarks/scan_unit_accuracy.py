"""Accuracy of the scan unit's fixed-point recurrence vs torch float64, and its cycles per step.

Usage:  python benchmarks/scan_unit_accuracy.py [--lengths 64,256,1024] [--rtl-lengths 1,16,256]
        [--no-rtl]

Accuracy: Mamba-shaped inputs (d_inner=16, N=16 so 256 lanes; delta = softplus(N(-2, 0.5^2)),
A = -[1..N], a = exp(delta A), b = delta x B, h0 ~ N(0, 1)) in the default formats (a: Q0.16,
b/h: Q16.16 in 32 bits, :mod:`tilewright.dataflow_sim.scan_numerics`). The anchor is torch's
float64 recurrence on the unquantised inputs; the fp32 recurrence (what the functional model's
``scan_fp32`` does) is shown against the same anchor. Columns: max |h - h_ref| over all steps and
lanes (d_inner x N), that error relative to max |h_ref|, the a-priori closed-form bound
u_h/2 + (u_a H + u_h)/(1 - a_max), the measured/bound ratio, and the largest ratio of the
error to the per-lane, per-step bound E[t] (``error_bound``); both ratios must stay <= 1; and the
max error of the C-projection y[t, d] = sum_n C[t, n] h[t, d, n] (scan unit: ``project_codes``).

Cycles: the Verilated scan unit (4 lanes; cocotb, full-rate streams) for each RTL length L, with
the documented closed form L + 1 and cycles per step. Printed, never asserted.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from tilewright.dataflow_sim.scan_numerics import (error_bound, from_a_code, from_h_code,
                                                   project_codes, scan_codes, to_a_code,
                                                   to_h_code)


def mamba_inputs(length: int, di: int = 16, n: int = 16, seed: int = 0):
    """float64 a, b [L, Di, N], C [L, N] and h0 [Di, N] shaped like a Mamba block's scan."""
    g = torch.Generator().manual_seed(seed)
    delta = torch.nn.functional.softplus(
        torch.randn(length, di, generator=g, dtype=torch.float64) * 0.5 - 2.0)
    A = -torch.arange(1, n + 1, dtype=torch.float64).expand(di, n)
    x = torch.randn(length, di, generator=g, dtype=torch.float64)
    B = torch.randn(length, n, generator=g, dtype=torch.float64)
    C = torch.randn(length, n, generator=g, dtype=torch.float64)
    a = torch.exp(delta[..., None] * A)
    b = (delta * x)[..., None] * B[:, None, :]
    return a, b, C, torch.randn(di, n, generator=g, dtype=torch.float64)


def recurrence(a: torch.Tensor, b: torch.Tensor, h0: torch.Tensor) -> torch.Tensor:
    """h[t] = a[t] h[t-1] + b[t] in a's dtype; returns [L, ...]."""
    h, out = h0, []
    for t in range(a.shape[0]):
        h = a[t] * h + b[t]
        out.append(h)
    return torch.stack(out)


def accuracy_table(lengths: list[int]) -> Table:
    tab = Table(title="scan recurrence error vs torch float64 (Mamba-shaped, 256 lanes)")
    for col in ("L", "arithmetic", "max |err|", "err / max|h|", "closed-form bound",
                "err / bound", "max err / E[t]", "max |y err|"):
        tab.add_column(col, justify="right")
    ua = uh = 2.0 ** -16
    for length in lengths:
        a, b, C, h0 = mamba_inputs(length)
        ref = recurrence(a, b, h0).numpy()
        y_ref = (ref * C.numpy()[:, None, :]).sum(-1)
        hmax = np.abs(ref).max()
        ac = to_a_code(a.numpy())
        hc = scan_codes(ac, to_h_code(b.numpy()), to_h_code(h0.numpy()))
        fixed = from_h_code(hc)
        cc = np.broadcast_to(to_h_code(C.numpy())[:, None, :], hc.shape)
        ys = {"Q16.16": from_h_code(project_codes(cc, hc))}
        fp32 = recurrence(a.float(), b.float(), h0.float())
        ys["fp32"] = (fp32 * C.float()[:, None, :]).sum(-1).double().numpy()
        fp32 = fp32.double().numpy()
        bound = uh / 2 + (ua * hmax + uh) / (1 - from_a_code(ac).max())
        e_t = error_bound(a.numpy(), np.concatenate([h0.numpy()[None], ref[:-1]]))
        for name, h in (("Q16.16", fixed), ("fp32", fp32)):
            err = np.abs(h - ref)
            fx = name == "Q16.16"
            tab.add_row(str(length), name, f"{err.max():.3e}", f"{err.max() / hmax:.3e}",
                        f"{bound:.3e}" if fx else "-", f"{err.max() / bound:.3f}" if fx else "-",
                        f"{(err / e_t).max():.3f}" if fx else "-",
                        f"{np.abs(ys[name] - y_ref).max():.3e}")
    return tab


def cycles_table(lengths: list[int]) -> Table:
    from tilewright.cosim import sim as cosim  # noqa: PLC0415
    from tilewright.cosim.scan_jobs import ScanJob, ScanParams  # noqa: PLC0415
    from tilewright.rtl.scan_unit import scan_cycles  # noqa: PLC0415

    p = ScanParams(lanes=4)
    rng = np.random.default_rng(0)
    jobs = [ScanJob([(rng.integers(0, 1 << 16, (n, 4)), rng.integers(-2**20, 2**20, (n, 4)),
                      rng.integers(-2**18, 2**18, (n, 4)), rng.integers(-2**20, 2**20, 4))])
            for n in lengths]
    runs = cosim.run("scan", jobs, p, log=print).records
    tab = Table(title="scan unit RTL cycles (Verilator, 4 lanes, full-rate stream)")
    for col in ("L", "RTL cycles", "closed form L+1", "cycles / step", "h and y bit-exact"):
        tab.add_column(col, justify="right")
    for n, job, run in zip(lengths, jobs, runs):
        a, b, c, h0 = job.sequences[0]
        h = scan_codes(a, b, h0)
        exact = np.array_equal(run.h, h) and np.array_equal(run.y, project_codes(c, h))
        tab.add_row(str(n), str(run.cycles), str(scan_cycles(n)), f"{run.cycles / n:.3f}",
                    "yes" if exact else "NO")
    return tab


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="64,256,1024", help="accuracy sequence lengths")
    ap.add_argument("--rtl-lengths", default="1,16,256", help="RTL sequence lengths")
    ap.add_argument("--no-rtl", action="store_true", help="skip the Verilator run")
    args = ap.parse_args()
    con = Console(width=120)
    con.print(accuracy_table([int(x) for x in args.lengths.split(",")]))
    if not args.no_rtl:
        con.print(cycles_table([int(x) for x in args.rtl_lengths.split(",")]))


if __name__ == "__main__":
    main()
