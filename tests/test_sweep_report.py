"""`tilewright report DB`: Pareto PNGs, per-op breakdown and per-op roofline of the best LLM
points; the roofline table's numbers equal an independent computation from the Report frame."""

from __future__ import annotations

import json
import re

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
    if kind == "cluster":
        # the cluster energy model: perf/W front (tokens/s vs tokens/J) and the energy breakdown
        assert "c_pareto_tokens_per_s_tokens_per_j.png" in pngs and "c_energy.png" in pngs
        assert "tokens_per_s_chips" in " ".join(pngs)
