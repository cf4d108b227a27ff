"""A serving run's time and memory by component (issue 15, acceptance: ``tilewright cluster ...
--json`` reports GEMM, attention, other compute, exposed communication, overheads and memory per
chip, and they sum to the total).

* Every pool's components sum to its replicas' busy time, read from the replica table (the
  iteration times the simulation adds up), and with the idle time to the window, on a dense, a
  dense TP 2, an MoE (with and without the all-to-all overlap), a P/D and a PP 2 run.
* One decode iteration of llama3-8b on one H100, component by component, against closed forms
  written here from the model's shapes and the H100 preset's published figures: at one token
  every GEMM, the fused attention and every non-GEMM op is bound by HBM bandwidth, so each
  component is bytes / achievable bandwidth, plus 4 µs per kernel launch and 2 ms per iteration.
* MoE without overlap: the exposed communication is the dispatch and combine of every MoE layer.
* The CLI's ``--json`` carries the fields, and the human output prints their table.

The bulk decode paths give the same components as the event-level loop to rounding
(tests/test_serving_decode_runs.py, ``assert_same_components``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from tilewright.app.cli.cluster import cluster
from tilewright.dataflow_sim.cluster import (ClusterSpec, CollectiveTimer, IterationCost,
                                             ServePlan, Topology, chip_model, load_cluster,
                                             poisson_requests, simulate_serving)
from tilewright.dataflow_sim.cluster.serving import SERVE_COMPONENTS
from tilewright.models.llm_configs import get_config

PARTS = (*SERVE_COMPONENTS, "pipeline_s")
MEMORY = ("weights", "kv_capacity", "kv_peak", "kv_peak_fraction", "reserved", "hbm")


def check_sums(res, pp: int = 1) -> dict:
    """Each pool's components sum to its replicas' mean busy time (the replica table) and, with
    idle, to the window; none is negative beyond rounding. Returns the pools."""
    comps = res.metrics["components"]
    window = comps["window_s"]
    reps = res.replicas
    assert set(comps["pools"]) == set(reps.role)
    for role, p in comps["pools"].items():
        busy = float(reps.loc[reps.role == role, "busy_s"].mean())
        assert p["busy_s"] == pytest.approx(busy, rel=1e-12)
        assert sum(p[k] for k in PARTS) == pytest.approx(busy, rel=1e-9), role
        assert p["busy_s"] + p["idle_s"] == pytest.approx(window, rel=1e-12)
        assert p["sum_s"] == pytest.approx(window, rel=1e-9)
        assert min(p[k] for k in (*PARTS, "idle_s")) >= -1e-12 * window, p
        assert p["gemm_s"] > 0 and p["overhead_s"] > 0
        if pp == 1:
            assert p["pipeline_s"] == 0.0
        assert set(p["memory_per_chip_gib"]) == set(MEMORY)
    return comps["pools"]


def reqs(n: int = 60, seed: int = 0):
    return poisson_requests(n, 20.0, (64, 1024), (4, 64), seed=seed)


def test_dense_run_components_sum_to_the_busy_time():
    pools = check_sums(simulate_serving(load_cluster("h100-8x-nvlink"), "llama3-8b",
                                        ServePlan(tp=1), reqs()))
    assert pools["both"]["exposed_comm_s"] == 0.0      # TP 1, no EP, no PP: nothing to send
    assert pools["both"]["attention_s"] > 0
    pools = check_sums(simulate_serving(load_cluster("h100-8x-nvlink"), "llama3-8b",
                                        ServePlan(tp=2), reqs()))
    assert pools["both"]["exposed_comm_s"] > 0         # TP 2: two all-reduces per layer


@pytest.mark.parametrize("overlap", [False, True])
def test_moe_run_components_sum_to_the_busy_time(overlap):
    plan = ServePlan(ep=4, routing="zipf", zipf_s=1.2, redundant_experts=4, overlap_a2a=overlap)
    pools = check_sums(simulate_serving(load_cluster("h100-8x-nvlink"), "mixtral-8x7b", plan,
                                        reqs(40)))
    assert pools["both"]["exposed_comm_s"] > 0 or overlap


def test_pd_run_components_sum_to_the_busy_time():
    res = simulate_serving(load_cluster("h100-8x-nvlink"), "llama3-8b",
                           ServePlan(tp=2, disaggregated=True), reqs(), prefill_chips=4)
    pools = check_sums(res)
    assert set(pools) == {"prefill", "decode"}
    assert res.metrics["components"]["kv_transfer_s"] > 0
    # the prefill pool's iterations are prompt-sized (GEMM-heavy), the decode pool's are not
    assert pools["prefill"]["gemm_s"] > 0 and pools["decode"]["gemm_s"] > 0


def test_pp_run_components_sum_to_the_busy_time():
    pools = check_sums(simulate_serving(load_cluster("h100-8x-nvlink"), "llama3-8b",
                                        ServePlan(tp=2, pp=2), reqs()), pp=2)
    assert pools["both"]["pipeline_s"] > 0     # bubbles and stage sends of every iteration


def one_h100() -> ClusterSpec:
    return ClusterSpec.from_dict({
        "name": "h100x1", "chip": {"kind": "gpu", "preset": "h100-sxm"}, "chips_per_node": 1,
        "intra_node": {"topology": "switch", "link_gbps": 450.0, "latency_us": 0.5}})


def test_one_decode_iteration_component_by_component():
    """llama3-8b, BF16, one sequence decoding its token over C keys on one H100 (TP 1)."""
    spec, cfg = one_h100(), get_config("llama3-8b")
    cost = IterationCost(cfg, ServePlan(tp=1), chip_model(spec),
                         CollectiveTimer(Topology(spec)), [0], cost_source="table")
    C = 1000
    total = sum(cost.parts(np.array([1]), np.array([C]), 1))
    comp = dict(zip(SERVE_COMPONENTS, cost.components))
    # H100 SXM (NVIDIA datasheet): 3.35 TB/s HBM3, used at the preset's 0.9; 4 µs per kernel
    # launch and 2 ms per iteration (the preset's stated assumptions); BF16 elements
    bw, launch, e = 3.35e12 * 0.90, 4e-6, 2
    L, d, V = 32, 4096, 128256
    h, kv, hd, f = 32, 8, 128, 14336
    # the layer's GEMMs at M = 1 token (QKV and gate/up fused, as vLLM runs them): (K, N)
    shapes = [(d, (h + 2 * kv) * hd), (h * hd, d), (d, 2 * f), (f, d)]
    gemm = L * sum(e * (K + K * N + N) for K, N in shapes) / bw + e * (d + d * V + V) / bw
    assert comp["gemm_s"] == pytest.approx(gemm, rel=1e-12)
    # FlashAttention at one query: reads Q, writes O (h·hd each), reads K and V of C keys
    attention = L * e * (2 * h * hd + 2 * kv * hd * C) / bw
    assert comp["attention_s"] == pytest.approx(attention, rel=1e-12)
    # per layer: 2 RMSNorms (read + write d), rotary on q and k, the KV write, 2 residual
    # adds (read 2 d, write d), SwiGLU (read 2 f, write f); then the embedding row gather
    # (d read + d written + a 4-byte id), the final norm and the logits softmax (read + write)
    per_layer = e * (2 * 2 * d + 2 * (h + kv) * hd + 2 * kv * hd + 2 * 3 * d + 3 * f)
    other = (L * per_layer + (2 * d * e + 4) + 2 * d * e + 2 * V * e) / bw
    assert comp["other_compute_s"] == pytest.approx(other, rel=1e-12)
    # launches: 4 GEMMs + 1 attention kernel per layer, the LM-head GEMM; the iteration's 2 ms
    assert comp["overhead_s"] == pytest.approx(L * 5 * launch + launch + 2e-3, rel=1e-12)
    assert comp["exposed_comm_s"] == 0.0
    assert sum(comp.values()) == pytest.approx(total, rel=1e-12)


def test_moe_exposed_comm_is_dispatch_and_combine_without_overlap():
    """mixtral-8x7b on 8 H100s at EP 8, one decode iteration of 64 sequences (8 per rank): the
    layers' time beyond their compute is the all-to-all of every MoE layer (TP 1: no
    all-reduce)."""
    spec, cfg = load_cluster("h100-8x-nvlink"), get_config("mixtral-8x7b")
    cost = IterationCost(cfg, ServePlan(ep=8), chip_model(spec), CollectiveTimer(Topology(spec)),
                         list(range(8)), cost_source="table")
    n = 64
    cost.parts(np.ones(n, np.int64), np.full(n, 500), n)
    comp = dict(zip(SERVE_COMPONENTS, cost.components))
    assert comp["exposed_comm_s"] == pytest.approx(cfg.n_layers * cost.a2a_seconds(n // 8),
                                                   rel=1e-9)
    assert comp["exposed_comm_s"] > 0


app = typer.Typer()
app.command()(cluster)


@app.command()
def _other() -> None:   # a second command keeps `cluster` a named sub-command, as in the CLI
    pass


def test_cli_json_and_table_carry_the_components():
    args = ["cluster", "--cluster", "h100-8x-nvlink", "--model", "llama3-8b", "--mode", "serve",
            "--requests", "30", "--rate", "20", "--prompt-tokens", "64-512",
            "--output-tokens", "8-32", "--tp", "2", "--pd", "4:4"]
    res = CliRunner().invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    comps = json.loads(res.output)["components"]
    assert set(comps) == {"window_s", "pools", "kv_transfer_s", "convention"}
    assert set(comps["pools"]) == {"prefill", "decode"}
    for p in comps["pools"].values():
        assert set(p) == {"replicas", "chips_per_replica", *PARTS, "idle_s", "busy_s", "sum_s",
                          "memory_per_chip_gib"}
        assert all(isinstance(p[k], float) for k in (*PARTS, "idle_s", "busy_s", "sum_s"))
        assert sum(p[k] for k in PARTS) == pytest.approx(p["busy_s"], rel=1e-9)
        mem = p["memory_per_chip_gib"]
        assert set(mem) == set(MEMORY)
        assert 0 < mem["kv_peak"] <= mem["kv_capacity"]
        assert mem["weights"] + mem["kv_capacity"] + mem["reserved"] <= mem["hbm"] + 1e-9
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "components per chip of each pool" in res.output and "exposed_comm_s" in res.output


@pytest.mark.parametrize("model", ["tiny-llama", "tiny-moe"])
def test_compiled_costs_components_sum_to_the_busy_time(model):
    """An ArchSpec chip (compiler costs): the compiled layer's ``gemm`` tasks are the GEMM
    component, no launches, no per-iteration overhead."""
    from tests.test_cluster_compiler_costs import arch_cluster

    res = simulate_serving(arch_cluster(), model, ServePlan(max_batch_tokens=32),
                           poisson_requests(6, 50.0, 16, 4, seed=0))
    assert res.metrics["cost_source"] == "compiler"
    comps = res.metrics["components"]
    p = comps["pools"]["both"]
    busy = float(res.replicas.busy_s.mean())
    assert sum(p[k] for k in PARTS) == pytest.approx(busy, rel=1e-9)
    assert p["gemm_s"] > 0 and p["other_compute_s"] > 0 and p["overhead_s"] == 0.0
    assert p["exposed_comm_s"] == pytest.approx(0.0, abs=1e-12 * comps["window_s"])
