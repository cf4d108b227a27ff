"""TP communication overlap (Megatron --tp-comm-overlap): the closed form against hand-computed
cases, the step's exposed versus overlapped communication against the closed form applied by hand
to the layer's costed op table, and the refusals."""

from __future__ import annotations

import pandas as pd
import pytest

from tilewright.dataflow_sim.cluster import (CollectiveTimer, PlanError, TrainPlan, Topology,
                                             chip_model, load_cluster, simulate_training)
from tilewright.dataflow_sim.cluster.training import stage_costs
from tilewright.dataflow_sim.cluster.workload import (TP_OVERLAP_GEMM, tp_comm_overlap,
                                                      tp_overlap_exposed)
from tilewright.models.llm_configs import get_config


@pytest.mark.parametrize("c, g, tp, exposed", [
    (10.0, 8.0, 4, 4.0),      # 10 − 8·3/4
    (3.0, 8.0, 4, 0.0),       # the GEMM's 6 s of overlappable chunks hide all 3 s
    (10.0, 8.0, 2, 6.0),      # 10 − 8·1/2
    (5.0, 0.0, 8, 5.0),       # nothing to hide behind
])
def test_closed_form(c, g, tp, exposed):
    assert float(tp_overlap_exposed(c, g, tp)) == pytest.approx(exposed)


def test_pairs_each_collective_with_its_gemm_per_phase():
    rows = [("forward", "qkv_proj", "gemm", None, 8.0),
            ("forward", "attn_all_gather", "comm", "tp", 10.0),
            ("forward", "o_proj", "gemm", None, 1.0),
            ("forward", "attn_reduce_scatter", "comm", "tp", 10.0),
            ("forward", "kv_all_gather", "comm", "sp", 7.0),
            ("backward", "qkv_proj.dgrad", "gemm", None, 2.0),
            ("backward", "attn_all_gather.bwd", "comm", "tp", 3.0)]
    t = pd.DataFrame(rows, columns=["phase", "name", "kind", "group", "seconds"])
    hidden = tp_comm_overlap(t, 4)
    # AG: 10 − max(0, 10 − 6) = 6; RS with o_proj 1 s: 10 − (10 − 0.75) = 0.75; SP row: 0;
    # backward RS with the 2 s dgrad: 3 − (3 − 1.5) = 1.5
    assert list(hidden) == pytest.approx([0, 6.0, 0, 0.75, 0, 0, 1.5])
    bad = pd.concat([t, pd.DataFrame([("forward", "x_proj_all_reduce", "comm", "tp", 1.0)],
                                     columns=t.columns)], ignore_index=True)
    with pytest.raises(ValueError, match="x_proj_all_reduce: no GEMM"):
        tp_comm_overlap(bad, 4)


def test_step_hides_what_the_closed_form_says():
    spec = load_cluster("h100-8x-nvlink")
    base = dict(dp=1, tp=8, pp=1, seq_parallel=True, micro_batches=2, seq_len=2048)
    off = simulate_training(spec, "llama3-8b", TrainPlan(**base), network="flow").metrics
    on = simulate_training(spec, "llama3-8b", TrainPlan(**base, tp_comm_overlap=True),
                           network="flow").metrics
    # the closed form applied by hand to the layer's op table costed without overlap
    plan = TrainPlan(**base)
    chip = chip_model(spec)
    groups = {"tp": [list(range(8))], "sp": [[i] for i in range(8)], "ep": [[i] for i in range(8)]}
    _, table = stage_costs(plan, get_config("llama3-8b"), chip,
                           CollectiveTimer(Topology(spec)), groups)
    sec = dict(zip(zip(table.phase, table.name), table.seconds))
    per_layer = 0.0
    for comm, gemm in TP_OVERLAP_GEMM.items():
        for phase, cname, gname in (("forward", comm, gemm),
                                    ("backward", comm + ".bwd", gemm + ".dgrad")):
            c, g = sec[(phase, cname)], sec[(phase, gname)]
            per_layer += min(c, g * 7 / 8)
    hidden = 2 * 32 * per_layer                       # micro-batches × layers
    assert on["tp_comm_overlapped_s"] == pytest.approx(hidden, rel=1e-9)
    assert hidden > 0
    assert off["exposed_comm_s"] - on["exposed_comm_s"] == pytest.approx(hidden, rel=1e-6)
    assert off["step_s"] - on["step_s"] == pytest.approx(hidden, rel=1e-6)
    assert on["overlapped_comm_s"] == pytest.approx(hidden, rel=1e-9)    # dp=1: no grad sync
    c = on["components"]
    assert c["sum_s"] == pytest.approx(on["step_s"], rel=1e-9)


@pytest.mark.parametrize("plan, model, match", [
    (dict(dp=1, tp=8, tp_comm_overlap=True), "llama3-8b", "needs seq_parallel"),
    (dict(dp=1, tp=8, seq_parallel=True, tp_comm_overlap=True), "mixtral-8x7b",
     "Llama-style dense decoders"),
])
def test_refusals(plan, model, match):
    with pytest.raises(PlanError, match=match):
        simulate_training(load_cluster("h100-8x-nvlink"), model, TrainPlan(**plan))
