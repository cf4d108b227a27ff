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
