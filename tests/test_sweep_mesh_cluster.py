"""Mesh and cluster workloads in sweeps: mesh-size axes run the mesh model, cluster./plan. axes
change the cluster description and the parallelism plan, bad plans are stored as point errors."""

from __future__ import annotations

import json
from pathlib import Path
import math

import pytest

from tilewright.app.sweep import ResultsStore, SweepError, run_sweep, sweep_from_dict

MESH = {
    "name": "m",
    "base": "mesh4x4",
    "tech": "45nm",
    "axes": {"mesh.rows,mesh.cols": [2, 4, 8]},
    "workloads": [{"mesh_gemv": [128, 256]}],
    "objectives": ["latency", "energy"],
}


def _mk(base, **changes):
    d = json.loads(json.dumps(base))
    d.update(changes)
    return sweep_from_dict(d, source="s.yaml")


def test_mesh_size_axis_runs_the_mesh_model(tmp_path):
    from tilewright.dataflow_sim.energy_area import (area_breakdown, dynamic_scale, layout_fit,
                                                     load_tech, operating_voltage)
    from tilewright.dataflow_sim.mesh import mesh_gemv
    spec = _mk(MESH, workloads=[{"mesh_gemv": [256, 256]}])   # int8: the mesh cores' format
    db = tmp_path / "m.db"
    run_sweep(spec, db, workers=1)
    with ResultsStore(db) as s:
        df = s.frame("m").set_index("p:mesh.rows")
        per = {int(json.loads(r["params"])["mesh.rows,mesh.cols"]): json.loads(r["per_workload"])
               for _, r in s.raw("m").iterrows() if r["per_workload"]}
    # 2x2 cores: a 128x128 int8 block (16 KiB) + buffers exceeds 16 KiB of SRAM -> stored error
    assert df.loc[2, "status"] == "error" and "core_sram_kib" in df.loc[2, "error"]
    tech = load_tech("45nm")
    lat = {}
    for side in (4, 8):
        row = df.loc[side]
        assert row["status"] == "ok"
        arch = spec.arch_for({"mesh.rows,mesh.cols": side})
        assert (arch.mesh.rows, arch.mesh.cols) == (side, side)
        rep = mesh_gemv(arch, 256, 256, elem_bytes=1)
        assert row["latency_s"] == pytest.approx(rep.cycles / (arch.clock_mhz * 1e6), rel=1e-12)
        assert row["macs"] == 256 * 256                          # [1,256] x [256,256]
        assert row["dram_bytes"] == 0
        # per-hop energy: bytes x hops x (wire pJ/B/mm x core pitch + router pJ/B), with the
        # core pitch the side of one core's area (docs/design.md: energy_area module doc)
        byte_hops = sum(float(a.sum()) for a in rep.link_load_flits.values()) \
            * arch.mesh.link_bytes_per_cycle
        assert byte_hops > 0
        k = layout_fit()     # a core laid out: PEs, SRAM x layout factors, + uncore share
        core_um2 = ((k.compute * arch.mesh.core_macs_per_cycle
                     * tech.pe_um2(arch.tensor_engine.input_format)
                     + k.sram * arch.mesh.core_sram_kib * tech.sram_um2_per_kib)
                    * (1 + k.uncore) + tech.area_um2.fixed / 64)
        mesh_pj = byte_hops * (tech.hop_pj_per_byte_mm * math.sqrt(core_um2) / 1e3
                               + tech.router_pj_per_byte)
        mesh_pj *= dynamic_scale(tech, operating_voltage(arch, tech))   # (V / v_nom)^2
        assert per[side][0]["mesh_pj"] == pytest.approx(mesh_pj, rel=1e-9)
        assert row["energy_j"] == pytest.approx(
            sum(v for k, v in per[side][0].items() if k.endswith("_pj")) * 1e-12, rel=1e-9)
        assert row["area_mm2"] == pytest.approx(area_breakdown(arch, tech)["area_mm2"])
        # the mesh alone: side^2 cores, no host core's array/scratchpad/vector unit/controller
        assert row["area_mm2"] == pytest.approx(side * side * core_um2 / 1e6, rel=1e-12)
        assert row["pes"] == side * side * 4 and row["sram_kib"] == side * side * 16
        lat[side] = row["latency_s"]
    # the FPGA figures predict the single-core GEMM core, which a mesh design does not have
    assert not [c for c in df.columns if c.startswith("fpga_") and df[c].notna().any()]
    assert lat[8] < lat[4]                     # 4x the cores for the same GEMV: faster


TRAIN = {
    "name": "c",
    "base": "ws16x16",
    "tech": "45nm",
    "axes": {"plan.tp": [1, 2, 8], "cluster.intra_node.link_gbps": [50.0, 450.0]},
    "workloads": [{"cluster": "h100-8x-nvlink", "model": "tiny-llama", "mode": "train",
                   "plan": {"dp": "auto", "micro_batches": 2, "seq_len": 128}}],
    "objectives": [{"metric": "tokens_per_s", "direction": "maximize"}, "chips"],
}


def test_cluster_and_plan_axes(tmp_path):
    from tilewright.dataflow_sim.cluster import (ClusterSpec, TrainPlan, load_cluster,
                                                 simulate_training)
    spec = _mk(TRAIN)
    db = tmp_path / "c.db"
    res = run_sweep(spec, db, workers=2)
    assert res.evaluated == 6                 # same ArchSpec, different cluster/plan: 6 keys
    with ResultsStore(db) as s:
        df = s.frame("c")
    assert df["key"].is_unique
    bad = df[df["p:plan.tp"] == 8]
    # tiny-llama has 4 heads: TP = 8 cannot run -> that point's error, the sweep goes on
    assert (bad["status"] == "error").all() and bad["error"].str.contains("tp").all()
    ok = df[df["status"] == "ok"]
    assert len(ok) == 4
    base = load_cluster("h100-8x-nvlink").model_dump(mode="json", exclude_none=True)
    for _, row in ok.iterrows():
        tp, bw = int(row["p:plan.tp"]), float(row["p:cluster.intra_node.link_gbps"])
        cl = json.loads(json.dumps(base))
        cl["intra_node"]["link_gbps"] = bw
        dp = 8 // tp
        ref = simulate_training(ClusterSpec.from_dict(cl), "tiny-llama",
                                TrainPlan(dp=dp, tp=tp, micro_batches=2, seq_len=128))
        assert row["latency_s"] == pytest.approx(ref.step_seconds, rel=1e-9)
        assert row["tokens_per_s"] == pytest.approx(dp * 2 * 1 * 128 / ref.step_seconds,
                                                    rel=1e-9)
        assert row["chips"] == 8
        assert row["energy_j"] == pytest.approx(ref.metrics["energy_j"], rel=1e-9)
    # the cluster runs the preset's H100s: no metric of the ArchSpec nobody ran is produced
    for metric in ("area_mm2", "pes", "sram_kib", "perf_per_mm2", "fpga_luts_ice40"):
        assert metric not in df.columns or df[metric].isna().all(), metric
    # faster links never make the step slower
    for tp in (1, 2):
        t = ok[ok["p:plan.tp"] == tp].set_index("p:cluster.intra_node.link_gbps")["latency_s"]
        assert t[450.0] <= t[50.0]


def test_cluster_nodes_axis_and_chip_from_sweep(tmp_path):
    from tilewright.dataflow_sim.cluster import ClusterSpec, TrainPlan, simulate_training
    from tilewright.dataflow_sim.energy_area import area_mm2, load_tech
    cl = {"name": "ring", "chip": {"kind": "arch", "arch": "ws16x16", "hbm_gib": 16},
          "nodes": 2, "chips_per_node": 2,
          "intra_node": {"topology": "ring", "link_gbps": 100.0, "latency_us": 1.0},
          "inter_node": {"topology": "switch", "link_gbps": 25.0, "latency_us": 2.0}}
    import yaml
    (tmp_path / "ring.yaml").write_text(yaml.safe_dump(cl))
    d = {"name": "n", "base": "ws16x16", "tech": "45nm",
         "axes": {"cluster.nodes": [1, 2], "tensor_engine.rows,tensor_engine.cols": [8, 16]},
         "workloads": [{"cluster": "ring.yaml", "model": "tiny-llama", "chip": "sweep",
                        "cost_source": "table",
                        "plan": {"dp": "auto", "micro_batches": 2, "seq_len": 64}}],
         "objectives": ["tokens", "chips"]}
    spec = sweep_from_dict(d, source=str(tmp_path / "n.yaml"), root=tmp_path)
    db = tmp_path / "n.db"
    run_sweep(spec, db, workers=2)
    with ResultsStore(db) as s:
        df = s.frame("n")
    assert (df["status"] == "ok").all() and len(df) == 4
    tech = load_tech("45nm")
    for _, row in df.iterrows():
        nodes = int(row["p:cluster.nodes"])
        side = int(row["p:tensor_engine.rows"])
        arch = spec.arch_for({"tensor_engine.rows,tensor_engine.cols": side})
        c = {**cl, "nodes": nodes,
             "chip": {"kind": "arch", "arch": arch.model_dump(mode="json", exclude_none=True),
                      "hbm_gib": 16}}
        ref = simulate_training(ClusterSpec.from_dict(c), "tiny-llama",
                                TrainPlan(dp=2 * nodes, micro_batches=2, seq_len=64),
                                cost_source="table")
        assert row["chips"] == 2 * nodes
        assert row["latency_s"] == pytest.approx(ref.step_seconds, rel=1e-9)
        assert row["cluster_area_mm2"] == pytest.approx(2 * nodes * area_mm2(arch, tech))
    # the design point is the chip: a bigger array gives a shorter step
    t = df.set_index(["p:cluster.nodes", "p:tensor_engine.rows"])["latency_s"]
    assert t[(1, 16)] < t[(1, 8)]


def test_chip_from_sweep_keeps_the_cluster_chips_capacity():
    """A cluster whose chip states its capacity in the ArchSpec (offchip.capacity_gib) keeps it
    when the design point (which leaves capacity unset) becomes the chip."""
    from tilewright.arch import load_arch
    from tilewright.dataflow_sim.cluster import ClusterSpec, TrainPlan, simulate_training
    from tilewright.app.sweep.evaluate import cluster_cost
    base = load_arch("ws16x16").model_dump(mode="json", exclude_none=True)
    base["offchip"]["capacity_gib"] = 16.0
    cl = {"name": "ring", "chip": {"kind": "arch", "arch": base}, "nodes": 1,
          "chips_per_node": 2,
          "intra_node": {"topology": "ring", "link_gbps": 100.0, "latency_us": 1.0}}
    point = load_arch("ws8x8")
    assert point.offchip.capacity_gib is None
    out = cluster_cost(point, {"cluster": cl, "chip": "sweep", "model": "tiny-llama",
                               "cost_source": "table",
                               "plan": {"dp": "auto", "micro_batches": 2, "seq_len": 64}})
    ref_arch = point.model_dump(mode="json", exclude_none=True)
    ref_arch["offchip"]["capacity_gib"] = 16.0
    ref = simulate_training(ClusterSpec.from_dict({**cl, "chip": {"kind": "arch",
                                                                  "arch": ref_arch}}),
                            "tiny-llama", TrainPlan(dp=2, micro_batches=2, seq_len=64),
                            cost_source="table")
    assert out["latency_s"] == pytest.approx(ref.step_seconds, rel=1e-12)


@pytest.mark.parametrize("change, words", [
    ({"axes": {"cluster.nodez": [1]}}, ["axes.", "cluster.nodez", "'nodez'", "chips_per_node"]),
    ({"axes": {"cluster.intra_node": [1]}}, ["cluster.intra_node", "is a section", "link_gbps"]),
    ({"axes": {"cluster.intra_node.speed": [1]}}, ["'speed'", "cluster.intra_node", "link_gbps"]),
    ({"axes": {"plan.tq": [1]}}, ["plan.tq", "train plan", "micro_batches"]),
    ({"axes": {"cluster.chip.arch.clock_mhz": [500.0]},
      "workloads": [{"cluster": "torus-1024", "model": "tiny-llama"}]}, []),
    ({"axes": {"plan.tp": [1]}, "workloads": [{"gemm": [8, 8, 8]}]},
     ["plan.tp", "need a cluster workload"]),
    ({"workloads": [{"cluster": "h100-8x-nvlink"}]}, ["workloads[0]", "needs `model"]),
    ({"workloads": [{"cluster": "nope-cluster", "model": "tiny-llama"}]},
     ["workloads[0].cluster", "nope-cluster"]),
    ({"workloads": [{"cluster": "h100-8x-nvlink", "model": "tiny-llama", "plan": {"tpp": 2}}]},
     ["workloads[0].plan.tpp", "unknown key", "micro_batches"]),
    ({"workloads": [{"cluster": "h100-8x-nvlink", "model": "tiny-llama", "chip": "sweep"}]},
     ["workloads[0].chip", "GPU chip", "kind: arch"]),
    ({"workloads": [{"gemm": [8, 8, 8], "mode": "train"}]}, ["workloads[0]", "mode", "cluster"]),
    ({"workloads": [{"mesh_gemv": [8, 8], "algo": "summa"}]},
     ["workloads[0]", "'summa'", "allreduce"]),
    ({"workloads": [{"mesh_gemv": [8, 8], "gemm": [8, 8, 8]}]}, ["workloads[0]", "exactly one"]),
    ({"workloads": [{"mesh_gemm": [8, 0, 8]}]}, ["workloads[0]", "mesh_gemm = [8, 0, 8]"]),
])
def test_workload_and_axis_errors_are_one_line(change, words):
    base = json.loads(json.dumps(TRAIN))
    if not words:                                  # accepted: an inline chip.arch mapping
        s = _mk(base, **change)
        w = s.workloads_for({"cluster.chip.arch.clock_mhz": 500.0})[0]
        assert w["cluster"]["chip"]["arch"]["clock_mhz"] == 500.0
        return
    with pytest.raises(SweepError) as ei:
        _mk(base, **change)
    msg = str(ei.value)
    assert "\n" not in msg and msg.startswith("s.yaml")
    for w in words:
        assert w in msg, (w, msg)


def test_result_key_follows_workloads_and_tech_table_content(tmp_path):
    """Workload fields added for mesh/cluster kinds are left out of the hash when unset; the tech
    table enters by content: a renamed copy keeps the key, an edited value changes it."""
    import yaml

    from tilewright.dataflow_sim.energy_area import TECH_DIR
    spec = _mk(MESH, workloads=[{"gemm": [8, 8, 8], "format": "int8"}])
    old = [{"model": None, "gemm": [8, 8, 8], "seq": 512, "batch": 1, "phase": "prefill",
            "format": "int8", "layers": 1, "weight": 1.0, "name": None}]
    tech = yaml.safe_load((Path(TECH_DIR) / f"{spec.tech}.yaml").read_text())
    copy = tmp_path / "copy.yaml"
    copy.write_text(yaml.safe_dump({**tech, "name": "renamed"}))
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump({**tech, "dram_pj_per_byte":
                                      float(tech["dram_pj_per_byte"]) * 2}))
    same = _mk(MESH, workloads=[{"gemm": [8, 8, 8], "format": "int8"}], tech=str(copy))
    other = _mk(MESH, workloads=[{"gemm": [8, 8, 8], "format": "int8"}], tech=str(edited))
    assert same.workloads_key() == spec.workloads_key()
    assert other.workloads_key() != spec.workloads_key()
    bigger = _mk(MESH, workloads=[{"gemm": [8, 8, 16], "format": "int8"}])
    assert bigger.workloads_key() != spec.workloads_key()
    assert json.dumps(old, sort_keys=True) == json.dumps(spec.workloads_for(None), sort_keys=True)


def test_cluster_serving_workload(tmp_path):
    from tilewright.dataflow_sim.cluster import (ServePlan, load_cluster, poisson_requests,
                                                 simulate_serving)
    d = {"name": "sv", "base": "ws16x16", "tech": "45nm",
         "axes": {"plan.tp": [1, 2]},
         "workloads": [{"cluster": "h100-8x-nvlink", "model": "tiny-llama", "mode": "serve",
                        "requests": 12, "rate": 40.0, "prompt_tokens": [16, 64],
                        "output_tokens": 8, "seed": 3, "plan": {"max_batch_tokens": 256}}],
         "objectives": ["tokens", "ttft_p99_s"]}
    spec = sweep_from_dict(d, source="s.yaml")
    run_sweep(spec, tmp_path / "sv.db", workers=1)
    with ResultsStore(tmp_path / "sv.db") as s:
        df = s.frame("sv").set_index("p:plan.tp")
    reqs = poisson_requests(12, 40.0, (16, 64), 8, seed=3)
    for tp in (1, 2):
        ref = simulate_serving(load_cluster("h100-8x-nvlink"), "tiny-llama",
                               ServePlan(tp=tp, max_batch_tokens=256), reqs, seed=3).metrics
        row = df.loc[tp]
        assert row["status"] == "ok"
        assert row["latency_s"] == pytest.approx(ref["makespan_s"], rel=1e-9)
        assert row["tokens_per_s"] == pytest.approx(12 * 8 / ref["makespan_s"], rel=1e-9)
        assert row["ttft_p99_s"] == pytest.approx(ref["ttft_p99_s"], rel=1e-9)
        assert row["tpot_p99_s"] == pytest.approx(ref["tpot_p99_s"], rel=1e-9)


def test_axis_into_a_preset_chip_name_is_a_load_error(tmp_path):
    import yaml
    cl = {"name": "two", "chip": {"kind": "arch", "arch": "ws16x16", "hbm_gib": 16},
          "chips_per_node": 2, "intra_node": {"topology": "ring", "link_gbps": 10.0}}
    (tmp_path / "two.yaml").write_text(yaml.safe_dump(cl))
    d = {**json.loads(json.dumps(TRAIN)), "axes": {"cluster.chip.arch.clock_mhz": [500.0]},
         "workloads": [{"cluster": "two.yaml", "model": "tiny-llama"}]}
    with pytest.raises(SweepError) as ei:
        sweep_from_dict(d, source="s.yaml", root=tmp_path)
    msg = str(ei.value)
    assert "\n" not in msg and "axes.cluster.chip.arch.clock_mhz" in msg and "preset" in msg


@pytest.mark.parametrize("base,changes,needle", [
    (TRAIN, {"objectives": ["tokens", "area"]},
     "objectives: area_mm2 is not produced: no workload uses the ArchSpec"),
    (TRAIN, {"constraints": ["perf_per_mm2 >= 1"]},
     "constraints: perf_per_mm2 is not produced: no workload uses the ArchSpec"),
    (MESH, {"workloads": [{"mesh_gemv": [256, 256]}], "constraints": ["fpga_luts_ice40 <= 5000"]},
     "fpga_luts_ice40 is not produced: the base is a mesh design"),
])
def test_metrics_of_parts_no_workload_uses_are_refused_as_objectives(base, changes, needle):
    with pytest.raises(SweepError) as exc:
        _mk(base, **changes)
    assert needle in str(exc.value) and "s.yaml" in str(exc.value)
