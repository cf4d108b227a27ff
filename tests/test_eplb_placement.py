"""EPLB redundant experts (``--redundant-experts``, :func:`eplb_placement`): a placement computed
by hand, the plain placement at N = 0, properties over seeded random loads that the greedy
algorithm guarantees (and the one it does not: the busiest rank can get *heavier* than without
replicas — a hand-computed counterexample), the CLI's one-line errors (exit 2) and the serving
validation's ``--redundant-experts`` override."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from tilewright.dataflow_sim.cluster.moe_serving import (SlotMap, eplb_placement,
                                                         rank_expected_loads)


def test_eight_experts_four_ranks_four_redundant_by_hand():
    # loads 1, 9, 9, 2, 8, 4, 2, 8 (sum 43, mean rank 10.75). Replicas, one at a time, to the
    # highest load per copy: e1 (9), e2 (9), e4 (8), e7 (8) -> slots e0 1, e1 4.5 x2, e2 4.5 x2,
    # e3 2, e4 4 x2, e5 4, e6 2, e7 4 x2. Heaviest first (ties in slot order) onto the lightest
    # rank with room (ties: lowest rank), 3 slots per rank: e1 r0, e1 r1, e2 r2, e2 r3 (4.5
    # each); e4 r0, e4 r1, e5 r2, e7 r3 (8.5 each); e7 r0 (12.5, full); e3 r1 (10.5, full);
    # e6 r2 (10.5, full); e0 r3 (9.5).
    w = np.array([1.0, 9, 9, 2, 8, 4, 2, 8])
    red = eplb_placement(w, 4, redundant=4)
    assert red.tolist() == [[1, 4, 7], [1, 4, 3], [2, 5, 6], [2, 7, 0]]
    assert rank_expected_loads(red, w).tolist() == [12.5, 10.5, 10.5, 9.5]
    # without replicas, expert j on rank j // 2: 10, 11, 12, 10. The greedy packing is a
    # heuristic (as DeepSeek EPLB's balanced_packing): here its busiest rank, 12.5, is heavier
    # than the plain placement's 12
    assert rank_expected_loads(eplb_placement(w, 4), w).tolist() == [10.0, 11.0, 12.0, 10.0]
    # drawn loads equal to the expected ones: e1's 9 rows split 5, 4 (remainder to the first
    # replica in slot order), e2 likewise, e4 4 + 4, e7 4 + 4
    rows = SlotMap([red]).rank_loads(w.astype(np.int64)[None])
    assert rows.tolist() == [[[5, 4, 4], [4, 4, 2], [5, 4, 2], [4, 4, 1]]]


def test_no_redundant_experts_is_the_plain_contiguous_placement():
    # N = 0: expert j on rank j // (E/ep), rows per rank the sum of each contiguous block
    rng = np.random.default_rng(5)
    for E, ep in ((8, 4), (64, 8), (256, 32)):
        w = rng.pareto(1.0, E)
        p = eplb_placement(w, ep, 0)
        assert p.tolist() == np.arange(E).reshape(ep, E // ep).tolist()
        loads = rng.integers(0, 1000, size=(2, 3, E))          # 2 iterations, 3 layers
        rows = SlotMap([p] * 3).rank_loads(loads)
        assert np.array_equal(rows.sum(axis=-1), loads.reshape(2, 3, ep, E // ep).sum(axis=-1))


def test_greedy_placement_properties_on_seeded_random_loads():
    # What the algorithm guarantees, checked against independent computations:
    # * each rank holds exactly (E + N)/ep slots and every expert at least one;
    # * the replica step minimises the largest per-replica share max_j w_j / c_j over every way
    #   of giving the N replicas (checked by brute force on E = 6); so that share, a lower bound
    #   of the busiest rank, never grows with N;
    # * no row is lost, and the busiest rank is at least max(mean rank, largest share).
    rng = np.random.default_rng(11)
    for trial in range(300):
        E, ep = ((6, 2), (6, 3), (8, 4), (16, 4))[trial % 4]
        w = rng.pareto(1.0, E) + 0.01 if trial % 2 else rng.random(E) + 0.01
        prev_share = np.inf
        for N in range(0, 3 * ep + 1, ep):
            p = eplb_placement(w, ep, N)
            assert p.shape == (ep, (E + N) // ep)
            c = np.bincount(p.ravel(), minlength=E)
            assert c.min() >= 1 and c.sum() == E + N
            share = (w / c).max()
            if E == 6:
                best = min((w / (1 + np.bincount(extra, minlength=E))).max()
                           for extra in itertools.combinations_with_replacement(range(E), N))
                assert share == pytest.approx(best, rel=1e-12)
            assert share <= prev_share + 1e-12
            prev_share = share
            r = rank_expected_loads(p, w)
            assert r.sum() == pytest.approx(w.sum(), rel=1e-12)
            assert r.max() >= max(w.sum() / ep, share) - 1e-12


@pytest.mark.parametrize("n,needle", [
    ("-1", "--redundant-experts = -1: input should be greater than or equal to 0"),
    ("3", "redundant_experts = 3: n_experts + redundant = 11 must split evenly over ep = 8"),
])
def test_cli_refuses_bad_redundant_experts_in_one_line(monkeypatch, capsys, n, needle):
    import tilewright.app.cli.main as cli_main
    monkeypatch.setattr(sys, "argv", ["tilewright", "cluster", "--cluster", "h100-8x-nvlink",
                                      "--model", "mixtral-8x7b", "--mode", "serve", "--ep", "8",
                                      "--requests", "2", "--redundant-experts", n])
    with pytest.raises(SystemExit) as ex:
        cli_main.main()
    assert ex.value.code == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err, err


def test_serving_validation_redundant_experts_override(monkeypatch, capsys):
    # benchmarks/serving_validation.py --redundant-experts N: every point gets N; DeepSeek-V3's
    # 256 routed experts split over EP 32 without replicas (8 each) but not over EP 144, so the
    # EP 144 decode rows get no prediction at N = 0 and every EP 32 row is predicted with N = 0
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import serving_validation as sv   # a script in benchmarks/, not a package: put on the path above
    seen = []

    def fake_predict(p):
        seen.append((p["ep"], p["redundant_experts"]))
        return {"predicted": 1.0, "iteration_s": 1.0, "kv_fits": True}
    monkeypatch.setattr(sv, "predict", fake_predict)
    monkeypatch.setattr(sys, "argv", ["serving_validation.py", "--json",
                                      "--redundant-experts", "0"])
    sv.main()
    rows = json.loads(capsys.readouterr().out)
    eps = {p["name"]: p["ep"] for p in yaml.safe_load(sv.POINTS.read_text())["points"]}
    assert {r["point"] for r in rows} == set(eps)
    for r in rows:
        assert (r["predicted"] is None) == (256 % eps[r["point"]] != 0), r
    assert seen and all(ep == 32 and n == 0 for ep, n in seen)
    monkeypatch.setattr(sys, "argv", ["serving_validation.py", "--redundant-experts", "-1"])
    with pytest.raises(SystemExit) as ex:
        sv.main()
    assert ex.value.code == 2
