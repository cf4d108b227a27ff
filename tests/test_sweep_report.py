"""`tilewright report DB`: Pareto PNGs, per-op breakdown and per-op roofline of the best LLM
points; the roofline table's numbers equal an independent computation from the Report frame."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tilewright.app.sweep import ResultsStore, run_sweep, sweep_from_dict

LLM = {
    "name": "llm",
    "base": "ws8x8",
    "tech": "45nm",
    "axes": {"tensor_engine.rows,tensor_engine.cols": [8, 16],
             "offchip.bandwidth_gbps": [4.0, 32.0]},
    "workloads": [{"model": "tiny-llama", "seq": 32, "batch": 1, "phase": "prefill",
                   "format": "int8"}],
    "objectives": ["latency", "area"],
}


def _tables(page: str) -> list[pd.DataFrame]:
    """The per-op roofline tables of the report (pandas to_html output), parsed with re."""
    out = []
    for tab in re.findall(r"<table[^>]*roofline[^>]*>(.*?)</table>", page, flags=re.S):
        head = re.findall(r"<th>(.*?)</th>", tab)
        rows = [re.findall(r"<td>(.*?)</td>", r, flags=re.S)
                for r in re.findall(r"<tr>(.*?)</tr>", tab, flags=re.S)]
        out.append(pd.DataFrame([r for r in rows if r], columns=head))
    return out


def test_report_per_op_roofline(tmp_path):
    import matplotlib.image as mpimg

    from tilewright.arch import ArchSpec
    from tilewright.app.sweep.evaluate import workload_report
    from tilewright.app.sweep.report import ROOFLINE_COLUMNS, write_report

    spec = sweep_from_dict(json.loads(json.dumps(LLM)), source="llm.yaml")
    db = tmp_path / "llm.db"
    run_sweep(spec, db, workers=1)
    page_path = write_report(db, tmp_path / "rep")
    page = page_path.read_text()
    pngs = re.findall(r"<img src='([^']+)'>", page)
    assert any("op_roofline" in p for p in pngs) and any("per_op" in p for p in pngs)
    assert any("pareto" in p for p in pngs)
    for p in pngs:
        f = tmp_path / "rep" / p
        assert f.exists() and f.stat().st_size > 5000, p
        img = mpimg.imread(f)
        assert img.shape[0] > 200 and img.shape[1] > 200 and img[..., :3].std() > 0.02, p
    # the best points for latency and for area are the ones with roofline sections
    with ResultsStore(db) as s:
        df = s.frame("llm")
        small = df[np.isclose(df["area_mm2"], df["area_mm2"].min())]   # area ties: the
        best = {int(df.loc[df["latency_s"].idxmin(), "id"]),              # faster one is on
                int(small.loc[small["latency_s"].idxmin(), "id"])}        # the Pareto front
        keys = dict(zip(df["id"], df["key"]))
        got = {int(m) for m in re.findall(r"Per-op roofline of the best point for \w+ \(#(\d+)\)",
                                          page)}
        assert got == best
        tables = _tables(page)
        assert len(tables) == len(best)
        inter = (tmp_path / "rep" / "interactive.html").read_text()
        clicks = json.loads(re.search(r"const TW_POINTS = (.*?);\n", inter).group(1)
                            .replace("<\\/", "</"))["llm"]
        for pid, tab in zip(re.findall(r"Per-op roofline of the best point for \w+ \(#(\d+)\)",
                                       page), tables):
            r = s.get(keys[int(pid)])
            arch = ArchSpec.model_validate(json.loads(r["arch_json"]))
            rep = workload_report(arch, LLM["workloads"][0])
            ops = rep[rep["macs"] > 0]
            assert list(tab.columns) == list(ROOFLINE_COLUMNS) and len(tab) == len(ops)
            # independent: roofs from the ArchSpec, each op from its Report row
            clock = arch.clock_mhz * 1e6
            peak_gops = 2 * arch.tensor_engine.rows * arch.tensor_engine.cols * clock / 1e9
            inten = 2 * ops["macs"].to_numpy(float) / ops["bytes"].to_numpy(float)
            macs, cyc = ops["macs"].to_numpy(float), ops["time_cycles"].to_numpy(float)
            achieved = 2 * macs * clock / cyc / 1e9
            roof = np.minimum(peak_gops, arch.offchip.bandwidth_gbps * inten)
            np.testing.assert_allclose(tab["intensity_ops_per_byte"].astype(float), inten,
                                       rtol=1e-5)
            np.testing.assert_allclose(tab["achieved_gops"].astype(float), achieved, rtol=1e-5)
            np.testing.assert_allclose(tab["roof_gops"].astype(float), roof, rtol=1e-5)
            assert (tab["achieved_gops"].astype(float) <= tab["roof_gops"].astype(float)
                    * (1 + 1e-5)).all()          # nothing beats the roofline
            assert f"compute roof {peak_gops:.6g} GOP/s" in page
            assert f"bandwidth roof {arch.offchip.bandwidth_gbps:.6g} GB/s" in page
            # the interactive page's click data: the same point's time per op, summed by hand
            per_op: dict[str, float] = {}
            for op, cyc in zip(rep["op"], rep["time_cycles"]):
                per_op[str(op)] = per_op.get(str(op), 0.0) + float(cyc) / arch.clock_mhz
            got = clicks[pid]["per_op"][0]["us_per_layer"]
            assert len(got) == min(12, len(per_op))
            assert sorted(got.values(), reverse=True) == list(got.values())
            for op, us in got.items():
                assert us == pytest.approx(per_op[op], rel=1e-9)
            assert min(got.values()) >= sorted(per_op.values())[-len(got)] * (1 - 1e-9)


@pytest.mark.parametrize("kind", ["mesh", "cluster"])
def test_report_of_mesh_and_cluster_sweeps(tmp_path, kind):
    """Sweeps without LLM layers still give a report (no empty plots)."""
    from tilewright.app.sweep.report import write_report
    if kind == "mesh":
        d = {"name": "m", "base": "mesh4x4", "tech": "45nm",
             "axes": {"mesh.rows,mesh.cols": [4, 8]},
             "workloads": [{"mesh_gemv": [128, 256]}],
             "objectives": ["latency", "energy"]}
    else:
        d = {"name": "c", "base": "ws8x8", "tech": "45nm",
             "axes": {"cluster.intra_node.link_gbps": [50.0, 450.0]},
             "workloads": [{"cluster": "h100-8x-nvlink", "model": "tiny-llama",
                            "plan": {"dp": 8, "micro_batches": 2, "seq_len": 64}}],
             "objectives": ["tokens", "chips"]}
    spec = sweep_from_dict(d, source="s.yaml")
    run_sweep(spec, tmp_path / "s.db", workers=1)
    page = write_report(tmp_path / "s.db", tmp_path / "rep").read_text()
    pngs = re.findall(r"<img src='([^']+)'>", page)
    assert pngs and all((tmp_path / "rep" / p).stat().st_size > 5000 for p in pngs)
    inter = (tmp_path / "rep" / "interactive.html").read_text()
    assert len(plotly_figures(inter)) >= len([p for p in pngs if "pareto" in p])
    if kind == "cluster":
        # the cluster energy model: perf/W front (tokens/s vs tokens/J) and the energy breakdown
        assert "c_pareto_tokens_per_s_tokens_per_j.png" in pngs and "c_energy.png" in pngs
        assert "tokens_per_s_chips" in " ".join(pngs)


# --- the interactive page ---------------------------------------------------------------------

GEMM = {
    "name": "g",
    "base": "ws8x8",
    "tech": "45nm",
    "axes": {"tensor_engine.rows,tensor_engine.cols": [4, 8, 16],
             "offchip.bandwidth_gbps": [4.0, 32.0]},
    "workloads": [{"gemm": [64, 256, 256], "format": "int8"}],
    "objectives": ["latency", "area"],
}


def gemm_report(tmp_path):
    """Run the small GEMM sweep and write its report; returns (db, report folder)."""
    from tilewright.app.sweep.report import write_report
    spec = sweep_from_dict(json.loads(json.dumps(GEMM)), source="g.yaml")
    db = tmp_path / "g.db"
    run_sweep(spec, db, workers=1)
    write_report(db, tmp_path / "rep")
    return db, tmp_path / "rep"


def _array(v):
    """A trace's x/y as numpy: plain lists, or plotly's base64 typed arrays (``bdata``)."""
    import base64
    if isinstance(v, dict) and "bdata" in v:
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"]).astype(float)
    return np.asarray(v, dtype=float)


def plotly_figures(page: str) -> list[tuple[list, dict]]:
    """(data, layout) of every ``Plotly.newPlot`` call of a page written by plotly's to_html."""
    dec = json.JSONDecoder()
    out = []
    for m in re.finditer(r'Plotly\.newPlot\(\s*"[^"]+",\s*', page):
        data, end = dec.raw_decode(page, m.end())
        layout, _ = dec.raw_decode(page[end:].lstrip().lstrip(",").lstrip())
        out.append((data, layout))
    return out


def brute_front(points: np.ndarray) -> set[int]:
    """Indices of the non-dominated rows of ``points`` (all objectives minimized), O(n^2)."""
    keep = set()
    for i, p in enumerate(points):
        if not any((q <= p).all() and (q < p).any() for j, q in enumerate(points) if j != i):
            keep.add(i)
    return keep


def test_interactive_page_front_roofs_breakdowns_units(tmp_path):
    """interactive.html: self-contained; the front trace is the brute-force Pareto front; every
    point's roof is 2*rows*cols*clock and its bandwidth; stacked bars add up to the totals;
    axis titles spell the unit, ticks never use SI prefixes."""
    from tilewright.app.sweep.report import FRONT_COLOUR
    from tilewright.arch import load_arch
    db, rep = gemm_report(tmp_path)
    index = (rep / "index.html").read_text()
    assert "href='interactive.html'" in index
    page = (rep / "interactive.html").read_text()
    assert "<script src" not in page and "<link" not in page      # nothing fetched
    assert len(page) > 3_000_000                                  # plotly.js inlined (~4.6 MB)
    figs = plotly_figures(page)
    with ResultsStore(db) as s:
        df = s.frame("g").sort_values("id").reset_index(drop=True)
    assert len(df) == 6 and (df["status"] == "ok").all()
    titles = [lay["title"]["text"] for _, lay in figs]
    # Pareto front latency vs area: the same ids as a brute-force dominance check
    data, lay = figs[titles.index("g: Pareto front, area_mm2 vs latency_s")]
    feas = df[df["feasible"]].reset_index(drop=True)
    want = {int(feas.loc[i, "id"]) for i in brute_front(feas[["latency_s", "area_mm2"]]
                                                        .to_numpy(float))}
    front = [t for t in data if t["name"].startswith("Pareto front")]
    assert len(front) == 1 and front[0]["marker"]["color"] == FRONT_COLOUR
    assert set(int(i) for i in _array(front[0]["customdata"])) == want
    assert front[0]["name"] == f"Pareto front ({len(want)})"
    assert lay["xaxis"]["title"]["text"].startswith("latency_s: seconds")
    assert "mm^2" in lay["yaxis"]["title"]["text"]
    assert lay["xaxis"]["exponentformat"] == lay["yaxis"]["exponentformat"] == "e"
    # hover text names every design parameter of the point
    for cd, text in zip(_array(front[0]["customdata"]), front[0]["hovertext"]):
        row = df[df["id"] == int(cd)].iloc[0]
        assert f"tensor_engine.rows = {row['p:tensor_engine.rows']}" in text
        assert f"offchip.bandwidth_gbps = {row['p:offchip.bandwidth_gbps']}" in text
    # roofline: one roof per (array, bandwidth), from the preset and the axes by hand
    clock = load_arch(Path(__file__).parents[1] / "configs" / "ws8x8.yaml").clock_mhz * 1e6
    data, lay = next(f for f, t in zip(figs, titles) if t.startswith("roofline"))
    roofs = {t["name"]: t for t in data if t["name"].startswith("roof ")}
    assert len(roofs) == 6
    for n in (4, 8, 16):
        for bw in (4.0, 32.0):
            peak = 2 * n * n * clock / 1e12                       # TOPS
            t = roofs[f"roof {peak:.4g} TOPS, {bw:.4g} GB/s"]
            x, y = _array(t["x"]), _array(t["y"])
            np.testing.assert_allclose(y, np.minimum(peak, bw * 1e9 * x / 1e12), rtol=1e-12)
    pts = next(t for t in data if t["name"] == "design points")
    np.testing.assert_allclose(sorted(_array(pts["x"])),
                               sorted(2 * df["macs"] / df["dram_bytes"]), rtol=1e-12)
    assert "TOPS" in lay["yaxis"]["title"]["text"] and "op/B" in lay["xaxis"]["title"]["text"]
    # stacked bars: the parts of each Pareto point add up to its total
    for title, total, scale in (("energy breakdown of the Pareto points", "energy_j", 1.0),
                                ("area breakdown of the Pareto points", "area_mm2", 1.0)):
        data, lay = figs[titles.index(title)]
        ids = [int(x.lstrip("#")) for x in data[0]["x"]]
        stack = np.sum([_array(t["y"]) for t in data], axis=0)
        np.testing.assert_allclose(stack, df.set_index("id").loc[ids, total] * scale, rtol=1e-9)
    assert "mm^2" in figs[titles.index("area breakdown of the Pareto points")][1]["yaxis"][
        "title"]["text"]
    # the click data: every point's parameters as stored
    blob = re.search(r"const TW_POINTS = (.*?);\n", page).group(1)
    pts = json.loads(blob.replace("<\\/", "</"))["g"]
    assert sorted(int(k) for k in pts) == sorted(df["id"])
    for _, row in df.iterrows():
        p = pts[str(int(row["id"]))]
        assert p["params"]["tensor_engine.cols"] == row["p:tensor_engine.cols"]
        assert p["workloads"][0]["macs"] == 64 * 256 * 256
