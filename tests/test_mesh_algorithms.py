"""MeshGEMM / Cannon / SUMMA / MeshGEMV / ring all-reduce: schedules are right (functional,
exact for ints), closed forms on small meshes, route/hop bounds, defects, errors, LLM mapping."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tilewright.arch import ArchSpec, TensorEngineSpec, load_arch
from tilewright.dataflow_sim.mesh import (MeshMappingError, defect_cost, execute_gemm,
                                          execute_gemv, healthy_grid, interleaved_ring,
                                          mesh_gemm, mesh_gemv)
from tilewright.dataflow_sim.mesh.gemm import gemm_phases
from tilewright.dataflow_sim.mesh.gemv import ktree_plan


def _arch(rows=4, cols=4, alpha=1.0, beta=1.0, bw=4, routes=24, sram=48.0, mpc=4, **mesh):
    return ArchSpec(name="t", clock_mhz=1000.0,
                    tensor_engine=TensorEngineSpec(rows=1, cols=mpc, dataflow="os"),  # each core's
                    mesh=dict(rows=rows, cols=cols, core_sram_kib=sram, core_macs_per_cycle=mpc,
                              link_bytes_per_cycle=bw, hop_latency_cycles=alpha,
                              routing_stage_cycles=beta, max_routes_per_core=routes, **mesh))


# ---- functional: the data movement computes A @ B exactly ------------------------------------

@pytest.mark.parametrize("algo", ["mesh", "cannon", "summa", "summa_relay"])
@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("align", [True, False])
def test_gemm_schedules_compute_a_times_b(algo, p, align):
    rng = np.random.default_rng(p)
    a = rng.integers(-100, 100, (3 * p + 2, 2 * p + 1))
    b = rng.integers(-100, 100, (2 * p + 1, p + 3))
    np.testing.assert_array_equal(execute_gemm(a, b, p, algo, align=align), a @ b)


@pytest.mark.parametrize("algo", ["mesh", "allreduce"])
@pytest.mark.parametrize("pr,pc", [(1, 1), (2, 3), (5, 2), (9, 4), (16, 3)])
@pytest.mark.parametrize("levels", [1, 2, 3])
def test_gemv_schedules_compute_x_times_w(algo, pr, pc, levels):
    rng = np.random.default_rng(pr * 7 + pc)
    x = rng.integers(-100, 100, (1, 37))
    w = rng.integers(-100, 100, (37, 13))
    y = execute_gemv(x, w, pr, pc, algo, levels=levels)
    np.testing.assert_array_equal(y, np.repeat(x @ w, pr, 0))   # every row holds all of y


def test_interleaved_ring_neighbours_within_two():
    for p in range(1, 40):
        ring = interleaved_ring(p)
        assert sorted(ring.tolist()) == list(range(p))
        assert (np.abs(np.diff(np.r_[ring, ring[0]])) <= 2).all()


def test_ktree_groups_about_sqrt():
    plan = ktree_plan(750, 2)
    assert len(plan[0]) == math.ceil(750 / 27) and all(g.size <= 27 for g in plan[0])
    assert len(plan[1]) == 1


# ---- closed forms on small meshes -------------------------------------------------------------

def test_meshgemm_closed_form_and_two_hop_bound():
    alpha, beta, bw, mpc = 1.0, 1.0, 4, 4
    arch = _arch(8, 8, alpha, beta, bw, mpc=mpc)
    m = k = n = 64                      # P = 8: 8 x 8 x 8 blocks
    rep = mesh_gemm(arch, m, k, n, algo="mesh")
    p, t = 8, 8
    w = t * t * 2 // bw                  # fp16 block: 32 flits
    comm = 2 * alpha + beta + w          # every ring transfer <= 2 hops, one per directed link
    comp = t ** 3 // mpc
    expect = (p // 2) * comm + (p - 1) * max(comm, comp) + comp
    assert rep.cycles == expect
    grid = healthy_grid(arch.mesh, square=True)
    for ph in gemm_phases("mesh", grid, t, t, t, elem_bytes=2, link_bytes=bw):
        if ph.flows is not None and len(ph.flows):
            assert ph.flows.hops.max() <= 2
    assert rep.routes_per_core.max() <= 6            # 3 per axis (send, receive, transit)
    assert rep.memory_bytes.max() == 2 * (2 * t * t * 2) + t * t * 2


def test_cannon_pays_the_wraparound():
    arch = _arch(8, 8, 1.0, 1.0)
    t, p = 8, 8
    rep = mesh_gemm(arch, 64, 64, 64, algo="cannon")
    w = t * t * 2 // 4
    wrap = 1.0 * (p - 1) + 1.0 + w      # the wrap-around crosses the row
    comp = t ** 3 // 4
    # alignment: rotate the shorter way, one step at a time, p // 2 steps
    assert rep.cycles == (p // 2) * wrap + (p - 1) * max(wrap, comp) + comp


def test_summa_closed_form():
    arch = _arch(6, 6, 1.0, 1.0)
    p, t = 6, 4
    rep = mesh_gemm(arch, 24, 24, 24, algo="summa")
    w = t * t * 2 // 4
    comp = t ** 3 // 4
    bc = [1.0 * max(kk, p - 1 - kk) + 1.0 + w for kk in range(p)]
    assert rep.cycles == bc[0] + sum(max(bc[kk], comp) for kk in range(1, p)) + comp


def test_summa_relay_closed_form_waferllm_baseline():
    """WaferLLM's SUMMA (He et al., OSDI 2025, sec. 5.1 (2)): each broadcast is relayed by every
    core on the way, (alpha + beta) per hop, flits streamed (W paid once), overlapped with the
    previous step's multiply; computed here by hand for a 6 x 6 grid."""
    alpha, beta, bw, mpc = 1.0, 2.0, 4, 4
    arch = _arch(6, 6, alpha, beta, bw, mpc=mpc)
    p, t = 6, 4
    rep = mesh_gemm(arch, 24, 24, 24, algo="summa_relay")
    w = t * t * 2 // bw                      # 8 flits per A or B block
    comp = t ** 3 // mpc                     # 16 cycles per block multiply
    bc = [(alpha + beta) * max(kk, p - 1 - kk) + w for kk in range(p)]
    assert rep.cycles == bc[0] + sum(max(bc[kk], comp) for kk in range(1, p)) + comp
    # the messages of step k = 1: per row a relay west (1 hop) and east (4 hops), per column
    # the same; every core passed is a stage
    grid = healthy_grid(arch.mesh, square=True)
    ph = gemm_phases("summa_relay", grid, t, t, t, elem_bytes=2, link_bytes=bw)[1]
    assert len(ph.flows) == 2 * p + 2 * p
    assert sorted(ph.flows.hops.tolist()) == [1] * (2 * p) + [4] * (2 * p)
    assert (ph.flows.stages == ph.flows.hops).all()
    # the hardware-multicast SUMMA pays beta once per broadcast: cheaper by beta * (d - 1)
    assert mesh_gemm(arch, 24, 24, 24, algo="summa").cycles < rep.cycles


def test_baseline_phases_by_hand_on_5x5():
    """Steps, messages and hops of WaferLLM's two baselines on a 5 x 5 grid, counted by hand.

    Cannon (sec. 5.1 (3)): alignment rotates row u by min(u, 5 - u) = 0, 1, 2, 2, 1 steps (the
    shorter way), so it repeats 2 times; rows 1-4 and columns 1-4 move, 5 messages each, per
    line 4 neighbour messages (1 hop) and the wrap-around (4 hops). Then 4 shift steps where all
    25 A and 25 B blocks move (same hops), then the last multiply.
    SUMMA relay (sec. 5.1 (2)): step k's row broadcast from column k reaches column 0 (k hops)
    and column 4 (4 - k hops), relayed by every core passed (stages = hops); 5 broadcasts, the
    first alone, 4 overlapped with the previous multiply, then the last multiply."""
    arch = _arch(5, 5)
    grid = healthy_grid(arch.mesh, square=True)
    ph = gemm_phases("cannon", grid, 2, 2, 2, elem_bytes=2, link_bytes=4)
    assert [(x.name, x.repeat, x.overlap) for x in ph] == [
        ("align", 2, False), ("shift + gemm", 4, True), ("gemm", 1, False)]
    per_line = [1, 1, 1, 1, 4]
    assert len(ph[0].flows) == 2 * 4 * 5
    assert sorted(ph[0].flows.hops.tolist()) == sorted(per_line * 8)
    assert len(ph[1].flows) == 2 * 25
    assert sorted(ph[1].flows.hops.tolist()) == sorted(per_line * 10)
    assert (ph[1].flows.stages == 1).all() and len(ph[2].flows) == 0
    ph = gemm_phases("summa_relay", grid, 2, 2, 2, elem_bytes=2, link_bytes=4)
    assert [(x.repeat, x.overlap, x.macs) for x in ph] == \
        [(1, False, 0)] + [(1, True, 8)] * 4 + [(1, False, 8)]
    for kk in range(5):
        hops = sorted(h for h in (kk, 4 - kk) if h) * 10          # 5 rows + 5 columns
        assert sorted(ph[kk].flows.hops.tolist()) == sorted(hops)
        assert (ph[kk].flows.stages == ph[kk].flows.hops).all()


def test_summa_relay_computes_a_times_b():
    rng = np.random.default_rng(3)
    a = rng.integers(-50, 50, (13, 9))
    b = rng.integers(-50, 50, (9, 7))
    np.testing.assert_array_equal(execute_gemm(a, b, 4, "summa_relay"), a @ b)


def test_sram_sets_the_k_panel_and_time():
    """Doubling SRAM doubles the K panel where the receive buffers are SRAM-limited: a 4 x 4
    grid of 16 x 16 x 16 fp16 blocks keeps own A, B, C = 1536 B; one receive panel pair costs
    (16 + 16) x 2 = 64 B per K column. 2 KiB holds 8 columns (two panels per block), 4 KiB the
    whole block. MeshGEMM's time by hand: align 2 ring steps, 3 overlapped shifts, the last
    multiply, each in q = 16 / kb panels of kb columns."""
    alpha, beta, bw, mpc = 10.0, 1.0, 4, 64
    t, p = 16, 4
    cyc = {}
    for sram_kib, kb in ((2.0, 8), (4.0, 16)):
        rep = mesh_gemm(_arch(4, 4, alpha, beta, bw, sram=sram_kib, mpc=mpc), 64, 64, 64)
        assert rep.notes["k_panel"] == kb
        q = t // kb
        comm = 2 * alpha + beta + t * kb * 2 // bw       # <= 2 hops, one panel of flits
        comp = t * kb * t // mpc
        assert rep.cycles == (p // 2) * q * comm + (p - 1) * q * max(comm, comp) + q * comp
        assert rep.memory_bytes.max() == 3 * t * t * 2 + (t + t) * kb * 2 <= sram_kib * 1024
        cyc[sram_kib] = rep.cycles
    assert cyc[4.0] < cyc[2.0]
    # an unlimited SRAM changes nothing further: the panel is already the whole block
    assert mesh_gemm(_arch(4, 4, alpha, beta, bw, sram=8.0, mpc=mpc), 64, 64, 64).cycles == cyc[4.0]
    # 1536 B own + 64 B for a 1-wide panel pair > 1.5 KiB: refused, naming the field
    with pytest.raises(MeshMappingError, match=r"1\.56 KiB per core even with 1-wide K panels"
                                               r".*core_sram_kib = 1\.5"):
        mesh_gemm(_arch(4, 4, alpha, beta, bw, sram=1.5, mpc=mpc), 64, 64, 64)


def test_summa_panels_from_sram_closed_form():
    """SUMMA with two receive panel pairs: 2 KiB leaves 512 B = 4 columns of (16 + 16) x 2 x 2
    B, so kb = 4 and every block is broadcast as q = 4 panels; the first panel goes before any
    multiply, the other p*q - 1 overlap the previous panel's multiply, the last multiply
    follows."""
    alpha, beta, bw, mpc = 1.0, 1.0, 4, 4
    t, p, kb = 16, 4, 4
    rep = mesh_gemm(_arch(4, 4, alpha, beta, bw, sram=2.0, mpc=mpc), 64, 64, 64, algo="summa")
    assert rep.notes["k_panel"] == kb and rep.notes["k_panels_per_block"] == 4
    q = t // kb
    w = t * kb * 2 // bw
    comp = t * kb * t // mpc
    bc = [alpha * max(kk, p - 1 - kk) + beta + w for kk in range(p)]
    want = bc[0] + (q - 1) * max(bc[0], comp) + sum(q * max(bc[kk], comp) for kk in range(1, p))
    assert rep.cycles == want + comp


def test_meshgemv_closed_form_single_column():
    alpha, beta = 1.0, 2.0
    arch = _arch(9, 1, alpha, beta)
    k, n = 9 * 5, 3                     # Kt = 5, Nt = 3 -> 2 flits of partial sums
    rep = mesh_gemv(arch, k, n, levels=2, group=3)
    w = math.ceil(3 * 2 / 4)
    comp = math.ceil(5 * 3 / 4)
    lvl1 = alpha * 1 + beta * 1 + w          # groups {0,1,2},{3,4,5},{6,7,8} -> roots 1,4,7
    lvl2 = alpha * 3 + beta * 1 + w          # roots 1 and 7 stream into 4 (3 hops, 1 stage)
    bcast = alpha * 4 + beta * 1 + w         # 4 multicasts to rows 0 and 8
    assert rep.cycles == comp + lvl1 + lvl2 + bcast


def test_sram_sets_the_gemv_reduce_chunk_and_time():
    """A 9 x 1 column, W blocks 40 x 8 fp16: W 640 B + x 80 B + partial y 16 B = 736 B, plus
    2 B per partial sum of receive buffer. 744 B holds 4 (two reduce messages per level),
    twice that holds all 8 (one). K-tree (groups of 3) by hand, as in the closed form above."""
    alpha, beta = 1.0, 2.0
    cyc = {}
    for sram_b, chunk in ((744, 4), (1488, 8)):
        rep = mesh_gemv(_arch(9, 1, alpha, beta, sram=sram_b / 1024), 9 * 40, 8,
                        levels=2, group=3)
        assert rep.notes["reduce_chunk"] == chunk
        q = 8 // chunk
        w = math.ceil(chunk * 2 / 4)
        comp = math.ceil(40 * 8 / 4)
        lvl1 = alpha * 1 + beta * 1 + w
        lvl2 = alpha * 3 + beta * 1 + w
        bcast = alpha * 4 + beta * 1 + math.ceil(8 * 2 / 4)     # y is broadcast whole
        assert rep.cycles == comp + q * (lvl1 + lvl2) + bcast
        assert rep.memory_bytes.max() == 736 + 2 * chunk
        cyc[sram_b] = rep.cycles
    assert cyc[1488] < cyc[744]
    with pytest.raises(MeshMappingError, match=r"even with a 1-value receive buffer.*"
                                               r"core_sram_kib"):
        mesh_gemv(_arch(9, 1, alpha, beta, sram=737 / 1024), 9 * 40, 8)


def test_ring_allreduce_gemv_closed_form():
    arch = _arch(6, 2, 1.0, 1.0)
    rep = mesh_gemv(arch, 12, 24, algo="allreduce", broadcast_x=False)
    nt, pr = 12, 6
    chunk_flits = math.ceil(math.ceil(nt / pr) * 2 / 4)
    step = 2 * 1.0 + 1.0 + chunk_flits
    comp = math.ceil(2 * 12 / 4)
    assert rep.cycles == comp + 2 * (pr - 1) * step


def test_meshgemm_beats_baselines_when_communication_bound():
    arch = _arch(64, 64, 1.0, 1.0)          # 4 x 4 x 4 blocks: 16 compute cycles per step
    mg = mesh_gemm(arch, 256, 256, 256, algo="mesh")
    ca = mesh_gemm(arch, 256, 256, 256, algo="cannon")
    su = mesh_gemm(arch, 256, 256, 256, algo="summa")
    assert mg.cycles < su.cycles < ca.cycles
    # compute-bound (8 x 8 x 8 blocks) SUMMA needs no alignment and may win: the model says so
    assert mesh_gemm(arch, 512, 512, 512, algo="summa").cycles < \
        mesh_gemm(arch, 512, 512, 512, algo="mesh").cycles


# ---- limits and errors ------------------------------------------------------------------------

def test_gemm_refuses_sram_overflow():
    with pytest.raises(MeshMappingError, match=r"KiB per core .*A block 256x256.*core_sram_kib"):
        mesh_gemm(load_arch("mesh4x4"), 1024, 1024, 1024)


def test_gemm_refuses_route_overflow():
    arch = _arch(8, 8, routes=4)
    with pytest.raises(MeshMappingError, match=r"needs 6 route ids.*max_routes_per_core = 4"):
        mesh_gemm(arch, 64, 64, 64, algo="mesh")


def test_bad_algo_and_missing_mesh():
    with pytest.raises(MeshMappingError, match="must be one of mesh, cannon, summa, summa_relay"):
        mesh_gemm(_arch(), 8, 8, 8, algo="foo")
    with pytest.raises(MeshMappingError, match="must be one of mesh, allreduce"):
        mesh_gemv(_arch(), 8, 8, algo="summa")
    with pytest.raises(MeshMappingError, match="no mesh section"):
        mesh_gemv(load_arch("ws8x8"), 8, 8)


# ---- defects ----------------------------------------------------------------------------------

def test_dead_core_is_skipped_with_reported_cost():
    arch = _arch(8, 8, defective_cores=((2, 5),))
    grid = healthy_grid(arch.mesh, square=True)
    assert 2 not in grid.rows and 5 not in grid.cols and grid.pr == 7
    cost = defect_cost(mesh_gemm, arch, 56, 56, 56, algo="mesh")
    bad = cost["with_defects"]
    assert bad.routes_per_core[2, 5] == 0 and bad.core_busy_cycles[2, 5] == 0
    assert cost["cores_used_with_defects"] == 49 and cost["cores_used_healthy"] == 64
    assert cost["slowdown"] > 1.0
    # the schedule itself is unchanged, so the result is still exact
    a = np.arange(56 * 56).reshape(56, 56) % 7
    np.testing.assert_array_equal(execute_gemm(a, a, grid.pr, "mesh"), a @ a)


def test_dead_link_drops_its_row_and_costs_extra_hops():
    arch = _arch(9, 1, 1.0, 1.0, defective_links=(((3, 0), (4, 0)),))
    with pytest.raises(MeshMappingError, match="no healthy rows/columns"):
        mesh_gemv(arch, 64, 8)        # a vertical dead link kills the only column
    arch = _arch(4, 9, 1.0, 1.0, defective_links=(((1, 3), (1, 4)),))
    cost = defect_cost(mesh_gemv, arch, 64, 36)
    bad = cost["with_defects"]
    assert bad.link_load_flits["E"][1, 3] == 0 and bad.link_load_flits["W"][1, 3] == 0
    assert cost["cores_used_with_defects"] == 27
    assert cost["cycles_with_defects"] >= cost["cycles_healthy"]


# ---- WSE-2 scale ------------------------------------------------------------------------------

def test_wse2_meshgemv_16k_near_paper():
    """The full 750x994 mesh (wall time: benchmarks/mesh_vs_waferllm.py)."""
    arch = load_arch("wse2")
    rep = mesh_gemv(arch, 16384, 16384, broadcast_x=False)
    assert rep.cores_used == 750 * 994
    assert 1.2 / 2 <= rep.us <= 1.2 * 2          # WaferLLM: 1.2 us


# ---- LLM partitioning and CLI -----------------------------------------------------------------

def test_llama3_8b_decode_layer_and_kv_capacity():
    from tilewright.dataflow_sim.mesh.llm import kv_cache_capacity, plan_layer
    arch = load_arch("wse2")
    plan = plan_layer(arch, "llama3-8b", "decode", context=4096)
    assert plan.cycles == sum(o.cycles for o in plan.ops) > 0
    assert {o.kind for o in plan.ops} == {"gemv", "vector", "kv-shift"}
    kv = kv_cache_capacity(arch, "llama3-8b", prompt=4096)
    assert kv["max_decode_shift"] > 100 * kv["max_decode_concat"] > 0


def test_cli_mesh_json_and_errors():
    import typer
    from typer.testing import CliRunner

    from tilewright.app.cli.mesh import mesh
    app = typer.Typer()
    app.command("mesh")(mesh)
    app.command("noop")(lambda: None)
    res = CliRunner().invoke(app, ["mesh", "gemm", "--arch", "mesh4x4", "--m", "32", "--k", "32",
                                   "--n", "32", "--algo", "summa", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["algo"] == "summa" and d["cycles"] > 0 and d["grid"] == "4x4"
    res = CliRunner().invoke(app, ["mesh", "gemv", "--arch", "mesh4x4", "--k", "32", "--n", "32",
                                   "--algo", "cannon"])
    assert isinstance(res.exception, MeshMappingError)
