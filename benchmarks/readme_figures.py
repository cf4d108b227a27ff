"""Render the README's figures from the project's own runs into ``docs/figures/`` (PNG).

    python benchmarks/readme_figures.py [--out docs/figures] [--only NAME ...] [--no-rtl]

Each figure is drawn from a run of this checkout, never from stored numbers:

- ``roofline.png``: the per-op roofline (:func:`tilewright.app.sweep.report.op_roofline`) of
  one llama3-8b layer (prefill of 512 tokens and decode at 512, int8) compiled for the
  ``ws16x16`` preset, under the
  preset's compute roof (2 x MACs/cycle x clock) and bandwidth roof (``offchip.bandwidth_gbps``);
- ``pareto.png``: latency vs area of a small GEMM sweep (array size x off-chip bandwidth) on the
  45 nm table, with its Pareto front (:func:`tilewright.app.sweep.pareto.pareto_mask`);
- ``mesh_heatmap.png``: ``tilewright mesh-layer llama3-8b --arch wse2 --phase decode --heatmap``;
- ``waveform.png``: an 8x16x8 GEMM on the 8x8 WS core traced by Verilator (VCD, sampled per
  clock edge; ``busy`` must last exactly the cycle model's count) — needs Verilator (``--no-rtl``
  skips it);
- ``cluster_timeline.png``: the Perfetto trace of ``tilewright cluster --mode train`` (llama3-8b on
  8 H100s, dp 2 x tp 2 x pp 2, 4 micro-batches) drawn as a Gantt chart.

Prints each file written and the figure's headline numbers; nothing is asserted here (the suite
checks the models; ``tests/test_readme_figures.py`` checks the README's image links).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "tilewright.app.cli.main"]
DPI = 110


def _cli(*args: str) -> None:
    """Run one ``tilewright`` command of this checkout; stop on failure with its message."""
    out = subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=REPO)
    if out.returncode != 0:
        raise SystemExit(f"tilewright {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}")


def roofline(path: Path) -> None:
    """Per-op roofline of one llama3-8b layer (prefill and decode, 512 tokens, int8) on
    ws16x16."""
    from tilewright.app.sweep.evaluate import workload_report
    from tilewright.app.sweep.report import op_roofline
    from tilewright.arch import load_arch

    arch = load_arch(REPO / "configs" / "ws16x16.yaml")
    frames = {}
    for phase, marker in (("prefill", "o"), ("decode", "^")):
        w = {"model": "llama3-8b", "seq": 512, "batch": 1, "phase": phase, "format": "int8"}
        frames[phase] = (op_roofline(workload_report(arch, w), arch), marker)
    (_, peak, bw), _ = frames["prefill"]
    inten = np.concatenate([rf["intensity_ops_per_byte"] for (rf, _, _), _ in frames.values()])
    x = np.geomspace(min(inten.min(), peak / bw) / 4, max(inten.max(), peak / bw) * 4, 200)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(x, np.minimum(peak, bw * x), "k-", lw=1.5,
            label=f"roofs: {peak:.4g} GOP/s compute, {bw:.4g} GB/s off-chip")
    for phase, ((rf, _, _), marker) in frames.items():
        for op, sub in rf.groupby("op"):
            ax.scatter(sub["intensity_ops_per_byte"], sub["achieved_gops"], s=26, marker=marker,
                       label=f"{phase}: {op}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("operational intensity (2*MACs / off-chip byte, op/B)")
    ax.set_ylabel("achieved throughput (GOP/s)")
    ax.set_title(f"llama3-8b layer, 512 tokens, int8, on {arch.name}: per-op roofline",
                 fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    for phase, ((rf, _, _), _) in frames.items():
        print(f"{path}: {phase}: {len(rf)} ops with MACs, median "
              f"{rf['fraction_of_roof'].median():.1%} of the roof")


PARETO_SWEEP = {
    "name": "readme-gemm",
    "base": "ws8x8",
    "tech": "45nm",
    "axes": {"tensor_engine.rows,tensor_engine.cols": [4, 8, 16, 32],
             "tensor_engine.dataflow": ["ws", "os"],
             "offchip.bandwidth_gbps": [4.0, 16.0, 64.0]},
    "workloads": [{"gemm": [256, 1024, 1024], "format": "int8"}],
    "objectives": ["latency", "area"],
}


def pareto(path: Path) -> None:
    """Latency vs area of a 24-point GEMM sweep and its Pareto front."""
    from tilewright.app.sweep import ResultsStore, run_sweep, sweep_from_dict
    from tilewright.app.sweep.pareto import pareto_mask

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "pareto.db"
        run_sweep(sweep_from_dict(json.loads(json.dumps(PARETO_SWEEP)), source="readme"), db,
                  workers=1)
        with ResultsStore(db) as store:
            df = store.frame(PARETO_SWEEP["name"])
    ok = df[(df["status"] == "ok") & df["feasible"]]
    m = pareto_mask(ok[["latency_s", "area_mm2"]].to_numpy(float), ["minimize", "minimize"])
    front = ok[m].sort_values("latency_s")
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.scatter(ok["latency_s"] * 1e6, ok["area_mm2"], s=14, c="tab:blue", label="design points")
    ax.plot(front["latency_s"] * 1e6, front["area_mm2"], "o-", c="tab:red", ms=6,
            label=f"Pareto front ({len(front)})")
    for _, r in front.iterrows():
        ax.annotate(f"{r['p:tensor_engine.rows']}x{r['p:tensor_engine.cols']} "
                    f"{r['p:tensor_engine.dataflow']}, {r['p:offchip.bandwidth_gbps']:g} GB/s",
                    (r["latency_s"] * 1e6, r["area_mm2"]), fontsize=6,
                    xytext=(4, 4), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel("latency of a 256x1024x1024 int8 GEMM (µs)")
    ax.set_ylabel("chip area (mm^2, 45 nm)")
    ax.set_title(f"GEMM sweep: {len(ok)} design points", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    print(f"{path}: {len(ok)} points, {len(front)} on the front")


def mesh_heatmap(path: Path) -> None:
    """The link-load heatmap of one llama3-8b decode layer on the WSE-2 mesh (the CLI's own)."""
    _cli("mesh-layer", "llama3-8b", "--arch", "wse2", "--phase", "decode", "--heatmap", str(path))
    print(f"{path}: tilewright mesh-layer llama3-8b --arch wse2 --phase decode --heatmap")


def waveform(path: Path) -> None:
    """One 8x16x8 GEMM tile on the 8x8 WS core, traced by Verilator (as notebook 06 does)."""
    from tilewright.app.flows.sim_rtl import gemm_program
    from tilewright.arch import default_arch
    from tilewright.cosim.sim import run
    from tilewright.cosim.waves import sample_vcd
    from tilewright.dataflow_sim.cycle import gemm_report

    arch = default_arch()
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (8, 16), dtype=np.int8)
    b = rng.integers(-128, 128, (16, 8), dtype=np.int8)
    prog = gemm_program([(a, b)], arch, "one-tile")
    with tempfile.TemporaryDirectory() as tmp:
        job = Path(tmp) / "trace"
        sim = run("core", prog, arch, keep_dir=job, waves=True)
        if not np.array_equal(sim.outputs["c0"], (a.astype(np.int64) @ b).astype(np.int32)):
            raise SystemExit("waveform: the RTL's GEMM differs from numpy")
        sigs = ["start", "busy", "pre", "w_in__valid", "a_in__valid", "c_out__valid", "c_w__en"]
        wave = sample_vcd(job / "dump.vcd", sigs)
    busy = wave.index[wave["busy"] == 1]
    predicted = int(gemm_report(prog, arch)["cycles"].iloc[0])
    w = wave.iloc[max(0, busy[0] - 3): busy[-1] + 4]
    fig, ax = plt.subplots(figsize=(8, 3.2))
    for i, s in enumerate(sigs):
        ax.step(w["cycle"], 1.5 * (len(sigs) - 1 - i) + 0.9 * (w[s] > 0), where="post", lw=1.5)
    ax.set_yticks([1.5 * (len(sigs) - 1 - i) + 0.45 for i in range(len(sigs))], sigs, fontsize=7)
    ax.set_xlabel("clock cycle")
    ax.set_title(f"8x16x8 int8 GEMM on the 8x8 WS core (Verilator): busy {len(busy)} cycles, "
                 f"cycle model {predicted}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    print(f"{path}: busy {len(busy)} cycles, cycle model {predicted}")


def cluster_timeline(path: Path) -> None:
    """Gantt chart of the Perfetto trace of one training step (dp 2 x tp 2 x pp 2)."""
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.json"
        _cli("cluster", "--cluster", "h100-8x-nvlink", "--model", "llama3-8b", "--mode", "train",
             "--dp", "2", "--tp", "2", "--pp", "2", "--micro-batches", "4",
             "--trace", str(trace))
        events = [e for e in json.loads(trace.read_text())["traceEvents"] if e.get("ph") == "X"]
    rows = sorted({(e["pid"], e["tid"]) for e in events})
    colour = {"F": "tab:blue", "B": "tab:orange"}
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.4))
    for e in events:
        y = rows.index((e["pid"], e["tid"]))
        c = "tab:gray" if e["cat"] == "comm" else colour.get(e["name"][:1], "tab:green")
        ax.broken_barh([(e["ts"] / 1e3, e["dur"] / 1e3)], (y - 0.4, 0.8), facecolors=c,
                       edgecolor="white", lw=0.3)
    ax.set_yticks(range(len(rows)), [f"{p} / {t}" for p, t in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in
               (colour["F"], colour["B"], "tab:gray")]
    ax.legend(handles, ["forward", "backward", "communication"], fontsize=7, loc="upper left",
              bbox_to_anchor=(1.0, 1.0))
    ax.set_title("llama3-8b training step on 8 H100 (dp 2, tp 2, pp 2, 4 micro-batches)",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    end = max(e["ts"] + e["dur"] for e in events) / 1e3
    print(f"{path}: {len(events)} spans on {len(rows)} rows, step {end:.1f} ms")


FIGURES = {"roofline": roofline, "pareto": pareto, "mesh_heatmap": mesh_heatmap,
           "waveform": waveform, "cluster_timeline": cluster_timeline}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "figures")
    ap.add_argument("--only", nargs="+", choices=sorted(FIGURES), default=sorted(FIGURES))
    ap.add_argument("--no-rtl", action="store_true", help="skip the waveform (needs Verilator)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.only:
        if name == "waveform" and args.no_rtl:
            continue
        FIGURES[name](args.out / f"{name}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
