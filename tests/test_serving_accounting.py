"""The serving loop's per-run accounting: work and link bytes kept as running sums
(:func:`.energy.serve_work`) equal the per-iteration formula (:func:`.energy.serve_iteration_work`)
summed over iterations, and the fused attention's causal-pair count (an integer closed form in the
iteration cost) matches hand-counted pairs."""

from __future__ import annotations

import numpy as np
import pytest

from tilewright.dataflow_sim.cluster import (CollectiveTimer, IterationCost, ServePlan,
                                             Topology, chip_model, load_cluster)
from tilewright.dataflow_sim.cluster.energy import WORK_FIELDS, serve_iteration_work
from tilewright.models.llm_configs import get_config


def _cost(tp: int = 8):
    spec = load_cluster("h100-8x-nvlink")
    timer = CollectiveTimer(Topology(spec))
    cost = IterationCost(get_config("llama3-8b"), ServePlan(tp=tp), chip_model(spec), timer,
                         list(range(tp)))
    return cost, timer


def test_run_work_and_link_bytes_are_the_sums_of_each_iterations():
    cost, timer = _cost()
    rng = np.random.default_rng(3)
    want_work, want_tokens = np.zeros(len(WORK_FIELDS)), 0   # table work: no SRAM bytes
    for i in range(6):
        n = int(rng.integers(1, 9))
        q = rng.integers(1, 300, n) if i % 2 else np.ones(n, np.int64)
        c = q + rng.integers(0, 2000, n)
        n_logits = int(rng.integers(0, n + 1))
        cost.parts(q, c, n_logits)
        want_work += serve_iteration_work(cost.dm, cost.e, 8, 1, cost.cfg.n_layers, q, c,
                                          n_logits)
        want_tokens += int(q.sum())
        if i == 2:                          # reading mid-run folds the pending sums in
            np.testing.assert_allclose(cost.work, want_work, rtol=1e-12)
    np.testing.assert_allclose(cost.work, want_work, rtol=1e-12)
    # TP all-reduce: 2 per layer of T·d·e bytes each, on the replica's 8 chips
    dm, e, L = cost.dm, cost.e, cost.cfg.n_layers
    rates = timer.traffic("all_reduce", [list(range(8))])
    got = cost.comm_link_bytes
    assert set(got) == set(rates)
    for link, r in rates.items():
        assert got[link] == pytest.approx(r * L * 2 * want_tokens * dm.d * e, rel=1e-12)


def test_fused_attention_counts_causal_pairs_by_hand():
    cost, _ = _cost()
    dm, chip, e = cost.dm, cost.chip, cost.e
    assert chip.fused_attention
    # q=3 new queries at the end of 5 keys: rows see 3, 4, 5 keys (12 pairs); a decode step
    # over 10 keys: 10 pairs; a 4-token prompt from scratch: 1+2+3+4 = 10 pairs; a 2,048-token
    # chunk after 2,048 cached keys: 2048·2048 + 2048·2049/2 pairs (makes the kernel FLOP-bound)
    q, c = np.array([3, 1, 4, 2048]), np.array([5, 10, 4, 4096])
    pairs = 12 + 10 + 10 + 2048 * 2048 + 2048 * 2049 // 2
    hv = dm.hd_v or dm.hd
    flops = 2.0 * (dm.hd + hv) * dm.h * pairs
    nbytes = e * (dm.h * 2056 * (dm.hd + hv) + dm.kv * 4115 * 2 * dm.hd)
    assert flops / (chip.peak_gemm_flops_per_s * chip.gpu.attention_efficiency) \
        > nbytes / chip.hbm_achievable          # so the pair count decides the time
    assert cost.attention_seconds(q, c) == float(chip.attention_seconds(flops, nbytes))
