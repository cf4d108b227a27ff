"""ArchSpec chips take their per-layer compute time from the compiler's Report
(``cost_source="compiler"``). Expected values come straight from ``compile_llm`` / the model's
shapes, not from the cluster code's own compile."""

from __future__ import annotations

import pytest

from tilewright.compile_flow import compile_llm
from tilewright.dataflow_sim.cluster import (ClusterSpec, ClusterSpecError, PlanError, TrainPlan,
                                             load_cluster, simulate_training)
from tilewright.dataflow_sim.cluster.compiled import cache_info, compiled_layer
from tilewright.dataflow_sim.cluster.workload import Shard
from tilewright.dataflow_sim.report import report_totals
from tilewright.models.llm_configs import get_config

ARCH = {"name": "t16", "clock_mhz": 800.0,
        "tensor_engine": {"rows": 16, "cols": 16, "dataflow": "ws"},
        "offchip": {"bandwidth_gbps": 50.0}}


def arch_cluster(n: int = 1) -> ClusterSpec:
    d = {"name": "archs", "chip": {"kind": "arch", "arch": ARCH, "hbm_gib": 16,
                                   "vector_ops_per_cycle": 32}, "chips_per_node": n}
    if n > 1:
        d["intra_node"] = {"topology": "switch"}
    return ClusterSpec.from_dict(d)


@pytest.mark.parametrize("name", ["tiny-llama"])
def test_one_chip_step_is_the_compiler_report_times_the_backward_factor(name):
    """Step = m · n_layers · (fwd + 2·fwd_gemm + 2·fwd_non_gemm), fwd from compile_llm's Report."""
    m, s = 3, 16
    spec = arch_cluster()
    arch = spec.arch()
    out = compile_llm(name, arch, seq=s, batch=1, phase="prefill", fmt="int8", execute=False)
    rep = out.report
    clock = rep.attrs["clock_mhz"] * 1e6
    fwd = report_totals(rep)["total_cycles"] / clock
    gemm = rep.loc[rep.macs > 0, "time_cycles"].sum() / clock
    per_layer = fwd + 2 * gemm + 2 * (fwd - gemm)
    plan = TrainPlan(micro_batches=m, seq_len=s, embedding_and_head=False)
    res = simulate_training(spec, name, plan)
    assert res.metrics["cost_source"] == "compiler"
    assert res.step_seconds == pytest.approx(m * get_config(name).n_layers * per_layer, rel=1e-9)
    assert res.breakdown.exposed_comm_s.iloc[0] == 0


def test_tp2_halves_the_per_chip_gemm_macs():
    """Closed form: a Llama layer's GEMM MACs are T·(D·(H+2Hkv)·hd + H·hd·D + 3·D·F) + attention
    2·H·q·c·hd; every term is divided by tp when heads, KV heads and F are."""
    cfg, arch = get_config("llama3-8b"), load_cluster("torus-1024").arch()
    T = 256
    D, H, Hkv, F = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.d_ffn
    hd = D // H
    proj = T * (D * (H + 2 * Hkv) * hd + H * hd * D + 3 * D * F)
    macs = {tp: compiled_layer(cfg, Shard(tp=tp), arch, batch=1, q_len=T, ctx_len=T).gemm_macs
            for tp in (1, 2)}
    assert macs[2] * 2 == macs[1]
    attn = macs[1] - proj
    assert 0 < attn <= 2 * H * T * T * hd          # the compiler may skip masked work, no more


def test_compiles_are_cached_and_gpu_presets_keep_the_roofline():
    spec = arch_cluster()
    plan = TrainPlan(micro_batches=2, seq_len=16)
    simulate_training(spec, "tiny-llama", plan)
    before = cache_info()["misses"]
    res = simulate_training(spec, "tiny-llama", plan)
    assert cache_info()["misses"] == before and res.metrics["layer_compiles"] == 0
    table = simulate_training(spec, "tiny-llama", plan, cost_source="table")
    assert table.metrics["cost_source"] == "table" and table.step_seconds > 0
    gpu = ClusterSpec.from_dict({"name": "g", "chip": {"kind": "gpu", "preset": "h100-sxm"}})
    assert simulate_training(gpu, "tiny-llama", plan).metrics["cost_source"] == "table"
    with pytest.raises(ClusterSpecError, match="GPU preset"):
        simulate_training(gpu, "tiny-llama", plan, cost_source="compiler")


def test_sharded_layers_are_compiled_and_the_network_still_times_collectives():
    """TP×SP and EP shards: per-rank compute = m · n_layers · (fwd + bwd) of the compiled shard
    (SP: s/sp new tokens attending to s keys); in-layer collectives equal the table path's."""
    m = 2
    for model, n, plan, shard in [
            ("tiny-llama", 4, TrainPlan(tp=2, sp=2, seq_len=32, micro_batches=m,
                                        embedding_and_head=False), Shard(tp=2, sp=2)),
            ("tiny-moe", 2, TrainPlan(ep=2, dp=2, seq_len=32, micro_batches=m,
                                      embedding_and_head=False), Shard(ep=2))]:
        spec = arch_cluster(n)
        cfg = get_config(model)
        comp = simulate_training(spec, model, plan)
        tab = simulate_training(spec, model, plan, cost_source="table")
        rep = compiled_layer(cfg, shard, spec.arch(), batch=1, q_len=32 // shard.sp, ctx_len=32)
        assert comp.metrics["compute_s"] == pytest.approx(
            m * cfg.n_layers * (rep.forward_seconds + rep.backward_seconds), rel=1e-9)
        assert comp.metrics["exposed_comm_s"] == pytest.approx(tab.metrics["exposed_comm_s"],
                                                               rel=1e-9)
        assert comp.metrics["exposed_comm_s"] > 0


def test_expert_shard_smaller_than_top_k_is_refused_clearly():
    spec = arch_cluster(4)
    with pytest.raises(PlanError, match="cost_source='table'"):
        simulate_training(spec, "tiny-moe", TrainPlan(ep=4, dp=4, seq_len=16, micro_batches=1))


def test_serving_dense_part_is_compiled_at_power_of_two_buckets_and_interpolated():
    from tilewright.dataflow_sim.cluster import (CollectiveTimer, IterationCost, ServePlan,
                                                 Topology, chip_model, poisson_requests,
                                                 simulate_serving)
    spec = arch_cluster()
    cfg, plan = get_config("tiny-llama"), ServePlan(max_batch_tokens=48)
    cost = IterationCost(cfg, plan, chip_model(spec), CollectiveTimer(Topology(spec)), [0])
    assert cost.cost_source == "compiler"

    def layer(T: int) -> float:
        return compiled_layer(cfg, Shard(), spec.arch(), batch=T, q_len=1,
                              ctx_len=1).forward_seconds
    assert cost._dense_seconds(16) == pytest.approx(layer(16), rel=1e-12)
    assert cost._dense_seconds(24) == pytest.approx((layer(16) + layer(32)) / 2, rel=1e-12)
    assert cost._dense_seconds(40) == pytest.approx(layer(32) + (layer(48) - layer(32)) / 2,
                                                    rel=1e-12)    # capped at max_batch_tokens
    reqs = poisson_requests(20, 50.0, 16, 4, seed=0)
    comp = simulate_serving(spec, "tiny-llama", plan, reqs)
    tab = simulate_serving(spec, "tiny-llama", plan, reqs, cost_source="table")
    assert comp.metrics["cost_source"] == "compiler" and tab.metrics["cost_source"] == "table"
    assert comp.metrics["finished"] == tab.metrics["finished"] == 20
    assert simulate_serving(spec, "tiny-moe", plan, reqs).metrics["cost_source"] == "table"
