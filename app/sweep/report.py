"""HTML + PNG report of a results database: Pareto fronts, a roofline view of the design points,
energy breakdowns, and for the best Pareto points of LLM workloads a per-op time breakdown and a
per-op roofline (each op at its operational intensity 2·MACs / off-chip byte against its achieved
throughput, under the compute roof 2·peak MAC/s and the bandwidth roof ``offchip.bandwidth_gbps``);
and beside it one self-contained interactive page (:func:`write_interactive`, Plotly with
plotly.js inlined: Pareto fronts with hover and click, the roofline with its roofs, energy and
area breakdowns).
"""

from __future__ import annotations

import html
import json
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd

from tilewright.app.sweep import pareto_frame
from tilewright.app.sweep.evaluate import is_user_module, workload_report
from tilewright.app.sweep.pareto import pareto_mask
from tilewright.app.sweep.spec import SweepError, metric_info
from tilewright.app.sweep.store import ResultsStore
from tilewright.arch import ArchSpec
from tilewright.dataflow_sim.energy_area import AREA_BLOCKS, area_breakdown, load_tech

__all__ = ["write_report", "write_interactive", "op_roofline", "ROOFLINE_COLUMNS", "FRONT_COLOUR"]

#: columns of :func:`op_roofline` (and of the report's per-op roofline tables)
ROOFLINE_COLUMNS = ("task", "op", "macs", "bytes", "time_cycles", "intensity_ops_per_byte",
                    "achieved_gops", "roof_gops", "fraction_of_roof")

_DEFAULT_PAIRS = [("latency_s", "energy_j"), ("latency_s", "area_mm2"),
                  ("perf_per_mm2", "perf_per_w"), ("tokens_per_s", "tokens_per_j")]


def _safe(text: str) -> str:
    """``text`` as a file-name part: letters and digits kept, anything else ``_``."""
    return "".join(c if c.isalnum() else "_" for c in text)


def _objectives(store: ResultsStore, sweep: str) -> list[tuple[str, str]]:
    row = store.conn.execute("SELECT spec FROM runs WHERE sweep=? ORDER BY run_id DESC LIMIT 1",
                             (sweep,)).fetchone()
    if row:
        spec = json.loads(row[0])
        return [(o["metric"], o["direction"]) for o in spec.get("objectives", [])]
    return []


def _front_plot(df: pd.DataFrame, x: str, y: str, path: Path, title: str) -> int:
    import matplotlib  # noqa: PLC0415  (lazy: matplotlib is heavy)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415  (lazy: matplotlib is heavy)
    ok = df[df["status"] == "ok"]
    feas = ok[ok["feasible"]]
    fig, ax = plt.subplots(figsize=(6, 4.2))
    ax.scatter(ok[x], ok[y], s=10, c="lightgray", label="infeasible" if len(ok) > len(feas) else None)
    ax.scatter(feas[x], feas[y], s=12, c="tab:blue", label="feasible")
    n = 0
    if len(feas):
        m = pareto_mask(feas[[x, y]].to_numpy(float), [metric_info(x)[0], metric_info(y)[0]])
        front = feas[m].sort_values(x)
        n = len(front)
        ax.plot(front[x], front[y], "o-", c="tab:red", ms=5, label=f"Pareto front ({n})")
    # long metric descriptions wrap instead of running off the figure
    ax.set_xlabel(textwrap.fill(f"{x} ({metric_info(x)[1]})", 70), fontsize=8)
    ax.set_ylabel(textwrap.fill(f"{y} ({metric_info(y)[1]})", 45), fontsize=8)
    for axis, name in (("x", x), ("y", y)):
        vals = ok[name].to_numpy(float)
        vals = vals[np.isfinite(vals) & (vals > 0)]
        if len(vals) and vals.max() / vals.min() > 50:
            getattr(ax, f"set_{axis}scale")("log")
        else:   # 4 significant digits: 1.5e+06 instead of six-digit ticks running together,
            # and 0.086 as itself (an SI prefix, "86 m", read as metres on an mm^2 axis)
            from matplotlib.ticker import FuncFormatter  # noqa: PLC0415  (lazy: matplotlib is heavy)
            getattr(ax, f"{axis}axis").set_major_formatter(
                FuncFormatter(lambda v, _: f"{v:.4g}"))
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return n


def _roofline_plot(df: pd.DataFrame, path: Path) -> None:
    import matplotlib  # noqa: PLC0415  (lazy: matplotlib is heavy)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415  (lazy: matplotlib is heavy)
    ok = df[(df["status"] == "ok") & (df["dram_bytes"] > 0) & (df["throughput_tops"] > 0)]
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
    import matplotlib  # noqa: PLC0415  (lazy: matplotlib is heavy)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415  (lazy: matplotlib is heavy)

    # single-chip terms (pJ, energy_area) and cluster terms (J, dataflow_sim.cluster.energy)
    comps = {"mac_pj": 1e-12, "sram_pj": 1e-12, "vector_pj": 1e-12, "dram_pj": 1e-12,
             "mesh_pj": 1e-12, "static_pj": 1e-12, "energy_compute_j": 1.0, "energy_idle_j": 1.0,
             "energy_dram_j": 1.0, "energy_network_j": 1.0}
    rows = []
    for key in front["key"].head(12):
        r = store.get(key)
        rows.append({c: sum(w.get(c, 0.0) or 0.0 for w in (r["per_workload"] or [])) * f
                     for c, f in comps.items()})
    fig, ax = plt.subplots(figsize=(6, 4.2))
    bottom = np.zeros(len(rows))
    for c in comps:
        v = np.array([r[c] for r in rows])
        if not v.any():
            continue
        label = c.removesuffix("_pj") if c.endswith("_pj") else \
            "cluster " + c.removeprefix("energy_").removesuffix("_j")
        ax.bar(range(len(rows)), v, bottom=bottom, label=label)
        bottom += v
    ax.set_xticks(range(len(rows)), [f"#{i}" for i in front["id"].head(12)], fontsize=7)
    ax.set_ylabel("energy (J, unweighted sum of workloads)")
    ax.set_title("energy breakdown of Pareto points", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def op_roofline(df: pd.DataFrame, arch) -> tuple[pd.DataFrame, float, float]:
    """Per-op roofline of a per-op Report ``df`` (one row per task) on ``arch``: the ops with
    MACs, each at ``intensity_ops_per_byte`` = 2·MACs / off-chip bytes and ``achieved_gops`` =
    2·MACs / (time_cycles / clock), with ``roof_gops`` = min(compute roof, bandwidth roof x
    intensity) and ``fraction_of_roof``. Returns ``(frame, compute roof GOP/s, bandwidth roof
    GB/s)``; compute roof = 2 · tensor_engine MACs/cycle · clock."""
    clock_hz = arch.clock_mhz * 1e6
    peak = 2 * arch.tensor_engine.macs_per_cycle * clock_hz / 1e9
    bw = arch.offchip.bandwidth_gbps
    g = df[df["macs"] > 0]
    out = pd.DataFrame({"task": g["task"].astype(str), "op": g["op"].astype(str),
                        "macs": g["macs"].astype(float), "bytes": g["bytes"].astype(float),
                        "time_cycles": g["time_cycles"].astype(float)}).reset_index(drop=True)
    out["intensity_ops_per_byte"] = 2 * out["macs"] / out["bytes"].clip(lower=1)
    out["achieved_gops"] = 2 * out["macs"] / (out["time_cycles"] / clock_hz) / 1e9
    out["roof_gops"] = np.minimum(peak, bw * out["intensity_ops_per_byte"])
    out["fraction_of_roof"] = out["achieved_gops"] / out["roof_gops"]
    return out, peak, bw


def _llm_reports(store: ResultsStore, key: str):
    """(arch, [(workload, per-op Report)]) of the LLM workloads of one stored point, or None."""
    r = store.get(key)
    llm = [w for w in (r["workloads"] or []) if w.get("model") and not w.get("cluster")]
    if not llm or not r.get("arch_json"):
        return None
    arch = ArchSpec.model_validate(json.loads(r["arch_json"]))
    return arch, [(w, workload_report(arch, w)) for w in llm]


def _wl_title(w: dict) -> str:
    if is_user_module(w["model"]):           # file.py:factory / .onnx: its own example inputs
        return f"{w['model']} (its example inputs)"
    return f"{w['model']} {w['phase']} seq={w['seq']} batch={w['batch']}"


def _op_roofline_plot(arch, reports, path: Path) -> str:
    """Per-op roofline PNG of one point's LLM workloads; returns the HTML tables."""
    import matplotlib  # noqa: PLC0415  (lazy: matplotlib is heavy)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415  (lazy: matplotlib is heavy)
    fig, axes = plt.subplots(len(reports), 1, figsize=(7, 4.2 * len(reports)), squeeze=False)
    tables = []
    for ax, (w, df) in zip(axes[:, 0], reports):
        rf, peak, bw = op_roofline(df, arch)
        if rf.empty:
            ax.set_title(f"{_wl_title(w)}: no op with MACs", fontsize=8)
            continue
        lo = min(rf["intensity_ops_per_byte"].min(), peak / bw) / 4
        hi = max(rf["intensity_ops_per_byte"].max(), peak / bw) * 4
        x = np.geomspace(lo, hi, 200)
        ax.plot(x, np.minimum(peak, bw * x), "k-", lw=1.5,
                label=f"roof: {peak:.4g} GOP/s, {bw:.4g} GB/s")
        for op, sub in rf.groupby("op"):
            ax.scatter(sub["intensity_ops_per_byte"], sub["achieved_gops"], s=18, label=op)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("operational intensity (2*MACs / off-chip byte)", fontsize=8)
        ax.set_ylabel("achieved GOP/s", fontsize=8)
        ax.set_title(f"{_wl_title(w)}: per-op roofline ({len(rf)} ops with MACs)", fontsize=8)
        ax.legend(fontsize=7)
        ax.tick_params(labelsize=7)
        tables.append(f"<p>{html.escape(_wl_title(w))}: compute roof {peak:.6g} GOP/s, "
                      f"bandwidth roof {bw:.6g} GB/s</p>"
                      + rf.to_html(index=False, float_format="%.6g", classes="roofline"))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return "".join(tables)


def _per_op_plot(reports, clock_mhz: float, path: Path) -> str:
    """Per-op time breakdown (one layer) of the LLM workloads of one stored point."""
    import matplotlib  # noqa: PLC0415  (lazy: matplotlib is heavy)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415  (lazy: matplotlib is heavy)
    fig, axes = plt.subplots(len(reports), 1, figsize=(7, 3.2 * len(reports)), squeeze=False)
    tables = []
    for ax, (w, df) in zip(axes[:, 0], reports):
        by = df.groupby("op")["time_cycles"].sum().sort_values(ascending=False)
        top = by.head(12)
        ax.barh(top.index[::-1], top.to_numpy()[::-1] / clock_mhz)
        ax.set_xlabel("µs per layer")
        ax.set_title(f"{_wl_title(w)}: time by op (top 12 of {len(by)})", fontsize=8)
        ax.tick_params(labelsize=7)
        tables.append((by / by.sum()).head(12).rename("share of layer time").to_frame()
                      .to_html(float_format="%.3f"))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return "".join(tables)


def _best_point_sections(store: ResultsStore, front: pd.DataFrame, objs, outp: Path,
                         safe: str) -> list[str]:
    """Per-op breakdown and per-op roofline of the Pareto point best in each objective (at
    most 3 distinct points) whose workloads include LLM layers."""
    parts: list[str] = []
    seen: set[int] = set()
    for metric, direction in objs:
        if len(seen) >= 3:
            break
        col = pd.to_numeric(front[metric], errors="coerce")
        if col.isna().all():
            continue
        row = front.loc[col.idxmin() if direction == "minimize" else col.idxmax()]
        pid = int(row["id"])
        if pid in seen:
            continue
        seen.add(pid)
        got = _llm_reports(store, row["key"])
        if got is None:
            continue
        arch, reports = got
        png_op = outp / f"{safe}_per_op_{pid}.png"
        tab = _per_op_plot(reports, arch.clock_mhz, png_op)
        parts.append(f"<h3>Per-op breakdown of the best point for {metric} (#{pid})</h3>"
                     f"<img src='{png_op.name}'>" + tab)
        png_rf = outp / f"{safe}_op_roofline_{pid}.png"
        tab = _op_roofline_plot(arch, reports, png_rf)
        parts.append(f"<h3>Per-op roofline of the best point for {metric} (#{pid})</h3>"
                     f"<img src='{png_rf.name}'>" + tab)
    return parts


def write_report(db: str | Path, out: str | Path, sweep: str | None = None) -> Path:
    """Write ``index.html`` with PNG plots and ``interactive.html`` (:func:`write_interactive`)
    into ``out``; returns the path of ``index.html``."""
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
        parts = ["<html><head><meta charset='utf-8'><title>tilewright sweep report</title>"
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
            safe = _safe(name)
            for x, y in pairs:
                if x not in ok or y not in ok or ok[x].isna().all() or ok[y].isna().all():
                    continue                  # e.g. tokens_per_j of a sweep without LLM workloads
                png = outp / f"{safe}_pareto_{_safe(x)}_{_safe(y)}.png"   # no ':' of w:metric
                n = _front_plot(df, x, y, png, f"{name}: {y} vs {x}")
                parts.append(f"<h3>Pareto front: {y} vs {x} ({n} points)</h3>"
                             f"<img src='{png.name}'>")
            if len(ok) and "dram_bytes" in ok and \
                    ((ok["dram_bytes"] > 0) & (ok["throughput_tops"] > 0)).any():
                png = outp / f"{safe}_roofline.png"
                _roofline_plot(df, png)
                parts.append(f"<h3>Roofline view</h3><img src='{png.name}'>")
            if len(objs) >= 1 and len(ok):
                front = pareto_frame(df, objs)
                if len(front):
                    png = outp / f"{safe}_energy.png"
                    has_energy = front["energy_j"].notna().any()
                    if has_energy:
                        _energy_plot(store, front, png)
                    cols = [c for c in df.columns if c.startswith("p:")] + \
                        [m for m, _ in objs] + ["area_mm2", "energy_j", "latency_s"]
                    cols = list(dict.fromkeys(c for c in cols if c in front))
                    parts += _best_point_sections(store, front, objs, outp, safe)
                    parts.append(f"<h3>Pareto points of the sweep objectives "
                                 f"({', '.join(m for m, _ in objs)})</h3>"
                                 + front[["id", *cols]].to_html(index=False, float_format="%.4g")
                                 + (f"<img src='{png.name}'>" if has_energy else ""))
            bad = df[df["status"].isin(["invalid", "error"])]
            if len(bad):
                parts.append("<h3>Points that could not be evaluated</h3>"
                             + bad[["id", "status", "error"]].head(50).to_html(index=False))
        parts.append("</body></html>")
        parts.insert(2, f"<p><a href='{write_interactive(db, outp, sweep).name}'>interactive "
                        "page</a> (hover and click the points; opens offline)</p>")
        page = outp / "index.html"
        page.write_text("\n".join(parts))
        return page
    finally:
        store.close()


# --- the interactive page (Plotly, plotly.js inlined: opens offline) -------------------------

#: colour of the Pareto front's markers and line on the interactive page (the browser test
#: looks for it in the screenshot)
FRONT_COLOUR = "#d62728"
_FEASIBLE_COLOUR = "#1f77b4"
_OTHER_COLOUR = "#c8c8c8"

# per-workload fields shown when a point is clicked (units in the names)
_WL_FIELDS = ("latency_s", "energy_j", "cycles", "macs", "dram_bytes", "tokens", "utilization")

# single-chip energy terms in pJ, cluster terms in J (as in :func:`_energy_plot`)
_ENERGY_TERMS = {"mac_pj": 1e-12, "sram_pj": 1e-12, "vector_pj": 1e-12, "dram_pj": 1e-12,
                 "mesh_pj": 1e-12, "static_pj": 1e-12, "energy_compute_j": 1.0,
                 "energy_idle_j": 1.0, "energy_dram_j": 1.0, "energy_network_j": 1.0}


def _axis_title(name: str) -> str:
    """``name: description`` with the unit spelled out (``area_mm2: chip area, mm^2``)."""
    return f"{name}: {metric_info(name)[1]}"


def _num(v):
    """A JSON-safe number: NaN/inf become None, numpy scalars plain Python."""
    if isinstance(v, (np.floating, float)):
        return float(v) if np.isfinite(v) else None
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.bool_):
        return bool(v)
    return v


def _wl_name(w: dict, i: int) -> str:
    return str(w.get("name") or w.get("tag") or (_wl_title(w) if w.get("model") and "phase" in w
                                                 else f"w{i}"))


def _arch_of(rec: dict):
    return ArchSpec.model_validate(json.loads(rec["arch_json"])) if rec.get("arch_json") else None


def _point_detail(store: ResultsStore, row: pd.Series, pcols: list[str], metrics: list[str],
                  per_op: bool) -> dict:
    """What a click on point ``row`` shows: its design parameters (``p:`` columns), its metrics,
    each workload's figures and, with ``per_op``, each LLM workload's time per op (µs per
    layer, top 12)."""
    rec = store.get(row["key"]) or {}
    wls = rec.get("workloads") or []
    out = {"id": int(row["id"]),
           "params": {c.removeprefix("p:"): _num(row[c]) for c in pcols},
           "metrics": {m: _num(row[m]) for m in metrics if m in row},
           "workloads": [{"workload": _wl_name(w, i),
                          **{f: _num(pw.get(f)) for f in _WL_FIELDS if f in pw}}
                         for i, (w, pw) in enumerate(zip(wls, rec.get("per_workload") or []))],
           "per_op": []}
    if per_op:
        got = _llm_reports(store, row["key"])
        if got is not None:
            arch, reports = got
            for w, df in reports:
                by = df.groupby("op")["time_cycles"].sum().sort_values(ascending=False).head(12)
                out["per_op"].append({"workload": _wl_title(w),
                                      "us_per_layer": {str(k): _num(v / arch.clock_mhz)
                                                       for k, v in by.items()}})
    return out


def _front_figure(df: pd.DataFrame, x: str, y: str, pcols: list[str], title: str):
    """Plotly Pareto scatter of ``y`` vs ``x``: every evaluated point, the feasible ones, and the
    front (``customdata`` = point id, for the click handler)."""
    import plotly.graph_objects as go  # noqa: PLC0415  (lazy: plotly is heavy)
    ok = df[(df["status"] == "ok") & df[x].notna() & df[y].notna()]
    feas = ok[ok["feasible"]]
    m = pareto_mask(feas[[x, y]].to_numpy(float), [metric_info(x)[0], metric_info(y)[0]]) \
        if len(feas) else np.zeros(0, bool)
    front = feas[m].sort_values(x)

    def hover(sub: pd.DataFrame) -> list[str]:
        return ["<br>".join([f"point #{int(r['id'])}", f"{x} = {r[x]:.4g}", f"{y} = {r[y]:.4g}"]
                            + [f"{c.removeprefix('p:')} = {r[c]}" for c in pcols])
                for _, r in sub.iterrows()]

    fig = go.Figure()
    for sub, name, colour, mode in ((ok[~ok["feasible"]], "infeasible", _OTHER_COLOUR, "markers"),
                                    (feas[~m], "feasible", _FEASIBLE_COLOUR, "markers"),
                                    (front, f"Pareto front ({len(front)})", FRONT_COLOUR,
                                     "lines+markers")):
        if len(sub):
            fig.add_trace(go.Scatter(x=sub[x], y=sub[y], mode=mode, name=name,
                                     marker={"color": colour, "size": 11 if sub is front else 8},
                                     line={"color": colour}, customdata=sub["id"].astype(int),
                                     hovertext=hover(sub), hoverinfo="text"))
    fig.update_layout(title=title, clickmode="event", height=480,
                      xaxis_title=_axis_title(x), yaxis_title=_axis_title(y))
    for axis, name in (("xaxis", x), ("yaxis", y)):
        vals = ok[name].to_numpy(float)
        vals = vals[np.isfinite(vals) & (vals > 0)]
        log = len(vals) > 0 and vals.max() / vals.min() > 50
        # "e" exponents: 0.086 never reads "86m" (an SI prefix taken for metres)
        fig.update_layout({axis: {"type": "log" if log else "linear", "exponentformat": "e"}})
    return fig, front


def _roofline_figure(store: ResultsStore, df: pd.DataFrame):
    """Plotly roofline: every evaluated point at 2·MACs / off-chip byte against its achieved
    TOPS, under the roofs of each distinct (peak, bandwidth) of the points' ArchSpecs: compute
    roof 2 · MACs/cycle · clock, bandwidth roof ``offchip.bandwidth_gbps`` · intensity."""
    import plotly.graph_objects as go  # noqa: PLC0415  (lazy: plotly is heavy)
    ok = df[(df["status"] == "ok") & (df["dram_bytes"] > 0) & (df["throughput_tops"] > 0)]
    if ok.empty:
        return None
    inten = (2 * ok["macs"] / ok["dram_bytes"]).to_numpy(float)
    roofs: set[tuple[float, float]] = set()
    for key in ok["key"]:
        arch = _arch_of(store.get(key) or {})
        if arch is not None and arch.mesh is None:
            roofs.add((2 * arch.tensor_engine.macs_per_cycle * arch.clock_mhz * 1e6 / 1e12,
                       arch.offchip.bandwidth_gbps))
    fig = go.Figure()
    lo, hi = inten.min() / 4, inten.max() * 4
    for peak, bw in sorted(roofs)[:10]:
        lo, hi = min(lo, peak * 1e3 / bw / 4), max(hi, peak * 1e3 / bw * 4)
    xs = np.geomspace(lo, hi, 200)
    for peak, bw in sorted(roofs)[:10]:
        fig.add_trace(go.Scatter(x=xs, y=np.minimum(peak, bw * 1e9 * xs / 1e12), mode="lines",
                                 line={"color": "black", "width": 1, "dash": "dot"},
                                 name=f"roof {peak:.4g} TOPS, {bw:.4g} GB/s", hoverinfo="name"))
    fig.add_trace(go.Scatter(
        x=inten, y=ok["throughput_tops"], mode="markers", name="design points",
        customdata=ok["id"].astype(int),
        marker={"color": ok["utilization"], "colorscale": "Viridis", "size": 9,
                "colorbar": {"title": "utilization"}},
        hovertext=[f"point #{int(i)}<br>utilization {u:.3f}" for i, u in
                   zip(ok["id"], ok["utilization"])], hoverinfo="text"))
    fig.update_layout(title=f"roofline: {len(ok)} design points, {len(roofs)} distinct roofs",
                      height=560, showlegend=True,
                      legend={"orientation": "h", "y": -0.25, "x": 0},
                      xaxis={"type": "log", "exponentformat": "e",
                             "title": "operational intensity (2*MACs / off-chip byte, op/B)"},
                      yaxis={"type": "log", "exponentformat": "e",
                             "title": "achieved throughput (TOPS, 10^12 op/s)"})
    return fig


def _breakdown_figures(store: ResultsStore, front: pd.DataFrame):
    """Stacked bars of the first 12 Pareto points: energy by term (J, unweighted sum of the
    workloads) and chip area by block (mm^2, laid out: :func:`energy_area.area_breakdown`)."""
    import plotly.graph_objects as go  # noqa: PLC0415  (lazy: plotly is heavy)
    pts = front.head(12)
    labels = [f"#{int(i)}" for i in pts["id"]]
    energy, area = {}, {}
    for n, key in enumerate(pts["key"]):
        rec = store.get(key) or {}
        for c, f in _ENERGY_TERMS.items():
            energy.setdefault(c, [0.0] * len(pts))[n] = \
                sum((w.get(c) or 0.0) for w in rec.get("per_workload") or []) * f
        arch = _arch_of(rec)
        if arch is not None and rec.get("tech"):
            ab = area_breakdown(arch, load_tech(rec["tech"]))
            for c in (f"{b}_um2" for b in AREA_BLOCKS):      # laid out: sums to area_mm2
                area.setdefault(c, [0.0] * len(pts))[n] = ab[c] / 1e6
    figs = []
    for title, parts, ytitle, strip in (
            ("energy breakdown of the Pareto points", energy,
             "energy (J, unweighted sum of the workloads)", ("_pj", "_j")),
            ("area breakdown of the Pareto points", area, "chip area (mm^2)", ("_um2",))):
        fig = go.Figure()
        for c, v in parts.items():
            if any(v):
                name = c
                for s in strip:
                    name = name.removesuffix(s)
                fig.add_trace(go.Bar(x=labels, y=v, name=name,
                                     customdata=pts["id"].astype(int)))
        if fig.data:
            fig.update_layout(barmode="stack", title=title, height=420,
                              xaxis_title="Pareto point (id)",
                              yaxis={"title": ytitle, "exponentformat": "e"})
            figs.append(fig)
    return figs


_CLICK_JS = """
<script>
const TW_POINTS = %s;
function twFmt(v) {
  if (v === null) return "n/a";
  if (typeof v !== "number") return v;
  return Number.isInteger(v) ? v.toLocaleString("en-US") : String(+v.toPrecision(5));
}
function twRows(obj) {
  return Object.entries(obj).map(([k, v]) =>
    "<tr><th>" + k + "</th><td>" + twFmt(v) + "</td></tr>").join("");
}
function twShow(sweep, id) {
  const p = (TW_POINTS[sweep] || {})[id];
  const box = document.getElementById("detail-" + sweep);
  if (!p || !box) return;
  let h = "<h4>point #" + id + "</h4><table><tr><th colspan=2>design parameters</th></tr>"
    + twRows(p.params) + "<tr><th colspan=2>metrics</th></tr>" + twRows(p.metrics) + "</table>";
  p.workloads.forEach(w => { h += "<table><tr><th colspan=2>workload " + w.workload
    + "</th></tr>" + twRows(Object.fromEntries(Object.entries(w).filter(e => e[0] !== "workload")))
    + "</table>"; });
  p.per_op.forEach(o => { h += "<table><tr><th colspan=2>" + o.workload
    + ": time by op (\u00b5s per layer)</th></tr>" + twRows(o.us_per_layer) + "</table>"; });
  box.innerHTML = "<button onclick='this.parentNode.style.display=\\"none\\"'>close</button>" + h;
  box.style.display = "block";
}
document.querySelectorAll(".tw-plot").forEach(div => {
  const plot = div.querySelector(".plotly-graph-div");
  if (plot) plot.on("plotly_click", ev => {
    const pt = ev.points[0];
    if (pt && pt.customdata !== undefined) twShow(div.dataset.sweep, pt.customdata);
  });
});
</script>
"""


def write_interactive(db: str | Path, out: str | Path, sweep: str | None = None) -> Path:
    """Write ``interactive.html`` into ``out``: one self-contained page (plotly.js inlined, no
    network) with, per sweep, the Pareto fronts (hover: the point's design parameters; click:
    its parameters, metrics, per-workload figures and, for the Pareto points, the per-op time
    of its LLM workloads), the roofline with its roofs, and energy and area breakdowns of the
    Pareto points as stacked bars. Returns the page's path."""
    store = ResultsStore(Path(db))
    try:
        names = [sweep] if sweep else store.sweeps()
        body: list[str] = [f"<h1>Sweep report: {html.escape(str(db))}</h1>"
                           "<p>Hover a point for its design parameters; click it for its "
                           "parameters, metrics and per-workload / per-op breakdown.</p>"]
        figs: list[tuple[str, object]] = []
        points: dict[str, dict] = {}
        for name in names:
            df = store.frame(name)
            pcols = [c for c in df.columns if c.startswith("p:")]
            objs = _objectives(store, name)
            pairs = ([(objs[0][0], objs[1][0])] if len(objs) >= 2 else []) + \
                [p for p in _DEFAULT_PAIRS if len(objs) < 2 or p != (objs[0][0], objs[1][0])]
            ok = df[df["status"] == "ok"]
            body.append(f"<h2>{html.escape(name)}</h2><p>{len(df)} points, {len(ok)} evaluated, "
                        f"{int(df['feasible'].sum())} feasible.</p>")
            front_ids: set[int] = set()
            for x, y in pairs:
                if x not in ok or y not in ok or ok[x].isna().all() or ok[y].isna().all():
                    continue
                fig, front = _front_figure(df, x, y, pcols, f"{name}: Pareto front, {y} vs {x}")
                front_ids |= set(int(i) for i in front["id"])
                figs.append((name, fig))
            rf = _roofline_figure(store, df) if "dram_bytes" in ok and len(ok) else None
            if rf is not None:
                figs.append((name, rf))
            obj_front = pareto_frame(df, objs) if objs and len(ok) else ok.iloc[:0]
            if len(obj_front):
                figs += [(name, f) for f in _breakdown_figures(store, obj_front)]
                front_ids |= set(int(i) for i in obj_front["id"])
            metrics = list(dict.fromkeys([m for m, _ in objs] + [
                "latency_s", "energy_j", "area_mm2", "throughput_tops", "utilization"]))
            # per-op breakdowns compile the LLM workloads again: the (at most 12) front points
            per_op = set(sorted(front_ids)[:12])
            points[name] = {int(r["id"]): _point_detail(store, r, pcols, metrics,
                                                        int(r["id"]) in per_op)
                            for _, r in ok.iterrows()}
            body.append(f"<!--figs:{html.escape(name)}-->")
        outp = Path(out)
        outp.mkdir(parents=True, exist_ok=True)
        first = True
        for name in names:
            divs = []
            for sw, fig in figs:
                if sw != name:
                    continue
                divs.append(f"<div class='tw-plot' data-sweep='{html.escape(name)}'>"
                            + fig.to_html(full_html=False, include_plotlyjs=first)
                            + "</div>")
                first = False
            divs.append(f"<div class='tw-detail' id='detail-{html.escape(name)}'></div>")
            i = body.index(f"<!--figs:{html.escape(name)}-->")
            body[i] = "\n".join(divs)
        data = json.dumps(points, allow_nan=False, default=str).replace("</", "<\\/")
        page = outp / "interactive.html"
        page.write_text(
            "<!DOCTYPE html><html><head><meta charset='utf-8'>"
            "<title>tilewright sweep report (interactive)</title>"
            "<style>body{font-family:sans-serif;max-width:1100px;margin:auto;padding:0 8px}"
            "table{border-collapse:collapse;font-size:12px;margin:4px 0}td,th{border:1px solid "
            "#ccc;padding:2px 6px;text-align:left}.tw-detail{display:none;position:fixed;right:8px;"
            "top:8px;max-width:400px;max-height:90vh;overflow:auto;background:#fff;"
            "border:1px solid #888;padding:6px;z-index:10}</style></head><body>\n"
            + "\n".join(body) + (_CLICK_JS % data) + "</body></html>\n")
        return page
    finally:
        store.close()
