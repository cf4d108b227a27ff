"""Fidelity of the cluster model's GPU costs and training memory (issue 15, items 1, 2, 6): each
closed form against hand-computed cases or published figures, the step components summing to
the step, and one-line refusals of bad training input."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import pytest

from tilewright.dataflow_sim.cluster import TrainPlan, chip_model, load_cluster, simulate_training
from tilewright.dataflow_sim.cluster.cluster_spec import GPU_PRESETS, PlanError
from tilewright.dataflow_sim.cluster.costs import causal_pairs, gpu_gemm_waves, wave_efficiency
from tilewright.dataflow_sim.cluster.plan import (activation_bytes_per_layer, layer_params,
                                                  micro_batches_for, train_memory,
                                                  zero_state_bytes)
from tilewright.dataflow_sim.cluster.training import COMPONENTS, model_flops_per_token
from tilewright.dataflow_sim.cluster.workload import Shard, backward_ops, layer_ops
from tilewright.models.llm_configs import get_config

H100 = GPU_PRESETS["h100-sxm"]


# ---- wave quantization (hand-computed) ---------------------------------------------------------
def test_wave_quantization_hand_cases():
    # 132 SMs, 128x256 tiles: 132 tiles are one full wave; 133 tiles need a second wave
    assert wave_efficiency(H100, 128, 4096, 256 * 132) == pytest.approx(1.0)
    assert wave_efficiency(H100, 128, 4096, 256 * 133) == pytest.approx(133 / 264)
    # 8192^3: 64 x 32 = 2048 tiles -> ceil(2048/132) = 16 waves, 2048/(16*132) useful
    waves, k_cta = gpu_gemm_waves(H100, 8192, 8192, 8192)
    assert (int(waves), int(k_cta)) == (16, 8192)
    assert wave_efficiency(H100, 8192, 8192, 8192) == pytest.approx(2048 / 2112)
    # a decode-like GEMM: one tile, split-K by min(132, 4096 // 256 = 16) = 16 -> one wave,
    # 256 K elements per CTA; useful 8*4096*256 of 132*128*256*256 issued
    waves, k_cta = gpu_gemm_waves(H100, 8, 4096, 256)
    assert (int(waves), int(k_cta)) == (1, 256)
    assert wave_efficiency(H100, 8, 4096, 256) == pytest.approx(8 * 4096 * 256
                                                                / (132 * 128 * 256 * 256))


def test_gpu_gemm_seconds_hand_case():
    chip = chip_model(load_cluster("h100-8x-nvlink"))
    # 16 waves x 2*128*256*8192 FLOPs per CTA at 989e12*0.80/132 FLOP/s per SM, + launch;
    # memory 2*(3*8192^2) B at 3.35e12*0.90 B/s is far below
    compute = 16 * 2 * 128 * 256 * 8192 / (989e12 * H100.gemm_efficiency / 132)
    assert float(chip.gemm_seconds(8192, 8192, 8192)) == pytest.approx(
        compute + H100.kernel_launch_s, rel=1e-12)
    # decode GEMM m=8: memory bound at the achievable bandwidth
    mem = 2 * (8 * 4096 + 4096 * 6144 + 8 * 6144) / (3.35e12 * H100.hbm_efficiency)
    assert float(chip.gemm_seconds(8, 4096, 6144)) == pytest.approx(
        mem + H100.kernel_launch_s, rel=1e-12)
    assert float(chip.gemm_seconds(0, 4096, 6144)) == 0.0


# ---- fused causal attention ---------------------------------------------------------------------
def test_causal_pairs_hand_cases():
    assert float(causal_pairs(4, 4)) == 10            # 1+2+3+4
    assert float(causal_pairs(1, 5)) == 5             # one decode query sees all 5 keys
    assert float(causal_pairs(2, 5)) == 4 + 5


def test_fused_attention_op_has_the_causal_half_and_no_score_traffic():
    cfg = get_config("llama3-8b")
    s, e = 4096, 2
    ops = layer_ops(cfg, Shard(), batch=1, q_len=s, ctx_len=s, element_bytes=e,
                    fused_attention=True)
    att = ops[ops.kind == "attention"].iloc[0]
    hd, h, kv = 128, 32, 8
    assert att.flops == 4 * hd * (s * (s + 1) / 2) * h           # causal half of 4·hd·s²·h
    assert att.bytes == e * hd * (2 * s * h + 2 * s * kv)        # Q, O, K, V only
    assert not ops.name.isin(["softmax", "attn_scores"]).any()
    bwd = backward_ops(ops)
    assert bwd[bwd.kind == "attention"].flops.iloc[0] == 2.5 * att.flops   # FA2: 5 vs 2 GEMMs


# ---- activation memory, Korthikanti et al. 2022 Table 2 (hand-computed, GPT-3 175B) ------------
@pytest.mark.parametrize("kw, expected", [
    # s=2048, b=1, h=12288, a=96, t=8: sbh = 25,165,824
    ({}, 25_165_824 * (10 + 24 / 8 + 5 * 96 * 2048 / (12288 * 8))),            # TP only
    ({"seq_parallel": True}, 25_165_824 / 8 * (34 + 5 * 96 * 2048 / 12288)),  # TP + SP
    ({"recompute": "selective"}, 25_165_824 * (10 + 24 / 8)),                  # TP + selective
    ({"seq_parallel": True, "recompute": "selective"}, 34 * 25_165_824 / 8),
    ({"fused_attention": True, "seq_parallel": True}, 34 * 25_165_824 / 8),  # no 5as/h term
    ({"recompute": "full"}, 2 * 25_165_824),                                   # layer input
])
def test_activation_memory_korthikanti(kw, expected):
    got = activation_bytes_per_layer(2048, 1, 12288, 96, 8, 2048, element_bytes=2, **kw)
    assert got == pytest.approx(expected, rel=1e-12)


# ---- ZeRO stages: the ZeRO paper's Figure 1 example (7.5B params, 64 GPUs, K = 12) -------------
@pytest.mark.parametrize("stage, gb", [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_stage_memory_matches_the_zero_paper(stage, gb):
    assert zero_state_bytes(7.5e9, 2, 12, 64, stage) / 1e9 == pytest.approx(gb, abs=0.06)


def test_llama3_8b_dp8_fits_on_8_h100_without_recompute():
    """Issue 15: the unfused-attention activation term made this 138 GiB and forced full
    recompute; with fused attention (Korthikanti without the 5as/h term) it fits."""
    spec = load_cluster("h100-8x-nvlink")
    mem = train_memory(TrainPlan(dp=8, seq_len=4096, micro_batches=8), spec, chip_model(spec),
                       "llama3-8b")[0]
    assert mem["total_bytes"] < mem["capacity_bytes"]


def test_partial_full_recompute_memory_and_cost():
    """recompute_layers = k of L: k layers keep their input (s·b·h·e), L − k keep the
    no-recompute activations (sbh·34 with fused attention), plus one layer's working set;
    backward runs k/L of the forward again."""
    spec = load_cluster("h100-8x-nvlink")
    chip = chip_model(spec)
    s, h = 1024, 4096
    none = activation_bytes_per_layer(s, 1, h, 32, 1, s, element_bytes=2, fused_attention=True)
    plan = TrainPlan(dp=8, seq_len=s, micro_batches=2, recompute="full", recompute_layers=8)
    acts = train_memory(plan, spec, chip, "llama3-8b")[0]["activation_bytes"]
    assert acts == pytest.approx(1 * (8 * s * h * 2 + 24 * none) + none)
    full = simulate_training(spec, "llama3-8b", plan.model_copy(update={"recompute_layers": None}))
    part = simulate_training(spec, "llama3-8b", plan)
    nonec = simulate_training(spec, "llama3-8b", plan.model_copy(
        update={"recompute": "none", "recompute_layers": None}))
    extra_full = full.metrics["compute_s"] - nonec.metrics["compute_s"]
    extra_part = part.metrics["compute_s"] - nonec.metrics["compute_s"]
    assert extra_part == pytest.approx(extra_full * 8 / 32, rel=1e-6)
    with pytest.raises(PlanError, match="recompute_layers"):
        simulate_training(spec, "llama3-8b", TrainPlan(dp=8, seq_len=s, recompute_layers=4))


def test_mfu_parameter_count_matches_the_published_model_size():
    """6·N counts every matmul parameter but the input embedding: Llama-3-8B has 8.03 B
    parameters (model card), of which the 128,256 x 4,096 embedding is not a matmul."""
    per_token, formula = model_flops_per_token(get_config("llama3-8b"), 8192)
    n = (per_token - 12 * 32 * 32 * 128 * 8192) / 6
    assert n == pytest.approx(8.03e9 - 128256 * 4096, rel=0.005)
    assert "6·N" in formula


# ---- components sum to the step ---------------------------------------------------------------
@pytest.mark.parametrize("plan", [
    TrainPlan(dp=8, seq_len=1024, micro_batches=2, zero=3),
    TrainPlan(dp=2, tp=2, pp=2, seq_len=1024, micro_batches=4, seq_parallel=True,
              recompute="full"),
])
def test_components_sum_to_the_step(plan):
    res = simulate_training(load_cluster("h100-8x-nvlink"), "llama3-8b", plan)
    c = res.metrics["components"]
    parts = sum(c[k] for k in (*COMPONENTS, "exposed_comm_s", "bubble_s", "idle_s"))
    assert parts == pytest.approx(res.step_seconds, rel=1e-9)
    assert all(c[k] >= 0 for k in COMPONENTS) and c["gemm_s"] > c["attention_s"] > 0
    for _, row in res.breakdown.iterrows():     # per pipeline rank as well
        assert sum(row[k] for k in (*COMPONENTS, "exposed_comm_s", "bubble_s", "idle_s")) \
            == pytest.approx(row["step_s"], rel=1e-9)
    assert 0 < res.metrics["mfu"] < 1


def test_zero3_all_gathers_and_stage_memory_in_the_run():
    spec = load_cluster("h100-8x-nvlink")
    z1 = simulate_training(spec, "llama3-8b", TrainPlan(dp=8, seq_len=1024, micro_batches=2))
    z3 = simulate_training(spec, "llama3-8b", TrainPlan(dp=8, seq_len=1024, micro_batches=2,
                                                        zero=3))
    P = z1.memory.params[0]
    dense, _ = layer_params(get_config("llama3-8b"), Shard())
    # ZeRO-1: 2·P weights + 2·P grads + 12·P/8; ZeRO-3: 16·P/8 + two gathered layers (2·2 B)
    assert z1.memory.states_bytes[0] == pytest.approx(4 * P + 12 * P / 8)
    assert z3.memory.states_bytes[0] == pytest.approx(16 * P / 8 + 4 * dense)
    assert z3.metrics["overlapped_comm_s"] > z1.metrics["overlapped_comm_s"]


# ---- CLI: --json components, bad input one line exit 2 ----------------------------------------
def _cli(*argv: str) -> tuple[object, str, str]:
    from tilewright.app.cli import main as cli_main
    out, err = io.StringIO(), io.StringIO()
    old, sys.argv = sys.argv, ["tilewright", *argv]
    code: object = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                cli_main.main()
            except SystemExit as exc:
                code = exc.code
    finally:
        sys.argv = old
    return code, out.getvalue(), err.getvalue()


def test_cli_json_components_sum_to_the_step():
    code, out, err = _cli("cluster", "--cluster", "h100-8x-nvlink", "--model", "llama3-8b",
                          "--tp", "8", "--seq-parallel", "--seq", "1024", "--global-batch", "4",
                          "--json")
    assert code in (0, None), err
    d = json.loads(out)
    c = d["components"]
    assert sum(c[k] for k in (*COMPONENTS, "exposed_comm_s", "bubble_s", "idle_s")) \
        == pytest.approx(d["step_s"], rel=1e-9)
    assert c["memory_per_chip_gib"]["total"] == pytest.approx(d["memory_peak_gib"])
    assert "6·N" in d["mfu_formula"] and d["plan"].endswith("m=4 seq-parallel")


@pytest.mark.parametrize("argv, words", [
    (["--global-batch", "12"], "global_batch = 12"),
    (["--seq-parallel"], "seq_parallel"),
    (["--fsdp", "--zero", "2"], "--fsdp"),
    (["--recompute", "sometimes"], "--recompute"),
    (["--sp", "2", "--cp", "4"], "--sp = 2"),
    (["--global-batch", "16", "--micro-batches", "3"], "--micro-batches = 3"),
])
def test_bad_training_input_is_one_line_exit_2(argv, words):
    code, out, err = _cli("cluster", "--cluster", "h100-8x-nvlink", "--model", "llama3-8b",
                          "--seq", "1024", *argv)
    lines = [x for x in err.splitlines() if x.strip() and not x.startswith("WARNING")]
    assert code == 2 and len(lines) == 1 and words in lines[0], err
    assert "Traceback" not in err


def test_micro_batches_for_global_batch():
    assert micro_batches_for(64, 8, 2) == 4
    with pytest.raises(PlanError, match="multiple of"):
        micro_batches_for(12, 8, 1)
    # a plan (or a sweep point) with the global batch and no micro_batches derives them
    assert TrainPlan(dp=4, global_batch=64, micro_batch_size=2).micro_batches == 8
    assert TrainPlan(dp=8, global_batch=64, micro_batch_size=2).micro_batches == 4
    with pytest.raises(ValueError, match="not a multiple"):
        TrainPlan(dp=8, global_batch=12)
    with pytest.raises(PlanError, match="global_batch = 64"):      # contradicting counts
        simulate_training(load_cluster("h100-8x-nvlink"), "llama3-8b",
                          TrainPlan(dp=8, global_batch=64, micro_batches=2, seq_len=256))


def test_validation_data_file_is_well_formed():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        import validation   # noqa: PLC0415  (the benchmark script, not a package)
    finally:
        sys.path.pop(0)
    data = validation.load()
    sets = {p["set"] for p in data["points"]}
    assert sets == {"calibration", "held_out"}
    assert all(p["source"] for p in data["points"])
    # every run point names a cluster and, for training, a plan the model accepts
    for p in data["points"]:
        if p["kind"] == "train" and "component_of" not in p:
            TrainPlan(**p["plan"])
