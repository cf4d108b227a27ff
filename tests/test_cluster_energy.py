"""Cluster energy model (dataflow_sim/cluster/energy.py): the cited figures re-typed from their
sources, and the simulated energy against closed forms computed here from those figures."""

from __future__ import annotations

import json
import math
import re

import pytest
import yaml

from tilewright.dataflow_sim.cluster import (GPU_PRESETS, ClusterSpec, ServePlan, TrainPlan,
                                             load_cluster, poisson_requests, simulate_serving,
                                             simulate_training)
from tilewright.dataflow_sim.cluster.energy import NETWORK_ENERGY_FILE, load_network_energy
from tilewright.dataflow_sim.energy_area import load_tech, sram_pj_per_byte
from tilewright.models.llm_configs import get_config

# NVIDIA transceiver specifications (docs.nvidia.com, see configs/energy/network.yaml): the
# 400G single-port OSFP (NIC end) draws 9 W at 400 Gb/s; the 2x400G twin-port OSFP (switch end)
# 17 W. Secondary text on NVLink-C2C: board-level SerDes 5.5 pJ/bit.
NIC_OSFP_W, SWITCH_TWIN_OSFP_W, LINE_GBPS, SERDES_PJ_PER_BIT = 9.0, 17.0, 400.0, 5.5
# NVIDIA datasheets: H100 SXM max TDP 700 W, A100 80GB SXM 400 W; idle: assumption 0.2 x TDP.
H100_TDP_W, A100_TDP_W, IDLE_FRACTION = 700.0, 400.0, 0.2
# 7 nm table (Jouppi et al., ISCA 2021): int8 mult 0.07 + int32 add 0.03 pJ; fp32 add 0.38 pJ;
# HBM2 250-450 pJ per 64-bit access
INT8_MAC_PJ_7NM, VECTOR_OP_PJ_7NM, HBM2_PJ_PER_BYTE_7NM = 0.07 + 0.03, 0.38, (250 + 450) / 2 / 8


def _pj_per_byte_of_link(*watts: float) -> float:
    """Transceivers' power over the 2 x line rate both directions carry, x 8 bits, in pJ."""
    return sum(watts) / (2 * LINE_GBPS * 1e9) * 8 * 1e12


def test_network_table_is_the_cited_figures():
    t = load_network_energy()
    assert t.intra_node_link_pj_per_byte == pytest.approx(SERDES_PJ_PER_BIT * 8)
    assert t.nic_link_pj_per_byte == pytest.approx(
        _pj_per_byte_of_link(NIC_OSFP_W, SWITCH_TWIN_OSFP_W / 2))
    assert t.switch_link_pj_per_byte == pytest.approx(
        _pj_per_byte_of_link(SWITCH_TWIN_OSFP_W / 2, SWITCH_TWIN_OSFP_W / 2))
    assert t.direct_link_pj_per_byte == pytest.approx(_pj_per_byte_of_link(NIC_OSFP_W, NIC_OSFP_W))
    text = NETWORK_ENERGY_FILE.read_text()
    cited = set(re.findall(r"\[([A-Z][A-Z0-9]+)\]", text))
    assert cited and cited <= set(t.sources)
    for line in text.splitlines():          # every figure says what it rests on
        if re.match(r"^\w+_pj_per_byte:", line):
            assert re.search(r"confirmed|derived|assumption", line), line


def test_gpu_presets_board_power():
    assert GPU_PRESETS["h100-sxm"].tdp_w == H100_TDP_W
    assert GPU_PRESETS["a100-sxm-80gb"].tdp_w == A100_TDP_W
    for p in GPU_PRESETS.values():
        assert p.idle_w == pytest.approx(IDLE_FRACTION * p.tdp_w)


def _grad_bytes(model: str, element_bytes: int = 2) -> float:
    """Gradient bytes per chip of a Llama model without sharding: every layer's attention
    projections, norms and SwiGLU FFN, plus the (untied) embedding and LM head."""
    c = get_config(model)
    hd = c.d_model // c.n_heads
    layer = (c.d_model * (c.n_heads + 2 * c.n_kv_heads) * hd + c.n_heads * hd * c.d_model
             + 2 * c.d_model + 3 * c.d_model * c.d_ffn)
    return element_bytes * (c.n_layers * layer + 2 * c.vocab_size * c.d_model)


@pytest.mark.parametrize("inlayer", ["network", "phase"])
def test_dp_all_reduce_network_energy_is_the_ring_closed_form(inlayer):
    """Pure data parallelism on one NVSwitch node: the only traffic is the gradient ring
    all-reduce, 2(n-1)/n x S sent per chip, each byte crossing an up-link and a down-link."""
    n = 8
    res = simulate_training(load_cluster("h100-8x-nvlink"), "tiny-llama",
                            TrainPlan(dp=n, micro_batches=2, seq_len=128, inlayer_comm=inlayer))
    m = res.metrics
    link_bytes = n * 2 * (n - 1) / n * _grad_bytes("tiny-llama") * 2
    assert m["intra_node_link_bytes"] == pytest.approx(link_bytes, rel=1e-9)
    assert m["inter_node_link_bytes"] == 0
    assert m["energy_network_j"] == pytest.approx(link_bytes * SERDES_PJ_PER_BIT * 8e-12, rel=1e-9)


def test_tp_collectives_counted_in_both_inlayer_modes():
    """TP all-reduces in the layers move the same bytes whether they run on the shared network
    or in the collective timer's phase simulations."""
    spec = load_cluster("h100-8x-nvlink")
    got = [simulate_training(spec, "tiny-llama", TrainPlan(dp=4, tp=2, micro_batches=2,
                                                           seq_len=128, inlayer_comm=mode)
                             ).metrics["intra_node_link_bytes"] for mode in ("network", "phase")]
    assert got[0] == pytest.approx(got[1], rel=1e-9)
    dp_only = simulate_training(spec, "tiny-llama", TrainPlan(dp=4, tp=2, micro_batches=2,
                                                              seq_len=128))
    assert got[0] > 0 and dp_only.metrics["energy_network_j"] > 0


def test_gpu_step_energy_is_busy_tdp_plus_idle():
    spec = load_cluster("h100-8x-nvlink")
    res = simulate_training(spec, "tiny-llama", TrainPlan(dp=4, tp=2, micro_batches=4,
                                                          seq_len=128))
    m, step = res.metrics, res.step_seconds
    busy = float(res.breakdown["compute_s"].sum()) * 4 * 2      # mean per rank x dp x tp
    assert m["energy_compute_j"] == pytest.approx(busy * H100_TDP_W, rel=1e-9)
    assert m["energy_idle_j"] == pytest.approx((8 * step - busy) * IDLE_FRACTION * H100_TDP_W,
                                               rel=1e-9)
    assert m["energy_dram_j"] == 0                                 # HBM is in the board power
    assert m["energy_j"] == pytest.approx(m["energy_compute_j"] + m["energy_idle_j"]
                                          + m["energy_network_j"], rel=1e-12)
    assert IDLE_FRACTION * H100_TDP_W * 8 * step < m["energy_j"] < H100_TDP_W * 8 * step \
        + m["energy_network_j"]


def _llama_step_macs(model: str, tokens: int, seq: int) -> float:
    """Forward + backward (2x forward) MACs of a training step: per token and layer the QKV,
    output and SwiGLU projections and the full (masked, not skipped) q x s attention scores and
    values; per token the LM head."""
    c = get_config(model)
    hd = c.d_model // c.n_heads
    per_layer = (c.d_model * (c.n_heads + 2 * c.n_kv_heads) * hd + c.n_heads * hd * c.d_model
                 + 3 * c.d_model * c.d_ffn + 2 * c.n_heads * hd * seq)
    return 3 * tokens * (c.n_layers * per_layer + c.d_model * c.vocab_size)


def _arch_cluster(nodes: int = 1, cpn: int = 1) -> ClusterSpec:
    return ClusterSpec.from_dict({
        "name": "a", "chip": {"kind": "arch", "arch": {
            **json.loads(json.dumps(__import__("tilewright.arch", fromlist=["load_arch"])
                                    .load_arch("ws16x16").model_dump(mode="json",
                                                                      exclude_none=True))),
            "offchip": {"bandwidth_gbps": 16.0, "capacity_gib": 16}}},
        "nodes": nodes, "chips_per_node": cpn,
        "intra_node": {"topology": "ring" if cpn > 1 else "none", "link_gbps": 100.0},
        "inter_node": {"topology": "switch" if nodes > 1 else "none", "link_gbps": 25.0}})


def test_archspec_chip_energy_is_the_tech_table_on_the_executed_work():
    """One ws16x16 chip (int8, 7 nm table), table cost source: MACs are the model's closed form;
    compute energy = (MACs x MAC pJ + the WS SRAM closed form + vector ops x vector pJ) at the
    supply 500 MHz needs; off-chip bytes x the HBM2 pJ/byte; static power x the step; no
    network."""
    spec = _arch_cluster()
    seq, mb = 64, 2
    res = simulate_training(spec, "tiny-llama", TrainPlan(dp=1, micro_batches=mb, seq_len=seq),
                            cost_source="table", tech="7nm")
    m = res.metrics
    assert m["macs"] == pytest.approx(_llama_step_macs("tiny-llama", mb * seq, seq), rel=1e-12)
    arch, t = spec.arch(), load_tech("7nm")
    sp = sram_pj_per_byte(t, arch.memory.scratchpad_kib / 2)
    acc = sram_pj_per_byte(t, arch.memory.accumulator_kib)
    rows, cols = arch.tensor_engine.rows, arch.tensor_engine.cols
    macs, vops, dram = m["macs"], m["vector_ops"], m["dram_bytes"]
    sram = macs * (1 / cols * sp + 8 / rows * acc) + dram * sp + vops * 8 * sp
    v2 = (0.55 / 0.75) ** 2     # 500 MHz runs at the 7 nm curve's v_min 0.55 V (v_nom 0.75 V)
    assert m["energy_compute_j"] == pytest.approx(
        (macs * INT8_MAC_PJ_7NM + sram + vops * VECTOR_OP_PJ_7NM) * v2 * 1e-12, rel=1e-9)
    assert m["energy_dram_j"] == pytest.approx(dram * HBM2_PJ_PER_BYTE_7NM * 1e-12, rel=1e-12)
    # static power for the whole step (tests/test_power_validation.py checks static_power by hand)
    assert m["energy_idle_j"] == pytest.approx(m["static_w_per_chip"] * m["step_s"], rel=1e-9)
    assert m["energy_idle_j"] > 0 and m["energy_network_j"] == 0


def test_inter_node_bytes_cost_the_nic_figure():
    """Two single-chip nodes on a switch: the DP all-reduce crosses NIC up- and down-links."""
    res = simulate_training(_arch_cluster(nodes=2), "tiny-llama",
                            TrainPlan(dp=2, micro_batches=2, seq_len=64), cost_source="table")
    m = res.metrics
    link_bytes = 2 * 2 * (2 - 1) / 2 * _grad_bytes("tiny-llama", 1) * 2      # int8 gradients
    assert m["inter_node_link_bytes"] == pytest.approx(link_bytes, rel=1e-9)
    assert m["energy_inter_node_j"] == pytest.approx(
        link_bytes * _pj_per_byte_of_link(NIC_OSFP_W, SWITCH_TWIN_OSFP_W / 2) * 1e-12, rel=1e-9)


def test_serving_energy_gpu_rule_and_tp_traffic():
    spec = load_cluster("h100-8x-nvlink")
    reqs = poisson_requests(12, 50.0, 64, 8, seed=1)
    res = simulate_serving(spec, "tiny-llama", ServePlan(tp=2), reqs)
    m = res.metrics
    busy = float((res.replicas["busy_s"] * res.replicas["chips"]).sum())
    span = m["makespan_s"]
    assert m["energy_compute_j"] == pytest.approx(busy * H100_TDP_W, rel=1e-9)
    assert m["energy_idle_j"] == pytest.approx((8 * span - busy) * IDLE_FRACTION * H100_TDP_W,
                                               rel=1e-9)
    # two TP ring all-reduces of T·d·e per layer, 2(n-1)/n x S per rank, 2 links per message
    c = get_config("tiny-llama")
    tokens = float((reqs.prompt_tokens + reqs.output_tokens - 1).sum())   # prompt + decode steps
    ring = 2 * (2 - 1) / 2 * 2 * 2            # per-rank factor x ranks x links per message
    expect = c.n_layers * 2 * tokens * c.d_model * 2 * ring
    assert m["intra_node_link_bytes"] == pytest.approx(expect, rel=1e-9)


def test_sweep_cluster_energy_is_finite_and_grows_with_the_cluster(tmp_path):
    """configs/sweeps/cluster_size.yaml's axis (nodes): more H100 nodes under data parallelism
    train more tokens per step at more joules per step (more chips busy and idle, and the
    gradient all-reduce now crosses the InfiniBand network)."""
    from tilewright.app.sweep import run_sweep, sweep_from_dict
    from tilewright.app.sweep.store import ResultsStore
    base = load_cluster("h100-64x-ib").model_dump(mode="json", exclude_none=True)
    (tmp_path / "ib.yaml").write_text(yaml.safe_dump(base))
    d = {"name": "ce", "base": "ws16x16", "tech": "7nm",
         "axes": {"cluster.nodes,cluster.inter_node.nodes_per_leaf": [1, 2]},
         "workloads": [{"cluster": "ib.yaml", "model": "tiny-llama", "mode": "train",
                        "plan": {"dp": "auto", "micro_batches": 2, "seq_len": 128}}],
         "objectives": [{"metric": "tokens_per_s", "direction": "maximize"},
                        {"metric": "tokens_per_j", "direction": "maximize"}]}
    spec = sweep_from_dict(d, source=str(tmp_path / "ce.yaml"), root=tmp_path)
    run_sweep(spec, tmp_path / "ce.db", workers=1)
    with ResultsStore(tmp_path / "ce.db") as s:
        df = s.frame("ce").set_index("p:cluster.nodes")
        rows = {k: s.get(df.loc[k, "key"]) for k in (1, 2)}
    assert (df["status"] == "ok").all()
    assert all(math.isfinite(v) and v > 0 for v in df["energy_j"])
    assert df.loc[2, "energy_j"] > df.loc[1, "energy_j"]
    assert df.loc[2, "chips"] == 2 * df.loc[1, "chips"]
    assert math.isfinite(df.loc[1, "perf_per_w"]) and math.isfinite(df.loc[1, "tokens_per_j"])
    w1, w2 = rows[1]["per_workload"][0], rows[2]["per_workload"][0]
    assert w2["energy_network_j"] > w1["energy_network_j"]        # IB traffic appears
    for w in (w1, w2):
        assert w["energy_j"] == pytest.approx(w["energy_compute_j"] + w["energy_idle_j"]
                                              + w["energy_dram_j"] + w["energy_network_j"])
