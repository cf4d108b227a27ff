"""Gradient buckets overlapped with the backward (PyTorch DDP style) and in-layer collectives on
the same network as the data-parallel traffic. Expected values are closed forms of the ring
all-reduce and of a FIFO queue of buckets, or a replay of the same two collectives on a fresh
network (what the network model predicts for the overlap)."""

from __future__ import annotations

import pytest
import simpy

from tilewright.dataflow_sim.cluster import (ClusterSpec, Network, Topology, TrainPlan,
                                             all_reduce, simulate_training)
from tilewright.models.llm_configs import get_config, param_count

B = 1.0e12          # link bytes/s
LAT = 0.5e-6        # s per link traversal; a message crosses an up-link and a down-link


def switch(n: int, gbps: float = B / 1e9) -> ClusterSpec:
    return ClusterSpec.from_dict({"name": "sw", "chip": {"kind": "gpu", "preset": "h100-sxm"},
                                  "chips_per_node": n,
                                  "intra_node": {"topology": "switch", "link_gbps": gbps,
                                                 "latency_us": LAT * 1e6}})


def ring2(nbytes: float) -> float:
    """Uncontended ring all-reduce over 2 ranks: 2(n−1)·(S/(n·B) + α), α = 2 link latencies."""
    return 2 * (nbytes / (2 * B) + 2 * LAT)


def test_bucketed_gradient_all_reduce_overlaps_the_backward_as_a_fifo_queue():
    """dp = 2, one bucket per layer. Layer j's gradients (G bytes) are final at t0 + j·b during
    the last backward; buckets all-reduce one after another, each taking c = ring2(G): the last
    ends at t0 + max_j (j·b + (L − j + 1)·c). Unbucketed: one all-reduce of L·G after the
    backward. Exposed = end − t0 − L·b."""
    cfg = get_config("llama3-8b")
    L, e = cfg.n_layers, 2
    G = param_count("llama3-8b")["layer"] * e
    plan = TrainPlan(dp=2, micro_batches=1, seq_len=256, embedding_and_head=False,
                     grad_bucket_mb=1.0)
    res = simulate_training(switch(2), "llama3-8b", plan)
    ops = res.ops
    b = float(ops.loc[(ops.phase == "backward") & (ops.kind != "comm"), "seconds"].sum())
    c = ring2(G)
    assert 0.5 * b < c < 2 * b          # the max below is not its first or last term alone
    end = max(j * b + (L - j + 1) * c for j in range(1, L + 1))
    bucketed = res.breakdown.grad_sync_exposed_s.iloc[0]
    assert bucketed == pytest.approx(end - L * b, rel=1e-9)
    whole = simulate_training(switch(2), "llama3-8b", plan.model_copy(update={"grad_bucket_mb": None}))
    assert whole.breakdown.grad_sync_exposed_s.iloc[0] == pytest.approx(ring2(L * G), rel=1e-9)
    assert bucketed <= whole.breakdown.grad_sync_exposed_s.iloc[0]
    assert res.step_seconds < whole.step_seconds
    for r in (res, whole):
        bd = r.breakdown
        assert (bd.compute_s + bd.exposed_comm_s + bd.bubble_s + bd.idle_s).to_numpy() \
            == pytest.approx(r.step_seconds, rel=1e-9)


def test_tp_all_reduce_contends_with_the_dp_bucket_on_shared_links():
    """tp = 2 × dp = 2 on a 4-chip switch; chip 0's up-link carries both its TP all-reduce
    (0 → 1) and its gradient all-reduce (0 → 2). In the last backward, bucket 0 (layer 2's
    gradients) starts all-reducing when layer 2 is done; layer 1's TP all-reduce starts b
    later and must queue behind it. Prediction: the same two collectives replayed on a fresh
    network (DP at 0, TP at b); the slowdown of the TP all-reduce is at least G/(2B) − b (it
    cannot start before the gradient message holding the up-link is through)."""
    cfg = get_config("tiny-llama")
    s = 64
    plan = TrainPlan(tp=2, dp=2, micro_batches=1, seq_len=s, embedding_and_head=False,
                     grad_bucket_mb=1e-6)
    spec = switch(4, gbps=0.05)
    net_run = simulate_training(spec, "tiny-llama", plan, trace=True)
    phase_run = simulate_training(spec, "tiny-llama", plan.model_copy(
        update={"inlayer_comm": "phase"}))
    ops = net_run.ops
    per_layer = ops[(ops.phase == "backward") & (ops.kind != "comm")].seconds.sum()
    tp_bytes = float(ops.loc[(ops.phase == "backward") & (ops.kind == "comm"),
                             "comm_bytes"].sum())           # both TP all-reduces of a layer
    D = cfg.d_model      # tp = 2 halves a layer's weights except its two RMSNorm vectors; bf16
    G = ((param_count("tiny-llama")["layer"] - 2 * D) / 2 + 2 * D) * 2

    def replay(with_dp: bool) -> float:
        env = simpy.Environment()
        net = Network(env, Topology(spec))
        out = {}

        def tp_phase():
            yield env.timeout(per_layer)
            t0 = env.now
            yield env.all_of([all_reduce(net, g, tp_bytes) for g in ([0, 1], [2, 3])])
            out["tp"] = env.now - t0
        if with_dp:
            env.all_of([all_reduce(net, g, G) for g in ([0, 2], [1, 3])])
        env.process(tp_phase())
        env.run()
        return out["tp"]

    slow, alone = replay(True), replay(False)
    assert alone == pytest.approx(2 * (tp_bytes / (2 * 0.05e9) + 2 * LAT), rel=1e-9)
    assert slow - alone >= G / (2 * 0.05e9) - per_layer > 0
    extra_net = net_run.breakdown.inlayer_comm_s.iloc[0] - phase_run.breakdown.inlayer_comm_s.iloc[0]
    assert extra_net == pytest.approx(slow - alone, rel=1e-9)
    assert net_run.step_seconds > phase_run.step_seconds
    assert cfg.n_layers == 2
