"""ArchSpec chips take their per-layer compute time from the compiler's Report
(``cost_source="compiler"``). Expected values come straight from ``compile_llm`` / the model's
shapes, not from the cluster code's own compile."""

from __future__ import annotations

import pytest

from tilewright.dataflow_sim.compile_flow import compile_llm
from tilewright.dataflow_sim.cluster import (ClusterSpec, ClusterSpecError, PlanError, TrainPlan,
                                             load_cluster, simulate_training)
from tilewright.dataflow_sim.cluster.compiled import cache_info, compiled_attention, compiled_layer
from tilewright.dataflow_sim.cluster.workload import Shard
from tilewright.dataflow_sim.report import report_totals
from tilewright.models.llm_configs import get_config

ARCH = {"name": "t16", "clock_mhz": 800.0,
        "tensor_engine": {"rows": 16, "cols": 16, "dataflow": "ws"},
        "offchip": {"bandwidth_gbps": 50.0, "capacity_gib": 16}}


def arch_cluster(n: int = 1) -> ClusterSpec:
    d = {"name": "archs", "chip": {"kind": "arch", "arch": ARCH}, "chips_per_node": n}
    if n > 1:
        d["intra_node"] = {"topology": "switch"}
    return ClusterSpec.from_dict(d)


def _matmul_seconds(arch, m: int, k: int, n: int, fmt: str) -> float:
    """Time of an (m×k)·(k×n) GEMM compiled on its own (torch module -> compile_module), from
    its Report's GEMM row."""
    import torch

    from tilewright.dataflow_sim.compile_flow import compile_module

    class MatMul(torch.nn.Module):
        def forward(self, a, b):
            return a @ b

    out = compile_module(MatMul(), (torch.empty(m, k, device="meta"),
                                    torch.empty(k, n, device="meta")), arch, fmt=fmt,
                         execute=False)
    rep = out.report
    return float(rep.loc[rep.kind == "bgemm", "time_cycles"].sum()) / (rep.attrs["clock_mhz"] * 1e6)


def _embedding_seconds(arch, vocab: int, d: int, tokens: int, fmt: str) -> float:
    """Forward seconds of an int8 ``nn.Embedding(vocab, d)`` lookup of ``tokens`` ids compiled on
    its own (aten.embedding -> one take_rows task), from its Report."""
    import torch

    from tilewright.dataflow_sim.compile_flow import compile_module

    with torch.device("meta"):
        emb = torch.nn.Embedding(vocab, d)
        emb.weight = torch.nn.Parameter(torch.empty(vocab, d, dtype=torch.int8),
                                        requires_grad=False)
    out = compile_module(emb, (torch.empty(tokens, dtype=torch.int64, device="meta"),), arch,
                         fmt=fmt, execute=False)
    rep = out.report
    assert list(rep.op) == ["take_rows"]
    return float(rep.time_cycles.sum()) / (rep.attrs["clock_mhz"] * 1e6)


def test_one_chip_step_is_the_sum_of_compiled_forward_and_backward_ops():
    """One chip, no network: step = m · n_layers · (forward + backward) of the layer + the LM
    head + the compiled embedding gather (forward + 2 × forward), where forward is compile_llm's Report, each forward GEMM
    (m×k·k×n) adds its dgrad (m×n·n×k) and wgrad (k×m·m×n) compiled as stand-alone matmuls,
    the fused attention adds twice its forward row and every other op twice its forward row."""
    m, s, fmt = 2, 16, "int8"
    spec = arch_cluster()
    arch, cfg = spec.arch(), get_config("tiny-llama")
    out = compile_llm("tiny-llama", arch, seq=s, batch=1, phase="prefill", fmt=fmt,
                      execute=False)
    rep, hz = out.report, out.report.attrs["clock_mhz"] * 1e6
    fwd = report_totals(rep)["total_cycles"] / hz
    bwd = 0.0
    for task, row in zip(out.program.tasks, rep.itertuples()):
        if task.kind == "bgemm":
            assert not task.batch
            bwd += _matmul_seconds(arch, task.m, task.n, task.k, fmt)     # dX = dY·Wᵀ
            bwd += _matmul_seconds(arch, task.k, task.m, task.n, fmt)     # dW = Xᵀ·dY
        else:
            bwd += 2 * row.time_cycles / hz
    # LM head: final RMSNorm, D×V projection, softmax over V (compiled independently here)
    import torch

    from tilewright.dataflow_sim.compile_flow import compile_module
    from tilewright.models.transformer import RMSNorm

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm, self.proj = RMSNorm(cfg.d_model), torch.nn.Linear(cfg.d_model,
                                                                         cfg.vocab_size, bias=False)

        def forward(self, x):
            return torch.softmax(self.proj(self.norm(x)), dim=-1)

    with torch.device("meta"):
        head = compile_module(Head(), (torch.empty(1, s, cfg.d_model),), arch, fmt=fmt,
                              execute=False)
    hrep = head.report
    hfwd = report_totals(hrep)["total_cycles"] / hz
    hbwd = sum(_matmul_seconds(arch, t.m, t.n, t.k, fmt) + _matmul_seconds(arch, t.k, t.m, t.n, fmt)
               if t.kind == "bgemm" else 2 * r.time_cycles / hz
               for t, r in zip(head.program.tasks, hrep.itertuples()))
    # embedding: nn.Embedding (int8 table, the chip's element size) compiled here on its own;
    # backward = 2 × its forward row (a non-GEMM task)
    emb = _embedding_seconds(arch, cfg.vocab_size, cfg.d_model, s, fmt)
    plan = TrainPlan(micro_batches=m, seq_len=s)
    res = simulate_training(spec, "tiny-llama", plan)
    assert res.metrics["cost_source"] == "compiler"
    expected = m * (cfg.n_layers * (fwd + bwd) + hfwd + hbwd + 3 * emb)
    assert res.step_seconds == pytest.approx(expected, rel=1e-9)
    assert res.breakdown.exposed_comm_s.iloc[0] == 0
    assert bwd < 2.5 * fwd    # sanity: not the 2x-everything rule


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


def test_expert_shard_smaller_than_top_k_compiles_with_the_balanced_local_load():
    """tiny-moe (E = 4, top-2) at ep = 4: one local expert, fewer than top_k. The chip's router
    covers all E experts (T·D·E MACs) and its expert receives the EP group's balanced load
    T·ep·k/E = T·k rows, so the grouped GEMMs hold 3·T·k·D·F MACs (gate, up, down)."""
    cfg = get_config("tiny-moe")
    spec = arch_cluster(4)
    T = 16
    rep = compiled_layer(cfg, Shard(ep=4), spec.arch(), batch=1, q_len=T, ctx_len=T)
    grouped = rep.report[rep.report.kind == "grouped_gemm"]
    assert int(grouped.macs.sum()) == 3 * T * cfg.top_k * cfg.d_model * cfg.d_expert_ffn
    router = rep.report[(rep.report.kind == "bgemm") & (rep.report.macs == T * cfg.d_model
                                                        * cfg.n_experts)]
    assert len(router) == 1
    res = simulate_training(spec, "tiny-moe", TrainPlan(ep=4, dp=4, seq_len=T, micro_batches=1,
                                                        embedding_and_head=False))
    assert res.metrics["compute_s"] == pytest.approx(
        cfg.n_layers * (rep.forward_seconds + rep.backward_seconds), rel=1e-9)


def test_serving_moe_experts_are_costed_by_the_compiler_at_the_drawn_loads():
    """The grouped expert GEMMs re-costed at a load vector equal the grouped-GEMM rows of the
    compiler's own Report of an executed tiny-moe layer (real routing counts from the functional
    run); serving a prompt with an expert trace differs from the balanced trace by exactly
    n_layers × the difference of those compiled expert times."""
    import numpy as np

    from tilewright.dataflow_sim.cluster import ServePlan, simulate_serving

    spec = arch_cluster()
    cfg, arch = get_config("tiny-moe"), spec.arch()
    ran = compile_llm("tiny-moe", arch, seq=16, batch=1, fmt="int8", execute=True)
    counts = next(t.example_counts for t in ran.program.tasks if t.kind == "grouped_gemm")
    ref = ran.report
    ref_s = ref.loc[ref.kind == "grouped_gemm", "time_cycles"].sum() / (ref.attrs["clock_mhz"] * 1e6)
    rep = compiled_layer(cfg, Shard(), arch, batch=1, q_len=1, ctx_len=1)
    assert rep.expert_seconds(np.array(counts)) == pytest.approx(ref_s, rel=1e-12)

    P = 24
    req = __import__("pandas").DataFrame({"arrival_s": [0.0], "prompt_tokens": [P],
                                          "output_tokens": [1]})
    plan = ServePlan(routing="trace")
    skew = np.zeros(P * cfg.top_k, dtype=np.int64)                 # every slot to expert 0
    even = np.arange(P * cfg.top_k, dtype=np.int64) % cfg.n_experts
    ttft = {}
    for name, tr in (("skew", skew), ("even", even)):
        out = simulate_serving(spec, "tiny-moe", plan, req, expert_trace=tr)
        assert out.metrics["cost_source"] == "compiler"
        ttft[name] = out.requests.ttft_s.iloc[0]
    loads = {"skew": np.bincount(skew, minlength=cfg.n_experts),
             "even": np.bincount(even, minlength=cfg.n_experts)}
    assert ttft["skew"] - ttft["even"] == pytest.approx(
        cfg.n_layers * (rep.expert_seconds(loads["skew"]) - rep.expert_seconds(loads["even"])),
        rel=1e-9)
    assert ttft["skew"] != ttft["even"]   # one chip: fewer active experts, fewer GEMM fills


def test_serving_dense_part_is_compiled_at_power_of_two_buckets_and_interpolated():
    from tilewright.dataflow_sim.cluster import (CollectiveTimer, IterationCost, ServePlan,
                                                 Topology, chip_model, poisson_requests,
                                                 simulate_serving)
    spec = arch_cluster()
    cfg, plan = get_config("tiny-llama"), ServePlan(max_batch_tokens=48)
    cost = IterationCost(cfg, plan, chip_model(spec), CollectiveTimer(Topology(spec)), [0])
    assert cost.cost_source == "compiler"

    def layer(T: int) -> float:
        # the token part: the compiled layer without its one-key attention task and the
        # quantization of that task's q, k, v (each sequence's real attention, operands
        # quantized, is added by attention_seconds)
        rep = compiled_layer(cfg, Shard(), spec.arch(), batch=T, q_len=1, ctx_len=1)
        att = [t for t in rep.program.tasks if t.kind == "attention"]
        assert len(att) == 1
        side = [t.name for t in rep.program.tasks
                if t.kind == "quantize" and t.out in (att[0].q, att[0].k, att[0].v)]
        assert len(side) == 3                       # int8 design: q, k and v quantized
        keep = (rep.report.kind != "attention") & ~rep.report.task.isin(side)
        return rep.report.loc[keep, "time_cycles"].sum() / rep.hz
    assert cost._dense_seconds(16) == pytest.approx(layer(16), rel=1e-12)
    assert cost._dense_seconds(24) == pytest.approx((layer(16) + layer(32)) / 2, rel=1e-12)
    assert cost._dense_seconds(40) == pytest.approx(layer(32) + (layer(48) - layer(32)) / 2,
                                                    rel=1e-12)    # capped at max_batch_tokens
    reqs = poisson_requests(20, 50.0, 16, 4, seed=0)
    comp = simulate_serving(spec, "tiny-llama", plan, reqs)
    tab = simulate_serving(spec, "tiny-llama", plan, reqs, cost_source="table")
    assert comp.metrics["cost_source"] == "compiler" and tab.metrics["cost_source"] == "table"
    assert comp.metrics["finished"] == tab.metrics["finished"] == 20


def test_serving_head_embedding_and_attention_come_from_the_compiler():
    """IterationCost (compiler): the LM head at n rows equals an independently compiled head
    module; the embedding equals an independently compiled int8 nn.Embedding; one decode
    sequence's attention over 64 keys contains exactly the fused attention task of the
    tiny-llama decode layer compiled by compile_llm (63 cached + 1 new token); attention over 96
    keys is the mean of 64 and 128 (bilinear buckets) and sums over sequences."""
    import numpy as np
    import torch

    from tilewright.dataflow_sim.compile_flow import compile_module
    from tilewright.dataflow_sim.cluster import (CollectiveTimer, IterationCost, ServePlan,
                                                 Topology, chip_model)
    from tilewright.models.transformer import RMSNorm

    spec = arch_cluster()
    arch, cfg = spec.arch(), get_config("tiny-llama")
    cost = IterationCost(cfg, ServePlan(max_batch_tokens=64, max_seqs=8), chip_model(spec),
                         CollectiveTimer(Topology(spec)), [0])
    hz = arch.clock_mhz * 1e6

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm, self.proj = RMSNorm(cfg.d_model), torch.nn.Linear(cfg.d_model,
                                                                         cfg.vocab_size, bias=False)

        def forward(self, x):
            return torch.softmax(self.proj(self.norm(x)), dim=-1)

    with torch.device("meta"):
        head = compile_module(Head(), (torch.empty(1, 4, cfg.d_model),), arch, fmt="int8",
                              execute=False)
    assert cost.head_seconds(4) == pytest.approx(head.report.time_cycles.sum() / hz, rel=1e-12)
    assert cost.embed_seconds(16) == pytest.approx(
        _embedding_seconds(arch, cfg.vocab_size, cfg.d_model, 16, "int8"), rel=1e-12)

    dec = compile_llm("tiny-llama", arch, seq=64, batch=1, phase="decode", fmt="int8",
                      execute=False).report
    fused = dec.loc[dec.kind == "attention", "time_cycles"].sum() / hz
    a64 = cost.attention_seconds(np.array([1]), np.array([64]))
    assert fused > 0 and a64 >= fused
    core = compiled_attention(cfg, Shard(), arch, q_len=1, ctx_len=64).report
    assert core.loc[core.kind == "attention", "time_cycles"].sum() / hz == pytest.approx(fused)
    a128 = cost.attention_seconds(np.array([1]), np.array([128]))
    assert cost.attention_seconds(np.array([1]), np.array([96])) == pytest.approx(
        (a64 + a128) / 2, rel=1e-12)
    assert cost.attention_seconds(np.array([1, 1]), np.array([64, 128])) == pytest.approx(
        a64 + a128, rel=1e-12)
    assert cost.attention_seconds(np.array([16]), np.array([64])) > a64
