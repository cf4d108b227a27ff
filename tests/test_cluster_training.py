"""Training step: one chip equals the sum of per-op costs; pipeline bubbles equal their closed
forms; impossible plans are refused with the numbers. Expected values are built here from the
model's shapes, ``dataflow_sim.cycle`` and the documented roofline — not from captured runs."""

from __future__ import annotations

import json

import pytest

from tilewright.arch import ArchSpec
from tilewright.dataflow_sim.cluster import (ClusterSpec, ClusterSpecError, PlanError, TrainPlan, load_cluster,
                                             simulate_training)
from tilewright.dataflow_sim.cluster.workload import Shard, layer_ops
from tilewright.dataflow_sim.cycle import gemm_cycles
from tilewright.models.llm_configs import LlamaConfig, param_count

LANES = 32
ARCH = {"name": "t16", "clock_mhz": 800.0,
        "tensor_engine": {"rows": 16, "cols": 16, "dataflow": "ws"},
        "vector_unit": {"lanes": LANES},
        "offchip": {"bandwidth_gbps": 50.0, "capacity_gib": 16}}
SMALL = LlamaConfig("small-llama", d_model=128, n_layers=4, n_heads=8, n_kv_heads=2, d_ffn=256,
                    vocab_size=512, rope_theta=1e4)


def arch_cluster(n: int = 1, **fabric) -> ClusterSpec:
    d = {"name": "archs", "chip": {"kind": "arch", "arch": ARCH}, "chips_per_node": n}
    if n > 1:
        d["intra_node"] = {"topology": "switch", **fabric}
    return ClusterSpec.from_dict(d)


# ---- independent expectation: the layer as the model defines it, costed by the stated rules ----
def _gemm(m: int, k: int, n: int) -> float:
    a = ArchSpec.from_dict(ARCH)
    return gemm_cycles(a, m, k, n).cycles / (a.clock_mhz * 1e6)


def _vec(flops: float, nbytes: float) -> float:
    return max(flops / (LANES * ARCH["clock_mhz"] * 1e6), nbytes / (ARCH["offchip"]["bandwidth_gbps"] * 1e9))


def layer_seconds(cfg: LlamaConfig, seqs: list[tuple[int, int]], backward: bool = False) -> float:
    """One Llama layer on one int8 chip (e = 1 byte) for sequences of (q new, c keys) tokens."""
    D, H, Hkv, F = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.d_ffn
    hd, g, T = D // H, H // Hkv, sum(q for q, _ in seqs)
    shapes = [(T, D, (H + 2 * Hkv) * hd), (T, H * hd, D), (T, D, 2 * F), (T, F, D)]
    shapes += [s for q, c in seqs for s in [(g * q, hd, c), (g * q, c, hd)] * Hkv]
    if backward:   # dA = dC·Bᵀ (m×n×k), dB = Aᵀ·dC (k×m×n)
        shapes = [s for m, k, n in shapes for s in ((m, n, k), (k, m, n))]
    qc = sum(q * c for q, c in seqs)
    vec = [(4 * D * T, 2 * D * T), (3 * (H + Hkv) * hd * T, 2 * (H + Hkv) * hd * T),
           (0, 2 * Hkv * hd * T), (D * T, 3 * D * T), (4 * D * T, 2 * D * T), (D * T, 3 * D * T),
           (5 * F * T, 3 * F * T), (5 * H * qc, 2 * H * qc)]
    k = 2 if backward else 1
    return sum(_gemm(*s) for s in shapes) + sum(_vec(k * f, k * b) for f, b in vec)


def head_seconds(cfg: LlamaConfig, rows: int, backward: bool = False) -> float:
    D, V = cfg.d_model, cfg.vocab_size
    k = 2 if backward else 1
    g = [(rows, D, V)] if not backward else [(rows, V, D), (D, rows, V)]
    return _vec(k * 4 * rows * D, k * 2 * rows * D) + sum(_gemm(*s) for s in g) \
        + _vec(k * 5 * rows * V, k * 2 * rows * V)


def embed_seconds(cfg: LlamaConfig, tokens: int, backward: bool = False) -> float:
    k = 2 if backward else 1
    return _vec(k * tokens * cfg.d_model, k * (2 * tokens * cfg.d_model + 4 * tokens))


@pytest.mark.parametrize("with_head", [False, True])
def test_one_chip_step_is_the_sum_of_per_op_costs(with_head):
    m, b, s = 3, 2, 32
    plan = TrainPlan(micro_batches=m, micro_batch_size=b, seq_len=s, embedding_and_head=with_head)
    res = simulate_training(arch_cluster(), SMALL, plan, cost_source="table")
    seqs = [(s, s)] * b
    per_mb = SMALL.n_layers * (layer_seconds(SMALL, seqs) + layer_seconds(SMALL, seqs, True))
    if with_head:
        per_mb += embed_seconds(SMALL, b * s) + embed_seconds(SMALL, b * s, True) \
            + head_seconds(SMALL, b * s) + head_seconds(SMALL, b * s, True)
    assert res.step_seconds == pytest.approx(m * per_mb, rel=1e-9)
    assert res.breakdown.exposed_comm_s.iloc[0] == 0 and res.breakdown.bubble_s.iloc[0] == pytest.approx(0, abs=1e-12)


def test_tp_shards_sum_to_the_model_gemm_flops():
    """Σ per-chip projection FLOPs × tp = 2·tokens·(layer weights), weights from param_count."""
    T = 1024
    weights = param_count("llama3-8b")["layer"] - 2 * 4096      # minus the two RMSNorm vectors
    for tp in (1, 2, 8):
        ops = layer_ops("llama3-8b", Shard(tp=tp), batch=1, q_len=T, ctx_len=T, element_bytes=2)
        proj = ops[ops.name.isin(["qkv_proj", "o_proj", "ffn_gate_up", "ffn_down"])]
        assert proj.flops.sum() * tp == 2 * T * weights
        comm = ops[ops.kind == "comm"]
        assert len(comm) == (2 if tp > 1 else 0)


def fast_net(n: int) -> ClusterSpec:
    """n H100s on a network so fast that pipeline messages cost < 1e-6 of a stage."""
    return ClusterSpec.from_dict({"name": "fast", "chip": {"kind": "gpu", "preset": "h100-sxm"},
                                  "chips_per_node": n,
                                  "intra_node": {"topology": "switch", "link_gbps": 1e9}})


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (8, 8), (4, 1)])
def test_1f1b_bubble_matches_closed_form(p, m):
    plan = TrainPlan(pp=p, micro_batches=m, seq_len=256, embedding_and_head=False)
    res = simulate_training(fast_net(p), "llama3-8b", plan)
    frac = (p - 1) / (m + p - 1)
    assert abs(res.metrics["bubble_fraction_rank0"] - frac) <= 0.01 * frac
    comp = res.breakdown.compute_s.iloc[0]          # m·(t_f + t_b)
    assert res.step_seconds == pytest.approx(comp * (m + p - 1) / m, rel=0.01)


@pytest.mark.parametrize("p,m,v", [(4, 8, 2), (2, 4, 4)])
def test_interleaved_bubble_matches_closed_form(p, m, v):
    plan = TrainPlan(pp=p, micro_batches=m, seq_len=256, schedule="interleaved",
                     virtual_stages=v, embedding_and_head=False)
    res = simulate_training(fast_net(p), "llama3-8b", plan)
    frac = (p - 1) / (v * m + p - 1)
    assert abs(res.metrics["bubble_fraction_rank0"] - frac) <= 0.01 * frac


def test_dp_tp_pp_step_has_every_part_and_a_trace(tmp_path):
    spec = load_cluster("h100-64x-ib")
    plan = TrainPlan(dp=2, tp=8, pp=4, micro_batches=4, seq_len=1024)
    res = simulate_training(spec, "llama3-8b", plan, trace=True)
    b = res.breakdown
    assert (b.inlayer_comm_s > 0).all() and (b.grad_sync_s > 0).all() and (b.bubble_s > 0).all()
    total = b.compute_s + b.exposed_comm_s + b.bubble_s + b.idle_s
    assert total.to_numpy() == pytest.approx(res.step_seconds, rel=1e-9)
    path = res.trace.save(tmp_path / "t.json")
    ev = json.loads(path.read_text())["traceEvents"]
    assert {e["ph"] for e in ev} == {"X"}
    assert sum(e["cat"] == "compute" for e in ev) == 2 * 4 * 2 * 4
    # one DDP bucket per layer: a layer's bf16 gradients on a tp=8 chip, 2·(params/8) B ≈ 54 MB,
    # exceed the 25 MiB bucket on their own; 8 layers per pipeline rank, 4 ranks
    assert 2 * param_count("llama3-8b")["layer"] / 8 > 25 * 2**20
    assert sum(e["cat"] == "comm" for e in ev) == 4 * 8
    assert 0 < res.metrics["gemm_utilization"] < 1


def test_moe_expert_parallel_and_sequence_parallel_add_their_collectives():
    spec = fast_net(4)
    moe = simulate_training(spec, "tiny-moe", TrainPlan(dp=4, ep=2, micro_batches=1, seq_len=256))
    assert set(moe.ops.loc[moe.ops.kind == "comm", "collective"]) == {"all_to_all"}
    assert moe.breakdown.inlayer_comm_s.iloc[0] > 0
    gemms = moe.ops[moe.ops.name == "expert_gate_up"]
    # 256 tokens × 2 EP ranks × top-2 spread evenly over 4 experts, 2 experts per chip
    assert gemms.m.iloc[0] == 256 * 2 * 2 // 4 and gemms["count"].iloc[0] == 2
    cp = simulate_training(spec, "llama3-8b", TrainPlan(sp=4, micro_batches=1, seq_len=1024))
    comm = cp.ops[cp.ops.kind == "comm"]
    assert list(comm.collective) == ["all_gather", "reduce_scatter"]


@pytest.mark.parametrize("plan,n,needle", [
    (TrainPlan(tp=3, dp=1), 3, "tp=3 does not divide n_heads = 32 of llama3-8b"),
    (TrainPlan(pp=40), 40, "pp=40 pipeline stages > n_layers = 32 of llama3-8b"),
    (TrainPlan(dp=2), 4, "dp·tp·pp·sp = 2·1·1·1 = 2 chips but cluster fast has 4"),
    (TrainPlan(dp=2, ep=2), 2, "ep=2 but llama3-8b has no experts"),
    (TrainPlan(pp=2, schedule="interleaved", virtual_stages=2, micro_batches=3), 2,
     "micro_batches (3) to be a multiple of pp=2"),
    (TrainPlan(pp=3), 3, "n_layers = 32 of llama3-8b is not divisible by pp·virtual_stages = 3·1"),
])
def test_impossible_plans_are_refused(plan, n, needle):
    with pytest.raises(PlanError) as err:
        simulate_training(fast_net(n), "llama3-8b", plan)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_model_that_does_not_fit_is_reported_with_numbers():
    with pytest.raises(PlanError) as err:
        simulate_training(load_cluster("h100-8x-nvlink"), "llama3-70b", TrainPlan(tp=8))
    msg = str(err.value)
    assert "llama3-70b does not fit" in msg and "GiB per chip" in msg
    assert "h100-sxm has 74.5 GiB" in msg and "\n" not in msg


@pytest.mark.parametrize("model,needle", [
    ("deepseek-v3", "an MoE model with MLA attention is not modelled"),
    ("gpt5", "unknown LLM config 'gpt5'"),
])
def test_models_outside_the_cluster_workload_are_refused(model, needle):
    with pytest.raises(ClusterSpecError, match=needle):
        simulate_training(fast_net(1), model, TrainPlan())


def test_all_five_parallelisms_at_once():
    """dp=2 × sp=2 × tp=2 × pp=2 on 16 chips, ep=2 over the dp·sp ranks, interleaved-free."""
    spec = ClusterSpec.from_dict({"name": "16", "chip": {"kind": "gpu", "preset": "h100-sxm"},
                                  "nodes": 4, "chips_per_node": 4,
                                  "intra_node": {"topology": "switch", "link_gbps": 450},
                                  "inter_node": {"topology": "fat_tree", "link_gbps": 50,
                                                 "nodes_per_leaf": 2, "planes": 2}})
    plan = TrainPlan(dp=2, sp=2, tp=2, pp=2, ep=2, micro_batches=4, seq_len=128)
    res = simulate_training(spec, "tiny-moe", plan)
    assert set(res.ops.collective.dropna()) == {"all_reduce", "all_gather", "reduce_scatter",
                                                "all_to_all"}
    b = res.breakdown
    total = b.compute_s + b.exposed_comm_s + b.bubble_s + b.idle_s
    assert total.to_numpy() == pytest.approx(res.step_seconds, rel=1e-9)
    assert res.metrics["network_messages"] > 0


# ---- unequal pipeline stages (plan.stage_layers) ------------------------------------------------
FOUR = LlamaConfig("four-layer-8b", d_model=4096, n_layers=4, n_heads=32, n_kv_heads=8,
                   d_ffn=14336, vocab_size=128256, rope_theta=5e5)


def one_f_one_b_step(f: list[float], b: list[float], m: int) -> float:
    """Step time of Megatron's 1F1B on stages with forward f[i] and backward b[i] seconds per
    micro-batch and free transfers: rank r runs min(p − r − 1, m) warm-up forwards, then
    alternates forward and backward; F(r, k) needs F(r − 1, k), B(r, k) needs B(r + 1, k) (the
    last stage: its own F(r, k)); each op also waits for the rank's previous op. The longest
    path of that graph, by hand (no simulator)."""
    p = len(f)
    orders = []
    for r in range(p):
        w = min(p - r - 1, m)
        o = [("F", k) for k in range(w)]
        for i in range(m - w):
            o += [("F", w + i), ("B", i)]
        orders.append(o + [("B", k) for k in range(m - w, m)])
    end: dict[tuple, float] = {}
    pos, free = [0] * p, [0.0] * p
    while any(pos[r] < len(orders[r]) for r in range(p)):
        for r in range(p):
            while pos[r] < len(orders[r]):
                kind, k = orders[r][pos[r]]
                dep = (r - 1, "F", k) if kind == "F" else \
                    ((r + 1, "B", k) if r < p - 1 else (r, "F", k))
                if kind == "F" and r == 0:
                    dep = None
                if dep is not None and dep not in end:
                    break
                t0 = max(free[r], end[dep] if dep is not None else 0.0)
                free[r] = end[(r, kind, k)] = t0 + (f[r] if kind == "F" else b[r])
                pos[r] += 1
    return max(end.values())


@pytest.mark.parametrize("layers", [(2, 2), (1, 3), (3, 1), (1, 2, 1), (2, 1, 1)])
def test_unequal_stages_match_the_1f1b_schedule_by_hand(layers):
    """Stage i holds L_i layers of SMALL (no embedding/head): its forward is L_i·t_f and its
    backward L_i·t_b per micro-batch, t_f and t_b one layer's per-op costs built above
    (layer_seconds). The step equals :func:`one_f_one_b_step`; when the last stage is the
    slowest that is the closed form Σ_{j<p−1} L_j·u + m·L_{p−1}·u, u = t_f + t_b ((2, 2):
    (m + 1)·2u, the classic (m + p − 1) stage times; a slower earlier stage can starve waiting
    for the round trip through the later ones, so it has no such form). Rank 0's bubble is
    the step minus its compute."""
    m, bsz, s, p = 4, 2, 32, len(layers)
    tf = layer_seconds(SMALL, [(s, s)] * bsz)
    tb = layer_seconds(SMALL, [(s, s)] * bsz, backward=True)
    plan = TrainPlan(pp=p, micro_batches=m, micro_batch_size=bsz, seq_len=s,
                     embedding_and_head=False, stage_layers=layers)
    res = simulate_training(arch_cluster(p, link_gbps=1e9, latency_us=0.0), SMALL, plan,
                            cost_source="table")
    step = one_f_one_b_step([L * tf for L in layers], [L * tb for L in layers], m)
    if layers[-1] == max(layers):
        u = tf + tb
        assert step == pytest.approx(sum(layers[:-1]) * u + m * layers[-1] * u, rel=1e-12)
    assert list(res.breakdown.compute_s) == pytest.approx([m * L * (tf + tb) for L in layers],
                                                         rel=1e-9)
    assert res.step_seconds == pytest.approx(step, rel=1e-6)
    assert res.breakdown.bubble_s.iloc[0] == pytest.approx(step - m * layers[0] * (tf + tb),
                                                           rel=1e-5)


@pytest.mark.parametrize("pp,layers", [(2, (0, 4)), (4, None), (4, (1, 1, 1, 1))])
def test_every_chunk_syncs_its_gradients(pp, layers):
    """Every pipeline rank all-reduces its gradients over the data-parallel ranks: a chunk of
    one layer (its last backward is one piece), and a chunk of 0 layers holding the embedding
    alone (Llama 3's split taken to one-layer chunks), whose gradient is vocab × d_model."""
    plan = TrainPlan(dp=2, pp=pp, micro_batches=2, seq_len=256, stage_layers=layers)
    res = simulate_training(fast_net(2 * pp), FOUR, plan)
    assert (res.breakdown.grad_sync_s > 0).all() and (res.breakdown.compute_s > 0).all()


@pytest.mark.parametrize("layers,msg", [((1, 2), "summing to 3"), ((1, 1, 2), "got 3 counts"),
                                        ((5, -1), "counts ≥ 0")])
def test_bad_stage_layers_are_refused(layers, msg):
    plan = TrainPlan(pp=2, micro_batches=2, seq_len=256, stage_layers=layers)
    with pytest.raises(PlanError, match="stage_layers") as e:
        simulate_training(fast_net(2), FOUR, plan)
    assert "pp·virtual_stages" in str(e.value)
