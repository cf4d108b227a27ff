"""hls4ml and tilewright side by side on the same torch modules: numerics vs torch, latency,
resources and wall time of each route.

Usage:  python benchmarks/hls4ml_side_by_side.py [--models mlp-tiny,cnn-small,tiny-llama]
        [--precisions "ap_fixed<16,6>;ap_fixed<16,6,AP_RND_CONV,AP_SAT>"] [--reuse-factor 1]
        [--backend Vitis] [--arch ws8x8] [--out-dir DIR] [--markdown]

Models (:data:`tilewright.app.flows.hls4ml_compare.SIDE_BY_SIDE_MODELS`): the demo's int8 MLP
``mlp-tiny`` (32->64->64->16, batch 4), ``cnn-small`` (Conv2d 1->4 3x3, ReLU, MaxPool 2,
Flatten, Linear 36->10; batch 4 of 1x8x8) and one ``tiny-llama`` decoder layer (seq 8, D 64).

Routes: ``torch`` (the float32 anchor: its forward time, best of 5 after a warm-up, is the wall-time
unit), ``hls4ml`` for
each precision (convert -> HLS C++ project -> g++ C simulation -> predict, one sample at a time)
and ``tilewright`` (compile -> Program -> functional model; int8 flow for the MLP, the arch's
input format otherwise). Errors are vs the torch float32 output (first output of the layer for
tiny-llama: the hidden state), ``LSB`` = the route's output quantization step. hls4ml's latency
and resources need the vendor's HLS synthesis (not run): those cells say so. tilewright's
latency is the Report's total cycles for the whole batch (tasks serialized). Wall times include
hls4ml's g++ build and tilewright's torch.export, split into stages; ``run / torch`` is the
run stage alone (hls4ml's C simulation ``predict``, tilewright's functional model) as a ratio to
the torch forward of the same run, on one thread. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from tilewright.arch import default_arch, load_arch
from tilewright.app.flows.hls4ml_compare import (SIDE_BY_SIDE_MODELS, RouteResult, build_side_by_side,
                                       run_hls4ml, run_tilewright, score_route, torch_reference)

COLUMNS = ("model", "route", "config", "max |err|", "err (LSB)", "rel L2", "argmax agree",
           "latency (cycles)", "resources", "wall s (stages)", "run / torch")


def _fmt(v, spec: str) -> str:
    return "—" if v is None else format(v, spec)


def _row(r: RouteResult, torch_s: float) -> list[str]:
    if r.status != "ok":
        why = f"unsupported by {r.route}" if r.status == "unsupported" else f"{r.route} error"
        return [r.model, r.route, r.config, f"{why}: {r.message}", "", "", "", "", "",
                _stages(r), ""]
    lsb = None if r.output_lsb is None else r.max_abs_err / r.output_lsb
    lat = (f"{r.latency_cycles} ({r.latency_source})" if r.latency_cycles is not None
           else r.latency_source)
    return [r.model, r.route, r.config, f"{r.max_abs_err:.3g}", _fmt(lsb, ".1f"),
            f"{r.rel_l2:.3g}", _fmt(r.argmax_agree, ".0%"), lat, r.resources,
            _stages(r), _fmt(r.stage_s.get("run", None) and r.stage_s["run"] / torch_s, ",.0f")]


def _stages(r: RouteResult) -> str:
    parts = ", ".join(f"{k} {v:.2f}" for k, v in r.stage_s.items())
    return f"{r.wall_s:.2f}" + (f" ({parts})" if parts else "")


def _timed(fn, *args) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def run(models: list[str], precisions: list[str], reuse_factor: int, backend: str, arch,
        out_dir: Path) -> list[list[str]]:
    """Every route of every model; the table rows."""
    rows = []
    for name in models:
        module, x = build_side_by_side(name)
        torch.set_num_threads(1)  # 2 threads on a shared 2-core machine spin: 1000x slower
        ref = torch_reference(module, x)  # warm-up, then the best of 5 timed forwards
        torch_s = min(_timed(torch_reference, module, x) for _ in range(5))
        rows.append([name, "torch", "float32, 1 thread (anchor)", "0", "", "0", "", "", "",
                     f"{torch_s:.6f}", "1"])
        for i, prec in enumerate(precisions):
            r = run_hls4ml(module, x, out_dir=out_dir / f"{name}-{i}", precision=prec,
                           reuse_factor=reuse_factor, backend=backend, name=name)
            rows.append(_row(score_route(r, ref), torch_s))
        r = run_tilewright(module, x, arch, name=name)
        rows.append(_row(score_route(r, ref), torch_s))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(SIDE_BY_SIDE_MODELS))
    ap.add_argument("--precisions", default="ap_fixed<16,6>;ap_fixed<16,6,AP_RND_CONV,AP_SAT>",
                    help="hls4ml precisions, separated by ';'")
    ap.add_argument("--reuse-factor", type=int, default=1)
    ap.add_argument("--backend", default="Vitis")
    ap.add_argument("--arch", default=None, help="ArchSpec YAML or preset (default: the demo's)")
    ap.add_argument("--out-dir", type=Path, default=None,
                    help="where the hls4ml projects go (default: a temporary folder)")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table instead")
    args = ap.parse_args()
    arch = load_arch(args.arch) if args.arch else default_arch()
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    precisions = [p.strip() for p in args.precisions.split(";") if p.strip()]
    with tempfile.TemporaryDirectory(prefix="hls4ml-") as tmp:
        rows = run(models, precisions, args.reuse_factor, args.backend, arch,
                   args.out_dir or Path(tmp))
    if args.markdown:
        print("| " + " | ".join(COLUMNS) + " |")
        print("|" + "---|" * len(COLUMNS))
        for r in rows:
            print("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |")
        return
    table = Table(title=f"hls4ml vs tilewright on {arch.name} (errors vs torch float32)")
    for c in COLUMNS:
        table.add_column(c, overflow="fold")
    for r in rows:
        table.add_row(*r)
    Console(width=240).print(table)


if __name__ == "__main__":
    main()
