"""MoE layers on the mesh: experts on disjoint regions, dispatch/combine as mesh messages.
MACs equal the closed form (tokens x top-k x expert MACs + router + shared experts), an
uncontended dispatch message costs alpha*hops + beta + ceil(B/bw), and the prefill relay
all-to-all costs its closed form."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tilewright.arch import ArchSpec, TensorEngineSpec
from tilewright.compiler.mesh_moe import (decode_combine_specs, decode_dispatch_specs,
                                          phase_routes, rect_tiling, relay_specs,
                                          relay_stage_bytes)
from tilewright.compiler.mesh_partition import (MeshProgramBuilder, partition_layer,
                                                partition_moe_layer)
from tilewright.compiler.mesh_schedule import MeshScheduleError, healthy_grid
from tilewright.dataflow_sim.mesh import MeshMappingError, run_mesh_program
from tilewright.models.llm_configs import MoEConfig, get_config


def _arch(rows, cols, sram=65536.0, alpha=1.0, beta=1.0, routes=24):
    return ArchSpec(name="t", clock_mhz=1000.0,
                    tensor_engine=TensorEngineSpec(rows=1, cols=4, dataflow="os"),
                    mesh=dict(rows=rows, cols=cols, core_sram_kib=sram, core_macs_per_cycle=4,
                              link_bytes_per_cycle=4, hop_latency_cycles=alpha,
                              routing_stage_cycles=beta, max_routes_per_core=routes))


def _closed_macs(cfg, t, keys=None, attention=True):
    """Router T*d*E + routed experts T*k*(3 d F) + shared experts T*(3 d F_shared); with
    attention (``cfg.n_heads`` set): per token q d*d, k and v d*kvd each, wo d*d, and the scores
    q.K^T and p.V over ``keys`` cached keys, d*keys each (all heads: head_dim x heads = d) — in
    prefill (``keys`` None) under the causal mask: token i sees i + 1 keys, d*T(T+1)/2 each."""
    d, f = cfg.d_model, cfg.d_expert_ffn
    moe = t * d * cfg.n_experts + t * cfg.top_k * 3 * d * f + t * 3 * d * cfg.n_shared_experts * f
    if not attention or cfg.n_heads is None:
        return moe
    kvd = cfg.n_kv_heads * (d // cfg.n_heads)
    scores = 2 * d * t * (t + 1) // 2 if keys is None else 2 * t * d * keys
    return moe + t * (d * d + 2 * d * kvd + d * d) + scores


def _op(run, name):
    return dict(run.ops)[name]


@pytest.mark.parametrize("model", ["mixtral-8x7b", "tiny-moe"])
def test_prefill_macs_closed_form_and_disjoint_regions(model):
    arch = _arch(12, 12)
    cfg = get_config(model)
    prog = partition_moe_layer(arch, model, "prefill", tokens=64)
    run = run_mesh_program(prog, arch)
    assert run.useful_macs == _closed_macs(cfg, 64)
    w1 = _op(run, "experts w1")
    n_regions = cfg.n_experts + (1 if cfg.n_shared_experts else 0)
    assert w1.cores_used == n_regions * 16          # 3 x 3 tiles of 4 x 4 cores
    # skewed routing keeps the closed form (the sum over experts is still T x k)
    counts = [64 * cfg.top_k - (cfg.n_experts - 1)] + [1] * (cfg.n_experts - 1)
    skew = run_mesh_program(partition_moe_layer(arch, model, "prefill", tokens=64,
                                                expert_tokens=counts), arch)
    assert skew.useful_macs == _closed_macs(cfg, 64)
    assert _op(skew, "experts w1").cycles > w1.cycles    # the busiest expert sets the time


def test_prefill_dispatch_relay_closed_form():
    """Mixtral, 64 tokens, 12 x 12 grid in 3 x 3 tiles of 4 (experts on tiles 0-7, tile 8
    none): uniform routing sends every core's 2 tokens x 342 features (fp16) = 1368 B to each
    other expert tile. Two-stage relay: along rows to the destination tile column (a column
    holds at most 3 expert tiles: 3 chunks aggregated), then along columns (3 source tiles of
    a row: 3 chunks); offsets 1 and 2 tiles, 4 and 8 one-hop steps each; the combine mirrors
    it (columns first). Every step: alpha + beta + ceil(3 x 1368 / 4) flits."""
    alpha, beta = 1.0, 2.0
    arch = _arch(12, 12, alpha=alpha, beta=beta)
    run = run_mesh_program(partition_moe_layer(arch, "mixtral-8x7b", "prefill", tokens=64), arch)
    q = 4
    chunk = math.ceil(64 * 2 / 8 / 12) * math.ceil(4096 / 12) * 2
    assert chunk == 1368
    step = alpha + beta + math.ceil(3 * chunk / 4)
    expect = 2 * (1 * q + 2 * q) * step                  # 2 stages x offsets 1, 2
    assert _op(run, "dispatch").cycles == expect
    assert _op(run, "combine").cycles == expect
    # a core sends one chunk each way and receives one from each side: 4 route ids at most
    assert _op(run, "dispatch").routes_per_core.max() == 4


def test_prefill_relay_split_for_a_tighter_route_limit():
    """The dispatch relay of the test above with each direction in its own phase (what a
    max_routes_per_core of 2 or 3 gets): a core sends one chunk and receives one, 2 route ids.
    Forward and back now cost apart: rows +-1: 3 chunks each way; +2 (tile column 0 -> 2,
    expert tiles 2 and 5): 2 chunks, -2: 3; columns: 3 chunks each way (offset 1: 4 steps,
    offset 2: 8). Under a limit of 1 the layer is refused, naming the 2 it needs."""
    alpha, beta = 1.0, 2.0
    arch = _arch(12, 12, alpha=alpha, beta=beta, routes=2)
    chunk, g, q = 1368, 3, 4
    moves = {(s, e): chunk for s in range(9) for e in range(8) if s != e}
    specs = relay_specs(healthy_grid(arch.mesh), g, q, relay_stage_bytes(g, moves, "row"),
                        "dispatch", split=True)
    b = MeshProgramBuilder("relay", arch)
    b.add("dispatch", specs, healthy_grid(arch.mesh).mask())
    disp = _op(run_mesh_program(b.program(), arch), "dispatch")
    s3, s2 = (alpha + beta + math.ceil(n * chunk / 4) for n in (3, 2))
    rows = 4 * s3 + 4 * s3 + 8 * s2 + 8 * s3
    cols = 2 * (4 * s3) + 2 * (8 * s3)
    assert disp.cycles == rows + cols and disp.routes_per_core.max() == 2
    with pytest.raises(MeshScheduleError, match=r"mixtral-8x7b prefill dispatch: core .* needs "
                                                 r"2 route ids .* max_routes_per_core >= 2"):
        partition_moe_layer(_arch(12, 12, routes=1), "mixtral-8x7b", "prefill", tokens=64)


def test_decode_single_dispatch_message_closed_form():
    """One token, top-1 to expert 1 on a 1 x 8 mesh: experts own columns 0-3 and 4-7; the
    token's only feature sits on column 0 (the gather chain has nothing to collect) and is
    multicast to expert 1's middle column (6)."""
    alpha, beta = 2.0, 3.0
    arch = _arch(1, 8, alpha=alpha, beta=beta)
    cfg = MoEConfig("one", d_model=1, n_layers=1, n_experts=2, top_k=1, d_expert_ffn=4)
    prog = partition_moe_layer(arch, cfg, "decode", token_experts=[[1]])
    run = run_mesh_program(prog, arch)
    disp = _op(run, "dispatch")
    assert [p.flows for p in disp.phases] == [0, 1]
    assert disp.cycles == math.ceil(alpha * 6 + beta * 1 + math.ceil(2 / 4))
    assert run.useful_macs == _closed_macs(cfg, 1)
    # only expert 1's region computes
    busy = _op(run, "experts w2").core_busy_cycles
    assert busy[0, :4].sum() == 0 and busy[0, 4:].sum() > 0


def test_decode_batch_macs_and_regions():
    arch = _arch(12, 16)
    cfg = get_config("mixtral-8x7b")
    toks = [[0, 1], [2, 3], [1, 2]]
    run = run_mesh_program(partition_moe_layer(arch, "mixtral-8x7b", "decode",
                                               token_experts=toks), arch)
    assert run.useful_macs == _closed_macs(cfg, 3, keys=4096)     # default context 4096
    busy = _op(run, "experts w1|w3").core_busy_cycles
    assert int((busy > 0).sum()) == 4 * 6 * 4          # experts 0-3 active, 6 x 4 regions
    assert np.count_nonzero(_op(run, "dispatch").routes_per_core) > 0


def test_prefill_groups_experts_when_the_relay_would_list_too_many(monkeypatch):
    import tilewright.compiler.mesh_partition as mp
    arch = _arch(12, 12)
    one = partition_moe_layer(arch, "mixtral-8x7b", "prefill", tokens=64)
    assert one.meta["relay_messages"] == 1088 and one.meta["experts_per_tile"] == 1
    monkeypatch.setattr(mp, "MAX_RELAY_MESSAGES", 1000)
    # one expert per tile: 12 x 12 grid, 3 x 3 tiles of 4 x 4 cores, experts on tiles 0-7.
    # (tile, direction, offset) with bytes: dispatch rows 9 tiles x 2 other columns = 18,
    # columns 6 tiles of columns 0-1 x 2 + column 2 (expert tiles 2, 5 only): 1 + 1 + 2 = 16;
    # combine columns 8 expert tiles x 2 = 16, rows 9 x 2 = 18: 68 x 16 cores = 1088 > 1000.
    # Two experts per tile: 2 x 2 tiles of 6 x 6, each tile sends once per stage and
    # direction of the relay: 4 tiles x 4 x 36 cores = 576
    prog = partition_moe_layer(arch, "mixtral-8x7b", "prefill", tokens=64)
    assert prog.meta["experts_per_tile"] == 2 and prog.meta["tiles"] == "2x2 of 6x6"
    assert prog.meta["relay_messages"] == 576
    run = run_mesh_program(prog, arch)
    assert run.useful_macs == _closed_macs(get_config("mixtral-8x7b"), 64)
    # each tile runs its two experts one after the other: twice one expert's w1 phases
    assert len([t for t in prog.tasks if t.op == "experts w1"]) == \
        2 * len([t for t in one.tasks if t.op == "experts w1"])
    monkeypatch.setattr(mp, "MAX_RELAY_MESSAGES", 10)
    with pytest.raises(MeshScheduleError, match="even with every expert on one tile"):
        partition_moe_layer(arch, "tiny-moe", "prefill", tokens=64)    # + shared: 2 tiles


def test_moe_errors():
    arch = _arch(4, 4)
    with pytest.raises(MeshScheduleError, match="expert_tokens: need 8 counts"):
        partition_moe_layer(arch, "mixtral-8x7b", "prefill", tokens=8, expert_tokens=[1, 2])
    with pytest.raises(MeshScheduleError, match="token_experts: need, per token, distinct"):
        partition_moe_layer(arch, "mixtral-8x7b", "decode", token_experts=[[9]])
    with pytest.raises(MeshScheduleError, match="LlamaConfig is not one"):
        partition_moe_layer(arch, "tiny-llama", "decode")
    with pytest.raises(MeshScheduleError, match="2 expert regions need at least 2x2 cores"):
        partition_moe_layer(_arch(1, 1), "tiny-moe", "prefill", tokens=8)
    # DeepSeek-V3 on 4 x 4 cores: at most 16 one-core tiles, so 18 experts per tile
    # (ceil(256 / 18) = 15 tiles + the shared one; 17 per tile would need 17 tiles), whose
    # weights no 48 KiB core holds
    wse_core = _arch(4, 4, sram=48.0)
    prog = partition_moe_layer(wse_core, "deepseek-v3", "prefill", tokens=8)
    assert prog.meta["experts_per_tile"] == 18 and prog.meta["tiles"] == "4x4 of 1x1"
    with pytest.raises(MeshMappingError, match="KiB per core"):
        run_mesh_program(prog, wse_core)


# ---- decode dispatch and combine within the route-id limit -----------------------------------

def _small_decode():
    """4 x 8 mesh, d = 16, 4 experts top-1: rect tiling 1 x 4 tiles of 4 x 2 cores (expert e on
    columns 2e, 2e+1, head column 2e+1); x in blocks of 2 features per column."""
    cfg = MoEConfig("small", d_model=16, n_layers=1, n_experts=4, top_k=1, d_expert_ffn=8)
    return cfg


def test_decode_route_counts_by_hand():
    """Two tokens routed to experts 0 and 3. Dispatch: region row u needs features 4u..4u+3
    (columns 2u, 2u+1): a chain 2u -> 2u+1, then multicasts from 2u+1 to heads 1 and 7.
    Combine: segment v = features 8v..8v+7 on region column v; band chain on row v from
    column v to column 6 + v; segment 1 then runs down column 7 from row 1 to row h_1 = 2;
    row multicasts from column 6 + v over blocks 4v..4v+3 on row h_v (h_0 = 0, h_1 = 2); column
    multicasts from row h_v."""
    alpha, beta = 1.0, 2.0
    arch = _arch(4, 8, alpha=alpha, beta=beta)
    run = run_mesh_program(partition_moe_layer(arch, _small_decode(), "decode",
                                               token_experts=[[0], [3]]), arch)
    disp = _op(run, "dispatch")
    expect = np.array([[1, 1, 1, 1, 1, 1, 1, 1],
                       [0, 1, 1, 2, 1, 1, 1, 1],     # multicasts 3 -> 7 and 3 -> 1 share 3
                       [0, 1, 1, 1, 1, 2, 1, 1],
                       [0, 1, 1, 1, 1, 1, 1, 1]])
    assert np.array_equal(disp.routes_per_core, expect)
    # 4 features x 2 tokens x 2 B = 16 B = 4 flits: chain 1 hop, multicasts 6 hops at most
    w = 16 // 4
    assert disp.cycles == (alpha + beta + w) + (6 * alpha + beta + w)
    comb = _op(run, "combine")
    expect = np.array([[1, 1, 1, 1, 1, 1, 1, 1],
                       [1, 1, 1, 1, 1, 1, 1, 1],
                       [1, 1, 1, 1, 2, 2, 2, 2],     # column multicasts north and south of h_1
                       [1, 1, 1, 1, 1, 1, 1, 1]])
    assert np.array_equal(comb.routes_per_core, expect)


def test_decode_refuses_naming_the_limit_it_needs():
    arch = _arch(4, 8, routes=1)
    with pytest.raises(MeshScheduleError, match=r"small decode dispatch: core \(1, 3\) needs 2 "
                                                 r"route ids .* max_routes_per_core >= 2"):
        partition_moe_layer(arch, _small_decode(), "decode", token_experts=[[0], [3]])


@pytest.mark.parametrize("rows,cols,model", [(750, 994, "deepseek-v3"), (60, 90, "tiny-moe"),
                                             (37, 53, "mixtral-8x7b")])
def test_decode_placement_within_route_limit(rows, cols, model):
    """Every expert active (the worst case for crossings), tiles no wider than tall: dispatch
    needs at most 2 route ids per core (a chain; two multicasts meeting at its end), combine at
    most 4 (a column block overlapping two segments gets 2 multicasts north and 2 south) —
    WSE-2 allows 24; DeepSeek-V3's direct sends needed 64."""
    cfg = get_config(model)
    mesh = _arch(rows, cols).mesh
    grid = healthy_grid(mesh)
    n_reg = cfg.n_experts + (1 if cfg.n_shared_experts else 0)
    tiling = rect_tiling(grid, n_reg)
    gy, gx, qr, qc = tiling
    assert gy * gx >= n_reg and gy * qr <= rows and gx * qc <= cols
    for make in (decode_dispatch_specs, decode_combine_specs):
        specs = make(grid, tiling, list(range(n_reg)), cfg.d_model, 2)
        routes = phase_routes(specs, mesh)
        assert qc <= qr and 1 <= routes.max() <= (2 if make is decode_dispatch_specs else 4)


# ---- the whole MoE decoder layer -----------------------------------------------------------

@pytest.mark.parametrize("phase,kw,t,keys", [("prefill", dict(tokens=48), 48, None),
                                             ("decode", dict(token_experts=[[0, 1], [2, 3]],
                                                             context=40), 2, 40)])
def test_whole_moe_layer_attention_then_moe(phase, kw, t, keys):
    """tiny-moe (d 64, 4 heads, 2 kv heads, 4 experts top-2 of F 128, 1 shared): the layer
    runs the dense decoder's attention ops first (same names as partition_layer's), then the
    MoE block; its MACs are the closed form of both."""
    arch = _arch(12, 12)
    cfg = get_config("tiny-moe")
    prog = partition_moe_layer(arch, "tiny-moe", phase, **kw)
    run = run_mesh_program(prog, arch)
    names = [n for n, _ in run.ops]
    dense = [n for n, _ in run_mesh_program(partition_layer(arch, "tiny-llama", phase,
                                                            tokens=48, context=40), arch).ops]
    n_att = dense.index("w1" if phase == "prefill" else "w1|w3")
    assert names[:n_att] == dense[:n_att]
    then = ["kv-cache shift", "router"] if phase == "decode" else ["router"]
    assert names[n_att:n_att + len(then)] == then
    d, kvd = 64, 2 * 16
    # prefill: causal, token i attends to i + 1 keys (sum t(t+1)/2); decode: all `keys`
    scores = 2 * d * (t * (t + 1) // 2 if keys is None else t * keys)
    attention = t * (d * (d + 2 * kvd) + d * d) + scores
    assert run.useful_macs == _closed_macs(cfg, t, keys) == \
        _closed_macs(cfg, t, attention=False) + attention
    assert prog.meta["layer"] == "decoder" and "4 heads, 2 kv heads" in prog.meta["attention"]


def test_decode_attention_once_per_batch_token():
    """Each decode token is its own sequence: the attention tasks repeat once per token."""
    arch = _arch(12, 12)
    one, two = (run_mesh_program(partition_moe_layer(arch, "tiny-moe", "decode",
                                                     token_experts=toks, context=40), arch)
                for toks in ([[0, 1]], [[0, 1], [0, 1]]))
    for op in ("wq|wk|wv", "softmax over context", "kv-cache shift"):
        assert _op(two, op).cycles == 2 * _op(one, op).cycles


def test_moe_block_only_without_modeled_attention():
    """DeepSeek-V3-like config (n_heads unset, MLA): the MoE block only, said in the meta; a
    decode context is refused rather than ignored."""
    arch = _arch(8, 8)
    cfg = MoEConfig("mla", d_model=16, n_layers=1, n_experts=4, top_k=1, d_expert_ffn=8)
    prog = partition_moe_layer(arch, cfg, "decode", token_experts=[[2]])
    assert prog.meta["layer"] == "moe" and "not modeled" in prog.meta["attention"]
    assert run_mesh_program(prog, arch).useful_macs == _closed_macs(cfg, 1)
    with pytest.raises(MeshScheduleError, match="context = 64: .* attention is not modeled"):
        partition_moe_layer(arch, cfg, "decode", token_experts=[[2]], context=64)
    with pytest.raises(MeshScheduleError, match="prefill attends over its own tokens"):
        partition_moe_layer(arch, "tiny-moe", "prefill", tokens=8, context=64)
