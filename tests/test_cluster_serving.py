"""Serving: single-request latencies equal the prefill/decode/KV-transfer closed forms; KV
capacity forces preemption; routing imbalance costs what it should. Expected values are built
from the model's shapes and the stated cost rules (see test_cluster_training)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tilewright.dataflow_sim.cluster import (ClusterSpec, ClusterSpecError, CollectiveTimer,
                                             IterationCost, PlanError, ServePlan, Topology,
                                             chip_model, load_cluster, load_request_trace,
                                             poisson_requests)
from tilewright.dataflow_sim.cluster import simulate_serving as _simulate_serving
from tilewright.models.llm_configs import get_config

from .test_cluster_training import ARCH, SMALL, embed_seconds, head_seconds, layer_seconds


def simulate_serving(*args, **kw):
    """These closed forms are the op-table path's (``cost_source="table"``); the compiler
    path is checked in test_cluster_compiler_costs."""
    kw.setdefault("cost_source", "table")
    return _simulate_serving(*args, **kw)


def arch_spec(n: int = 1, hbm_gib: float = 16, pools: int | None = None) -> ClusterSpec:
    arch = {**ARCH, "offchip": {**ARCH["offchip"], "capacity_gib": hbm_gib}}
    d = {"name": "archs", "chip": {"kind": "arch", "arch": arch}, "chips_per_node": n}
    if n > 1:
        d["intra_node"] = {"topology": "switch", "link_gbps": 20.0, "latency_us": 3.0}
    if pools:
        d["pools"] = {"prefill_chips": pools}
    return ClusterSpec.from_dict(d)


def one(prompt: int, output: int, at: float = 0.5) -> pd.DataFrame:
    return pd.DataFrame({"arrival_s": [at], "prompt_tokens": [prompt], "output_tokens": [output]})


def prefill(P: int) -> float:
    return SMALL.n_layers * layer_seconds(SMALL, [(P, P)]) + embed_seconds(SMALL, P) \
        + head_seconds(SMALL, 1)


def decode(ctx: int) -> float:
    return SMALL.n_layers * layer_seconds(SMALL, [(1, ctx)]) + embed_seconds(SMALL, 1) \
        + head_seconds(SMALL, 1)


@pytest.mark.parametrize("P,O", [(100, 1), (300, 5)])
def test_single_request_ttft_is_prefill_time_and_tpot_is_decode_time(P, O):
    res = simulate_serving(arch_spec(), SMALL, ServePlan(), one(P, O))
    r = res.requests.iloc[0]
    assert abs(r.ttft_s - prefill(P)) <= 0.01 * prefill(P)
    assert r.ttft_s == pytest.approx(prefill(P), rel=1e-9)
    steps = [decode(P + i) for i in range(1, O)]
    assert r.e2e_s == pytest.approx(prefill(P) + sum(steps), rel=1e-9)
    if O > 1:
        assert r.tpot_s == pytest.approx(sum(steps) / (O - 1), rel=1e-9)


def test_chunked_prefill_splits_the_prompt_into_budget_sized_iterations():
    P, budget = 300, 128
    res = simulate_serving(arch_spec(), SMALL, ServePlan(max_batch_tokens=budget), one(P, 1))
    chunks = [(128, 128), (128, 256), (44, 300)]       # (new tokens, keys attended)
    expect = sum(SMALL.n_layers * layer_seconds(SMALL, [ch]) + embed_seconds(SMALL, ch[0])
                 for ch in chunks) + head_seconds(SMALL, 1)
    assert res.requests.ttft_s.iloc[0] == pytest.approx(expect, rel=1e-9)
    assert res.replicas.iterations.iloc[0] == 3


def test_disaggregated_request_pays_the_kv_transfer_on_the_network():
    P, O = 200, 4
    spec = arch_spec(2, pools=1)
    res = simulate_serving(spec, SMALL, ServePlan(), one(P, O))
    r = res.requests.iloc[0]
    assert r.ttft_s == pytest.approx(prefill(P), rel=1e-9)      # first token made by the prefill
    kv = P * 2 * SMALL.n_kv_heads * (SMALL.d_model // SMALL.n_heads) * 1 * SMALL.n_layers
    transfer = kv / 20e9 + 2 * 3e-6                               # S/B + α (up + down link)
    steps = sum(decode(P + i) for i in range(1, O))
    assert r.e2e_s == pytest.approx(prefill(P) + transfer + steps, rel=1e-9)
    assert res.metrics["kv_transfers"] == 1 and res.metrics["disaggregated"]
    colo = simulate_serving(spec, SMALL, ServePlan(disaggregated=False), one(P, O))
    assert colo.requests.e2e_s.iloc[0] == pytest.approx(prefill(P) + steps, rel=1e-9)


def test_kv_capacity_forces_preemption_and_oversized_requests_are_rejected():
    chip = chip_model(arch_spec())
    weights_gib = 0.7e6 / 2**30
    spec = arch_spec(hbm_gib=(weights_gib + 2000 * 256 / 2**30) / 0.9)
    reqs = pd.DataFrame({"arrival_s": np.zeros(10), "prompt_tokens": np.full(10, 100),
                         "output_tokens": np.full(10, 200)})
    res = simulate_serving(spec, SMALL, ServePlan(), reqs)
    assert chip.element_bytes == 1
    assert 1500 < res.metrics["kv_tokens_per_replica"] < 2100
    assert res.metrics["preemptions"] > 0 and res.metrics["finished"] == 10
    assert (res.requests.preemptions > 0).any()
    big = simulate_serving(spec, SMALL, ServePlan(), one(5000, 2))
    assert big.metrics["rejected"] == 1 and big.metrics["finished"] == 0


def test_moe_routing_imbalance_slows_the_iteration():
    cfg = get_config("tiny-moe")
    arch = {**ARCH, "offchip": {**ARCH["offchip"], "capacity_gib": 1}}
    spec = ClusterSpec.from_dict({"chip": {"kind": "arch", "arch": arch}, "chips_per_node": 2,
                                  "intra_node": {"topology": "switch", "link_gbps": 10}})
    chip, timer = chip_model(spec), CollectiveTimer(Topology(spec))
    plan = ServePlan(ep=2)
    q, c = np.ones(64, np.int64), np.full(64, 100)
    balanced = IterationCost(cfg, plan, chip, timer, [0, 1], np.arange(4)).seconds(q, c, 64)
    hot = IterationCost(cfg, plan, chip, timer, [0, 1], np.zeros(8, np.int64)).seconds(q, c, 64)
    assert hot > balanced
    uni = IterationCost(cfg, plan, chip, timer, [0, 1], seed=1)
    zipf = IterationCost(cfg, ServePlan(ep=2, routing="zipf", zipf_s=2.0), chip, timer, [0, 1],
                         seed=1)
    assert np.mean([zipf.seconds(q, c, 64) for _ in range(30)]) > \
        np.mean([uni.seconds(q, c, 64) for _ in range(30)])


def test_many_requests_on_the_pd_preset_give_consistent_metrics(tmp_path):
    reqs = poisson_requests(300, 30.0, (64, 1024), (8, 128), seed=3)
    res = simulate_serving(load_cluster("pd-h100-64"), "llama3-8b", ServePlan(tp=8), reqs,
                           trace=True)
    m = res.metrics
    assert m["finished"] == 300 and m["disaggregated"] and m["kv_transfers"] > 0
    for k in ("ttft", "tpot", "e2e"):
        assert m[f"{k}_p50_s"] <= m[f"{k}_p90_s"] <= m[f"{k}_p99_s"]
    assert m["throughput_tokens_per_s"] == pytest.approx(
        reqs.output_tokens.sum() / m["makespan_s"], rel=1e-9)
    assert {e["cat"] for e in res.trace.events} == {"compute", "comm", "timeline"}


def test_poisson_workload_and_trace_files(tmp_path):
    reqs = poisson_requests(4000, 50.0, 10, (1, 9), seed=0)
    gaps = np.diff(reqs.arrival_s)
    assert gaps.mean() == pytest.approx(1 / 50.0, rel=0.05)
    assert reqs.output_tokens.between(1, 9).all()
    path = tmp_path / "t.csv"
    reqs.head(5).to_csv(path, index=False)
    assert len(load_request_trace(path)) == 5
    (tmp_path / "bad.csv").write_text("arrival_s,prompt\n0,1\n")
    with pytest.raises(ClusterSpecError, match=r"missing \['prompt_tokens', 'output_tokens'\]"):
        load_request_trace(tmp_path / "bad.csv")


def test_serving_plans_that_cannot_run_are_refused():
    six = ClusterSpec.from_dict({"name": "six", "chip": {"kind": "gpu", "preset": "h100-sxm"},
                                 "chips_per_node": 6, "intra_node": {"topology": "switch"}})
    with pytest.raises(PlanError, match="tp·ep·pp = 4 chips, which does not divide a pool of 6"):
        simulate_serving(six, "llama3-8b", ServePlan(tp=4), one(10, 2))
    with pytest.raises(PlanError, match="llama3-70b weights need .* GiB per chip"):
        simulate_serving(load_cluster("h100-8x-nvlink"), "llama3-70b", ServePlan(tp=1),
                         one(10, 2))
    with pytest.raises(ClusterSpecError, match="no `pools:` section"):
        simulate_serving(arch_spec(), SMALL, ServePlan(disaggregated=True), one(10, 2))


def test_moe_serving_with_expert_parallelism_runs_and_reports():
    reqs = poisson_requests(40, 20.0, (64, 512), (8, 32), seed=2)
    res = simulate_serving(load_cluster("h100-8x-nvlink"), "mixtral-8x7b",
                           ServePlan(tp=2, ep=4, routing="zipf"), reqs)
    rep = res.report()
    assert rep.finished.iloc[0] == 40 and res.metrics["replicas"] == 1
    assert "TTFT" in rep.attrs["convention"]


def test_without_chunked_prefill_a_prompt_runs_whole_even_over_the_budget():
    P = 300
    res = simulate_serving(arch_spec(), SMALL, ServePlan(max_batch_tokens=128,
                                                         chunked_prefill=False), one(P, 1))
    assert res.requests.ttft_s.iloc[0] == pytest.approx(prefill(P), rel=1e-9)
    assert res.replicas.iterations.iloc[0] == 1


def test_pipeline_parallel_serving_adds_the_stage_to_stage_transfer():
    """pp = 2 on two chips: a lone prompt is one micro-batch: stage 0 runs half the layers and
    the embedding, sends P·D·e bytes to chip 1 (closed form S/B + 2 link latencies on the
    switch), stage 1 runs the other half and the LM head. TTFT = one-chip prefill + transfer.
    Two prompts at once are two micro-batches: stage times a (layers/2 + embedding) and
    b (layers/2 + head) per prompt give the 2-stage pipeline makespan a + max(a + x, x + b) + b."""
    P, e = 96, 1
    spec = arch_spec(2)
    x = P * SMALL.d_model * e / 20e9 + 2 * 3e-6
    res = simulate_serving(spec, SMALL, ServePlan(pp=2), one(P, 1))
    assert res.requests.ttft_s.iloc[0] == pytest.approx(prefill(P) + x, rel=1e-9)
    half = SMALL.n_layers * layer_seconds(SMALL, [(P, P)]) / 2
    a, b = half + embed_seconds(SMALL, P), half + head_seconds(SMALL, 1)
    two = pd.DataFrame({"arrival_s": [0.5, 0.5], "prompt_tokens": [P, P],
                        "output_tokens": [1, 1]})
    res2 = simulate_serving(spec, SMALL, ServePlan(pp=2), two)
    assert res2.requests.ttft_s.max() == pytest.approx(a + max(a + x, x + b) + b, rel=1e-9)
    with pytest.raises(PlanError, match="pp=3 does not divide n_layers"):
        simulate_serving(arch_spec(3), SMALL, ServePlan(pp=3), one(P, 1))
