"""Serving SLOs: goodput counted by hand on a made-up request table and against the closed-form
TTFT of one request; --pd auto beats a fixed split; power caps follow the stated DVFS model
(compute-bound prefill slows by the clock ratio, memory-bound decode does not); the batch/KV
timeline; bad SLO, split and cap values refused in one line with exit status 2."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from tilewright.app.cli.cluster import cluster
from tilewright.dataflow_sim.cluster import (SLO, ClusterSpecError, CollectiveTimer,
                                             IterationCost, ServePlan, Topology, chip_model,
                                             load_cluster, parse_pd, search_pd_split,
                                             simulate_serving, timeline_summary)
from tilewright.dataflow_sim.cluster.cluster_spec import GPU_PRESETS
from tilewright.dataflow_sim.cluster.energy import capped_clock_ratio, power_capped_chip
from tilewright.dataflow_sim.cluster.serve_slo import slo_metrics
from tilewright.models.llm_configs import get_config

from .test_cli import tw
from .test_cluster_serving import SMALL, arch_spec, one, prefill

app = typer.Typer()
app.command()(cluster)


@app.command()
def _other() -> None:
    pass


def run(*args: str):
    return CliRunner().invoke(app, ["cluster", *args])


def test_goodput_counts_requests_meeting_both_slos_by_hand():
    # 5 requests: ok; TTFT too slow; TPOT too slow; one-token output (no TPOT) ok; rejected
    df = pd.DataFrame({"ttft_s": [0.1, 0.5, 0.1, 0.2, np.nan],
                       "tpot_s": [0.01, 0.01, 0.05, np.nan, np.nan],
                       "finish_s": [1.0, 2.0, 3.0, 1.5, np.nan]})
    m = slo_metrics(df, SLO(ttft_s=0.3, tpot_s=0.02), makespan_s=4.0)
    assert m["slo_met_requests"] == 2
    assert m["slo_attainment"] == pytest.approx(2 / 5)
    assert m["goodput_requests_per_s"] == pytest.approx(2 / 4.0)


def test_goodput_on_a_simulated_trace_follows_the_closed_form_ttft():
    P, O = 200, 1
    reqs = pd.DataFrame({"arrival_s": [0.0], "prompt_tokens": [P], "output_tokens": [O]})
    ttft = prefill(P)                   # closed form of the op-table path
    kw = dict(cost_source="table")
    met = simulate_serving(arch_spec(), SMALL, ServePlan(), reqs, slo=SLO(ttft * 1.01, 1.0), **kw)
    miss = simulate_serving(arch_spec(), SMALL, ServePlan(), reqs, slo=SLO(ttft * 0.99, 1.0), **kw)
    assert met.metrics["slo_met_requests"] == 1 and miss.metrics["slo_met_requests"] == 0
    assert met.metrics["goodput_requests_per_s"] == pytest.approx(1 / ttft, rel=1e-9)
    assert met.metrics["goodput_requests_per_s"] <= met.metrics["throughput_requests_per_s"]


def _prefill_heavy() -> pd.DataFrame:
    n = 40
    return pd.DataFrame({"arrival_s": np.arange(n) * 0.0006, "prompt_tokens": np.full(n, 240),
                         "output_tokens": np.full(n, 2)})


def test_pd_auto_picks_a_split_that_beats_a_fixed_one():
    spec, reqs = arch_spec(4, pools=1), _prefill_heavy()
    slo = SLO(ttft_s=3 * prefill(240), tpot_s=1.0)
    best, rows = search_pd_split(spec, SMALL, ServePlan(), reqs, slo=slo, cost_source="table")
    assert [r["prefill_chips"] for r in rows] == [1, 2, 3]
    fixed = simulate_serving(spec, SMALL, ServePlan(), reqs, slo=slo, cost_source="table")
    g = best.metrics["goodput_requests_per_s"]
    assert g == max(r["goodput_requests_per_s"] for r in rows)
    assert g > fixed.metrics["goodput_requests_per_s"]            # the cluster's own 1:3 split
    assert best.metrics["prefill_chips"] == 3                    # prompts need prefill chips


def test_power_cap_clock_model_and_its_effect_on_prefill_and_decode():
    p = GPU_PRESETS["h100-sxm"]
    assert capped_clock_ratio(p.tdp_w, p.idle_w, p.tdp_w) == 1.0
    assert capped_clock_ratio(p.tdp_w, p.idle_w, p.idle_w + (p.tdp_w - p.idle_w) / 8) \
        == pytest.approx(0.5)
    spec = load_cluster("h100-8x-nvlink")
    chip = chip_model(spec)
    capped, r = power_capped_chip(spec, chip, p.idle_w + (p.tdp_w - p.idle_w) / 8)
    assert capped.peak_gemm_flops_per_s == pytest.approx(0.5 * chip.peak_gemm_flops_per_s)
    assert capped.hbm_bytes_per_s == chip.hbm_bytes_per_s       # HBM keeps its clock
    cfg, timer = get_config("llama3-8b"), CollectiveTimer(Topology(spec))

    def it(c):
        return IterationCost(cfg, ServePlan(), c, timer, [0], cost_source="table")
    one_tok = (np.array([1]), np.array([512]), 1)               # decode: memory-bound
    # (a one-row GEMM still runs whole 128-row tensor-core tiles, costs.py: at half the clock
    # those tiles come close to the HBM time, so decode may slow a little, never by 1/r)
    decode_slow = it(capped).seconds(*one_tok) / it(chip).seconds(*one_tok)
    assert 1.0 <= decode_slow < 1.05
    # a compute-bound GEMM slows by exactly the clock ratio (its launch, on the host, does not)
    launch = chip.launch_s
    assert capped.gemm_seconds(4096, 4096, 14336)[()] - launch == pytest.approx(
        (chip.gemm_seconds(4096, 4096, 14336)[()] - launch) / r, rel=1e-12)
    big = (np.array([4096]), np.array([4096]), 1)   # prefill: GEMMs compute-bound, norms are not
    slow = it(capped).seconds(*big) / it(chip).seconds(*big)
    assert 1.2 < slow <= 1 / r + 1e-9


def test_power_capped_pool_draws_its_cap_in_the_energy_total():
    spec = load_cluster("pd-h100-64")
    reqs = pd.DataFrame({"arrival_s": [0.0, 0.01], "prompt_tokens": [512, 256],
                         "output_tokens": [16, 8]})
    res = simulate_serving(spec, "llama3-8b", ServePlan(tp=8), reqs, power_caps={"decode": 400})
    rep, p = res.replicas, GPU_PRESETS["h100-sxm"]
    busy = {role: float((g.busy_s * g.chips).sum()) for role, g in rep.groupby("role")}
    assert res.metrics["energy_compute_j"] == pytest.approx(
        busy["prefill"] * p.tdp_w + busy["decode"] * 400.0, rel=1e-9)
    assert res.metrics["clock_ratio_decode"] == pytest.approx(
        ((400 - p.idle_w) / (p.tdp_w - p.idle_w)) ** (1 / 3))


def test_timeline_records_batch_and_kv_occupancy():
    P, O = 100, 3
    res = simulate_serving(arch_spec(), SMALL, ServePlan(), one(P, O), trace=True,
                           cost_source="table")
    tl = res.timeline
    assert list(tl.seqs) == [1] * O and list(tl.tokens) == [P] + [1] * (O - 1)
    blocks = res.metrics["kv_tokens_per_replica"] // ServePlan().kv_block_tokens
    # KV occupancy at an iteration's start: the prompt's blocks are allocated when it is admitted
    assert tl.kv.iloc[1] == pytest.approx(math.ceil((P + 1) / 16) / blocks)
    counters = [e for e in res.trace.events if e.get("ph") == "C"]
    assert {e["name"] for e in counters} == {"batch", "kv occupancy"}
    summary = timeline_summary(tl, bins=4)
    assert sum(r["iterations"] for r in summary) == O
    json.dumps(summary)


def test_cli_pd_auto_reports_every_split_tried():
    res = run("--cluster", "h100-8x-nvlink", "--model", "llama3-8b", "--tp", "2", "--mode",
              "serve", "--requests", "12", "--rate", "50", "--prompt-tokens", "256",
              "--output-tokens", "4", "--slo-ttft", "1", "--slo-tpot", "0.1", "--pd", "auto",
              "--json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert [r["prefill_chips"] for r in d["pd_search"]] == [2, 4, 6]
    best = max(r["goodput_requests_per_s"] for r in d["pd_search"])
    assert d["goodput_requests_per_s"] == best and d["pd_auto_splits_tried"] == 3


def test_cli_reports_goodput_and_timeline_in_json():
    res = run("--cluster", "pd-h100-64", "--model", "llama3-8b", "--tp", "8", "--requests", "20",
              "--rate", "20", "--prompt-tokens", "64-256", "--output-tokens", "4-16",
              "--slo-ttft", "1", "--slo-tpot", "0.1", "--pd", "32:32", "--json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["prefill_chips"] == 32 and d["decode_chips"] == 32
    assert 0 <= d["slo_attainment"] <= 1 and d["goodput_requests_per_s"] >= 0
    assert d["timeline"] and {"seqs_mean", "kv_occupancy_max"} <= set(d["timeline"][0])


@pytest.mark.parametrize("args,needle", [
    (["--pd", "0:64"], "prefill pool empty"),
    (["--pd", "64:0"], "decode pool empty"),
    (["--pd", "8:8"], "64 chips"),
    (["--pd", "x"], "auto or P:D"),
    (["--slo-ttft", "0", "--slo-tpot", "0.1"], "--slo-ttft"),
    (["--slo-ttft", "1", "--slo-tpot", "0"], "--slo-tpot"),
    (["--slo-ttft", "1"], "give both"),
    (["--pd", "auto"], "needs --slo-ttft"),
    (["--decode-power-cap", "701"], "--decode-power-cap"),
    (["--decode-power-cap", "0"], "--decode-power-cap"),
    (["--prefill-power-cap", "-1"], "--prefill-power-cap"),
])
def test_bad_serving_input_is_a_one_line_user_error(args, needle):
    res = run("--cluster", "pd-h100-64", "--model", "llama3-8b", "--tp", "8", "--requests", "4",
              *args)
    assert isinstance(res.exception, ClusterSpecError), res.output
    msg = str(res.exception)
    assert needle in msg and "\n" not in msg


@pytest.mark.parametrize("args", [["--pd", "64:0"], ["--slo-ttft", "0", "--slo-tpot", "1"],
                                  ["--decode-power-cap", "800"]])
def test_bad_serving_input_exits_2_with_one_line(args):
    res = tw("cluster", "--cluster", "pd-h100-64", "--model", "llama3-8b", "--tp", "8",
             "--requests", "4", *args)
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr


def test_parse_pd():
    assert parse_pd("16:48", 64) == 16 and parse_pd("auto", 64) is None
    with pytest.raises(ClusterSpecError, match="decode pool empty"):
        parse_pd("64:0", 64)


def test_serving_flags_in_train_mode_are_refused_not_ignored():
    res = run("--cluster", "h100-8x-nvlink", "--model", "llama3-8b", "--mode", "train",
              "--tp", "8", "--slo-ttft", "1", "--slo-tpot", "0.1")
    assert isinstance(res.exception, ClusterSpecError) and "--slo-ttft" in str(res.exception)
    res = run("--cluster", "h100-8x-nvlink", "--model", "llama3-8b", "--mode", "train",
              "--tp", "8", "--a2a", "deepep")
    assert isinstance(res.exception, ClusterSpecError) and "--a2a" in str(res.exception)
