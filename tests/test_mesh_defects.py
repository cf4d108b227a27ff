"""Route-around defect remapping vs row/column dropping: keeps more cores, no message touches a
dead core or link (checked by walking every message's XY path here, independently of the
model), every rerouted message still connects its source to its destination, and the cost is
reported against the defect-free mesh."""

from __future__ import annotations

import numpy as np
import pytest

from tilewright.arch import ArchSpec, MeshSpec, TensorEngineSpec
from tilewright.compiler.mesh_schedule import (FlowBatch, PhaseSpec, gemm_phase_specs,
                                               gemv_phase_specs, route_around,
                                               route_around_specs, routearound_grid)
from tilewright.dataflow_sim.mesh import (MeshMappingError, execute_gemm, mesh_gemm, mesh_gemv,
                                          message_cycles, simulate, without_defects)
from tilewright.dataflow_sim.mesh.program_run import to_phases
from tilewright.dataflow_sim.mesh.grid import defect_policy_cost

DEAD_CORES = ((2, 5),)
DEAD_LINKS = (((6, 1), (6, 2)), ((3, 7), (4, 7)))


def _arch(rows=9, cols=9, sram=1024.0, **mesh):
    return ArchSpec(name="t", clock_mhz=1000.0,
                    tensor_engine=TensorEngineSpec(rows=1, cols=4, dataflow="os"),
                    mesh=dict(rows=rows, cols=cols, core_sram_kib=sram, core_macs_per_cycle=4,
                              link_bytes_per_cycle=4, hop_latency_cycles=1.0,
                              routing_stage_cycles=1.0, max_routes_per_core=24, **mesh))


def _xy_path(sr, sc, dr, dc):
    """Cores and undirected links of the XY route, walked one hop at a time."""
    cores, links = [(sr, sc)], []
    r, c = sr, sc
    while c != dc:
        n = c + (1 if dc > c else -1)
        links.append(frozenset({(r, c), (r, n)}))
        c = n
        cores.append((r, c))
    while r != dr:
        n = r + (1 if dr > r else -1)
        links.append(frozenset({(r, c), (n, c)}))
        r = n
        cores.append((r, c))
    return cores, links


def _assert_clean(f: FlowBatch, mesh: MeshSpec):
    dead_c = {tuple(x) for x in mesh.defective_cores}
    dead_l = {frozenset({tuple(a), tuple(b)}) for a, b in mesh.defective_links}
    for i in range(len(f)):
        cores, links = _xy_path(*(int(x[i]) for x in (f.sr, f.sc, f.dr, f.dc)))
        assert not dead_c & set(cores), f"message {i} touches a dead core"
        assert not dead_l & set(links), f"message {i} crosses a dead link"


@pytest.mark.parametrize("algo", ["mesh", "cannon", "summa"])
def test_routed_gemm_messages_avoid_every_defect(algo):
    mesh = _arch(defective_cores=DEAD_CORES, defective_links=DEAD_LINKS).mesh
    grid = routearound_grid(mesh, square=True)
    assert grid.pr == 8 and 5 not in grid.cols          # only the dead core's column dropped
    specs = gemm_phase_specs(algo, grid, 4, 4, 4, elem_bytes=2)
    crossing = 0
    for s in specs:
        if s.flows is not None and len(s.flows):
            crossing += sum(1 for i in range(len(s.flows)) if not _clean_one(s.flows, i, mesh))
    assert crossing > 0                                 # without rerouting, messages hit defects
    routed, extra = route_around_specs(specs, mesh)
    assert extra > 0
    for s in routed:
        if s.flows is not None:
            _assert_clean(s.flows, mesh)


def _clean_one(f, i, mesh):
    try:
        _assert_clean(FlowBatch(*(getattr(f, k)[i:i + 1] for k in
                                  ("sr", "sc", "dr", "dc", "nbytes", "stages", "times"))), mesh)
        return True
    except AssertionError:
        return False


def test_routed_gemv_messages_avoid_every_defect():
    mesh = _arch(defective_cores=DEAD_CORES, defective_links=DEAD_LINKS).mesh
    grid = routearound_grid(mesh)
    routed, _ = route_around_specs(
        gemv_phase_specs("mesh", grid, 8, 8, elem_bytes=2, acc_bytes=2), mesh)
    for s in routed:
        if s.flows is not None:
            _assert_clean(s.flows, mesh)


def test_detour_pieces_chain_source_to_destination():
    mesh = MeshSpec(rows=5, cols=8, defective_cores=((2, 4),),
                    defective_links=(((0, 1), (0, 2)), ((3, 6), (4, 6))))
    msgs = [(2, 0, 2, 7), (0, 0, 0, 5), (0, 7, 0, 0), (1, 6, 4, 6)]
    for sr, sc, dr, dc in msgs:
        waves, extra = route_around(FlowBatch.make(sr, sc, dr, dc, 16), mesh)
        pieces = [(int(w.sr[0]), int(w.sc[0]), int(w.dr[0]), int(w.dc[0])) for w in waves]
        assert pieces[0][:2] == (sr, sc) and pieces[-1][2:] == (dr, dc)
        for a, b in zip(pieces, pieces[1:]):
            assert a[2:] == b[:2]                          # each relay forwards what it got
        hops = sum(abs(p[2] - p[0]) + abs(p[3] - p[1]) for p in pieces)
        assert hops == abs(dr - sr) + abs(dc - sc) + 2 == abs(dr - sr) + abs(dc - sc) + extra
        _assert_clean(FlowBatch.concat(waves), mesh)


def test_single_detour_costs_store_and_forward_closed_form():
    """One message along a row past a dead link: 4 pieces sent one after another."""
    arch = _arch(3, 8, defective_links=(((1, 3), (1, 4)),))
    mesh = arch.mesh
    waves, _ = route_around(FlowBatch.make(1, 0, 1, 7, 64), mesh)
    hops = [int(w.hops[0]) for w in waves]
    assert hops == [3, 1, 1, 1, 3]          # to the link, aside, past it, back, on to the end
    specs, _ = route_around_specs([PhaseSpec("msg", FlowBatch.make(1, 0, 1, 7, 64))], mesh)
    rep = simulate(arch, to_phases(specs, 4), op="msg", algo="t", shape={},
                   cores=np.zeros((3, 8), bool), memory_bytes=np.zeros((3, 8)), useful_macs=0)
    assert rep.cycles == sum(message_cycles(mesh, 64, h) for h in hops)


def test_route_keeps_more_cores_than_skip_and_reports_cost():
    arch = _arch(defective_cores=DEAD_CORES, defective_links=DEAD_LINKS)
    cost = defect_policy_cost(mesh_gemm, arch, 256, 256, 256, algo="mesh")
    assert cost["cores_used_skip"] == 49 and cost["cores_used_route"] == 64
    assert cost["detour_extra_hops"] > 0
    # compute-bound: the 15 cores route-around keeps outweigh its detours
    assert cost["cycles_healthy"] < cost["cycles_route"] < cost["cycles_skip"]
    # against the defect-free mesh on the same 8 x 8 grid, detours only add time
    same = mesh_gemm(without_defects(arch), 256, 256, 256, algo="mesh", p=8)
    assert cost["cycles_route"] > same.cycles
    assert cost["route"].routes_per_core[2, 5] == 0
    assert cost["route"].core_busy_cycles[2, 5] == 0
    for a, b in DEAD_LINKS:
        (r0, c0), (r1, c1) = sorted((a, b))
        d = ("E", "W") if r0 == r1 else ("S", "N")
        assert all(cost["route"].link_load_flits[x][r0, c0] == 0 for x in d)
    # the schedule on the route-around grid is still an exact GEMM
    a = np.arange(64 * 64).reshape(64, 64) % 11
    np.testing.assert_array_equal(execute_gemm(a, a, 8, "mesh"), a @ a)
    g = defect_policy_cost(mesh_gemv, arch, 4096, 4096)
    assert g["cores_used_route"] == 72 > g["cores_used_skip"] == 49
    assert g["cycles_route"] < g["cycles_skip"]


def test_route_policy_errors():
    arch = _arch(defective_cores=DEAD_CORES)
    with pytest.raises(MeshMappingError, match="defects 'foo': must be one of skip, route"):
        mesh_gemm(arch, 8, 8, 8, defects="foo")
    # the same link is dead on both rows of a 2-row mesh: no parallel row to detour through
    arch = _arch(2, 6, defective_links=(((0, 2), (0, 3)), ((1, 2), (1, 3))))
    with pytest.raises(MeshMappingError, match="no healthy parallel line"):
        mesh_gemv(arch, 64, 64, defects="route")


def test_route_policy_in_layer_programs():
    """The compiler's layer partitioning under ``route``: more cores than ``skip``, every
    message clean (walked here), and the model's own dead core/link check passes."""
    from tilewright.compiler.mesh_partition import partition_layer, partition_moe_layer
    from tilewright.dataflow_sim.mesh import run_mesh_program
    arch = _arch(13, 13, sram=262144.0, defective_cores=((3, 4),),
                 defective_links=(((7, 8), (7, 9)),))
    for make in (lambda d: partition_layer(arch, "tiny-llama", "decode", context=64, defects=d),
                 lambda d: partition_moe_layer(arch, "tiny-moe", "prefill", tokens=32,
                                               defects=d)):
        skip, route = make("skip"), make("route")
        assert route.meta["detour_extra_hops"] > 0
        for t in route.tasks:
            if t.flows:
                arr = route.constants[t.flows].astype(np.int64)
                _assert_clean(FlowBatch.make(arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], 1,
                                             arr[:, 4], arr[:, 5]), arch.mesh)
        r_skip, r_route = run_mesh_program(skip, arch), run_mesh_program(route, arch)
        used = [max(r.cores_used for _, r in run.ops) for run in (r_skip, r_route)]
        assert used[1] > used[0]
        assert r_route.useful_macs == r_skip.useful_macs
