"""Attention parallelism apart from the experts' (serve plan ``attn_tp``/``attn_dp``): weights and
KV sized per shard (hand-computed Mixtral-8x7B parameter counts), one KV pool per attention-DP rank
(admission and preemption per rank), the dispatch volume per chip, and one-line refusals of
inconsistent plans (library and CLI)."""

from __future__ import annotations

import pandas as pd
import pytest

from tilewright.dataflow_sim.cluster import (ClusterSpec, CollectiveTimer, IterationCost, PlanError,
                                             ServePlan, Topology, chip_model, simulate_serving)
from tilewright.dataflow_sim.cluster.plan import serve_memory
from tilewright.models.llm_configs import get_config


def _h100(n: int) -> ClusterSpec:
    return ClusterSpec.from_dict({"chip": {"kind": "gpu", "preset": "h100-sxm"},
                                  "chips_per_node": n,
                                  "intra_node": {"topology": "switch", "link_gbps": 450}})


def test_plan_resolves_the_attention_layout_from_either_field():
    assert (ServePlan(ep=8).attention_tp, ServePlan(ep=8).attention_dp) == (1, 8)
    p = ServePlan(tp=2, ep=4, attn_tp=8)
    assert (p.attention_tp, p.attention_dp, p.split_attention) == (8, 1, True)
    p = ServePlan(tp=1, ep=8, attn_dp=2)
    assert (p.attention_tp, p.attention_dp) == (4, 2)
    assert "attn_tp=4 attn_dp=2" in p.label()


def test_weights_and_kv_follow_the_attention_and_expert_shards():
    # Mixtral-8x7B: d 4096, 32 heads, 8 KV heads of 128, 8 experts of 14336, 32 layers,
    # vocab 32000 (untied: embedding + LM head). tp=1, ep=8, attention TP 8 × DP 1, bf16.
    chip = chip_model(_h100(8))
    mem = serve_memory(ServePlan(tp=1, ep=8, attn_tp=8), chip, "mixtral-8x7b")
    attn = 4096 * (4 + 2 * 1) * 128 + 4 * 128 * 4096 + 2 * 4096    # 4 heads, 1 KV head / chip
    router = 4096 * 8
    expert = 3 * 4096 * 14336 * 1                                    # one expert per chip
    weights = (32 * (attn + router + expert) + 2 * (32000 // 8) * 4096) * 2
    assert mem["weight_bytes"] == weights
    kv = 2 * 1 * 128 * 32 * 2                                        # K+V, 1 head, 32 layers
    assert mem["kv_bytes_per_token"] == kv
    assert mem["kv_tokens"] == int((80e9 * 0.9 - weights) // kv)            # H100: 80 GB
    # the default layout (attention TP 1 × DP 8) holds every attention weight on each chip
    full = serve_memory(ServePlan(tp=1, ep=8), chip, "mixtral-8x7b")
    attn1 = 4096 * (32 + 16) * 128 + 32 * 128 * 4096 + 2 * 4096
    assert full["weight_bytes"] == (32 * (attn1 + router + expert) + 2 * 32000 * 4096) * 2
    assert full["kv_bytes_per_token"] == 8 * kv


@pytest.mark.parametrize("plan, match", [
    (dict(tp=1, ep=8, attn_tp=3), "attn_tp = 3 does not divide the tp·ep = 8"),
    (dict(tp=1, ep=8, attn_tp=2, attn_dp=2), r"attn_tp·attn_dp = 2·2 = 4, but .* 8 chips"),
    (dict(tp=1, ep=16, attn_dp=16), r"ep=16 does not divide n_experts = 8"),
])
def test_inconsistent_attention_layouts_are_refused(plan, match):
    reqs = pd.DataFrame({"arrival_s": [0.0], "prompt_tokens": [8], "output_tokens": [2]})
    n = plan["tp"] * plan["ep"]
    with pytest.raises(PlanError, match=match):
        simulate_serving(_h100(n), "mixtral-8x7b", ServePlan(**plan), reqs, cost_source="table")


def test_attention_fields_on_a_dense_model_are_refused():
    reqs = pd.DataFrame({"arrival_s": [0.0], "prompt_tokens": [8], "output_tokens": [2]})
    with pytest.raises(PlanError, match="attn_dp is an MoE option"):
        simulate_serving(_h100(2), "llama3-8b", ServePlan(tp=2, attn_dp=1), reqs)


def test_each_attention_dp_rank_has_its_own_kv_pool():
    # attention DP 2 (tp=1, ep=2): two pools of kv_tokens each. Three prompts of 0.6 of one
    # pool: the first two go to the two ranks; the third fits the replica's free total (0.8 of a
    # pool) but no single rank, so it waits until the first request ends and frees its rank.
    spec, plan = _h100(2), ServePlan(tp=1, ep=2, kv_block_tokens=16, max_batch_tokens=1 << 20)
    kv = serve_memory(plan, chip_model(spec), "mixtral-8x7b")["kv_tokens"]
    prompt = int(0.6 * kv) // 16 * 16
    reqs = pd.DataFrame({"arrival_s": [0.0, 0.0, 0.0], "prompt_tokens": [prompt] * 3,
                         "output_tokens": [2, 2, 2]})
    res = simulate_serving(spec, "mixtral-8x7b", plan, reqs, cost_source="table")
    r = res.requests.set_index("rid")
    assert r.first_token_s[0] == r.first_token_s[1]                  # admitted together
    assert r.first_token_s[2] > min(r.finish_s[0], r.finish_s[1])    # only after a rank frees
    assert res.metrics["kv_tokens_per_replica"] == 2 * kv
    assert res.metrics["rejected"] == 0
    # a prompt larger than one rank's pool is rejected (it never fits any rank)
    big = pd.DataFrame({"arrival_s": [0.0], "prompt_tokens": [kv + 16], "output_tokens": [2]})
    assert simulate_serving(spec, "mixtral-8x7b", plan, big,
                            cost_source="table").metrics["rejected"] == 1


def test_dispatch_volume_and_collective_groups_of_the_split_layout():
    # tp=2, ep=4 (8 chips), attention TP 8 × DP 1: each chip dispatches tokens·tp/attn_tp of the
    # rank's tokens (16 tokens -> 4); attention all-reduce over all 8 chips, expert-TP over 2
    spec = _h100(8)
    plan = ServePlan(tp=2, ep=4, attn_tp=8)
    timer = CollectiveTimer(Topology(spec))
    cost = IterationCost(get_config("mixtral-8x7b"), plan, chip_model(spec), timer,
                         list(range(8)), cost_source="table")
    assert cost._tp_group == [list(range(8))] and cost._etp_group == [[0, 1]]
    assert cost.dm.h == 32 // 8 and cost.dm_exp.f_exp == 14336 // 2
    seen = []
    cost.a2a_seconds = lambda tokens: seen.append(tokens) or 0.0
    import numpy as np
    cost.parts(np.array([16]), np.array([16]), 1)
    assert seen == [16 * 2 / 8]


def cluster_cli():
    """``invoke(args)``: ``tilewright cluster`` (a Typer app of the command) run in-process by
    Typer's CliRunner; returns the result (its ``exception`` is the error the command raised)."""
    import typer
    from typer.testing import CliRunner

    from tilewright.app.cli.cluster import cluster
    app = typer.Typer()
    app.command()(cluster)
    app.command("other")(lambda: None)
    return lambda args: CliRunner().invoke(app, args)


def test_cli_flags_reach_the_plan_and_an_inconsistent_layout_is_refused():
    # the CLI maps PlanError to one line and exit 2 (tests/test_cluster_cli.py); here: the
    # flags reach the plan's check
    invoke = cluster_cli()
    res = invoke(["cluster", "--model", "mixtral-8x7b", "--cluster",
                  "h100-8x-nvlink", "--mode", "serve", "--ep", "8",
                  "--attn-tp", "2", "--attn-dp", "2", "--requests", "2"])
    assert isinstance(res.exception, PlanError)
    assert "attn_tp·attn_dp = 2·2 = 4" in str(res.exception)
    res = invoke(["cluster", "--model", "mixtral-8x7b", "--cluster",
                  "h100-8x-nvlink", "--mode", "train", "--attn-tp", "2"])
    assert "--attn-tp: a serving option" in str(res.exception)
