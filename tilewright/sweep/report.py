"""HTML + PNG report of a results database: Pareto fronts, a roofline view, energy breakdowns."""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
import pandas as pd

from tilewright.sweep.pareto import pareto_mask
from tilewright.sweep.spec import METRICS, SweepError
from tilewright.sweep.store import ResultsStore

__all__ = ["write_report"]

_DEFAULT_PAIRS = [("latency_s", "energy_j"), ("latency_s", "area_mm2"),
                  ("perf_per_mm2", "perf_per_w")]


def _objectives(store: ResultsStore, sweep: str) -> list[tuple[str, str]]:
    row = store.conn.execute("SELECT spec FROM runs WHERE sweep=? ORDER BY run_id DESC LIMIT 1",
                             (sweep,)).fetchone()
    if row:
        spec = json.loads(row[0])
        return [(o["metric"], o["direction"]) for o in spec.get("objectives", [])]
    return []


def _front_plot(df: pd.DataFrame, x: str, y: str, path: Path, title: str) -> int:
    import matplotlib  # noqa: PLC0415
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415
    ok = df[df["status"] == "ok"]
    feas = ok[ok["feasible"]]
    fig, ax = plt.subplots(figsize=(6, 4.2))
    ax.scatter(ok[x], ok[y], s=10, c="lightgray", label="infeasible" if len(ok) > len(feas) else None)
    ax.scatter(feas[x], feas[y], s=12, c="tab:blue", label="feasible")
    n = 0
    if len(feas):
        m = pareto_mask(feas[[x, y]].to_numpy(float), [METRICS[x][0], METRICS[y][0]])
        front = feas[m].sort_values(x)
        n = len(front)
        ax.plot(front[x], front[y], "o-", c="tab:red", ms=5, label=f"Pareto front ({n})")
    ax.set_xlabel(f"{x} ({METRICS[x][1]})", fontsize=8)
    ax.set_ylabel(f"{y} ({METRICS[y][1]})", fontsize=8)
    for axis, name in (("x", x), ("y", y)):
        vals = ok[name].to_numpy(float)
        vals = vals[np.isfinite(vals) & (vals > 0)]
        if len(vals) and vals.max() / vals.min() > 50:
            getattr(ax, f"set_{axis}scale")("log")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return n


def _roofline_plot(df: pd.DataFrame, path: Path) -> None:
    import matplotlib  # noqa: PLC0415
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415
    ok = df[(df["status"] == "ok") & (df["dram_bytes"] > 0)]
    fig, ax = plt.subplots(figsize=(6, 4.2))
    inten = 2 * ok["macs"] / ok["dram_bytes"]
    sc = ax.scatter(inten, ok["throughput_tops"], s=10, c=ok["utilization"], cmap="viridis")
    fig.colorbar(sc, ax=ax, label="utilization")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (2*MACs / off-chip byte)")
    ax.set_ylabel("achieved TOPS")
    ax.set_title("roofline view: every evaluated design point", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _energy_plot(store: ResultsStore, front: pd.DataFrame, path: Path) -> None:
    import matplotlib  # noqa: PLC0415
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415
    comps = ["mac_pj", "sram_pj", "vector_pj", "dram_pj", "mesh_pj"]
    rows = []
    for key in front["key"].head(12):
        r = store.get(key)
        tot = {c: sum(w.get(c, 0.0) or 0.0 for w in (r["per_workload"] or [])) * 1e-12 for c in comps}
        rows.append(tot)
    fig, ax = plt.subplots(figsize=(6, 4.2))
    bottom = np.zeros(len(rows))
    for c in comps:
        v = np.array([r[c] for r in rows])
        ax.bar(range(len(rows)), v, bottom=bottom, label=c.removesuffix("_pj"))
        bottom += v
    ax.set_xticks(range(len(rows)), [f"#{i}" for i in front["id"].head(12)], fontsize=7)
    ax.set_ylabel("energy (J, unweighted sum of workloads)")
    ax.set_title("energy breakdown of Pareto points", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _per_op_plot(store: ResultsStore, key: str, path: Path) -> str | None:
    """Per-op time breakdown (one layer) of the LLM workloads of one stored point."""
    import matplotlib  # noqa: PLC0415
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    from tilewright.arch import ArchSpec  # noqa: PLC0415
    from tilewright.sweep.evaluate import workload_report  # noqa: PLC0415
    r = store.get(key)
    llm = [w for w in (r["workloads"] or []) if w.get("model")]
    if not llm or not r.get("arch_json"):
        return None
    arch = ArchSpec.model_validate(json.loads(r["arch_json"]))
    fig, axes = plt.subplots(len(llm), 1, figsize=(7, 3.2 * len(llm)), squeeze=False)
    tables = []
    for ax, w in zip(axes[:, 0], llm):
        df = workload_report(arch, w)
        by = df.groupby("op")["time_cycles"].sum().sort_values(ascending=False)
        top = by.head(12)
        ax.barh(top.index[::-1], top.to_numpy()[::-1] / arch.clock_mhz)
        ax.set_xlabel("µs per layer")
        ax.set_title(f"{w['model']} {w['phase']} seq={w['seq']} batch={w['batch']}: "
                     f"time by op (top 12 of {len(by)})", fontsize=8)
        ax.tick_params(labelsize=7)
        tables.append((by / by.sum()).head(12).rename("share of layer time").to_frame()
                      .to_html(float_format="%.3f"))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return "".join(tables)


def write_report(db: str | Path, out: str | Path, sweep: str | None = None) -> Path:
    """Write ``index.html`` with PNG plots into ``out``; returns the HTML path."""
    dbp = Path(db)
    if not dbp.exists():
        raise SweepError(f"{db}: no such results database")
    store = ResultsStore(dbp)
    try:
        sweeps = store.sweeps()
        if not sweeps:
            raise SweepError(f"{db}: holds no evaluated points")
        if sweep is not None and sweep not in sweeps:
            raise SweepError(f"--sweep {sweep!r}: not in {db} (has {', '.join(sweeps)})")
        outp = Path(out)
        outp.mkdir(parents=True, exist_ok=True)
        parts = [f"<html><head><meta charset='utf-8'><title>tilewright sweep report</title>"
                 "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}"
                 "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;"
                 "padding:2px 6px}</style></head><body>",
                 f"<h1>Sweep report: {html.escape(str(db))}</h1>"]
        for name in [sweep] if sweep else sweeps:
            df = store.frame(name)
            counts = df["status"].value_counts().to_dict()
            parts.append(f"<h2>{html.escape(name)}</h2><p>{len(df)} points: "
                         + ", ".join(f"{v} {k}" for k, v in counts.items())
                         + f"; {int(df['feasible'].sum())} feasible; evaluation wall time "
                         f"{df['wall_s'].sum():.1f} s.</p>")
            objs = _objectives(store, name)
            pairs: list[tuple[str, str]] = []
            if len(objs) >= 2:
                pairs.append((objs[0][0], objs[1][0]))
            pairs += [p for p in _DEFAULT_PAIRS if p not in pairs]
            ok = df[df["status"] == "ok"]
            safe = "".join(c if c.isalnum() else "_" for c in name)
            for x, y in pairs:
                if x not in ok or y not in ok:
                    continue
                png = outp / f"{safe}_pareto_{x}_{y}.png"
                n = _front_plot(df, x, y, png, f"{name}: {y} vs {x}")
                parts.append(f"<h3>Pareto front: {y} vs {x} ({n} points)</h3>"
                             f"<img src='{png.name}'>")
            if len(ok) and "dram_bytes" in ok:
                png = outp / f"{safe}_roofline.png"
                _roofline_plot(df, png)
                parts.append(f"<h3>Roofline view</h3><img src='{png.name}'>")
            if len(objs) >= 1 and len(ok):
                from tilewright.sweep import pareto_frame  # noqa: PLC0415
                front = pareto_frame(df, objs)
                if len(front):
                    png = outp / f"{safe}_energy.png"
                    _energy_plot(store, front, png)
                    cols = [c for c in df.columns if c.startswith("p:")] + \
                        [m for m, _ in objs] + ["area_mm2", "energy_j", "latency_s"]
                    cols = list(dict.fromkeys(c for c in cols if c in front))
                    best = front.sort_values(objs[0][0], ascending=objs[0][1] == "minimize")
                    png_op = outp / f"{safe}_per_op.png"
                    tab = _per_op_plot(store, best["key"].iloc[0], png_op)
                    if tab is not None:
                        parts.append(f"<h3>Per-op breakdown of the best point for {objs[0][0]} "
                                     f"(#{best['id'].iloc[0]})</h3><img src='{png_op.name}'>"
                                     + tab)
                    parts.append(f"<h3>Pareto points of the sweep objectives "
                                 f"({', '.join(m for m, _ in objs)})</h3>"
                                 + front[["id", *cols]].to_html(index=False, float_format="%.4g")
                                 + f"<img src='{png.name}'>")
            bad = df[df["status"].isin(["invalid", "error"])]
            if len(bad):
                parts.append("<h3>Points that could not be evaluated</h3>"
                             + bad[["id", "status", "error"]].head(50).to_html(index=False))
        parts.append("</body></html>")
        page = outp / "index.html"
        page.write_text("\n".join(parts))
        return page
    finally:
        store.close()
