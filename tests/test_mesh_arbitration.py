"""Run-time arbitration in the RTL mesh router and the flit model that predicts it.

References: hand-worked cycle tables of the round-robin / credit rule (router unit tests), a
routing that breaks the XY turn rule (must deadlock in the flit model; XY must not), the
Amaranth simulation of the RTL mesh for forks and merges the static arbiter used to refuse,
and hypothesis-generated random flows on one Verilator build of the 4x4 mesh: the RTL must
deliver every word intact, every flit in the cycle the flit model says and finish when it says.
"""

from __future__ import annotations

import numpy as np
import pytest

from tilewright.arch import ArchSpec, load_arch
from tilewright.compiler.mesh_codegen import transfer_job
from tilewright.compiler.mesh_isa import OUTPUTS
from tilewright.compiler.mesh_partition import MeshProgramBuilder
from tilewright.compiler.mesh_schedule import FlowBatch, PhaseSpec
from tilewright.dataflow_sim.mesh.flit_sim import simulate_fields, simulate_job


def _arch() -> ArchSpec:
    return load_arch("configs/mesh4x4.yaml")


def _bit(*outs: str) -> int:
    return sum(1 << OUTPUTS.index(o) for o in outs)


def _router_trace(dut, drive, cycles: int, watch):
    """Run the router ``cycles`` cycles; ``drive(ctx, t)`` sets inputs; returns, per watched
    (valid, data) pair name, the (cycle, data) seen."""
    from amaranth.sim import Simulator
    seen = {k: [] for k in watch}

    async def bench(ctx):
        for t in range(cycles):
            drive(ctx, t)
            for name, (v, d) in watch.items():
                if ctx.get(v):
                    seen[name].append((t, ctx.get(d) if d is not None else 1))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return seen


def test_router_round_robin_with_credits_in_amaranth_sim():
    """Two inputs (west, injection 0) want output e; 3 credits. Hand-worked: w first (pointer
    0), then alternating; no credits left after 3 flits; each returned credit lets one more go,
    the pointer still alternating; injection 0 is not ready while its 3-flit FIFO is full; the
    west input's credits go back one cycle after each pop."""
    from tilewright.rtl.mesh_router import MeshRouter
    dut = MeshRouter(flit_bits=16, hop_cycles=1, eject_cycles=1, routes=4, depth=3)
    sent = []

    def drive(ctx, t):
        ctx.set(dut.route, _bit("e"))                       # colour 0 -> east
        ctx.set(dut.i_w_valid, t < 3)
        ctx.set(dut.i_w_data, 0x100 + t)
        ctx.set(dut.o_e_credit, t in (4, 6))
        ready = ctx.get(dut.inj0_ready)
        go = ready and len(sent) < 5
        ctx.set(dut.inj0_valid, go)
        ctx.set(dut.inj0_data, 0x200 + len(sent))
        if go:
            sent.append(t)

    seen = _router_trace(dut, drive, 10, {"e": (dut.o_e_valid, dut.o_e_data),
                                          "credit_w": (dut.i_w_credit, None),
                                          "inj_ready": (dut.inj0_ready, None)})
    assert seen["e"] == [(1, 0x100), (2, 0x200), (3, 0x101), (6, 0x201), (8, 0x102)]
    assert sent == [0, 1, 2, 3, 6]          # offered while ready: FIFO full at t = 4, 5, 7..
    assert [t for t, _ in seen["credit_w"]] == [1, 3, 8]
    assert [t for t, _ in seen["inj_ready"]] == sent


def test_router_fork_latencies_in_amaranth_sim():
    """A colour routed to east and ejection lane 0 forks: injected in cycle 1, it leaves east
    hop_cycles = 2 later and reaches the tile eject_cycles = 3 later; a colour routed nowhere
    is dropped."""
    from tilewright.rtl.mesh_router import MeshRouter
    dut = MeshRouter(flit_bits=16, hop_cycles=2, eject_cycles=3, routes=2)

    def drive(ctx, t):
        ctx.set(dut.route, _bit("e", "ej0") | (0 << 6))     # colour 1: no entry
        ctx.set(dut.inj0_valid, t in (1, 2))
        ctx.set(dut.inj0_color, 0 if t == 1 else 1)
        ctx.set(dut.inj0_data, 0xAB + t)

    seen = _router_trace(dut, drive, 9, {"e": (dut.o_e_valid, dut.o_e_data),
                                         "ej0": (dut.ej0_valid, dut.ej0_data),
                                         "w": (dut.o_w_valid, dut.o_w_data)})
    assert seen == {"e": [(3, 0xAC)], "ej0": [(4, 0xAC)], "w": []}
    with pytest.raises(ValueError, match="hop_cycles"):
        MeshRouter(flit_bits=32, hop_cycles=0)


def _ring(xy: bool, flits: int = 24) -> list[dict]:
    """Four long flows on the 2x2 mesh, injected at once: (0,0)->(1,0), (0,1)->(0,0),
    (1,1)->(0,1), (1,0)->(1,1). ``xy``: their XY routes (one hop each, X first); else each
    goes the long way, three hops clockwise around the square (X, Y, X turns), so every link
    of the ring carries three flows that each wait on the next link. Route tables by hand
    (colour = flow index)."""
    from tilewright.compiler.mesh_codegen import xy_path
    f = [dict() for _ in range(4)]                   # tile index r * 2 + c
    ring = [(0, 0), (0, 1), (1, 1), (1, 0)]          # clockwise
    side = {((0, 0), (0, 1)): "e", ((0, 1), (1, 1)): "s", ((1, 1), (1, 0)): "w",
            ((1, 0), (0, 0)): "n"}
    for c in range(4):
        src, dst = ring[c], ring[(c + 3) % 4]
        if xy:
            hops = [((r, cc), sd) for r, cc, sd in xy_path(*src, *dst)]
        else:
            hops = [(ring[(c + h) % 4], side[(ring[(c + h) % 4], ring[(c + h + 1) % 4])])
                    for h in range(3)]
        s_, d_ = src[0] * 2 + src[1], dst[0] * 2 + dst[1]
        f[s_].update({"inj0_count": flits, "inj0_color": c})
        for (r, cc), sd in hops:
            f[r * 2 + cc][f"route_{c}"] = _bit(sd)
        f[d_][f"route_{c}"] = _bit("ej0")
        f[d_]["ej0_count"] = flits
    return f


def test_xy_routing_is_what_keeps_the_ring_deadlock_free():
    """Four long flows going around a 2x2 square the long way (X, Y, X turns) wait on one
    another in a ring: the flit model (the RTL's rule) never finishes. The same flows on
    their XY routes deliver every flit, uncontended: 1 hop + 1 eject + 24 flits."""
    with pytest.raises(RuntimeError, match="deadlock"):
        simulate_fields(_ring(xy=False), 2, 2, hop=1, eject=1, depth=3, max_cycles=2000)
    cycles, arr = simulate_fields(_ring(xy=True), 2, 2, hop=1, eject=1, depth=3)
    assert len(arr) == 4 * 24 and cycles == 1 + 1 + 24


def _transfers(arch: ArchSpec, phases: list[list[tuple[int, int, int, int, int]]]):
    """A Program of message phases: per phase (sr, sc, dr, dc, flits) unicasts (4-byte flits)."""
    b = MeshProgramBuilder("flows", arch)
    specs = []
    for i, flows in enumerate(phases):
        sr, sc, dr, dc, fl = (list(x) for x in zip(*flows))
        specs.append(PhaseSpec(f"p{i}", FlowBatch.make(sr, sc, dr, dc,
                                                       [4 * x for x in fl])))
    b.add("flows", specs, np.ones((arch.mesh.rows, arch.mesh.cols), bool))
    return b.program()


#: forks and merges the static arbiter refused or serialized: two messages sharing a link then
#: leaving it by different ports; three converging on one column; a crossing
FORKS = [[(0, 0, 0, 2, 4), (0, 1, 0, 3, 4)],
         [(0, 0, 3, 1, 5), (1, 2, 3, 1, 3), (2, 1, 1, 1, 2), (0, 1, 2, 3, 6)],
         [(1, 0, 1, 3, 6), (0, 2, 3, 2, 6), (3, 3, 0, 0, 3)]]


def test_forks_and_merges_in_amaranth_sim():
    """Phases the old static arbiter refused (a fork after a shared link) or serialized: on the
    Amaranth-simulated RTL every word arrives intact, every flit in the flit model's cycle."""
    from tilewright.cosim.mesh_pysim import run_mesh_job_pysim
    arch = _arch()
    job, expect = transfer_job(arch, _transfers(arch, FORKS), seed=1)
    res = run_mesh_job_pysim(arch, job)
    for key, words in expect.items():
        assert [int(w) for w in res["reads"][key][0]] == [int(w) for w in words], key
    flit = simulate_job(job, arch)
    assert len(res["arrivals"]) == sum(f[4] for ph in FORKS for f in ph)
    assert res["arrivals"] == flit.arrivals and res["cycles"] == flit.cycles


def test_route_limit_is_checked_and_zero_refused(tmp_path):
    """More route ids than mesh.max_routes_per_core at a core: a MeshMappingError naming the
    field; max_routes_per_core = 0 in an ArchSpec: one line, exit 2."""
    import subprocess
    import sys

    import yaml

    from tilewright.compiler.errors import MeshMappingError
    base = _arch().model_dump(mode="json")
    one = ArchSpec.from_dict({**base, "mesh": {**base["mesh"], "max_routes_per_core": 1}})
    with pytest.raises(MeshMappingError, match="max_routes_per_core = 1"):
        transfer_job(one, _transfers(one, [FORKS[0]]))
    bad = {**base, "mesh": {**base["mesh"], "max_routes_per_core": 0}}
    (tmp_path / "zero.yaml").write_text(yaml.safe_dump(bad))
    proc = subprocess.run([sys.executable, "-m", "tilewright.app.cli.main", "mesh", "gemv",
                           "--arch", str(tmp_path / "zero.yaml"), "--k", "64", "--n", "8"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "max_routes_per_core" in lines[0] and "Traceback" not in \
        proc.stderr, proc.stderr


# ---- random flows on one Verilator build ----------------------------------------------------

def _random_phases(draw_flows, rows: int, cols: int):
    """Keep the drawn (sr, sc, dr, dc, flits) flows a tile's two injection and two ejection
    lanes allow (no self-sends)."""
    out, inj, ej = [], {}, {}
    for sr, sc, dr, dc, fl in draw_flows:
        sr, dr, sc, dc = sr % rows, dr % rows, sc % cols, dc % cols
        if (sr, sc) == (dr, dc) or inj.get((sr, sc), 0) == 2 or ej.get((dr, dc), 0) == 2:
            continue
        inj[(sr, sc)] = inj.get((sr, sc), 0) + 1
        ej[(dr, dc)] = ej.get((dr, dc), 0) + 1
        out.append((sr, sc, dr, dc, fl))
    return out


def _collect_random_jobs(arch: ArchSpec, n_examples: int, seed: int):
    """Hypothesis-generated phases of random flows (bounded example count), each built into a
    MeshJob by the compiler path (Program -> transfer_job). Returns [(flows, job, expect)]."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from tilewright.compiler.errors import MeshMappingError
    R, C = arch.mesh.rows, arch.mesh.cols
    flow = st.tuples(st.integers(0, R - 1), st.integers(0, C - 1), st.integers(0, R - 1),
                     st.integers(0, C - 1), st.integers(1, 9))
    jobs = []

    @settings(max_examples=n_examples, database=None, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(st.lists(flow, min_size=2, max_size=3 * R), min_size=1, max_size=2))
    def collect(phases):
        kept = [p for p in (_random_phases(ph, R, C) for ph in phases) if p]
        if not kept:
            return
        try:
            job, expect = transfer_job(arch, _transfers(arch, kept), seed=seed + len(jobs))
        except MeshMappingError:          # more route ids than a core holds: not this test
            return
        jobs.append((kept, job, expect))

    collect()
    return jobs


def _mesh(n: int) -> ArchSpec:
    """The mesh4x4 preset, or an n x n mesh like it with 1 KiB per core (a smaller build)."""
    if n == 4:
        return _arch()
    base = _arch().model_dump(mode="json")
    return ArchSpec.from_dict({**base, "name": f"mesh{n}x{n}", "mesh": {
        **base["mesh"], "rows": n, "cols": n, "core_sram_kib": 1.0}})


@pytest.mark.verilator
@pytest.mark.slow
@pytest.mark.parametrize("n,n_examples", [
    (4, 12), pytest.param(8, 25, marks=pytest.mark.nightly)])
def test_random_flows_rtl_flit_exact(n, n_examples):
    """Random contending flows (hypothesis, bounded) on the Verilated n x n mesh, all examples
    in one simulation of one build: every word intact, every flit's arrival cycle and every
    job's total == the flit model; some examples contend (their time != the closed form)."""
    from tilewright.cosim.mesh_rtl import rtl_jobs
    from tilewright.dataflow_sim.mesh import run_mesh_program
    arch = _mesh(n)
    jobs = _collect_random_jobs(arch, n_examples, seed=11)
    assert len(jobs) >= n_examples // 2
    runs = rtl_jobs(arch, [j for _, j, _ in jobs])
    contended = 0
    for (flows, job, expect), run in zip(jobs, runs):
        for key, words in expect.items():
            assert [int(w) for w in run.reads[key][0]] == [int(w) for w in words], (flows, key)
        assert run.flit_exact, (flows, run.rtl_cycles, run.flit.cycles)
        assert len(run.arrivals) == sum(f[4] for ph in flows for f in ph)
        closed = run_mesh_program(_transfers(arch, flows), arch).cycles
        contended += run.rtl_cycles != closed
    assert contended > 0, "no example contended: the test would not exercise arbitration"
