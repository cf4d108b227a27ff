"""Two-micro-batch overlap of the MoE all-to-all (DeepSeek's prefill schedule, profile-data
README "Prefilling" and its figure) against hand-computed slot sums; the SMs the all-to-all
kernels hold; the cache-hit prefill batch of the serving validation."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tilewright.dataflow_sim.cluster import (ClusterSpec, CollectiveTimer, IterationCost, PlanError,
                                             ServePlan, Topology, chip_model)
from tilewright.models.llm_configs import MoEConfig

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import serving_validation as sv  # noqa: E402


def _moe() -> MoEConfig:
    return MoEConfig("t-moe-shared", d_model=64, n_layers=2, n_experts=4, top_k=2,
                     d_expert_ffn=32, n_shared_experts=1, n_heads=4, n_kv_heads=2,
                     vocab_size=256, max_seq_len=256)


def _cost(**kw) -> IterationCost:
    spec = ClusterSpec.from_dict({"chip": {"kind": "gpu", "preset": "h100-sxm"},
                                  "chips_per_node": 4,
                                  "intra_node": {"topology": "switch", "link_gbps": 100}})
    return IterationCost(_moe(), ServePlan(ep=4, a2a="deepep", **kw), chip_model(spec),
                         CollectiveTimer(Topology(spec)), [0, 1, 2, 3], cost_source="table")


@pytest.mark.parametrize("args, by_hand", [
    # compute, shared, experts, dispatch, combine (per micro-batch comm) -> layer seconds.
    # Per micro-batch a = (C - s)/2, s/2, m/2; slots max(a+s, b) + max(a, d) + max(m, d)
    # + max(m+s, b):
    ((10.0, 2.0, 6.0, 1.0, 3.0), 5 + 4 + 3 + 4),     # compute-bound: all comm hidden = C + E
    ((2.0, 0.0, 2.0, 4.0, 6.0), 6 + 4 + 4 + 6),      # comm-bound: 2d + 2b
    ((10.0, 2.0, 2.0, 1.0, 6.0), 6 + 4 + 1 + 6),     # combine exposed in slots 1 and 4
])
def test_overlap_period_is_the_published_schedule_by_hand(args, by_hand):
    cost = _cost(overlap_a2a=True)
    assert cost.sm_scale == 1.0
    assert cost.overlap_period(*args) == pytest.approx(by_hand)
    # the old per-layer fill max(C, M) + min(C, M)/2 of the first case would be 16 + 4/2 = 18
    assert cost.overlap_period(10.0, 2.0, 6.0, 1.0, 3.0) < 18.0


def test_a2a_sms_slow_the_overlapped_compute_by_the_sm_share():
    cost = _cost(overlap_a2a=True, a2a_sms=24)
    assert cost.sm_scale == pytest.approx(132 / 108)         # H100: 132 SMs, 24 held
    # compute-bound: the layer is C + E on 108 of 132 SMs
    assert cost.overlap_period(10.0, 2.0, 6.0, 1.0, 3.0) == pytest.approx(16 * 132 / 108)
    # comm-bound: unchanged
    assert cost.overlap_period(2.0, 0.0, 2.0, 4.0, 6.0) == pytest.approx(20.0)
    with pytest.raises(PlanError, match="a2a_sms"):
        _cost(a2a_sms=24)                                     # no overlap: nothing held
    with pytest.raises(PlanError, match="a2a_sms"):
        _cost(overlap_a2a=True, a2a_sms=132)                  # no SM left for compute


def test_shared_experts_time_is_their_two_gemms_and_activation():
    cost = _cost(overlap_a2a=True)
    chip, T = cost.chip, 48
    d, f = 64, 32
    by_hand = (chip.gemm_seconds(T, d, 2 * f) + chip.gemm_seconds(T, f, d)
               + chip.vector_seconds(5 * f, 3 * f * cost.e) * T)
    assert cost.shared_seconds(T) == pytest.approx(float(by_hand), rel=1e-12)
    assert cost.shared_seconds(T) < cost._dense_seconds(T)


def test_dispatch_and_combine_parts_sum_to_the_all_to_all():
    cost = _cost(overlap_a2a=True, dispatch_bytes=1)
    d, c = cost.a2a_parts(64)
    assert d + c == cost.a2a_seconds(64)
    lat = cost.timer.topology.spec.intra_node.latency_us * 1e-6     # one node: NVLink only
    # one node, 4 ranks, 4 experts (one each), top-2: a token goes to the other 3 GPUs with
    # P(hit) = 1 - C(3,2)/C(4,2) = 1/2 each -> 64 · 3 · 1/2 · 64 features · bytes at 100 GB/s
    assert d - lat == pytest.approx(64 * 3 * 0.5 * 64 * 1 / 100e9)
    assert c - lat == pytest.approx(64 * 3 * 0.5 * 64 * cost.e / 100e9)


def test_cache_hit_prefill_batch_computes_the_uncached_ends():
    q, c = sv.prefill_batch({"prompt": 4096, "cache_hit": 0.563, "tokens_per_gpu": 16384})
    assert q.tolist() == [1790] * 9 and c.tolist() == [4096] * 9   # 4096·0.437 = 1789.95
    q, c = sv.prefill_batch({"prompt": 4096, "tokens_per_gpu": 8192})
    assert q.tolist() == c.tolist() == [4096, 4096]
    # a cached prefix makes each computed token attend to more keys: 1,790 new tokens over
    # 4,096 keys have 1790·4096 − 1790·1789/2 causal pairs, 3,201 per token against 2,048.5
    cost = _cost()
    T, C, qc, pairs = cost._batch_sums(np.array([1790]), np.array([4096]))
    assert pairs == 1790 * 4096 - 1790 * 1789 // 2
    assert pairs / T == pytest.approx(3201.5)


@pytest.mark.parametrize("args, by_hand", [
    # compute (all but the routed experts), ATTN-1 part, experts, dispatch, combine per
    # micro-batch -> max(C − A1, 2d) + E + max(A1, 2b) (the MLP slots overlap nothing)
    ((10.0, 4.0, 3.0, 1.0, 1.0), 6 + 3 + 4),          # all comm hidden: C + E
    ((10.0, 4.0, 3.0, 5.0, 1.0), 10 + 3 + 4),         # dispatch exposed
    ((10.0, 4.0, 3.0, 1.0, 3.0), 6 + 3 + 6),          # combine exposed
])
def test_decode_overlap_period_is_the_published_decode_schedule_by_hand(args, by_hand):
    assert IterationCost.decode_overlap_period(*args) == pytest.approx(by_hand)


def test_a2a_sms_slow_prefill_iterations_only():
    # decode iterations run DeepEP's low-latency kernels, which hold no SMs (profile-data
    # README "Decoding"); iterations with prefill hold a2a_sms (the same routing seed)
    dec_q, dec_c = np.full(16, 1), np.full(16, 40)
    pre_q = pre_c = np.full(4, 64)
    held, free = _cost(overlap_a2a=True, a2a_sms=24), _cost(overlap_a2a=True)
    assert held.seconds(dec_q, dec_c, 16) == free.seconds(dec_q, dec_c, 16)
    assert held.seconds(pre_q, pre_c, 4) > free.seconds(pre_q, pre_c, 4)


def test_a2a_sms_flag_reaches_the_plan_check():
    from tests.test_attention_parallel import cluster_cli
    invoke = cluster_cli()
    res = invoke(["cluster", "--model", "mixtral-8x7b", "--cluster",
                  "h100-8x-nvlink", "--mode", "serve", "--ep", "8",
                  "--a2a-sms", "24", "--requests", "2", "--cost-source", "table"])
    assert isinstance(res.exception, PlanError)
    assert "a2a_sms = 24 needs overlap_a2a" in str(res.exception)
    res = invoke(["cluster", "--model", "mixtral-8x7b", "--cluster",
                  "h100-8x-nvlink", "--mode", "train", "--a2a-sms", "24"])
    assert "--a2a-sms: a serving option" in str(res.exception)
