"""MoE serving at scale: distinct top-k routing drawn per layer (against exact enumeration),
dense layers costed and sized dense, dispatch volumes with per-node dedup (against enumeration of
every expert set), EPLB redundant experts, per-rank token budgets of DP attention, and the
stand-in attention of a config without one."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from tilewright.dataflow_sim.cluster import (ClusterSpec, CollectiveTimer, IterationCost, PlanError,
                                             ServePlan, Topology, chip_model, load_cluster,
                                             poisson_requests, simulate_serving)
from tilewright.dataflow_sim.cluster.moe_serving import (ExpertRouter, SlotMap, a2a_bytes,
                                                         eplb_placement, inclusion_probabilities,
                                                         max_over_mean, miss_probability,
                                                         rank_expected_loads, standin_attention)
from tilewright.dataflow_sim.cluster.plan import serve_memory
from tilewright.models.llm_configs import LlamaConfig, MoEConfig, get_config


def _exact_inclusion(p: np.ndarray, k: int) -> np.ndarray:
    """Successive sampling without replacement, by enumerating every ordered draw."""
    E, pi = len(p), np.zeros(len(p))
    for seq in itertools.permutations(range(E), k):
        prob, left = 1.0, 1.0
        for j in seq:
            prob *= p[j] / left
            left -= p[j]
        pi[list(seq)] += prob
    return pi


def test_inclusion_probabilities_match_exact_enumeration():
    p = np.array([0.5, 0.25, 0.15, 0.1])
    est = inclusion_probabilities(p, 2, np.random.default_rng(0), draws=20000)
    assert np.abs(est - _exact_inclusion(p, 2)).max() < 0.02
    assert np.allclose(inclusion_probabilities(np.full(8, 1 / 8), 3, np.random.default_rng(0)),
                       3 / 8)


def test_routing_is_over_distinct_experts_drawn_fresh_per_layer():
    # the case: Zipf routing, 8,192 tokens, 256 experts, top-8, 58 MoE layers
    T = 8192
    r = ExpertRouter(256, 8, 58, "zipf", 1.2, np.random.default_rng(1))
    loads = r.loads(T)
    assert loads.shape == (58, 256)
    assert loads.max() <= T                                # no expert above the token count
    assert np.abs(loads.sum(axis=1) / (T * 8) - 1).max() < 0.02   # ≈ T·k rows per layer
    hottest = loads.argmax(axis=1)
    assert len(set(hottest.tolist())) > 10                 # each layer its own popular experts
    assert not np.array_equal(loads[0], r.loads(T)[0])     # a fresh draw every iteration
    uni = ExpertRouter(16, 2, 4, "uniform", 1.0, np.random.default_rng(2))
    draws = np.stack([uni.loads(10) for _ in range(3000)])
    assert draws.max() <= 10
    assert draws.mean() == pytest.approx(10 * 2 / 16, rel=0.02)


def _moe(n_dense: int) -> MoEConfig:
    return MoEConfig("t-moe", d_model=64, n_layers=2, n_experts=4, top_k=2, d_expert_ffn=32,
                     n_heads=4, n_kv_heads=2, vocab_size=256, n_dense_layers=n_dense,
                     d_dense_ffn=96, max_seq_len=256)


def _h100(n: int = 1) -> ClusterSpec:
    return ClusterSpec.from_dict({"chip": {"kind": "gpu", "preset": "h100-sxm"},
                                  "chips_per_node": n,
                                  **({"intra_node": {"topology": "switch", "link_gbps": 100}}
                                     if n > 1 else {})})


def test_dense_layers_are_costed_as_the_dense_model():
    spec = _h100()
    chip, timer = chip_model(spec), CollectiveTimer(Topology(spec))
    llama = LlamaConfig("t-dense", d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ffn=96,
                        vocab_size=256, rope_theta=10000.0)
    q, c = np.array([7, 1, 1]), np.array([7, 30, 50])
    all_dense = IterationCost(_moe(2), ServePlan(), chip, timer, [0], cost_source="table")
    ref = IterationCost(llama, ServePlan(), chip, timer, [0], cost_source="table")
    assert all_dense.seconds(q, c, 3) == pytest.approx(ref.seconds(q, c, 3), rel=1e-12)
    half = IterationCost(_moe(1), ServePlan(), chip, timer, [0], cost_source="table")
    moe = IterationCost(_moe(0), ServePlan(), chip, timer, [0], cost_source="table")
    assert half.expert_loads(10).shape[0] == 1 and moe.expert_loads(10).shape[0] == 2


def test_dense_layers_and_fp8_weights_size_the_memory():
    cfg, label = standin_attention(get_config("deepseek-v3"))
    assert label is None                      # MLA is modelled: no stand-in
    chip = chip_model(load_cluster("h100-8x-nvlink"))
    mem = serve_memory(ServePlan(ep=32, weight_bytes=1), chip, cfg)
    # DeepSeek-V3's config.json: d 7168, 128 heads, q_lora_rank 1536, kv_lora_rank 512,
    # qk_nope 128, qk_rope 64, v_head 128; MLA weights + the two RMSNorms of the layer
    d, E, h, qr, r, dn, dr, dv = 7168, 256, 128, 1536, 512, 128, 64, 128
    attn = (d * qr + qr + qr * h * (dn + dr) + d * (r + dr) + r + r * h * (dn + dv)
            + h * dv * d + 2 * d)
    moe_layer = attn + d * E + 3 * d * 2048 + 3 * d * 2048 * (E // 32)
    dense_layer = attn + 3 * d * 18432
    hand = 3 * dense_layer + 58 * moe_layer + 2 * 129280 * d        # 1 byte per FP8 weight
    assert mem["weight_bytes"] == pytest.approx(hand, rel=1e-12)
    assert mem["kv_bytes_per_token"] == (r + dr) * 2 * 61           # bf16 latent cache
    red = serve_memory(ServePlan(ep=32, weight_bytes=1, redundant_experts=32), chip, cfg)
    assert red["weight_bytes"] - mem["weight_bytes"] == pytest.approx(58 * 3 * d * 2048 * 1)


def test_dispatch_volume_with_per_node_dedup_matches_enumeration():
    E, k, ep, g, d, b = 16, 4, 8, 4, 10, 1          # 2 nodes of 4 EP ranks, 2 experts per rank
    nodes, T = ep // g, 3
    inter = intra = 0.0
    subsets = list(itertools.combinations(range(E), k))
    for s in subsets:            # a token on rank 0 (node 0); expert x lives on rank x // 2
        ranks = {x // (E // ep) for x in s}
        inter += len({r // g for r in ranks} - {0})
        intra += len({r for r in ranks if r // g == 0} - {0})
    inter, intra = (T * v / len(subsets) * d * b for v in (inter, intra))
    got = a2a_bytes(T, d, b, E, k, ep, g, "deepep")
    assert got == pytest.approx((inter, intra), rel=1e-12)
    assert miss_probability(E, k, E // nodes) == pytest.approx(math.comb(8, 4) / math.comb(16, 4))
    flat, _ = a2a_bytes(T, d, b, E, k, ep, g, "flat")
    assert flat == pytest.approx(T * k * (1 - 1 / ep) * d * b)
    assert got[0] < flat                            # dedup sends less over the network


def test_fp8_dispatch_and_overlap_shorten_the_moe_layer():
    spec = _h100(4)
    chip, timer = chip_model(spec), CollectiveTimer(Topology(spec))
    cfg = _moe(0)
    q, c = np.full(8, 16), np.full(8, 16)

    def it(**kw):
        return IterationCost(cfg, ServePlan(ep=4, **kw), chip, timer, [0, 1, 2, 3],
                             cost_source="table")
    bf16, fp8 = it().a2a_seconds(32), it(dispatch_bytes=1).a2a_seconds(32)
    assert fp8 < bf16
    plain, over = it(), it(overlap_a2a=True)
    t_plain = np.mean([plain.seconds(q, c, 8) for _ in range(50)])
    t_over = np.mean([over.seconds(q, c, 8) for _ in range(50)])
    assert t_over < t_plain


def test_eplb_redundant_experts_balance_the_ranks():
    rng = np.random.default_rng(0)
    pi = np.sort(rng.pareto(1.0, 32) + 0.01)[::-1]
    plain, red = eplb_placement(pi, 8), eplb_placement(pi, 8, redundant=8)
    assert red.shape == (8, 5) and set(red.ravel()) == set(range(32))
    copies = np.bincount(red.ravel(), minlength=32)
    share = pi / copies
    assert share[red].sum(axis=1).max() < pi[plain].sum(axis=1).max()
    loads = rng.integers(0, 50, size=(3, 32))
    slots = SlotMap([red, red, red]).rank_loads(loads)
    assert (slots.reshape(3, -1).sum(axis=1) == loads.sum(axis=1)).all()   # no row lost
    with pytest.raises(PlanError, match="redundant"):
        simulate_serving(_h100(4), cfg_tiny(), ServePlan(ep=4, redundant_experts=3),
                         _one(8, 2), cost_source="table")


def test_eplb_placement_and_rank_loads_match_a_hand_computed_case():
    # 4 experts of expected loads 8, 3, 2, 1 on 2 EP ranks, 2 redundant experts. By hand:
    # replicas go to the highest load per copy: expert 0 (8 -> 4), expert 0 again (4 > 3; 8/3
    # per copy). Slots by weight, heaviest first onto the lighter rank with room: e1 (3) -> r0,
    # e0 (8/3) -> r1, e0 -> r1 (8/3 < 3), e0 -> r0 (3 < 16/3), e2 (2) -> r1 (16/3 < 17/3),
    # e3 (1) -> r0 (the only rank with room). Rank 0 expects 3 + 8/3 + 1 = 20/3, rank 1
    # 16/3 + 2 = 22/3 rows; without replicas ranks get 8 + 3 = 11 and 2 + 1 = 3.
    w = np.array([8.0, 3.0, 2.0, 1.0])
    red, plain = eplb_placement(w, 2, redundant=2), eplb_placement(w, 2)
    assert red.tolist() == [[1, 0, 3], [0, 0, 2]]
    assert rank_expected_loads(red, w) == pytest.approx([20 / 3, 22 / 3])
    assert rank_expected_loads(plain, w).tolist() == [11.0, 3.0]
    assert max_over_mean(rank_expected_loads(plain, w)) == pytest.approx(11 / 7)
    assert max_over_mean(rank_expected_loads(red, w)) == pytest.approx((22 / 3) / 7)
    # drawn loads 8, 3, 2, 1: expert 0's 8 rows over its 3 replicas as 3, 3, 2 (slot order:
    # r0's copy is its first replica, r1's two the second and third) -> 7 rows on each rank
    rows = SlotMap([red]).rank_loads(np.array([[8, 3, 2, 1]]))
    assert rows.tolist() == [[[3, 3, 1], [3, 2, 2]]]
    # 4 experts + 2 redundant over 3 ranks: no placement without the replicas exists (4 over 3),
    # so the comparison figure is NaN, not a crash (DeepSeek's 256 + 32 over EP 144 is this case)
    spec = _h100(3)
    cost = IterationCost(_moe(0), ServePlan(ep=3, redundant_experts=2), chip_model(spec),
                         CollectiveTimer(Topology(spec)), [0, 1, 2], cost_source="table")
    assert math.isnan(cost.rank_balance_plain)
    # uniform top-2 of 4 (π = 1/2 each): replicas of experts 0 and 1 (1/4 per copy); packing
    # 1/2, 1/2, 1/4 onto r0, r1, r2, then 1/4 -> r2 (full), 1/4 -> r0, 1/4 -> r1: ranks 3/4,
    # 3/4, 1/2 against a mean of 2/3
    assert cost.rank_balance_expected == pytest.approx(0.75 / (2 / 3))


def test_redundant_experts_balance_a_zipf_serving_run():
    # Mixtral-8x7B on 8 H100s, EP 8, Zipf(1.2) routing: 8 redundant experts bring the busiest
    # rank's rows from ~2.8x the mean to ~1.1x (drawn loads agree with the placement's expected
    # balance) and shorten the compute-bound prefills (TTFT); decode steps read two experts'
    # weights per rank instead of one, so TPOT grows
    reqs = poisson_requests(30, 20.0, (512, 2048), (4, 32), seed=3)
    runs = {R: simulate_serving(load_cluster("h100-8x-nvlink"), "mixtral-8x7b",
                                ServePlan(ep=8, routing="zipf", redundant_experts=R), reqs).metrics
            for R in (0, 8)}
    for m in runs.values():
        assert m["moe_rank_load_max_over_mean"] == pytest.approx(
            m["moe_rank_load_expected_max_over_mean"], rel=0.05)
        assert m["moe_rank_load_expected_max_over_mean_without_redundant"] == \
            runs[0]["moe_rank_load_expected_max_over_mean"]
    assert runs[0]["moe_rank_load_expected_max_over_mean"] > 2.0
    assert runs[8]["moe_rank_load_expected_max_over_mean"] < 1.2
    assert runs[8]["ttft_p50_s"] < 0.95 * runs[0]["ttft_p50_s"]
    assert runs[8]["tpot_p50_s"] > runs[0]["tpot_p50_s"]


def cfg_tiny() -> MoEConfig:
    return _moe(0)


def _one(P: int, O: int) -> pd.DataFrame:
    return pd.DataFrame({"arrival_s": [0.0], "prompt_tokens": [P], "output_tokens": [O]})


def test_dp_attention_ranks_get_a_share_of_the_token_budget():
    # ep=2: each rank a DP attention rank with max_batch_tokens // 2 tokens per iteration
    res = simulate_serving(_h100(2), cfg_tiny(), ServePlan(ep=2, max_batch_tokens=64),
                           _one(200, 3), cost_source="table", trace=True)
    assert res.replicas.iterations.iloc[0] == math.ceil(200 / 32) + 2
    assert res.timeline.tokens.max() == 32


def test_moe_options_on_a_dense_model_are_refused():
    with pytest.raises(PlanError, match="MoE option"):
        simulate_serving(_h100(), "llama3-8b", ServePlan(a2a="deepep"), _one(8, 2))


def test_a_config_without_attention_gets_a_labelled_stand_in():
    import dataclasses
    bare = dataclasses.replace(get_config("mixtral-8x7b"), name="bare-moe", n_heads=None,
                               n_kv_heads=None)
    cfg, label = standin_attention(bare)
    assert cfg.n_heads == 128 and "stand-in" in label
    ds, none_ds = standin_attention(get_config("deepseek-v3"))   # MLA is modelled
    assert none_ds is None and ds is get_config("deepseek-v3")
    same, none = standin_attention(get_config("mixtral-8x7b"))
    assert none is None and same is get_config("mixtral-8x7b")
