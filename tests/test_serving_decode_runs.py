"""Decode-only runs computed in bulk (:mod:`tilewright.dataflow_sim.cluster.decode_run`) give the
serving simulation's results to the last bit: every per-request time (TTFT, TPOT, e2e, finish),
every metric (goodput, energy, utilization, ...), the replica table and the timeline equal the
event-level loop's (``decode_runs=False``, one SimPy event per iteration) on seeded workloads —
colocated, P/D with a power-capped decode pool, Mamba, a KV-starved replica that preempts,
simultaneous arrivals, and an arrival landing exactly on an iteration's end (which falls back to
the event-level loop) — and MoE with EP > 1 (DP attention with per-rank KV pools that preempt,
attention TP apart from the experts, EPLB, DeepEP/FP8 dispatch, overlap, dense leading layers, a
routing trace), whose routing draws made for iterations past a run's end are undone — and with
pipeline stages (PP 2 and 4, TP, P/D, MoE; stage sends that would queue or share links with
other transfers keep the event-level loop). The run's block arithmetic is checked against a per-iteration count kept
here."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from tilewright.dataflow_sim.cluster import (ClusterSpec, ServePlan, load_cluster,
                                             poisson_requests, simulate_serving)
from tilewright.dataflow_sim.cluster import serving as serving_mod
from tilewright.dataflow_sim.cluster.decode_run import DecodeRun
from tilewright.dataflow_sim.cluster.serve_slo import SLO

#: metrics that measure the simulator, not the simulated system
SIM_COST = ("events", "wall_s", "events_per_s")


def assert_same_run(fast, slow) -> None:
    """Bit-equal results; the bulk path scheduled fewer SimPy events (it did engage)."""
    pd.testing.assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    pd.testing.assert_frame_equal(fast.replicas, slow.replicas, check_exact=True)
    pd.testing.assert_frame_equal(fast.timeline, slow.timeline, check_exact=True)
    for k, v in slow.metrics.items():
        if k in SIM_COST:
            continue
        w = fast.metrics[k]
        if k == "components":     # summed in another order in bulk: equal to rounding
            assert_same_components(w, v)
            continue
        assert w == v or (isinstance(v, float) and math.isnan(v) and math.isnan(w)), k
    assert set(fast.metrics) == set(slow.metrics)


def assert_same_components(fast: dict, slow: dict) -> None:
    """The run's components (``metrics["components"]``) computed in bulk equal the event-level
    loop's to rounding (1e-9 of the window); the same pools and keys."""
    assert fast.keys() == slow.keys() and fast["pools"].keys() == slow["pools"].keys()
    tol = 1e-9 * slow["window_s"]
    for role, p in slow["pools"].items():
        for k, v in p.items():
            if isinstance(v, dict):
                assert fast["pools"][role][k] == pytest.approx(v, rel=1e-9), (role, k)
            else:
                assert fast["pools"][role][k] == pytest.approx(v, abs=tol), (role, k)


def both(*args, **kw):
    return (simulate_serving(*args, decode_runs=True, **kw),
            simulate_serving(*args, decode_runs=False, **kw))


def gpu_pair() -> ClusterSpec:
    """Two H100s: llama3-70b at TP 2 leaves ~8.8 k tokens of KV, so long requests preempt."""
    return ClusterSpec.from_dict({
        "name": "h100x2", "chip": {"kind": "gpu", "preset": "h100-sxm"}, "chips_per_node": 2,
        "intra_node": {"topology": "switch", "link_gbps": 450.0, "latency_us": 0.5}})


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_colocated_runs_equal_the_event_level_loop(seed):
    reqs = poisson_requests(150, 25.0, (32, 1500), (1, 300), seed=seed)
    fast, slow = both(load_cluster("h100-8x-nvlink"), "llama3-8b", ServePlan(tp=2), reqs,
                      slo=SLO(0.3, 0.02))
    assert_same_run(fast, slow)
    assert fast.events < slow.events / 3
    assert fast.metrics["goodput_requests_per_s"] > 0


def test_pd_with_a_power_capped_decode_pool_equals_the_event_level_loop():
    reqs = poisson_requests(150, 30.0, (64, 1024), (8, 200), seed=4)
    fast, slow = both(load_cluster("pd-h100-64"), "llama3-8b",
                      ServePlan(tp=8, disaggregated=True), reqs, slo=SLO(0.5, 0.05),
                      power_caps={"decode": 400.0})
    assert_same_run(fast, slow)
    assert fast.metrics["clock_ratio_decode"] < 1 and fast.metrics["kv_transfers"] == 150
    assert fast.events < slow.events


def test_mamba_state_slots_equal_the_event_level_loop():
    reqs = poisson_requests(150, 50.0, (16, 800), (1, 200), seed=6)
    fast, slow = both(load_cluster("h100-64x-ib"), "mamba-2.8b", ServePlan(tp=8), reqs)
    assert_same_run(fast, slow)
    assert fast.events < slow.events


def test_a_kv_starved_replica_preempts_identically():
    reqs = poisson_requests(120, 20.0, (256, 2048), (64, 400), seed=5)
    fast, slow = both(gpu_pair(), "llama3-70b", ServePlan(tp=2), reqs)
    assert slow.metrics["preemptions"] > 0
    assert_same_run(fast, slow)


def test_simultaneous_and_whole_second_arrivals_equal_the_event_level_loop():
    rng = np.random.default_rng(8)
    reqs = pd.DataFrame({"arrival_s": np.repeat([0.0, 1.0, 2.0, 3.0], 30),
                         "prompt_tokens": rng.integers(16, 600, 120),
                         "output_tokens": rng.integers(1, 150, 120)})
    fast, slow = both(load_cluster("h100-8x-nvlink"), "llama3-8b", ServePlan(tp=2), reqs)
    assert_same_run(fast, slow)


def _bulk_with_an_arrival_at(monkeypatch, spec, plan, base, t):
    """(requests, bulk run, the ``decode_runs`` of every ``_simulate`` call) of ``base`` plus one
    request arriving at ``t``."""
    reqs = pd.concat([base, pd.DataFrame({"arrival_s": [t], "prompt_tokens": [50],
                                          "output_tokens": [5]})], ignore_index=True)
    calls = []
    real = serving_mod._simulate
    monkeypatch.setattr(serving_mod, "_simulate",
                        lambda *a, decode_runs: calls.append(decode_runs)
                        or real(*a, decode_runs=decode_runs))
    return reqs, simulate_serving(spec, "llama3-8b", plan, reqs), calls


def test_an_arrival_exactly_at_an_iteration_end_falls_back_to_the_event_level_loop(
        monkeypatch):
    spec, plan = load_cluster("h100-8x-nvlink"), ServePlan(tp=8)
    base = pd.DataFrame({"arrival_s": [0.0, 0.0], "prompt_tokens": [100, 300],
                         "output_tokens": [60, 80]})
    ref = simulate_serving(spec, "llama3-8b", plan, base, decode_runs=False)
    t = float(ref.timeline.t_s.iloc[20])            # an iteration's start = the previous end
    reqs, fast, calls = _bulk_with_an_arrival_at(monkeypatch, spec, plan, base, t)
    assert calls == [True, False]                   # the bulk path met the tie and gave up
    monkeypatch.undo()
    assert_same_run(fast, simulate_serving(spec, "llama3-8b", plan, reqs, decode_runs=False))


def brute_blocks(s, r, b, free0, bt, slots, stop):
    """Per iteration and sequence, as the serving loop does it: (free before each iteration,
    blocks taken in each, whether some take found too few free blocks)."""
    blocks, free, frees, grows, short = list(b), free0, [free0], [], False
    for j in range(stop):
        g = 0
        for i in range(len(s)):
            if j < r[i]:
                need = 1 if slots else -(-(s[i] + j) // bt)
                if need > blocks[i]:
                    short |= need - blocks[i] > free - g
                    g += need - blocks[i]
                    blocks[i] = need
        free -= g
        for i in range(len(s)):
            if r[i] == j + 1:
                free += blocks[i]
        grows.append(g)
        frees.append(free)
    return frees, grows, short, blocks


@pytest.mark.parametrize("seed", range(6))
def test_run_block_arithmetic_matches_a_per_iteration_count(seed):
    rng = np.random.default_rng(seed)
    N, bt = int(rng.integers(1, 12)), int(rng.choice([1, 4, 16]))
    s = rng.integers(1, 200, N).tolist()
    r = rng.integers(1, 90, N).tolist()
    b = [max(0, -(-x // bt) - int(rng.integers(0, 2))) for x in s]   # at most one block short
    free0 = int(rng.integers(0, 40))
    for slots in (False, True):
        run = DecodeRun(s, r, b, free0, bt, slots)
        K = max(r)
        frees, grows, short, held = brute_blocks(s, r, b, free0, bt, slots, K)
        assert run.feasible == (not short)
        free, grow = run.blocks(K)
        assert (free, grow) == (frees, grows)
        stop = int(rng.integers(1, K + 1))
        frees, grows, _, held = brute_blocks(s, r, b, free0, bt, slots, stop)
        assert run.blocks(stop) == (frees, grows)
        assert [h for h, x in zip(run.blocks_held(stop), r) if x > stop] == \
            [h for h, x in zip(held, r) if x > stop]
        n, keys = run.counts(0, K)
        assert n.tolist() == [sum(x > j for x in r) for j in range(K)]
        assert keys.tolist() == [sum(y + j for x, y in zip(r, s) if x > j) for j in range(K)]



@pytest.mark.parametrize("seed", range(4))
def test_run_block_arithmetic_in_numpy_matches_a_per_iteration_count(seed, monkeypatch):
    """Batches of at least ``NUMPY_MIN_SEQUENCES`` take the numpy path: the same counts as the
    per-iteration loop, and as the plain-Python path forced on the same batch."""
    from tilewright.dataflow_sim.cluster import decode_run
    rng = np.random.default_rng(100 + seed)
    N, bt = int(rng.integers(decode_run.NUMPY_MIN_SEQUENCES, 90)), int(rng.choice([1, 4, 16]))
    s = rng.integers(1, 300, N).tolist()
    r = rng.integers(1, 120, N).tolist()
    b = [max(0, -(-x // bt) - int(rng.integers(0, 2))) for x in s]
    free0 = int(rng.integers(0, 60))
    for slots in (False, True):
        run = DecodeRun(s, r, b, free0, bt, slots)
        assert run._vector
        K = max(r)
        stop = int(rng.integers(1, K + 1))
        frees, grows, short, held = brute_blocks(s, r, b, free0, bt, slots, stop)
        assert run.blocks(stop) == (frees, grows)
        assert [h for h, x in zip(run.blocks_held(stop), r) if x > stop] == \
            [h for h, x in zip(held, r) if x > stop]
        assert run.feasible == (not brute_blocks(s, r, b, free0, bt, slots, K)[2])
        monkeypatch.setattr(decode_run, "NUMPY_MIN_SEQUENCES", N + 1)
        plain = DecodeRun(s, r, b, free0, bt, slots)
        monkeypatch.undo()
        assert not plain._vector
        assert plain.blocks(K) == run.blocks(K) and plain.feasible == run.feasible
        assert plain.blocks_held(stop) == run.blocks_held(stop)
        for x, y in zip(plain.counts(0, K), run.counts(0, K)):
            assert x.tolist() == y.tolist()

# ---- MoE: every EP layout, drawn routing, per-rank KV pools ---------------------------------
def _mixtral(plan: ServePlan, reqs: pd.DataFrame, **kw):
    return both(load_cluster("h100-8x-nvlink"), "mixtral-8x7b", plan, reqs, **kw)


@pytest.mark.parametrize("plan", [
    ServePlan(ep=8, routing="zipf", redundant_experts=8),               # DP attention, EPLB
    ServePlan(tp=2, ep=4, attn_tp=8, a2a="deepep", dispatch_bytes=1,    # attention TP 8
              overlap_a2a=True),
    ServePlan(tp=4, ep=2),                                              # DP attention 2
])
def test_moe_ep_runs_equal_the_event_level_loop(plan, monkeypatch):
    # the routing draws of iterations timed ahead past a run's end are undone and redrawn, so
    # the generator stays where the event-level loop has it (EP rank loads equal too)
    reqs = poisson_requests(100, 15.0, (32, 1500), (1, 200), seed=1)
    undone = []
    real = serving_mod.IterationCost.restore
    monkeypatch.setattr(serving_mod.IterationCost, "restore",
                        lambda self, state: undone.append(1) or real(self, state))
    fast, slow = _mixtral(plan, reqs, slo=SLO(0.3, 0.03))
    assert undone                                   # some run was timed past its end
    assert_same_run(fast, slow)
    assert fast.events < slow.events / 1.4
    assert fast.metrics["moe_rank_load_max_over_mean"] >= 1.0


def test_moe_per_rank_kv_pools_preempt_identically():
    # attention DP 8, each rank's KV pool ~1.7k tokens: decode steps preempt within a rank
    reqs = poisson_requests(60, 30.0, (256, 1200), (64, 400), seed=2)
    fast, slow = _mixtral(ServePlan(ep=8, memory_fraction=0.184), reqs)
    assert slow.metrics["preemptions"] > 0
    assert_same_run(fast, slow)


def test_moe_dense_layers_and_a_routing_trace_equal_the_event_level_loop():
    # a routing trace is consumed iteration by iteration (its position rolled back past a run's
    # end); the leading dense layer is timed by the dense twin in both paths
    from tilewright.models.llm_configs import MoEConfig
    cfg = MoEConfig("t-moe", d_model=256, n_layers=3, n_experts=8, top_k=2, d_expert_ffn=512,
                    n_heads=8, n_kv_heads=2, vocab_size=1024, n_dense_layers=1,
                    d_dense_ffn=1024, max_seq_len=4096)
    spec = ClusterSpec.from_dict({"chip": {"kind": "gpu", "preset": "h100-sxm"},
                                  "chips_per_node": 4,
                                  "intra_node": {"topology": "switch", "link_gbps": 450}})
    reqs = poisson_requests(80, 40.0, (16, 600), (1, 120), seed=3)
    trace = np.random.default_rng(0).integers(0, 8, 997)
    for plan, kw in ((ServePlan(ep=4, routing="trace"), dict(expert_trace=trace)),
                     (ServePlan(ep=4, routing="zipf", redundant_experts=4), {})):
        fast, slow = both(spec, cfg, plan, reqs, **kw)
        assert_same_run(fast, slow)
        assert fast.events < slow.events


# ---- pipeline stages (pp > 1): stage sends timed by the clock additions SimPy makes ----------
def one_gpu_nodes(gbps: float, pools: dict | None = None) -> ClusterSpec:
    """Four one-H100 nodes on a switch of ``gbps`` GB/s links: every stage send crosses it."""
    d = {"name": "h100x4-1pn", "chip": {"kind": "gpu", "preset": "h100-sxm"},
         "chips_per_node": 1, "nodes": 4,
         "intra_node": {"topology": "switch", "link_gbps": 450.0, "latency_us": 0.5},
         "inter_node": {"topology": "switch", "link_gbps": gbps, "latency_us": 1.0}}
    return ClusterSpec.from_dict(d | ({"pools": pools} if pools else {}))


@pytest.mark.parametrize("cluster,model,plan", [
    ("h100-8x-nvlink", "llama3-8b", ServePlan(pp=2)),
    ("h100-8x-nvlink", "llama3-8b", ServePlan(tp=2, pp=4)),               # TP inside stages
    ("pd-h100-64", "llama3-8b", ServePlan(tp=2, pp=2, disaggregated=True)),
    ("h100-8x-nvlink", "mixtral-8x7b", ServePlan(ep=2, pp=2)),            # DP attention
    ("h100-8x-nvlink", "mixtral-8x7b", ServePlan(ep=4, pp=2, routing="zipf",
                                                 redundant_experts=4)),
    ("h100-8x-nvlink", "mixtral-8x7b", ServePlan(tp=2, pp=4)),
])
def test_pipelined_runs_equal_the_event_level_loop(cluster, model, plan):
    """Decode-only runs through pp stages (prefills arriving in between) give the event-level
    loop's results bit for bit, with far fewer SimPy events (the runs engaged)."""
    reqs = poisson_requests(80, 20.0, (32, 1500), (1, 200), seed=2)
    fast, slow = both(load_cluster(cluster), model, plan, reqs, slo=SLO(0.3, 0.05))
    assert_same_run(fast, slow)
    assert fast.events < slow.events / 3


def test_pipelined_runs_with_queued_or_shared_stage_links_stay_event_level(monkeypatch):
    """Where the closed form does not hold, the event-level loop times the iterations and the
    results are still bit-equal: on slow links a stage send queues behind the previous
    micro-batch's (the run is refused, :class:`serving._Contended`), and a P/D decode replica
    whose stage links also carry KV hand-offs never starts a run."""
    refused, private = [], {}
    times, priv = serving_mod._Replica._pipeline_times, serving_mod._Sim.private_pipeline

    def spy_times(self, *a):
        try:
            return times(self, *a)
        except serving_mod._Contended:
            refused.append(self.idx)
            raise

    def spy_private(self, rep):
        private[rep.idx] = priv(self, rep)
        return private[rep.idx]
    monkeypatch.setattr(serving_mod._Replica, "_pipeline_times", spy_times)
    monkeypatch.setattr(serving_mod._Sim, "private_pipeline", spy_private)
    reqs = poisson_requests(60, 20.0, (32, 1500), (1, 200), seed=1)
    fast, slow = both(one_gpu_nodes(0.005), "llama3-8b", ServePlan(pp=2), reqs)
    assert_same_run(fast, slow)
    assert refused and private == {0: True, 1: True}
    reqs = poisson_requests(30, 20.0, (32, 500), (1, 50), seed=2)
    fast, slow = both(one_gpu_nodes(50.0, {"prefill_chips": 2}), "llama3-8b",
                      ServePlan(pp=2, disaggregated=True), reqs)
    assert_same_run(fast, slow)
    assert private[1] is False and fast.events == slow.events


def test_pipelined_runs_on_a_ring_equal_the_event_level_loop():
    """Eight H100s on a ring: at TP 2 (or EP 2) the two chips' stage sends share ring links and
    queue (runs refused, event by event; MoE: the refused run's routing draws undone); at TP 1 ×
    PP 8 each send has its links alone (runs engage). All bit-equal to the event-level loop."""
    spec = ClusterSpec.from_dict({
        "name": "h100x8-ring", "chip": {"kind": "gpu", "preset": "h100-sxm"},
        "chips_per_node": 8,
        "intra_node": {"topology": "ring", "link_gbps": 450.0, "latency_us": 0.5}})
    reqs = poisson_requests(60, 20.0, (32, 1500), (1, 200), seed=2)
    for plan, engaged in ((ServePlan(tp=2, pp=4), False), (ServePlan(pp=8), True)):
        fast, slow = both(spec, "llama3-8b", plan, reqs)
        assert_same_run(fast, slow)
        assert (fast.events < slow.events / 3) is engaged
    fast, slow = both(spec, "mixtral-8x7b", ServePlan(ep=2, pp=4, routing="zipf"), reqs)
    assert_same_run(fast, slow)


def test_a_pipelined_run_that_would_queue_late_repeats_the_simulation_event_level(monkeypatch):
    """A stage send found to queue after a run has started (here forced once a run is 12
    iterations in) makes the whole simulation repeat event by event: the results are the
    event-level loop's."""
    times, real, runs = serving_mod._Replica._pipeline_times, serving_mod._simulate, []

    def simulate(*a, **k):
        runs.append(k["decode_runs"])
        return real(*a, **k)
    monkeypatch.setattr(serving_mod, "_simulate", simulate)

    def late(self, t0, *a):
        if len(self.run.t) > 12:
            raise serving_mod._Contended(t0)
        return times(self, t0, *a)
    monkeypatch.setattr(serving_mod._Replica, "_pipeline_times", late)
    reqs = poisson_requests(40, 5.0, (32, 800), (100, 200), seed=3)
    fast, slow = both(load_cluster("h100-8x-nvlink"), "llama3-8b", ServePlan(tp=2, pp=2), reqs)
    assert runs == [True, False, False]
    assert_same_run(fast, slow)


# ---- pipelined prefill/mixed iterations timed without SimPy events --------------------------
@pytest.mark.parametrize("gbps,engaged", [(50.0, True), (0.005, False)])
def test_pipelined_prefill_iterations_timed_in_closed_form_equal_the_event_level_loop(
        gbps, engaged):
    """One-token outputs: no decode-only run ever starts, every iteration is a (chunked)
    prefill. On a replica whose stage links are its own they are timed by the clock additions
    (one SimPy event each, far fewer events); on links so slow that the second micro-batch's
    send queues behind the first's they fall back to SimPy events. Bit-equal either way."""
    reqs = poisson_requests(40, 20.0, (32, 3000), 1, seed=7)
    fast, slow = both(one_gpu_nodes(gbps), "llama3-8b", ServePlan(pp=2), reqs)
    assert_same_run(fast, slow)
    assert (fast.events < slow.events / 3) is engaged
    assert fast.metrics["inter_node_link_bytes"] > 0


def test_an_arrival_exactly_at_a_timed_pipeline_iteration_end_repeats_event_level(monkeypatch):
    """A request reaching a pipelined replica exactly when an iteration timed without events
    ends (where the event-level order of same-instant events decides what it sees) makes the
    simulation repeat event by event; the results are the event-level loop's."""
    spec, plan = load_cluster("h100-8x-nvlink"), ServePlan(tp=2, pp=2)
    base = pd.DataFrame({"arrival_s": [0.0, 0.0], "prompt_tokens": [7000, 9000],
                         "output_tokens": [1, 1]})
    ref = simulate_serving(spec, "llama3-8b", plan, base, decode_runs=False)
    # one prompt per replica; replica 1's 9,000 tokens take two back-to-back iterations
    starts = ref.timeline[ref.timeline.replica == 1].t_s
    assert len(starts) == 2
    t = float(starts.iloc[1])                       # the second iteration's start = first's end
    reqs, fast, calls = _bulk_with_an_arrival_at(monkeypatch, spec, plan, base, t)
    assert calls == [True, False]                   # the timed iteration met the tie
    monkeypatch.undo()
    assert_same_run(fast, simulate_serving(spec, "llama3-8b", plan, reqs, decode_runs=False))
