"""FP8 GEMM timing on H100 (dense FP8 peak 1,979 TFLOP/s, NVIDIA H100 datasheet; achieved 1,550,
DeepGEMM): hand-computed
compute-bound and memory-bound GEMMs, FP8 serving weights, and refusals."""

from __future__ import annotations

import pandas as pd
import pytest

from tilewright.dataflow_sim.cluster import (ClusterSpec, PlanError, ServePlan, TrainPlan,
                                             chip_model, load_cluster, simulate_serving,
                                             simulate_training)
from tilewright.dataflow_sim.cluster.costs import with_gemm_format
from tilewright.dataflow_sim.cluster.plan import serve_memory


def _chip(preset: str = "h100-sxm"):
    return chip_model(ClusterSpec.from_dict({"chip": {"kind": "gpu", "preset": preset},
                                             "chips_per_node": 1}))


def test_compute_bound_gemm_runs_at_the_fp8_peak():
    # 8192³ on 132 SMs with 128×256 tiles: 64·32 = 2048 tiles, no split-K, ⌈2048/132⌉ = 16
    # waves of 2·128·256·8192 FLOPs per SM at 1,550e12/132 FLOP/s (DeepGEMM's best on H800),
    # + 4 µs launch
    fp8 = with_gemm_format(_chip(), "fp8")
    per_sm = 1550e12 / 132
    want = 16 * 2 * 128 * 256 * 8192 / per_sm + 4e-6
    assert float(fp8.gemm_seconds(8192, 8192, 8192)) == pytest.approx(want, rel=1e-12)
    bf16 = float(_chip().gemm_seconds(8192, 8192, 8192))
    assert bf16 == pytest.approx(16 * 2 * 128 * 256 * 8192 / (989e12 * 0.90 / 132) + 4e-6,
                                 rel=1e-12)


def test_memory_bound_gemm_reads_one_byte_operands():
    # one decode token through an 8192×8192 weight: 1-byte A and B, 2-byte C, at 0.90 of 3.35 TB/s
    fp8 = with_gemm_format(_chip(), "fp8")
    want = (1 * (8192 + 8192 * 8192) + 2 * 8192) / (3.35e12 * 0.90) + 4e-6
    assert float(fp8.gemm_seconds(1, 8192, 8192)) == pytest.approx(want, rel=1e-12)


def test_attention_and_mfu_peak_stay_bf16():
    fp8 = with_gemm_format(_chip(), "fp8")
    assert fp8.peak_gemm_flops_per_s == 989e12 and fp8.gemm_peak_flops == 1979e12
    assert float(fp8.attention_seconds(1e12, 1.0)) == float(_chip().attention_seconds(1e12, 1.0))


def test_fp8_serving_stores_one_byte_weights():
    chip = _chip()
    w16 = serve_memory(ServePlan(), chip, "llama3-8b")["weight_bytes"]
    w8 = serve_memory(ServePlan(gemm_format="fp8"), chip, "llama3-8b")["weight_bytes"]
    assert w8 == pytest.approx(w16 / 2, rel=1e-12)
    assert serve_memory(ServePlan(gemm_format="fp8", weight_bytes=2), chip,
                        "llama3-8b")["weight_bytes"] == w16


def test_fp8_shortens_a_compute_bound_training_step():
    spec = load_cluster("h100-8x-nvlink")
    plan = dict(dp=1, tp=8, micro_batches=1, seq_len=2048)
    bf = simulate_training(spec, "llama3-8b", TrainPlan(**plan), network="flow").metrics
    f8 = simulate_training(spec, "llama3-8b", TrainPlan(**plan, gemm_format="fp8"),
                           network="flow").metrics
    assert f8["components"]["gemm_s"] < 0.75 * bf["components"]["gemm_s"]
    assert f8["components"]["attention_s"] == pytest.approx(bf["components"]["attention_s"])


def test_fp8_is_refused_without_fp8_tensor_cores():
    with pytest.raises(PlanError, match="no FP8 tensor cores"):
        with_gemm_format(_chip("a100-sxm-80gb"), "fp8")
    reqs = pd.DataFrame({"arrival_s": [0.0], "prompt_tokens": [8], "output_tokens": [2]})
    spec = ClusterSpec.from_dict({"chip": {"kind": "gpu", "preset": "a100-sxm-80gb"},
                                  "chips_per_node": 1})
    with pytest.raises(PlanError, match="no FP8 tensor cores"):
        simulate_serving(spec, "llama3-8b", ServePlan(gemm_format="fp8"), reqs)
