"""The mesh Program: a decoder layer partitioned by the compiler into ``mesh_phase`` tasks costs
exactly what the per-op plan (mesh_gemm / mesh_gemv calls) predicts, carries the layer's
closed-form MACs, survives save/load, and is rejected clearly by levels that cannot run it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tilewright.arch import ArchSpec, TensorEngineSpec
from tilewright.compiler.mesh_partition import partition_layer
from tilewright.compiler.mesh_schedule import MeshScheduleError
from tilewright.compiler.program import MeshPhaseTask, Program
from tilewright.dataflow_sim.mesh import MeshMappingError, run_mesh_program
from tilewright.dataflow_sim.mesh.llm import plan_layer


def _arch(rows, cols, sram=262144.0, alpha=1.0, beta=1.0, **mesh):
    return ArchSpec(name="t", clock_mhz=1000.0,
                    tensor_engine=TensorEngineSpec(rows=1, cols=4, dataflow="os"),
                    mesh=dict(rows=rows, cols=cols, core_sram_kib=sram, core_macs_per_cycle=4,
                              link_bytes_per_cycle=4, hop_latency_cycles=alpha,
                              routing_stage_cycles=beta, max_routes_per_core=24, **mesh))


def _macs(d, h, kv, ffn, s, t):
    """Closed form: q/k/v projections, q.k^T, p.v, wo, w1, w3, w2 (head_dim = d / h); prefill
    (s = t tokens) is causal: query i attends to keys 0..i, sum = s(s+1)/2 pairs."""
    kvd = kv * d // h
    pairs = s * (s + 1) // 2 if s == t else s * t
    return s * d * (d + 2 * kvd) + pairs * d + pairs * d + s * d * d + 3 * s * d * ffn


@pytest.mark.parametrize("phase,kw,algo,defects", [
    ("prefill", {"tokens": 96}, "mesh", "skip"), ("prefill", {"tokens": 96}, "summa", "skip"),
    ("decode", {"context": 300}, "mesh", "skip"),
    ("decode", {"context": 300}, "allreduce", "skip"),
    ("prefill", {"tokens": 96}, "mesh", "route"), ("decode", {"context": 300}, "mesh", "route")])
def test_program_equals_plan_layer_and_closed_form_macs(phase, kw, algo, defects):
    arch = _arch(12, 14, alpha=1.0, beta=2.0, defective_cores=((11, 3), (5, 6)),
                 defective_links=(((8, 9), (9, 9)),))
    prog = partition_layer(arch, "llama3-8b", phase, algo=algo, defects=defects, **kw)
    assert all(isinstance(t, MeshPhaseTask) for t in prog.tasks)
    run = run_mesh_program(prog, arch)
    plan = plan_layer(arch, "llama3-8b", phase, algo=algo, defects=defects, **kw)
    assert [name for name, _ in run.ops] == [o.name for o in plan.ops]
    assert [r.cycles for _, r in run.ops] == [o.cycles for o in plan.ops]
    assert run.cycles == plan.cycles
    s, t = (kw["tokens"], kw["tokens"]) if phase == "prefill" else (1, kw["context"])
    assert run.useful_macs == sum(t_.useful_macs for t_ in prog.tasks) == \
        _macs(4096, 32, 8, 14336, s, t)
    # padded per-core work covers the useful MACs: cores x MACs per core >= useful
    side = int(prog.meta["grid"].split("x")[0]) if phase == "prefill" else 0
    if side:
        assert sum(t_.macs_per_core * t_.repeat for t_ in prog.tasks) * side ** 2 >= \
            run.useful_macs


def test_program_save_load_roundtrip(tmp_path):
    arch = _arch(8, 8)
    prog = partition_layer(arch, "tiny-llama", "decode", context=64)
    prog.save(tmp_path / "p")
    back = Program.load(tmp_path / "p")
    assert back.tasks == prog.tasks
    assert all(np.array_equal(back.constants[k], v) for k, v in prog.constants.items())
    assert run_mesh_program(back, arch).cycles == run_mesh_program(prog, arch).cycles
    # geometry is shared between tasks: far fewer constants than tasks with messages
    assert len(prog.constants) < sum(t.flows is not None for t in prog.tasks)


def test_mesh_tasks_are_rejected_clearly_elsewhere():
    arch = _arch(8, 8)
    prog = partition_layer(arch, "tiny-llama", "decode", context=64)
    from tilewright.dataflow_sim.functional import run_program
    with pytest.raises(TypeError, match="MeshPhaseTask"):
        run_program(prog, {})
    from tilewright.dataflow_sim.report import program_report
    with pytest.raises(TypeError, match="MeshPhaseTask"):
        program_report(prog, arch)
    with pytest.raises(MeshMappingError, match=r"maps 8x8 cores but t's mesh is 9x9"):
        run_mesh_program(prog, _arch(9, 9))


def test_program_check_and_partition_errors():
    arch = _arch(8, 8)
    prog = partition_layer(arch, "tiny-llama", "decode", context=64)
    t = next(t for t in prog.tasks if t.flows)
    bad = prog.model_copy(update={"tasks": [t.model_copy(update={"flow_counts": (1,) * len(
        t.flow_counts)})]})
    with pytest.raises(ValueError, match="flows has .* rows but flow_counts sums to"):
        bad.check()
    with pytest.raises(ValueError, match="one byte count per run"):
        MeshPhaseTask(name="x", op="x", cores="c", flows="f", flow_bytes=(4, 4), flow_counts=(1,))
    with pytest.raises(MeshScheduleError, match="phase 'train'"):
        partition_layer(arch, "tiny-llama", "train")
    with pytest.raises(MeshScheduleError, match="MoEConfig is not supported"):
        partition_layer(arch, "tiny-moe", "decode")
    with pytest.raises(MeshMappingError, match="KiB per core"):
        run_mesh_program(partition_layer(_arch(4, 4, sram=1.0), "tiny-llama", "prefill",
                                         tokens=64), _arch(4, 4, sram=1.0))


def test_cli_mesh_layer_json_and_errors(tmp_path):
    import json

    import typer
    from typer.testing import CliRunner

    from tilewright.app.cli.mesh_layer import mesh_layer
    app = typer.Typer()
    app.command("mesh-layer")(mesh_layer)
    app.command("noop")(lambda: None)
    yaml = (Path(__file__).parents[1] / "configs" / "mesh4x4.yaml").read_text()
    arch_file = tmp_path / "big.yaml"
    arch_file.write_text(yaml.replace("core_sram_kib: 16", "core_sram_kib: 256"))
    res = CliRunner().invoke(app, ["mesh-layer", "--model", "tiny-moe", "--arch", str(arch_file), "--phase",
                                   "decode", "--experts", "0,1;2,3", "--context", "16", "--json",
                                   "--save", str(tmp_path / "p")])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["cycles"] == sum(o["cycles"] for o in d["ops"]) > 0
    assert Program.load(tmp_path / "p").name == d["program"]
    res = CliRunner().invoke(app, ["mesh-layer", "--model", "tiny-moe", "--arch", "mesh4x4", "--phase",
                                   "decode", "--experts", "0;x"])
    assert isinstance(res.exception, MeshMappingError) and "--experts '0;x'" in str(res.exception)
    res = CliRunner().invoke(app, ["mesh-layer", "--model", "tiny-llama", "--arch", "mesh4x4",
                                   "--defects", "spare"])
    assert isinstance(res.exception, MeshMappingError) and "defects 'spare'" in str(res.exception)
