"""The sweep's fast paths give exactly the numbers of the full paths (issue 7).

* pruned mapper (``map_gemm(prune=True)``, used by the lowering) vs the whole mapping space
  searched by :func:`best_index` (the brute-force reference): same mapping, same cost;
* :func:`program_totals` (no DataFrame) vs pandas sums over :func:`program_report`'s rows;
* the Report's mapped-GEMM rows vs :func:`cost_of` called directly on the recorded mapping;
* the sweep's LLM ``workload_cost`` vs the per-op Report of ``workload_report``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tilewright.arch import ArchSpec
from tilewright.compiler.frontend import export_model, from_exported
from tilewright.compiler.lower_llm import ELEM_BYTES, lower_graph
from tilewright.compiler.gemm_mapper import (GemmOp, Mapping, best_index, cost_of, enumerate_mappings,
                                        map_gemm, map_gemms, mapper_arch_key)
from tilewright.compiler.passes import run_flow
from tilewright.compiler.program import BgemmTask
from tilewright.dataflow_sim.report import program_report, program_totals, report_totals
from tilewright.models.llm_configs import build_llm
from tilewright.app.sweep.evaluate import workload_cost, workload_report


def _arch(rows: int, cols: int, dataflow: str, kib: int, acc_kib: int, gbps: float,
          clock: float = 800.0, lat_ns: float = 100.0, lanes: int | None = None) -> ArchSpec:
    d = {"name": f"p{rows}x{cols}{dataflow}", "clock_mhz": clock,
         "tensor_engine": {"rows": rows, "cols": cols, "dataflow": dataflow},
         "memory": {"scratchpad_kib": kib, "accumulator_kib": acc_kib},
         "offchip": {"bandwidth_gbps": gbps, "latency_ns": lat_ns}}
    if lanes:
        d["vector_unit"] = {"lanes": lanes}
    return ArchSpec.from_dict(d)


def _random_archs(n: int, seed: int) -> list[ArchSpec]:
    rng = np.random.default_rng(seed)
    return [_arch(int(rng.choice([4, 8, 16, 24, 32])), int(rng.choice([4, 8, 16, 24, 32])),
                  str(rng.choice(["ws", "os"])), int(rng.choice([2, 8, 64, 512])),
                  int(rng.choice([1, 4, 64])), float(np.exp(rng.uniform(np.log(2), np.log(2048)))),
                  clock=float(rng.uniform(300, 1500)), lat_ns=float(rng.uniform(10, 300)))
            for _ in range(n)]


# ---- pruned mapper == brute force over the whole space ----------------------------------------
SHAPES = [(512, 4096, 1024, 1, 4), (64, 64, 700, 3, 1), (300, 200, 100, 1, 2), (1, 4096, 512, 1, 1),
          (2048, 128, 2048, 2, 4), (7, 1000, 333, 1, 4)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pruned_mapper_chooses_what_the_whole_space_chooses(seed):
    rng = np.random.default_rng(100 + seed)
    checked = pruned = 0
    for a in _random_archs(12, seed):
        m, k, n, b, e = SHAPES[int(rng.integers(len(SHAPES)))]
        op = GemmOp("t", m, k, n, batch=b, elem_bytes=e, out_bytes=4)
        double = bool(rng.random() < 0.8)
        try:
            whole = enumerate_mappings(op, a, double_buffer=double)
        except ValueError:
            with pytest.raises(ValueError, match="no tiling fits"):
                map_gemm(op, a, double_buffer=double, prune=True)
            continue
        ref = best_index(whole)                               # brute force over every mapping
        fast = map_gemm(op, a, double_buffer=double, prune=True)
        assert fast.mapping == whole.mapping(ref)
        assert fast.cost == whole.cost(ref)
        # the pruned space is a subset of the whole one, row for row
        key = lambda c, i: (int(c["m_t"][i]), int(c["k_t"][i]), int(c["n_t"][i]),  # noqa: E731
                            int(c["order_idx"][i]))
        rows = {key(whole.columns, i): i for i in range(len(whole))}
        assert 0 < len(fast.space) <= len(whole)
        pruned += len(fast.space) < len(whole)
        for i in range(len(fast.space)):
            j = rows[key(fast.space.columns, i)]
            assert fast.space.cost(i) == whole.cost(j)
        checked += 1
    assert checked >= 6 and pruned >= 3                       # pruning did skip mappings


def test_batched_mapper_equals_one_op_at_a_time():
    rng = np.random.default_rng(11)
    seen_none = 0
    for a in _random_archs(10, 11):
        ops = [GemmOp(f"g{j}", *SHAPES[int(i)][:3], batch=SHAPES[int(i)][3],
                      elem_bytes=SHAPES[int(i)][4], out_bytes=4)
               for j, i in enumerate(rng.integers(len(SHAPES), size=int(rng.integers(1, 5))))]
        for op, got in zip(ops, map_gemms(ops, a)):
            try:
                ref = map_gemm(op, a, prune=True)
            except ValueError:
                assert got is None
                seen_none += 1
                continue
            assert (got.mapping, got.cost) == (ref.mapping, ref.cost)
            assert set(got.space.columns) == set(ref.space.columns)
            for k, v in ref.space.columns.items():
                got_v = got.space.columns[k]
                assert np.array_equal(got_v, v) and got_v.dtype == v.dtype
    assert seen_none >= 1                      # some small ArchSpec fits nothing: None, no raise


@pytest.mark.parametrize("tie_rtol", [0.0, 1e-3, 0.05])
def test_pruning_honours_the_tie_tolerance(tie_rtol):
    a = _arch(16, 16, "ws", 256, 64, 25.0)                    # bandwidth-starved: many near-ties
    op = GemmOp("t", 512, 4096, 4096, elem_bytes=4, out_bytes=4)
    whole = enumerate_mappings(op, a)
    fast = map_gemm(op, a, tie_rtol=tie_rtol, prune=True)
    assert fast.mapping == whole.mapping(best_index(whole, tie_rtol=tie_rtol))


def test_mapper_arch_key_covers_what_the_mapper_reads():
    a = _arch(16, 8, "os", 64, 64, 100.0)
    same = _arch(16, 8, "os", 64, 64, 100.0, lanes=32)        # vector unit: not read by the mapper
    assert mapper_arch_key(a) == mapper_arch_key(same)
    op = GemmOp("t", 256, 512, 384, elem_bytes=2)
    assert map_gemm(op, a).cost == map_gemm(op, same).cost
    for other in (_arch(16, 8, "os", 64, 64, 101.0), _arch(16, 8, "os", 128, 64, 100.0),
                  _arch(16, 8, "ws", 64, 64, 100.0), _arch(16, 8, "os", 64, 64, 100.0, clock=900),
                  _arch(16, 8, "os", 64, 64, 100.0, lat_ns=50), _arch(8, 16, "os", 64, 64, 100.0),
                  _arch(16, 8, "os", 64, 32, 100.0)):
        assert mapper_arch_key(other) != mapper_arch_key(a)


# ---- report: lean totals == pandas sums; mapped rows == cost_of -------------------------------
@pytest.fixture(scope="module")
def graphs():
    out = {}
    for name, seq in (("tiny-llama", 32), ("tiny-moe", 16), ("tiny-mamba", 16)):
        module, example = build_llm(name, seq=seq, batch=1, phase="prefill")
        g = from_exported(export_model(module, example), name=name)
        run_flow(g, "llm")
        out[name] = g
    return out


REPORT_ARCHS = [_arch(4, 4, "ws", 8, 4, 16.0), _arch(8, 16, "os", 64, 64, 400.0, lanes=32),
                _arch(32, 8, "ws", 512, 64, 3000.0, clock=1400.0)]


@pytest.mark.parametrize("fmt", ["fp32", "int8"])
@pytest.mark.parametrize("name", ["tiny-llama", "tiny-moe", "tiny-mamba"])
def test_program_totals_equal_the_report_sums(graphs, name, fmt):
    for a in REPORT_ARCHS:
        prog = lower_graph(graphs[name], a, fmt=fmt)
        df = program_report(prog, a)
        tot = program_totals(prog, a, layers=3)
        ref = {"total_cycles": 3 * int(df["time_cycles"].sum()),
               "compute_cycles": 3 * int(df["cycles"].sum()),
               "mem_cycles": 3 * int(df["mem_cycles"].sum()), "macs": 3 * int(df["macs"].sum()),
               "bytes": 3 * int(df["bytes"].sum()), "vector_ops": 3 * int(df["vector_ops"].sum()),
               "tasks": len(df), "layers": 3, "max_buffer_bytes": int(df["buffer_bytes"].max())}
        assert {k: tot[k] for k in ref} == ref
        assert tot["time_us"] == pytest.approx(ref["total_cycles"] / a.clock_mhz, rel=1e-12)
        assert report_totals(df, layers=3) == tot
        # every row's time is the max of its compute, memory and (mapped GEMMs) pipeline time
        assert (df["time_cycles"] >= df[["cycles", "mem_cycles"]].max(axis=1)).all()


def test_mapped_gemm_rows_are_cost_of_the_recorded_mapping(graphs):
    for a in REPORT_ARCHS:
        for fmt in ("fp32", "bf16"):
            prog = lower_graph(graphs["tiny-llama"], a, fmt=fmt)
            df = program_report(prog, a).set_index("task")
            tasks = [t for t in prog.tasks if isinstance(t, BgemmTask)]
            assert tasks
            for t in tasks:
                c = cost_of(GemmOp("ref", t.m, t.k, t.n, batch=t.batch_size,
                                   elem_bytes=ELEM_BYTES[t.format], out_bytes=4), a,
                            Mapping(t.tile_m, t.tile_k, t.tile_n, t.order, t.dataflow))
                row = df.loc[t.name]
                assert row["cycles"] == max(1, c.core_cycles)
                assert row["bytes"] == c.dram_bytes
                assert row["scratchpad_bytes"] == c.scratchpad_bytes
                assert row["accumulator_bytes"] == c.accumulator_bytes
                assert row["time_cycles"] >= int(np.ceil(c.cycles))


def test_report_of_a_foreign_mapping_uses_cost_of(graphs):
    """A task whose recorded mapping is not the mapper's choice is still costed as that mapping."""
    a = REPORT_ARCHS[1]
    prog = lower_graph(graphs["tiny-llama"], a)
    i, t = next((i, t) for i, t in enumerate(prog.tasks) if isinstance(t, BgemmTask))
    small = dict(tile_m=1, tile_k=min(t.k, a.tensor_engine.rows) if t.dataflow == "ws" else 1,
                 tile_n=min(t.n, a.tensor_engine.cols))
    if t.dataflow == "os":
        small["tile_m"] = min(t.m, a.tensor_engine.rows)
    other = t.model_copy(update=small)
    tasks = list(prog.tasks)
    tasks[i] = other
    df = program_report(prog.model_copy(update={"tasks": tasks}), a)
    c = cost_of(GemmOp("ref", t.m, t.k, t.n, batch=t.batch_size, elem_bytes=4, out_bytes=4), a,
                Mapping(other.tile_m, other.tile_k, other.tile_n, t.order, t.dataflow))
    row = df[df["task"] == t.name].iloc[0]
    assert (row["cycles"], row["bytes"]) == (max(1, c.core_cycles), c.dram_bytes)


def test_sweep_llm_workload_cost_equals_its_report():
    w = {"model": "tiny-llama", "seq": 32, "batch": 1, "phase": "prefill", "layers": 2}
    for a in REPORT_ARCHS:
        c = workload_cost(a, w)
        df = workload_report(a, w)
        assert c["cycles"] == 2.0 * float(df["time_cycles"].sum())
        assert c["macs"] == 2.0 * float(df["macs"].sum())
        assert c["vector_ops"] == 2.0 * float(df["vector_ops"].sum())
        assert c["dram_bytes"] == 2.0 * float(df["bytes"].sum())
        assert c["tokens"] == 32.0


def test_mapping_cost_fields_are_plain_numbers():
    """The pruned path's MappingCost carries Python numbers like the full path's (JSON-able)."""
    a = REPORT_ARCHS[0]
    res = map_gemm(GemmOp("t", 64, 64, 64, elem_bytes=4), a, prune=True)
    for f in dataclasses.fields(res.cost):
        assert type(getattr(res.cost, f.name)) in (int, float, str)


# ---- local executor: batched pool tasks ---------------------------------------------------------
def test_batched_random_sweep_stores_every_point_with_its_own_metrics(tmp_path):
    from tilewright.app.sweep import ResultsStore, run_sweep, sweep_from_dict  # noqa: PLC0415
    from tilewright.app.sweep.runner import _local_batch  # noqa: PLC0415

    n = 70
    assert _local_batch(n, 2) == 2                         # this sweep really is batched
    spec = sweep_from_dict({
        "name": "b", "base": "ws16x16", "tech": "45nm",
        "axes": {"tensor_engine.rows": [8, 16], "tensor_engine.cols": [8, 16, 32],
                 "offchip.bandwidth_gbps": {"low": 8.0, "high": 512.0, "log": True}},
        "workloads": [{"gemm": [64, 128, 96], "format": "int8"}],
        "objectives": ["latency"], "search": {"method": "random", "trials": n, "seed": 3},
    }, source="b.yaml")
    res = run_sweep(spec, tmp_path / "b.db", workers=2)
    assert (res.evaluated, res.reused, res.invalid) == (n, 0, 0)
    df = ResultsStore(tmp_path / "b.db").frame("b")
    assert len(df) == n and df["key"].is_unique and (df["status"] == "ok").all()
    from tilewright.app.sweep.runner import random_points  # noqa: PLC0415
    points = random_points(spec, n, 3)
    for _, row in df.iterrows():                            # each row holds its own point's cost
        arch = spec.arch_for(points[int(row["trial"])])
        cost = map_gemm(GemmOp("g", 64, 128, 96, elem_bytes=1), arch).cost
        assert row["latency_s"] == pytest.approx(cost.cycles / (arch.clock_mhz * 1e6), rel=1e-12)
