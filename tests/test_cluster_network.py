"""Collectives and links against closed forms; contention slows shared links by the predicted
amount. Every expected value is derived here from S, B, α and n — never from a captured run."""

from __future__ import annotations

import math

import pytest
import simpy

from tilewright.dataflow_sim.cluster import (ClusterSpec, CollectiveTimer, Network, Topology,
                                             all_reduce)

S = 64e6           # bytes per rank
GBPS = 100.0       # GB/s per link per direction
LAT_US = 2.0       # µs per link


def _topo(kind: str, n: int, **extra) -> Topology:
    return Topology(ClusterSpec.from_dict({
        "chip": {"kind": "gpu", "preset": "h100-sxm"}, "chips_per_node": n,
        "intra_node": {"topology": kind, "link_gbps": GBPS, "latency_us": LAT_US, **extra}}))


def _rel(a: float, b: float) -> float:
    return abs(a - b) / b


@pytest.mark.parametrize("kind,hops", [("switch", 2), ("ring", 1), ("fully_connected", 1)])
@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_all_reduce_matches_closed_form(kind, hops, n):
    B, alpha = GBPS * 1e9, hops * LAT_US * 1e-6
    t = CollectiveTimer(_topo(kind, n)).seconds("all_reduce", [range(n)], S)
    assert _rel(t, 2 * (n - 1) / n * S / B + 2 * (n - 1) * alpha) <= 0.01


@pytest.mark.parametrize("kind", ["reduce_scatter", "all_gather"])
def test_reduce_scatter_all_gather_closed_form(kind):
    n, B, alpha = 8, GBPS * 1e9, 2 * LAT_US * 1e-6
    t = CollectiveTimer(_topo("switch", n)).seconds(kind, [range(n)], S)
    assert _rel(t, (n - 1) / n * S / B + (n - 1) * alpha) <= 0.01


@pytest.mark.parametrize("kind,hops", [("switch", 2), ("fully_connected", 1)])
@pytest.mark.parametrize("n", [4, 8])
def test_pairwise_all_to_all_closed_form(kind, hops, n):
    B, alpha = GBPS * 1e9, hops * LAT_US * 1e-6
    t = CollectiveTimer(_topo(kind, n)).seconds("all_to_all", [range(n)], S)
    assert _rel(t, (n - 1) * (S / (n * B) + alpha)) <= 0.01


@pytest.mark.parametrize("n", [3, 7, 8])
def test_tree_all_reduce_closed_form_without_shared_links(n):
    B, alpha = GBPS * 1e9, LAT_US * 1e-6
    t = CollectiveTimer(_topo("fully_connected", n)).seconds("all_reduce", [range(n)], S, "tree")
    assert _rel(t, 2 * math.floor(math.log2(n)) * (S / B + alpha)) <= 0.01


def test_multi_plane_send_stripes_over_planes():
    topo = Topology(ClusterSpec.from_dict({
        "chip": {"kind": "gpu", "preset": "h100-sxm"}, "nodes": 2,
        "inter_node": {"topology": "switch", "link_gbps": 25, "latency_us": 1, "planes": 4}}))
    t = CollectiveTimer(topo).seconds("send", [(0, 1)], S)
    assert _rel(t, S / (4 * 25e9) + 2e-6) <= 1e-9


def _run_sends(topo: Topology, flows: list[tuple[int, int]], nbytes: float) -> list[float]:
    env = simpy.Environment()
    net = Network(env, topo)
    ends: list[float] = [math.nan] * len(flows)
    for i, (a, b) in enumerate(flows):
        net.send(a, b, nbytes).callbacks.append(lambda _e, i=i: ends.__setitem__(i, env.now))
    env.run()
    return ends


def test_two_flows_sharing_a_link_take_the_predicted_extra_time():
    """Flows 0→2 and 1→2 share chip 2's down-link of the switch: the second one waits one
    serialization time S/B. Flows 0→1 and 2→3 share nothing and do not slow each other."""
    topo = _topo("switch", 4)
    B, alpha = GBPS * 1e9, 2 * LAT_US * 1e-6
    (alone,) = _run_sends(topo, [(0, 2)], S)
    assert alone == pytest.approx(S / B + alpha, rel=1e-12)
    shared = sorted(_run_sends(topo, [(0, 2), (1, 2)], S))
    assert shared[0] == pytest.approx(S / B + alpha, rel=1e-12)
    assert shared[1] == pytest.approx(2 * S / B + alpha, rel=1e-12)       # slowdown: + S/B
    assert shared[1] / alone == pytest.approx((2 * S / B + alpha) / (S / B + alpha), rel=1e-12)
    disjoint = _run_sends(topo, [(0, 1), (2, 3)], S)
    assert disjoint == pytest.approx([alone, alone], rel=1e-12)


def test_two_all_reduces_sharing_nics_slow_down_as_predicted():
    """Two nodes, two chips each, one NIC per node. Groups A = (0, 2) and B = (1, 3) each run a
    2-rank ring all-reduce (2 steps of S/2 over NIC up + NIC down, α = 2 link latencies).
    Alone: 2·(S/(2B) + α). Together, each NIC direction carries four S/(2B) messages (A step 1,
    B step 1, A step 2, B step 2); since α < S/(2B) each next message is ready before the NIC
    frees, so the NIC never idles and the last message lands at 4·S/(2B) + α = 2·S/B + α."""
    topo = Topology(ClusterSpec.from_dict({
        "chip": {"kind": "gpu", "preset": "h100-sxm"}, "nodes": 2, "chips_per_node": 2,
        "intra_node": {"topology": "switch", "link_gbps": 1000},
        "inter_node": {"topology": "switch", "link_gbps": GBPS, "latency_us": LAT_US}}))
    B, alpha = GBPS * 1e9, 2 * LAT_US * 1e-6
    timer = CollectiveTimer(topo)
    alone = timer.seconds("all_reduce", [(0, 2)], S)
    both = timer.seconds("all_reduce", [(0, 2), (1, 3)], S)
    assert alone == pytest.approx(2 * (S / (2 * B) + alpha), rel=1e-12)
    assert alpha < S / (2 * B)
    assert both == pytest.approx(2 * S / B + alpha, rel=1e-12)
    assert both - alone == pytest.approx(S / B - alpha, rel=1e-9)


def test_affine_phase_time_is_exact_when_contention_free_and_refused_otherwise():
    topo = _topo("switch", 8)
    timer = CollectiveTimer(topo)
    a, b = timer.affine("all_reduce", [range(8)])
    assert a + b * 3 * S == pytest.approx(timer.seconds("all_reduce", [range(8)], 3 * S), rel=1e-12)
    assert timer.affine("all_to_all", [range(8)], "direct") is None   # direct all-to-all queues


def test_all_reduce_of_one_rank_is_free_and_bad_algorithm_is_an_error():
    env = simpy.Environment()
    net = Network(env, _topo("switch", 2))
    ev = all_reduce(net, [0], S)
    assert ev.triggered
    with pytest.raises(ValueError, match="accepted are"):
        all_reduce(net, [0, 1], S, "butterfly")


# ---- rail-aware routing ------------------------------------------------------------------------
def _nodes(nodes: int, cpn: int, planes: int, topology: str = "switch", **extra) -> Topology:
    return Topology(ClusterSpec.from_dict({
        "chip": {"kind": "gpu", "preset": "h100-sxm"}, "nodes": nodes, "chips_per_node": cpn,
        "intra_node": {"topology": "switch", "link_gbps": 450, "latency_us": 0.5},
        "inter_node": {"topology": topology, "link_gbps": 50, "latency_us": 1.0,
                       "planes": planes, **extra}}))


def test_lone_chip_inter_node_send_runs_at_its_own_nic_bandwidth():
    """8 chips per node, 8 rails of 50 GB/s: chip 3 of node 0 to chip 3 of node 1 takes
    S/50 GB/s + 2 µs — not S/400 GB/s (the node's summed NICs)."""
    topo = _nodes(2, 8, 8)
    assert topo.planes_of(3) == (3,) and topo.planes_of(11) == (3,)
    t = CollectiveTimer(topo).seconds("send", [(3, 11)], S)
    assert t == pytest.approx(S / 50e9 + 2e-6, rel=1e-12)
    assert topo.uncontended_seconds(3, 11, S) == pytest.approx(S / 50e9 + 2e-6, rel=1e-12)


def test_chips_on_different_rails_do_not_contend_and_a_shared_nic_does():
    """Rails 0..7: chips 0 and 1 of node 0 send to node 1 at once, each at full NIC speed.
    With 2 planes for 4 chips, chips 0 and 2 share plane 0: the second one waits S/B."""
    ends = sorted(_run_sends(_nodes(2, 8, 8), [(0, 8), (1, 9)], S))
    assert ends == pytest.approx([S / 50e9 + 2e-6] * 2, rel=1e-12)
    shared = _nodes(2, 4, 2)
    assert shared.planes_of(0) == shared.planes_of(2) == (0,)
    ends = sorted(_run_sends(shared, [(0, 4), (2, 6)], S))
    assert ends == pytest.approx([S / 50e9 + 2e-6, 2 * S / 50e9 + 2e-6], rel=1e-12)


def test_chip_with_several_nics_stripes_over_its_own_planes_only():
    """4 planes, 2 chips per node: chip 1 owns planes 1 and 3 and sends at 2 × 50 GB/s."""
    topo = _nodes(2, 2, 4)
    assert topo.planes_of(1) == (1, 3)
    assert topo.uncontended_seconds(1, 3, S) == pytest.approx(S / 100e9 + 2e-6, rel=1e-12)


# ---- closed forms with pipelining, hand-computed -----------------------------------------------
# switch fabric, B = 100 GB/s, α = 2 hops × 2 µs = 4 µs; n = 4 ranks, C = 4 pieces per step,
# all-reduce K = 2(n−1) = 6 steps of c = S/n.
#  S = 64 MB: c = 16 MB; link bound K·c/B = 6·16e6/1e11 = 960 µs; latency chain
#  (K+C−1)·c/(C·B) + (K−1)·α = 9·4e6/1e11 + 5·4 µs = 380 µs; T = α + 960 µs = 964 µs.
#  S = 64 kB: c = 16 kB; link bound 0.96 µs; chain 9·4e3/1e11 + 20 µs = 20.36 µs; T = 24.36 µs.
@pytest.mark.parametrize("size,expected", [(64e6, 964e-6), (64e3, 24.36e-6)])
def test_pipelined_ring_all_reduce_hand_computed(size, expected):
    from tilewright.dataflow_sim.cluster.collectives import FlowTimer, ring_seconds
    topo = _topo("switch", 4)
    assert ring_seconds(6, size / 4, 100e9, 4e-6, chunks=4) == pytest.approx(expected, rel=1e-12)
    assert CollectiveTimer(topo, chunks=4).seconds("all_reduce", [range(4)], size) == \
        pytest.approx(expected, rel=1e-9)
    assert FlowTimer(topo, chunks=4).seconds("all_reduce", [range(4)], size) == \
        pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("chunks,expected", [
    # fully connected, n = 8 (heap depth d = 3), B = 100 GB/s, α = 2 µs, one tree:
    (4, 1452e-6),   # (2d + C − 1)·S/(C·B) + 2d·α = 9 · 16e6/1e11 + 6 · 2 µs
    (1, 3852e-6),   # C = 1: 2d·(S/B + α) = 6 · (640 µs + 2 µs)
])
def test_pipelined_tree_all_reduce_hand_computed(chunks, expected):
    from tilewright.dataflow_sim.cluster.collectives import FlowTimer, tree_seconds
    topo = _topo("fully_connected", 8)
    assert tree_seconds(8, S, 100e9, 2e-6, chunks) == pytest.approx(expected, rel=1e-12)
    for timer in (CollectiveTimer(topo, chunks=chunks), FlowTimer(topo, chunks=chunks)):
        assert timer.seconds("all_reduce", [range(8)], S, "tree") == \
            pytest.approx(expected, rel=1e-9)


def test_ring_bus_bandwidth_approaches_the_link_bandwidth():
    """nccl-tests' busbw = algbw·2(n−1)/n is defined so that a bandwidth-optimal all-reduce
    shows the link speed: 1 GB over 8 ranks on 100 GB/s links gives busbw within 0.1 % of it."""
    from tilewright.dataflow_sim.cluster.collectives import FlowTimer, bus_bandwidth
    t = FlowTimer(_topo("switch", 8), chunks=8).seconds("all_reduce", [range(8)], 1e9)
    alg, bus = bus_bandwidth("all_reduce", 8, 1e9, t)
    assert alg == pytest.approx(1e9 / t) and bus == pytest.approx(100e9, rel=1e-3)


# ---- flow level vs event level on small contended cases ----------------------------------------
#: flow / event time, per family (the bounds the docs state): rings are exact up to the
#: fluid-vs-FIFO difference; the flow level's fair sharing is optimistic against the event
#: level's whole-path FIFO locks for all-to-all; trees sit either side (overlapping tree edges)
BOUNDS = {("all_reduce", "ring"): (0.99, 1.01), ("reduce_scatter", "ring"): (0.99, 1.01),
          ("all_gather", "ring"): (0.99, 1.01), ("all_to_all", "pairwise"): (0.6, 1.1),
          ("all_to_all", "direct"): (0.45, 1.01), ("all_reduce", "tree"): (0.8, 1.45)}

CONTENDED = {
    "dp-rings-own-rails": (lambda: _nodes(4, 4, 4, "fat_tree", nodes_per_leaf=2, spines=1),
                           [[c + 4 * u for u in range(4)] for c in range(4)]),
    "dp-rings-shared-nic": (lambda: _nodes(4, 4, 2, "fat_tree", nodes_per_leaf=2, spines=1),
                            [[c + 4 * u for u in range(4)] for c in range(4)]),
    "dp-rings-one-nic": (lambda: _nodes(4, 4, 1),
                         [[c + 4 * u for u in range(4)] for c in range(4)]),
    "one-ring-16": (lambda: _nodes(4, 4, 4, "fat_tree", nodes_per_leaf=2, spines=1),
                    [list(range(16))]),
    "spine": (lambda: _nodes(8, 2, 2, "fat_tree", nodes_per_leaf=2, spines=1),
              [[c + 2 * u for u in range(8)] for c in range(2)]),
}


@pytest.mark.parametrize("case", sorted(CONTENDED))
@pytest.mark.parametrize("kind,algo,chunks", [(k, a, c) for k, a in sorted(BOUNDS)
                                              for c in ((1,) if k == "all_to_all" else (1, 8))])
def test_flow_level_agrees_with_event_level_on_contended_cases(case, kind, algo, chunks):
    from tilewright.dataflow_sim.cluster.collectives import FlowTimer
    make, groups = CONTENDED[case]
    topo = make()
    trees = 2 if algo == "tree" else 1
    event = CollectiveTimer(topo, chunks=chunks, trees=trees).seconds(kind, groups, S, algo)
    flow = FlowTimer(topo, chunks=chunks, trees=trees).seconds(kind, groups, S, algo)
    lo, hi = BOUNDS[(kind, algo)]
    assert lo <= flow / event <= hi


def test_flow_traffic_matches_event_traffic():
    """Bytes per link per byte of S: the flow level's count equals the messages the event
    level actually sent (ring all-reduce and pairwise all-to-all, shared NICs)."""
    from tilewright.dataflow_sim.cluster.collectives import FlowTimer
    make, groups = CONTENDED["dp-rings-shared-nic"]
    topo = make()
    for kind in ("all_reduce", "all_to_all"):
        ev = CollectiveTimer(topo).traffic(kind, groups)
        fl = FlowTimer(topo).traffic(kind, groups)
        assert fl.keys() == ev.keys()
        assert [fl[k] for k in sorted(fl)] == pytest.approx([ev[k] for k in sorted(ev)])


# ---- training at flow level --------------------------------------------------------------------
def _gpu_cluster(nodes: int) -> ClusterSpec:
    return ClusterSpec.from_dict({
        "chip": {"kind": "gpu", "preset": "h100-sxm"}, "nodes": nodes, "chips_per_node": 8,
        "intra_node": {"topology": "switch", "link_gbps": 450, "latency_us": 0.5},
        "inter_node": {"topology": "fat_tree", "link_gbps": 50, "latency_us": 1.0, "planes": 8,
                       "nodes_per_leaf": 2, "spines": 2}})


@pytest.mark.parametrize("plan_kw", [dict(dp=4, tp=8), dict(dp=4, tp=4, pp=2, micro_batches=4)])
def test_training_step_flow_level_agrees_with_event_level(plan_kw):
    """A 32-GPU step (TP in a node, DP rings on the rails, with and without pipeline stages)
    at both levels: the flow level leaves out contention between phases only, which these
    plans barely have — step times agree within 2 %."""
    from tilewright.dataflow_sim.cluster import TrainPlan, simulate_training
    plan = TrainPlan(seq_len=512, inlayer_comm="phase", **plan_kw)
    ev = simulate_training(_gpu_cluster(4), "llama3-8b", plan, network="event")
    fl = simulate_training(_gpu_cluster(4), "llama3-8b", plan, network="flow")
    assert ev.metrics["network_level"] == "event" and fl.metrics["network_level"] == "flow"
    assert _rel(fl.step_seconds, ev.step_seconds) <= 0.02
    assert fl.metrics["network_messages"] == 0 and ev.metrics["network_messages"] > 0


def test_flow_level_step_cost_grows_linearly_in_chips():
    """Simulation work (events) of a flow-level DP step: doubling the replicas at most doubles
    it (plus a constant), where the event level grows as dp² (ring messages per bucket)."""
    from tilewright.dataflow_sim.cluster import TrainPlan, simulate_training
    ev = {}
    for nodes in (4, 8):
        plan = TrainPlan(dp=nodes, tp=8, seq_len=512)
        ev[nodes] = simulate_training(_gpu_cluster(nodes), "llama3-8b", plan,
                                      network="flow").events
    assert ev[8] <= 2.2 * ev[4]


def test_network_level_choice_and_bad_values():
    from tilewright.dataflow_sim.cluster import ClusterSpecError, PlanError, TrainPlan
    from tilewright.dataflow_sim.cluster import simulate_training
    from tilewright.dataflow_sim.cluster.training import AUTO_FLOW_CHIPS
    spec = _gpu_cluster(AUTO_FLOW_CHIPS // 8 + 2)          # above the auto threshold
    res = simulate_training(spec, "tiny-llama", TrainPlan(dp=spec.n_chips, seq_len=64))
    assert res.metrics["network_level"] == "flow"
    explicit = TrainPlan(dp=spec.n_chips, seq_len=64, inlayer_comm="network")
    assert simulate_training(spec, "tiny-llama", explicit).metrics["network_level"] == "event"
    with pytest.raises(PlanError, match="inlayer_comm='network' needs network='event'"):
        simulate_training(spec, "tiny-llama", explicit, network="flow")
    with pytest.raises(ClusterSpecError, match="network = 'fluid': must be one of"):
        simulate_training(spec, "tiny-llama", TrainPlan(dp=spec.n_chips), network="fluid")


def test_multi_node_ring_runs_one_channel_per_rail():
    """16 GPUs in 2 nodes (8 rails of 50 GB/s, 1 µs per hop, one leaf): NCCL-like channels give
    8 rings of S/8, ring c leaving each node from chip c, so every NIC carries one flow. Hand
    computed: K = 30 steps of c = S/(8·16) = 0.5 MB; slowest step = NIC: 0.5e6/50e9 = 10 µs +
    2 hops·1 µs; T = 30·12 µs = 360 µs at both levels. (One ring on rail 7 would take 8× the
    NIC time.)"""
    from tilewright.dataflow_sim.cluster.collectives import FlowTimer, ring_channels
    topo = _nodes(2, 8, 8, "fat_tree", nodes_per_leaf=2, spines=1)
    chans = ring_channels(topo, list(range(16)))
    assert len(chans) == 8 and chans[0][7:9] == [0, 9]      # ring 0 crosses on chip 0's rail
    for timer in (CollectiveTimer(topo), FlowTimer(topo)):
        assert timer.seconds("all_reduce", [range(16)], S) == pytest.approx(360e-6, rel=1e-9)


def test_predict_collective_at_line_rate_gives_the_bottleneck_link():
    """With both efficiencies 1, a large ring all-reduce's busbw is the bottleneck rate:
    the NVLink line rate in one node, the node's summed NIC rate (8 × 25 GB/s) across nodes
    (nccl-tests' busbw definition, doc/PERFORMANCE.md) — within 0.5 %, the latency part of
    2(n−1) steps at 8 GiB. The published rows and their errors
    are printed by benchmarks/collectives_validation.py."""
    from tilewright.dataflow_sim.cluster.nccl_calibration import load_points, predict_collective
    rows = {r["id"]: r for r in load_points()}
    assert {r["set"] for r in rows.values()} == {"calibration", "held_out"}
    assert all(r["source"].startswith("https://") for r in rows.values())
    one = dict(nvlink_efficiency=1.0, network_efficiency=1.0)
    assert predict_collective(rows["h100-nvlink-8-allreduce-ring"], **one) == \
        pytest.approx(450, rel=5e-3)
    assert predict_collective(rows["dgx-a100-8x200g-allreduce"], **one) == \
        pytest.approx(200, rel=5e-3)
    # fewer NICs than GPUs (nccl-tests#119: 4 x 200 Gb/s per 8-GPU node, 3 nodes): the 8
    # channels share the 4 rails two by two, so busbw is still the node's summed NIC rate,
    # 4 x 25 = 100 GB/s, not 8 x 25
    four_nics = dict(rows["a100-3node-4x200g-ib-allreduce"], size_bytes=8 * 2**30)
    assert predict_collective(four_nics, **one) == pytest.approx(100, rel=5e-3)
    # 8 x 400 Gb/s H100 nodes: 8 x 50 = 400 GB/s; NVLink (450 GB/s per GPU) is not the bottleneck
    assert predict_collective(rows["h100-2node-8x400g-ring-expected"], **one) == \
        pytest.approx(400, rel=5e-3)
