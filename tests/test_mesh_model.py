"""Mesh cost model: closed forms for uncontended messages, broadcasts, contention, limits."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tilewright.arch import ArchSpec, TensorEngineSpec
from tilewright.dataflow_sim.mesh import Flows, MeshMappingError, Phase, message_cycles, simulate


def _arch(rows=4, cols=8, alpha=2.0, beta=3.0, bw=4, routes=24, sram=48.0, mpc=4, **mesh):
    return ArchSpec(name="t", clock_mhz=1000.0,
                    tensor_engine=TensorEngineSpec(rows=1, cols=mpc, dataflow="os"),  # each core's
                    mesh=dict(rows=rows, cols=cols, core_sram_kib=sram, core_macs_per_cycle=mpc,
                              link_bytes_per_cycle=bw, hop_latency_cycles=alpha,
                              routing_stage_cycles=beta, max_routes_per_core=routes, **mesh))


def _run(arch, *phases):
    r, c = arch.mesh.rows, arch.mesh.cols
    return simulate(arch, list(phases), op="t", algo="t", shape={}, cores=np.ones((r, c), bool),
                    memory_bytes=np.zeros((r, c)), useful_macs=0)


def test_single_message_closed_form():
    arch = _arch()
    # (0,0) -> (2,3): 5 hops, 1 stage, 10 bytes = 3 flits of 4 B
    rep = _run(arch, Phase("p", Flows.make(0, 0, 2, 3, flits=3, stages=1)))
    assert rep.cycles == 2.0 * 5 + 3.0 * 1 + 3 == 16
    assert message_cycles(arch.mesh, 10, 5, 1) == 16
    # XY route: east along row 0 over cols 0..2, then south along col 3 over rows 0..1
    e = rep.link_load_flits["E"]
    assert e[0, :3].tolist() == [3, 3, 3] and e.sum() == 9
    s = rep.link_load_flits["S"]
    assert s[:2, 3].tolist() == [3, 3] and s.sum() == 6
    assert rep.link_load_flits["W"].sum() == 0 and rep.link_load_flits["N"].sum() == 0
    # route count: 4 cores on the horizontal leg + 2 below the turn
    assert rep.routes_per_core.sum() == 6 and rep.routes_per_core.max() == 1


def test_chain_stages_count_beta():
    arch = _arch(alpha=1.0, beta=2.0)
    rep = _run(arch, Phase("chain", Flows.make(0, 0, 0, 5, flits=4, stages=5)))
    assert rep.cycles == 1 * 5 + 2 * 5 + 4


def test_row_broadcast_closed_form():
    arch = _arch(rows=3, cols=8, alpha=1.5, beta=1.0)
    # multicast from (1, 2): west to col 0 (2 hops), east to col 7 (5 hops), 7 flits each
    f = Flows.make([1, 1], [2, 2], [1, 1], [0, 7], flits=7, stages=1)
    rep = _run(arch, Phase("bcast", f))
    assert rep.cycles == math.ceil(1.5 * 5 + 1.0 + 7)
    assert rep.link_load_flits["E"][1].tolist() == [0, 0, 7, 7, 7, 7, 7]
    assert rep.link_load_flits["W"][1].tolist() == [7, 7, 0, 0, 0, 0, 0]


def test_contention_on_shared_link_adds_serialization():
    arch = _arch(alpha=1.0, beta=1.0)
    w = 10
    one = _run(arch, Phase("a", Flows.make(0, 0, 0, 3, w))).cycles
    assert one == 3 + 1 + w
    # second flow (0,1)->(0,4) shares links 1-2 and 2-3 in the same direction: +w cycles
    two = _run(arch, Phase("ab", Flows.make([0, 0], [0, 1], [0, 0], [3, 4], w))).cycles
    assert two == 3 + 1 + 2 * w == one + w
    # the same flow in the opposite direction uses the other directed links: no contention
    opp = _run(arch, Phase("ba", Flows.make([0, 0], [0, 3], [0, 0], [3, 0], w))).cycles
    assert opp == one
    # disjoint links: no contention either
    dis = _run(arch, Phase("cd", Flows.make([0, 1], [0, 0], [0, 1], [3, 3], w))).cycles
    assert dis == one


def test_phases_repeat_overlap_and_compute():
    arch = _arch(alpha=1.0, beta=0.0, mpc=4)
    f = Flows.make(0, 0, 0, 1, 5)            # 1 + 0 + 5 = 6 cycles
    ov = _run(arch, Phase("ov", f, macs=40, overlap=True, repeat=3))    # max(6, 10) * 3
    assert ov.cycles == 30
    seq = _run(arch, Phase("seq", f, macs=40, overlap=False, repeat=3))  # (6 + 10) * 3
    assert seq.cycles == 48
    assert seq.core_busy_cycles.max() == 30
    assert seq.link_load_flits["E"][0, 0] == 15


def test_sram_limit_error_names_numbers():
    arch = _arch(sram=1.0)
    mem = np.full((4, 8), 2048)
    with pytest.raises(MeshMappingError, match=r"needs 2\.00 KiB per core.*core_sram_kib = 1"):
        simulate(arch, [], op="gemm", algo="x", shape={"m": 1}, cores=np.ones((4, 8), bool),
                 memory_bytes=mem, useful_macs=0)


def test_route_limit_error_names_numbers():
    arch = _arch(routes=2)
    f = Flows.make([0, 0, 0], [0, 0, 0], [0, 0, 0], [5, 6, 7], 1)   # 3 flows leave (0, 0)
    with pytest.raises(MeshMappingError, match=r"needs 3 route ids.*max_routes_per_core = 2"):
        _run(arch, Phase("p", f))


def test_dead_link_and_core_are_refused():
    arch = _arch(defective_links=(((0, 1), (0, 2)),))
    with pytest.raises(MeshMappingError, match="dead link"):
        _run(arch, Phase("p", Flows.make(0, 0, 0, 3, 1)))
    arch = _arch(defective_cores=((0, 2),))
    with pytest.raises(MeshMappingError, match=r"dead core \(0, 2\)"):
        _run(arch, Phase("p", Flows.make(0, 0, 0, 3, 1)))


def test_mesh_mapping_error_is_value_error():
    assert issubclass(MeshMappingError, ValueError)
