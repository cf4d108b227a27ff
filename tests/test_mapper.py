"""Mapper (analytical) and tiled cycle model: capacity, traffic, closed-form limits, optimality.

Independent references: buffer needs from :class:`GemmLayout` (the layout's own formulas), DRAM
traffic from a literal Python loop over the tiles, the pipeline recurrence written as a plain
loop, and the compute-/bandwidth-bound limits in closed form.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tilewright.arch import ArchSpec, load_arch
from tilewright.compiler.layout import GemmLayout
from tilewright.compiler.gemm_mapper import (ACC_BYTES, LOOP_ORDERS, GemmOp, Mapping, best_index,
                                        cost_of, dram_rates, enumerate_mappings, map_gemm)
from tilewright.dataflow_sim.cycle import gemm_cycles
from tilewright.dataflow_sim.tiled import pipeline_ends, simulate_tiled, tile_schedule


def arch(dataflow: str = "ws", rows: int = 4, cols: int = 4, kib: int = 2, acc_kib: int = 1,
         gbps: float = 16.0, lat_ns: float = 100.0) -> ArchSpec:
    return ArchSpec.from_dict({
        "name": f"t-{dataflow}{rows}x{cols}", "clock_mhz": 500.0,
        "tensor_engine": {"rows": rows, "cols": cols, "dataflow": dataflow},
        "memory": {"scratchpad_kib": kib, "accumulator_kib": acc_kib},
        "offchip": {"bandwidth_gbps": gbps, "latency_ns": lat_ns}})


# ---- capacity ------------------------------------------------------------------------------
@pytest.mark.parametrize("dataflow", ["ws", "os"])
@pytest.mark.parametrize("double_buffer", [True, False])
@pytest.mark.parametrize("shape", [(300, 200, 100, 1, 1), (1, 4096, 512, 1, 2), (64, 64, 700, 3, 1)])
def test_every_mapping_fits_the_buffers(dataflow, double_buffer, shape):
    m, k, n, batch, e = shape
    a = arch(dataflow, 4, 8, kib=4, acc_kib=2)
    op = GemmOp("t", m, k, n, batch=batch, elem_bytes=e)
    space = enumerate_mappings(op, a, double_buffer=double_buffer)
    slots = 2 if double_buffer else 1
    da, db, dc = GemmLayout.depths(a)
    c = space.columns
    assert len(space) > 0
    for mt, kt, nt in {(int(x), int(y), int(z)) for x, y, z in zip(c["m_t"], c["k_t"], c["n_t"])}:
        lay = GemmLayout(4, 8, dataflow, mt, kt, nt)
        assert lay.a_words * e * slots <= da and lay.b_words * e * slots <= db
        assert lay.acc_words * slots <= dc
        assert 1 <= mt <= m and 1 <= kt <= k and 1 <= nt <= n
        # folded dimensions step by the array size (or take the whole extent)
        folded = {"ws": ((kt, k, 4), (nt, n, 8)), "os": ((mt, m, 4), (nt, n, 8))}[dataflow]
        assert all(t == ext or t % g == 0 for t, ext, g in folded)


def test_split_k_false_keeps_k_whole():
    space = enumerate_mappings(GemmOp("t", 64, 40, 64), arch("ws"), split_k=False)
    assert set(space.columns["k_t"].tolist()) == {40}


# ---- traffic: analytical == literal loop == tiled schedule ----------------------------------
def literal_traffic(op: GemmOp, mp: Mapping, cap: tuple[int, int, int] = (1, 1, 1)
                    ) -> dict[str, int]:
    """Walk the tiles in loop order with a least-recently-used cache of ``cap`` tiles per
    operand (A, B, accumulator); count bytes/transfers. A C tile evicted before its last k tile
    is written as int32 partial sums and read back at its next visit; a complete C tile is
    written (``out_bytes``) when the walk leaves it."""
    tm, tk, tn = mp.tile_counts(op)
    trips = {"m": tm, "k": tk, "n": tn}
    cache = {"a": [], "b": [], "c": []}
    visited: set = set()
    done: set = set()
    out = dict(a=0, b=0, c_read=0, c_write=0, transfers=0)
    tiles = [(b, dict(zip(mp.order, t))) for b in range(op.batch)
             for t in itertools.product(*(range(trips[d]) for d in mp.order))]
    size = {"m": lambda i: min(mp.m_t, op.m - i * mp.m_t),
            "k": lambda i: min(mp.k_t, op.k - i * mp.k_t),
            "n": lambda i: min(mp.n_t, op.n - i * mp.n_t)}

    def use(which: str, key, limit: int) -> tuple[bool, list]:
        """LRU access: (hit, evicted keys)."""
        lru = cache[which]
        hit = key in lru
        if hit:
            lru.remove(key)
        lru.append(key)
        evicted = []
        while len(lru) > limit:
            evicted.append(lru.pop(0))
        return hit, evicted

    for j, (b, ix) in enumerate(tiles):
        m, k, n = size["m"](ix["m"]), size["k"](ix["k"]), size["n"](ix["n"])
        if not use("a", (b, ix["m"], ix["k"]), cap[0])[0]:
            out["a"] += m * k * op.elem_bytes
            out["transfers"] += 1
        if not use("b", (b, ix["k"], ix["n"]), cap[1])[0]:
            out["b"] += k * n * op.elem_bytes
            out["transfers"] += 1
        ckey = (b, ix["m"], ix["n"])
        hit, evicted = use("c", ckey, cap[2])
        for key in evicted:                   # partial sums spilled to DRAM
            if key not in done:
                out["c_write"] += size["m"](key[1]) * size["n"](key[2]) * ACC_BYTES
                out["transfers"] += 1
        if not hit and ckey in visited:
            out["c_read"] += m * n * ACC_BYTES
            out["transfers"] += 1
        visited.add(ckey)
        nxt = tiles[j + 1] if j + 1 < len(tiles) else None
        leaving = nxt is None or (nxt[0], nxt[1]["m"], nxt[1]["n"]) != ckey
        if leaving and ix["k"] == tk - 1:     # complete: written once, final
            out["c_write"] += m * n * op.out_bytes
            out["transfers"] += 1
            done.add(ckey)                    # its slot keeps it until reused
    return out


def lru_capacity(a: ArchSpec, mp: Mapping, e: int) -> tuple[int, int, int]:
    """Tiles each buffer keeps besides the prefetch slot: depth // words - 1 (GemmLayout)."""
    lay = GemmLayout(a.tensor_engine.rows, a.tensor_engine.cols, mp.dataflow, mp.m_t, mp.k_t,
                     mp.n_t)
    da, db, dc = GemmLayout.depths(a)
    return (da // (lay.a_words * e) - 1, db // (lay.b_words * e) - 1, dc // lay.acc_words - 1)


@pytest.mark.parametrize("order", LOOP_ORDERS)
@pytest.mark.parametrize("shape,tile", [
    ((10, 12, 14, 1, 1, 4), (4, 8, 4)),    # ragged edges on every dimension
    ((8, 8, 8, 2, 2, 1), (8, 4, 4)),       # batch 2, 2-byte elements, int8 output, Tm = 1
    ((5, 9, 3, 1, 1, 4), (5, 9, 3)),       # one tile
    ((9, 4, 17, 1, 1, 4), (3, 4, 8)),      # Tk = 1
    ((40, 48, 56, 1, 1, 4), (8, 8, 8)),    # operands resident in some orders, not in others
])
@pytest.mark.parametrize("kib,acc_kib", [(16, 16), (1, 1)])
def test_dram_bytes_equal_a_literal_loop(order, shape, tile, kib, acc_kib):
    m, k, n, batch, e, ob = shape
    op = GemmOp("t", m, k, n, batch=batch, elem_bytes=e, out_bytes=ob)
    mp = Mapping(*tile, order=order, dataflow="ws")
    a = arch("ws", 4, 4, kib=kib, acc_kib=acc_kib)
    want = literal_traffic(op, mp, lru_capacity(a, mp, e))
    cost = cost_of(op, a, mp)
    got = dict(a=cost.dram_a_bytes, b=cost.dram_b_bytes, c_read=cost.dram_c_read_bytes,
               c_write=cost.dram_c_write_bytes, transfers=cost.transfers)
    assert got == want
    t = simulate_tiled(op, a, mp)
    assert dict(a=t.dram_a_bytes, b=t.dram_b_bytes, c_read=t.dram_c_read_bytes,
                c_write=t.dram_c_write_bytes, transfers=t.transfers) == want
    assert cost.dram_bytes == sum(want[x] for x in ("a", "b", "c_read", "c_write"))


def test_core_cycles_are_the_sum_of_per_tile_commands():
    a = arch("os", 4, 4, kib=16, acc_kib=16)
    op = GemmOp("t", 10, 13, 14, batch=2)
    mp = Mapping(8, 5, 4, "nkm", "os")
    want = 0
    for _ in range(op.batch):
        for i0 in range(0, op.m, mp.m_t):
            for k0 in range(0, op.k, mp.k_t):
                for n0 in range(0, op.n, mp.n_t):
                    want += gemm_cycles(a, min(mp.m_t, op.m - i0), min(mp.k_t, op.k - k0),
                                        min(mp.n_t, op.n - n0)).cycles
    assert cost_of(op, a, mp).core_cycles == want
    assert simulate_tiled(op, a, mp).core_cycles == want


# ---- the pipeline recurrence ---------------------------------------------------------------
def loop_pipeline(ld, c, wb):
    """The module docstring's recurrence, one tile at a time."""
    T = len(c)
    u, v = np.zeros(T), np.zeros(T)
    v2, v1, up = 0.0, ld[0], 0.0
    for i in range(T):
        u[i] = max(up, v2 + ld[i]) + c[i]
        v[i] = max(v1 + (ld[i + 1] if i + 1 < T else 0.0), u[i]) + wb[i]
        v2, v1, up = v1, v[i], u[i]
    return u, v


@pytest.mark.parametrize("T", [1, 2, 3, 10, 257, 2000])
def test_vectorized_pipeline_equals_the_loop(T):
    rng = np.random.default_rng(T)
    ld, c = rng.random(T) * 10, rng.integers(1, 10, T).astype(float)
    wb = rng.random(T) * 10 * (rng.random(T) < 0.5)
    for got, want in zip(pipeline_ends(ld, c, wb), loop_pipeline(ld, c, wb)):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_single_buffered_is_the_plain_sum():
    a = arch("ws", 4, 4, kib=16, acc_kib=16)
    op = GemmOp("t", 30, 40, 50)
    mp = Mapping(8, 8, 8, "mnk", "ws", double_buffer=False)
    s = tile_schedule(op, a, mp)
    bw, lat = dram_rates(a)
    want = float(np.sum(s.load_cycles(bw, lat) + s.compute + s.write_cycles(bw, lat)))
    assert simulate_tiled(op, a, mp).cycles == pytest.approx(want, rel=1e-12)
    assert cost_of(op, a, mp).cycles == pytest.approx(want, rel=1e-12)


# ---- closed-form limits ----------------------------------------------------------------------
@pytest.mark.parametrize("dataflow", ["ws", "os"])
@pytest.mark.parametrize("order", ["mnk", "kmn", "nkm"])
def test_compute_bound_tends_to_the_command_sum(dataflow, order):
    a = arch(dataflow, 4, 4, kib=16, acc_kib=16, gbps=1e6, lat_ns=0.0)
    op = GemmOp("t", 96, 80, 72)
    mp = Mapping(32, 16, 24, order, dataflow)
    s = tile_schedule(op, a, mp)
    bw, lat = dram_rates(a)
    t = simulate_tiled(op, a, mp)
    exact = s.load_cycles(bw, lat)[0] + s.compute.sum() + s.write_cycles(bw, lat)[-1]
    assert t.cycles == pytest.approx(exact, rel=1e-12)
    assert t.cycles == pytest.approx(s.compute.sum(), rel=1e-3)
    assert cost_of(op, a, mp).cycles == pytest.approx(t.cycles, rel=1e-12)


@pytest.mark.parametrize("dataflow", ["ws", "os"])
@pytest.mark.parametrize("order", ["mnk", "kmn", "nkm"])
def test_bandwidth_bound_tends_to_bytes_over_bandwidth(dataflow, order):
    a = arch(dataflow, 4, 4, kib=16, acc_kib=16, gbps=0.01, lat_ns=0.0)
    op = GemmOp("t", 96, 80, 72)
    mp = Mapping(32, 16, 24, order, dataflow)
    t = simulate_tiled(op, a, mp)
    bw, _ = dram_rates(a)
    ideal = t.dram_bytes / bw
    # resident operands leave tiles with nothing to load; the DMA engine waits for the command
    # that frees a slot, so at most every command's cycles add to bytes / bandwidth
    assert ideal <= t.cycles <= ideal + t.core_cycles
    c = cost_of(op, a, mp)
    assert c.bound == "bandwidth" and c.roofline_bound == "bandwidth"
    assert c.cycles == pytest.approx(t.cycles, rel=1e-2)


# ---- optimality ------------------------------------------------------------------------------
@pytest.mark.parametrize("dataflow", ["ws", "os"])
def test_chosen_mapping_is_no_worse_than_any_brute_force_mapping(dataflow):
    a = arch(dataflow, 4, 4, kib=1, acc_kib=1, gbps=4.0, lat_ns=20.0)
    op = GemmOp("t", 24, 20, 28)
    res = map_gemm(op, a, tie_rtol=0.0)
    g = {"ws": (1, 4, 4), "os": (4, 1, 4)}[dataflow]
    sizes = [sorted({min(ext, t) for t in range(gr, ext + gr, gr)})
             for ext, gr in zip((op.m, op.k, op.n), g)]
    checked = 0
    for mt, kt, nt in itertools.product(*sizes):
        for order in LOOP_ORDERS:
            mp = Mapping(mt, kt, nt, order, dataflow)
            try:
                c = cost_of(op, a, mp)
            except ValueError:  # does not fit
                continue
            checked += 1
            assert res.cost.cycles <= c.cycles, mp
    assert checked > 100
    near = map_gemm(op, a)  # default: near-ties (0.1 %) go to the fewest DRAM bytes
    assert near.cost.cycles <= res.cost.cycles * (1 + 1e-3)
    assert near.cost.dram_bytes <= res.cost.dram_bytes


def test_best_index_objectives():
    a = arch("ws", 4, 4, kib=2, acc_kib=1)
    space = enumerate_mappings(GemmOp("t", 64, 64, 64), a)
    c = space.columns
    assert c["cycles"][best_index(space, "cycles", 0.0)] == c["cycles"].min()
    assert c["dram_bytes"][best_index(space, "dram_bytes", 0.0)] == c["dram_bytes"].min()
    with pytest.raises(ValueError, match="objective"):
        best_index(space, "energy")


def test_report_fields_on_a_real_preset():
    a = load_arch("ws16x16")
    res = map_gemm(GemmOp("llama3-8b.wq", 2048, 4096, 4096), a)
    c = res.cost
    assert c.macs == 2048 * 4096 * 4096
    assert 0 < c.utilization <= 1 and c.bound == "compute" and c.roofline_bound == "compute"
    assert c.intensity == pytest.approx(2 * c.macs / c.dram_bytes)
    assert c.scratchpad_bytes > c.dram_a_bytes + c.dram_b_bytes and c.accumulator_bytes > 0
    assert res.evaluated > 1000 and res.mappings_per_second > 0
    assert len(res.space.to_frame()) == res.evaluated
    decode = map_gemm(GemmOp("llama3-8b.wq.decode", 1, 4096, 4096), a).cost
    assert decode.roofline_bound == "bandwidth"


# ---- errors ----------------------------------------------------------------------------------
def test_nothing_fits_names_op_and_sizes():
    tiny = arch("ws", 64, 64, kib=1, acc_kib=1)
    with pytest.raises(ValueError, match=r"op 'ffn\.w1' \(1x4096x14336.*no tiling fits"):
        map_gemm(GemmOp("ffn.w1", 1, 4096, 14336), tiny)


def test_bad_op_and_bad_mapping():
    with pytest.raises(ValueError, match=r"op 'x' .*m = 0"):
        GemmOp("x", 0, 4, 4)
    a = arch("ws", 4, 4, kib=1, acc_kib=1)
    with pytest.raises(ValueError, match="does not fit"):
        cost_of(GemmOp("x", 512, 512, 512), a, Mapping(512, 512, 512, "mnk", "ws"))
    with pytest.raises(ValueError, match="order"):
        cost_of(GemmOp("x", 8, 8, 8), a, Mapping(4, 4, 4, "mmk", "ws"))
    with pytest.raises(ValueError, match="dataflows"):
        map_gemm(GemmOp("x", 8, 8, 8), a, dataflows=["xs"])
