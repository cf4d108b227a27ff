"""RTL mesh rung: MeshGEMV and MeshGEMM on a 4x4 Verilated mesh vs numpy, the functional
execution of the schedule and the mesh model's cycles — both running the same mesh Program.

The co-simulation tests build one design (configs/mesh4x4.yaml, cached) and run every case of
an op in one simulator process. The RTL job is built from the compiler's mesh Program
(:mod:`tilewright.compiler.mesh_ops`); outputs must equal an independent int64 numpy matmul
wrapped to int32 and the schedule's numpy execution (``execute_gemv`` / ``execute_gemm``); the
cycles the mesh was busy must equal ``run_mesh_program`` on that Program and the model's direct
``mesh_gemv`` / ``mesh_gemm``. Link contention: phases whose messages share links, RTL cycles
== the model's rule == its closed form (worst latency + busiest link's flits).
"""

from __future__ import annotations

import numpy as np
import pytest

from tilewright.arch import ArchSpec, load_arch
from tilewright.compiler.mesh_codegen import (gemm_job, gemv_job, pack_int8, transfer_job,
                                           unpack_int32, xy_path)
from tilewright.compiler.mesh_isa import encode_instruction, instr_fields, mesh_params
from tilewright.compiler.mesh_partition import MeshProgramBuilder
from tilewright.compiler.mesh_schedule import FlowBatch, PhaseSpec
from tilewright.dataflow_sim.mesh import (MeshMappingError, execute_gemm, execute_gemv,
                                          mesh_gemm, mesh_gemv, run_mesh_program)


def _arch() -> ArchSpec:
    return load_arch("configs/mesh4x4.yaml")


def _wrap32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.int64).astype(np.uint32).astype(np.int32)


def _i8(rng, shape, fill=None) -> np.ndarray:
    if fill is not None:
        return np.full(shape, fill, np.int8)
    return rng.integers(-128, 128, shape).astype(np.int8)


# ---- fast checks (no simulator) -------------------------------------------------------------

def test_xy_path_goes_along_the_row_first():
    assert xy_path(1, 0, 3, 2) == [(1, 0, "e"), (1, 1, "e"), (1, 2, "s"), (2, 2, "s")]
    assert xy_path(2, 3, 2, 1) == [(2, 3, "w"), (2, 2, "w")]
    assert xy_path(0, 0, 0, 0) == []


def test_pack_and_unpack_words():
    x = np.array([1, -1, 127, -128, 5, 6, 7, 8], np.int8)
    w = pack_int8(x, 4)
    assert int(w[0]) == 0x80_7F_FF_01 and int(w[1]) == 0x08070605
    assert unpack_int32([0xFFFFFFFF, 2**31, 5]).tolist() == [-1, -2**31, 5]


def test_instruction_encoding_fields():
    bits = 12
    fields = dict(instr_fields(bits))
    word = encode_instruction(bits, route_0=5, mac_kw=3)
    assert word & 63 == 5
    off = sum(w for n, w in instr_fields(bits)[:instr_fields(bits).index(("mac_kw", 13))])
    assert word >> off == 3 and fields["mac_kw"] == 13
    with pytest.raises(ValueError, match="bogus"):
        encode_instruction(bits, bogus=1)
    with pytest.raises(ValueError, match="route_1 = 64"):
        encode_instruction(bits, route_1=64)


def test_mesh_params_reject_what_the_rtl_does_not_build():
    base = _arch().model_dump(mode="json")
    bad = {"core_macs_per_cycle": 8, "hop_latency_cycles": 1.5, "routing_stage_cycles": 0.0}
    for key, val in bad.items():
        engine = {**base["tensor_engine"], **({"cols": val} if key == "core_macs_per_cycle"
                                               else {})}   # a 1x8 core engine: 8 MACs/cycle
        arch = ArchSpec.from_dict({**base, "tensor_engine": engine,
                                   "mesh": {**base["mesh"], key: val}})
        with pytest.raises(ValueError, match=key):
            mesh_params(arch)
    assert mesh_params(_arch())["sram_words"] == 4096


def test_rtl_program_limits_are_clear_errors():
    arch, rng = _arch(), np.random.default_rng(0)
    with pytest.raises(MeshMappingError, match="multiple of"):
        gemv_job(arch, _i8(rng, 20), _i8(rng, (20, 8)))         # K block 5: not 4-lane packed
    # a chain reduction is not a copy: transfer_job refuses it
    pb = MeshProgramBuilder("chain", arch)
    pb.add("t", [PhaseSpec("chain", FlowBatch.make(0, 0, 2, 0, 8, stages=2))],
           np.ones((4, 4), bool))
    with pytest.raises(MeshMappingError, match="chain reduction .stages 2. is not a transfer"):
        transfer_job(arch, pb.program())


def test_programs_follow_the_model_flows():
    """Every phase's RTL messages are the model phase's flows (gemv_job/gemm_job assert it);
    MeshGEMM on 4x4: 2 align steps, 3 shift+gemm steps, 1 final gemm."""
    arch, rng = _arch(), np.random.default_rng(1)
    job, _ = gemm_job(arch, _i8(rng, (16, 16)), _i8(rng, (16, 16)))
    assert job.phase_names == ["align #0", "align #1", "shift + gemm #0", "shift + gemm #1",
                               "shift + gemm #2", "gemm #0"]
    assert [len(m) for m in job.messages] == [24, 8, 32, 32, 32, 0]
    assert len(job.instrs) == 16 and all(len(i) == 6 for i in job.instrs)


# ---- co-simulation (Verilator + cocotb) -----------------------------------------------------

@pytest.mark.verilator
@pytest.mark.slow
def test_mesh_gemv_rtl_bit_and_cycle_exact():
    from tilewright.cosim.mesh_rtl import rtl_gemv
    arch, rng = _arch(), np.random.default_rng(6)
    cases = [(_i8(rng, 64), _i8(rng, (64, 24))),           # kt = 16, nt = 6
             (_i8(rng, 45), _i8(rng, (45, 10))),           # ragged K and N (zero padding)
             (_i8(rng, 64, -128), _i8(rng, (64, 16), -128))]
    runs = rtl_gemv(arch, cases)
    for (x, w), run in zip(cases, runs):
        ref = _wrap32(x.astype(np.int64) @ w.astype(np.int64))
        np.testing.assert_array_equal(run.output, np.repeat(ref[None], 4, 0), err_msg="numpy")
        np.testing.assert_array_equal(run.output, _wrap32(execute_gemv(x, w, 4, 4)),
                                      err_msg="execute_gemv")
        assert run.rtl_cycles == run.model_cycles, (w.shape, run.rtl_cycles, run.model_cycles,
                                                    [p.cycles for p in run.model.phases])
        assert run.model_cycles == mesh_gemv(arch, *w.shape, elem_bytes=1, acc_bytes=4).cycles
        assert run.job.flit_exact, "every flit's arrival cycle == the flit model's"
    assert runs[2].output.min() == 64 * 128 * 128
    # 1-level K-tree: streaming chain reductions (stages 2 and 1) in the Verilated mesh
    x, w = cases[0]
    run, = rtl_gemv(arch, [(x, w)], levels=1)
    ktree = [t for t in run.program.tasks if "k-tree" in t.name]
    assert len(ktree) == 1 and np.asarray(run.program.constants[ktree[0].flows])[:, 4].max() == 2
    ref = _wrap32(x.astype(np.int64) @ w.astype(np.int64))
    np.testing.assert_array_equal(run.output, np.repeat(ref[None], 4, 0))
    assert run.rtl_cycles == run.model_cycles == mesh_gemv(arch, *w.shape, elem_bytes=1,
                                                           acc_bytes=4, levels=1).cycles


@pytest.mark.verilator
@pytest.mark.slow
@pytest.mark.parametrize("algo", ["mesh", "summa", "cannon"])
def test_mesh_gemm_rtl_bit_and_cycle_exact(algo):
    from tilewright.cosim.mesh_rtl import rtl_gemm
    arch, rng = _arch(), np.random.default_rng(7)
    cases = [(_i8(rng, (32, 32)), _i8(rng, (32, 32))),     # 8 x 8 x 8 blocks
             (_i8(rng, (13, 30)), _i8(rng, (30, 9))),      # ragged: 4 x 8 x 3 blocks
             (_i8(rng, (4, 64)), _i8(rng, (64, 4))),       # 1 x 16 x 1: messages outlast MACs
             (_i8(rng, (16, 16), -128), _i8(rng, (16, 16), -128))]
    runs = rtl_gemm(arch, cases, algo=algo)
    # the 1 x 16 x 1 case really exercises max(comm, compute) with comm the larger
    assert any(0 < ph.compute_cycles < ph.cycles for ph in runs[2].model.phases)
    for (a, b), run in zip(cases, runs):
        ref = _wrap32(a.astype(np.int64) @ b.astype(np.int64))
        np.testing.assert_array_equal(run.output, ref, err_msg="numpy")
        np.testing.assert_array_equal(run.output, _wrap32(execute_gemm(a, b, 4, algo)),
                                      err_msg="execute_gemm")
        assert run.rtl_cycles == run.model_cycles, ((a.shape, b.shape), run.rtl_cycles,
                                                    run.model_cycles,
                                                    [p.cycles for p in run.model.phases])
        assert run.model_cycles == mesh_gemm(arch, *a.shape, b.shape[1], algo=algo,
                                             elem_bytes=1, acc_bytes=4).cycles
        assert run.job.flit_exact, "every flit's arrival cycle == the flit model's"


# ---- the CLI face ---------------------------------------------------------------------------

def _tw(*args: str):
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path
    exe = shutil.which("tilewright")
    cmd = [exe, *args] if exe else [sys.executable, "-m", "tilewright.app.cli.main", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                          cwd=Path(__file__).resolve().parents[1],
                          env={**os.environ, "COLUMNS": "120"})


@pytest.mark.parametrize("args,needle", [
    (["gemm", "--m", "16", "--k", "16", "--n", "16", "--arch", "wse2"], "--rtl runs int8 GEMM"),
    (["gemv", "--k", "20", "--n", "8"], "multiple of the flit's 4 int8"),
    (["gemv", "--k", "20", "--n", "8", "--elem-bytes", "2"], "compute in tensor_engine.input_"),
    (["gemv", "--k", "64", "--n", "8", "--arch", "{big}"], "at most 64 tiles"),
])
def test_cli_rtl_user_errors(args, needle, tmp_path):
    """--rtl's bad input raises MeshMappingError (one of the CLI's user errors: `error: ...`,
    exit 2), before any Verilator build."""
    import typer
    import yaml
    from typer.testing import CliRunner

    from tilewright.app.cli.main import _user_errors
    from tilewright.app.cli.mesh import mesh
    app = typer.Typer()
    app.command("mesh")(mesh)
    app.command("noop")(lambda: None)
    big = load_arch("mesh4x4").model_dump(mode="json", exclude_none=True)
    big["mesh"].update(rows=9, cols=8)              # 72 int8 tiles: beyond the RTL mesh's 64
    (tmp_path / "big.yaml").write_text(yaml.safe_dump(big))
    args = [a.replace("{big}", str(tmp_path / "big.yaml")) for a in args]
    arch = [] if "--arch" in args else ["--arch", "mesh4x4"]
    res = CliRunner().invoke(app, ["mesh", *args, *arch, "--rtl"])
    assert isinstance(res.exception, MeshMappingError), res.output
    assert isinstance(res.exception, _user_errors()) and needle in str(res.exception)


@pytest.mark.verilator
@pytest.mark.slow
def test_cli_mesh_rtl_prints_model_and_rtl_cycles():
    import json
    proc = _tw("mesh", "gemm", "--arch", "mesh4x4", "--m", "16", "--k", "32", "--n", "16",
               "--elem-bytes", "1", "--rtl", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    d = json.loads(proc.stdout.strip().splitlines()[-1])["rtl"]
    assert d["bit_exact"] is True and d["rtl_cycles"] == d["model_cycles"] > 0


@pytest.mark.verilator
def test_mesh_verilog_is_lint_clean():
    from tilewright.cosim.build import build
    from tilewright.cosim.verilator import lint
    ok, out = lint(build("mesh", _arch()))
    assert ok, out[-3000:]


def test_phase_builder_rejects_what_the_rtl_cannot_route():
    """A third ejection or a third injection at one tile, and more route ids than a core holds,
    are clear errors (forks and merges are not: the routers arbitrate)."""
    from tilewright.compiler.mesh_codegen import _PhaseBuilder
    b = _PhaseBuilder(4, 4, "fork")
    b.send((0, 0), 0, 4, [((0, 2), False, 0, False)])
    b.send((0, 1), 8, 4, [((0, 3), False, 8, False)])      # shares (0,1)->(0,2), then goes on
    b.route(8)
    with pytest.raises(MeshMappingError, match="max_routes_per_core = 1"):
        b.route(1)
    b = _PhaseBuilder(4, 4, "lanes")
    b.send((0, 0), 0, 1, [((1, 1), False, 0, False)])   # XY: east, then south into (1,1)
    b.send((1, 0), 0, 1, [((1, 1), False, 4, False)])   # from the west
    b.send((1, 2), 0, 1, [((1, 1), False, 8, False)])   # from the east
    with pytest.raises(MeshMappingError, match="third ej lane"):
        b.route(8)
    b.send((3, 3), 0, 1, [((3, 0), False, 0, False)])
    b.send((3, 3), 0, 1, [((0, 3), False, 0, False)])
    with pytest.raises(MeshMappingError, match="third inj lane"):
        b.send((3, 3), 0, 1, [((2, 3), False, 0, False)])


@pytest.mark.parametrize("algo", ["mesh", "cannon", "summa"])
def test_gemm_program_costs_what_the_model_predicts(algo, tmp_path):
    """compiler.mesh_ops emits one GEMM as a mesh Program; run_mesh_program on it (also after
    a save/load round trip) equals the model's own mesh_gemm, on 4x4 and on a 7x5 mesh with
    ragged blocks and 2-byte elements."""
    from tilewright.compiler.mesh_ops import gemm_program
    from tilewright.compiler.program import Program
    base = _arch().model_dump(mode="json")
    odd = ArchSpec.from_dict({**base, "name": "mesh7x5", "mesh": {**base["mesh"], "rows": 7,
                                                                  "cols": 5}})
    for arch, (m, k, n), eb, acc in ((_arch(), (32, 32, 32), 1, 4), (odd, (13, 30, 9), 2, 2)):
        prog = gemm_program(arch, m, k, n, algo=algo, elem_bytes=eb, acc_bytes=acc)
        prog.save(tmp_path / arch.name)
        back = Program.load(tmp_path / arch.name)
        want = mesh_gemm(arch, m, k, n, algo=algo, elem_bytes=eb, acc_bytes=acc)
        assert run_mesh_program(prog, arch).cycles == run_mesh_program(back, arch).cycles \
            == want.cycles
        assert sum(t.useful_macs for t in prog.tasks) == m * k * n


def test_gemv_program_costs_what_the_model_predicts():
    from tilewright.compiler.mesh_ops import gemv_program
    arch = _arch()
    for k, n, levels in ((64, 24, 2), (45, 10, 2), (16, 8, 1)):
        prog = gemv_program(arch, k, n, levels=levels)
        assert run_mesh_program(prog, arch).cycles == mesh_gemv(
            arch, k, n, elem_bytes=1, acc_bytes=4, levels=levels).cycles
    prog = gemv_program(arch, 64, 24, algo="allreduce")
    assert run_mesh_program(prog, arch).cycles == mesh_gemv(
        arch, 64, 24, algo="allreduce", elem_bytes=1, acc_bytes=4).cycles


def test_mesh_op_programs_reject_bad_input_clearly():
    from tilewright.compiler.mesh_ops import gemm_program, gemv_program
    from tilewright.compiler.mesh_schedule import MeshScheduleError
    arch, rng = _arch(), np.random.default_rng(2)
    with pytest.raises(MeshScheduleError, match="GEMM algo 'bogus'"):
        gemm_program(arch, 4, 4, 4, algo="bogus")
    with pytest.raises(MeshScheduleError, match="dimension k = 0"):
        gemv_program(arch, 0, 4)
    a, w = _i8(rng, (16, 16)), _i8(rng, (16, 16))
    with pytest.raises(MeshMappingError, match="not a single-gemm mesh Program"):
        gemm_job(arch, a, w, program=gemv_program(arch, 16, 16))
    with pytest.raises(MeshMappingError, match="m = 16 but the operands need 8"):
        gemm_job(arch, a[:8], w, program=gemm_program(arch, 16, 16, 16))
    with pytest.raises(MeshMappingError, match="elem_bytes 1, acc_bytes 4"):
        gemm_job(arch, a, w, program=gemm_program(arch, 16, 16, 16, elem_bytes=2))
    with pytest.raises(MeshMappingError, match="runs 'mesh'"):
        gemv_job(arch, a[0], w, program=gemv_program(arch, 16, 16, algo="allreduce"))


def _contend_program(arch: ArchSpec, alpha: int = 1):
    """Phases built to contend (4x4, alpha = beta = 1, FIFOs of 3): two messages into (0, 3)
    along row 0, two messages on one whole path, two merging in column 2. Returns the Program,
    each phase's model closed form — worst alpha*hops + beta plus the flits the busiest link
    carries — and each phase's RTL time worked out by hand from the round-robin rule."""
    b = MeshProgramBuilder("contend", arch)
    specs = [
        # (0,0)->(0,3): 3 hops, 4 flits; (0,1)->(0,3): 2 hops, 6 flits; both on (0,1)->(0,2).
        # RTL: (0,1)'s injection takes that link in cycle 0, (0,0)'s first flit reaches it in
        # cycle 1; round-robin alternates the two, so the link carries all 10 flits in cycles
        # 0..9, the last one 2 hops + eject later: 10 + 2 + 1. The model's rule: 3 + 1 + 10.
        (PhaseSpec("two into (0,3)", FlowBatch.make([0, 0], [0, 1], [0, 0], [3, 3], [16, 24])),
         alpha * 3 + 1 + 4 + 6, 10 + 2 + 1),
        # twice (1,0)->(3,2): 4 hops, 2 + 5 flits on every link; RTL: the two injection lanes
        # alternate, 7 flits back to back: 4 + 1 + 7, the model's rule exactly
        (PhaseSpec("one path twice", FlowBatch.make([1, 1], [0, 0], [3, 3], [2, 2], [8, 20])),
         alpha * 4 + 1 + 2 + 5, 4 + 1 + 7),
        # (0,2)->(3,2): 3 hops, 4 flits; (2,3)->(3,2): 2 hops, 1 flit; both on (2,2)->(3,2).
        # RTL: the 1 flit crosses that link in cycle 1, before (0,2)'s first arrives (cycle 2),
        # so nothing waits: 3 + 1 + 4; the model's rule serializes all 5 flits after the worst
        # latency — an upper bound here
        (PhaseSpec("merge into column 2", FlowBatch.make([0, 2], [2, 3], [3, 3], [2, 2],
                                                          [16, 4])),
         alpha * 3 + 1 + 5, 3 + 1 + 4),
    ]
    b.add("contend", [s for s, _, _ in specs], np.ones((arch.mesh.rows, arch.mesh.cols), bool))
    return b.program(), [c for _, c, _ in specs], [r for _, _, r in specs]


def test_flit_model_meets_the_hand_worked_arbitration():
    """The flit model (the RTL's round-robin rule in Python) gives the hand-worked phase times;
    the closed-form model is exact for the second phase and an upper bound for the others."""
    from tilewright.dataflow_sim.mesh.flit_sim import simulate_job
    arch = _arch()
    prog, closed, rtl = _contend_program(arch)
    job, _ = transfer_job(arch, prog)
    assert simulate_job(job, arch).phase_cycles == rtl
    assert [p.cycles for p in run_mesh_program(prog, arch).ops[0][1].phases] == closed
    assert closed[1] == rtl[1] and closed[0] > rtl[0] and closed[2] > rtl[2]


def test_contention_in_amaranth_sim():
    """Link sharing in the RTL (Amaranth simulator, 4x4): every message delivered intact; every
    flit ejected in the cycle the flit model predicts; busy cycles = the hand-worked times."""
    from tilewright.cosim.mesh_pysim import run_mesh_job_pysim
    from tilewright.dataflow_sim.mesh.flit_sim import simulate_job
    arch = _arch()
    prog, closed, rtl = _contend_program(arch)
    job, expect = transfer_job(arch, prog, seed=3)
    res = run_mesh_job_pysim(arch, job)
    for key, words in expect.items():
        assert [int(w) for w in res["reads"][key][0]] == [int(w) for w in words], key
    flit = simulate_job(job, arch)
    assert res["arrivals"] == flit.arrivals and len(res["arrivals"]) == 4 + 6 + 2 + 5 + 4 + 1
    assert res["cycles"] == flit.cycles == sum(rtl), (res["cycles"], rtl, closed)


@pytest.mark.verilator
@pytest.mark.slow
def test_contention_rtl_cycle_exact():
    """The contending phases on the Verilated 4x4 mesh: data intact, every flit's arrival cycle
    and the total == the flit model == the hand-worked round-robin times; the closed-form
    model is exact where the hand-worked time says so (the second phase alone)."""
    from tilewright.cosim.mesh_rtl import rtl_jobs
    arch = _arch()
    prog, closed, rtl = _contend_program(arch)
    two = prog.model_copy(update={"tasks": prog.tasks[1:2]})
    built = [transfer_job(arch, p, seed=5) for p in (two, prog)]
    runs = rtl_jobs(arch, [j for j, _ in built])
    for (job, expect), r in zip(built, runs):
        assert r.flit_exact, (r.rtl_cycles, r.flit.cycles)
        for key, words in expect.items():
            assert [int(w) for w in r.reads[key][0]] == [int(w) for w in words], key
    assert runs[0].rtl_cycles == run_mesh_program(two, arch).cycles == closed[1] == rtl[1]
    assert runs[1].rtl_cycles == sum(rtl) < run_mesh_program(prog, arch).cycles == sum(closed)


def test_rectangular_mesh_with_slower_hops_in_amaranth_sim():
    """2x3 mesh, alpha = 2 link registers per hop, beta = 3 eject registers: the same RTL
    generator, run in Amaranth's simulator, is still bit-exact and cycle-exact vs the model."""
    from tilewright.compiler.mesh_codegen import gemm_job, gemv_job
    from tilewright.cosim.mesh_pysim import run_mesh_job_pysim
    from tilewright.dataflow_sim.mesh import mesh_gemm, mesh_gemv
    base = _arch().model_dump(mode="json")
    arch = ArchSpec.from_dict({**base, "name": "mesh2x3-slow", "mesh": {
        **base["mesh"], "rows": 2, "cols": 3, "core_sram_kib": 0.5,
        "hop_latency_cycles": 2.0, "routing_stage_cycles": 3.0}})
    rng = np.random.default_rng(11)
    x, w = _i8(rng, 16), _i8(rng, (16, 7))
    job, prog = gemv_job(arch, x, w)
    res = run_mesh_job_pysim(arch, job)
    assert res["cycles"] == run_mesh_program(prog, arch).cycles
    got = np.array([unpack_int32(v) for v in res["reads"]["y"]]).reshape(2, -1)[:, :7]
    ref = _wrap32(x.astype(np.int64) @ w.astype(np.int64))
    np.testing.assert_array_equal(got, np.repeat(ref[None], 2, 0))
    assert res["cycles"] == mesh_gemv(arch, 16, 7, elem_bytes=1, acc_bytes=4).cycles
    a, b = _i8(rng, (3, 16)), _i8(rng, (16, 5))
    job, _ = gemm_job(arch, a, b)                       # a 2x2 grid of the 2x3 mesh
    res = run_mesh_job_pysim(arch, job)
    blocks = np.array([unpack_int32(v) for v in res["reads"]["C"]]).reshape(2, 2, 2, 3)
    got = blocks.transpose(0, 2, 1, 3).reshape(4, 6)[:3, :5]
    np.testing.assert_array_equal(got, _wrap32(a.astype(np.int64) @ b.astype(np.int64)))
    assert res["cycles"] == mesh_gemm(arch, 3, 16, 5, elem_bytes=1, acc_bytes=4).cycles


@pytest.mark.parametrize("rows,alpha,beta", [(7, 2, 3)])      # 4x4, alpha = beta = 1: Verilator
def test_streaming_chain_reduction_in_amaranth_sim(rows, alpha, beta):
    """1-level K-tree: each column's halves stream through every core to the root (stages =
    hops), each core adding its partial sums in its eject stage. 7x2 with alpha = 2, beta = 3
    (two chains of 3 stages, reaching the root in lockstep): bit-exact vs numpy and the schedule's execution; cycles == run_mesh_program on
    the same Program == mesh_gemv, and the k-tree phase == alpha*h + beta*stages + W by hand."""
    from tilewright.cosim.mesh_pysim import run_mesh_job_pysim
    base = _arch().model_dump(mode="json")
    arch = ArchSpec.from_dict({**base, "name": f"mesh{rows}x4", "mesh": {
        **base["mesh"], "rows": rows, "cols": 4 if rows == 4 else 2, "core_sram_kib": 0.25,
        "hop_latency_cycles": float(alpha), "routing_stage_cycles": float(beta)}})
    cols = arch.mesh.cols
    rng = np.random.default_rng(rows)
    k, n = 8 * rows, 3 * cols
    x, w = _i8(rng, k), _i8(rng, (k, n))
    job, prog = gemv_job(arch, x, w, levels=1)
    chains = [m for m in job.messages[2] if m[5] > 1]
    assert chains and all(m[5] == abs(m[2] - m[0]) for m in chains)
    res = run_mesh_job_pysim(arch, job)
    got = np.array([unpack_int32(v) for v in res["reads"]["y"]]).reshape(rows, -1)[:, :n]
    ref = _wrap32(x.astype(np.int64) @ w.astype(np.int64))
    np.testing.assert_array_equal(got, np.repeat(ref[None], rows, 0))
    np.testing.assert_array_equal(got, _wrap32(execute_gemv(x, w, rows, cols, levels=1)))
    model = run_mesh_program(prog, arch)
    assert res["cycles"] == model.cycles == mesh_gemv(arch, k, n, elem_bytes=1, acc_bytes=4,
                                                      levels=1).cycles
    h = max(abs(m[2] - m[0]) for m in chains)              # the longest chain: h hops = stages
    assert model.ops[0][1].phases[2].cycles == alpha * h + beta * h + 3     # W = nt = 3 flits


@pytest.mark.parametrize("rows", [5, 9])
def test_ktree_roots_adding_two_halves_in_amaranth_sim(rows):
    """K-tree groups whose two halves reach the root together (9 rows: groups of 3, both
    halves 1 and then 3 hops away — the root adds two flits per cycle) or offset (5 rows:
    the last level's halves are 2 and 1 hops away): bit-exact and cycle-exact."""
    from tilewright.compiler.mesh_codegen import gemv_job
    from tilewright.cosim.mesh_pysim import run_mesh_job_pysim
    from tilewright.dataflow_sim.mesh import mesh_gemv
    base = _arch().model_dump(mode="json")
    arch = ArchSpec.from_dict({**base, "name": f"mesh{rows}x2", "mesh": {
        **base["mesh"], "rows": rows, "cols": 2, "core_sram_kib": 0.25}})
    rng = np.random.default_rng(rows)
    k = 4 * rows
    x, w = _i8(rng, k), _i8(rng, (k, 6))
    job, prog = gemv_job(arch, x, w)
    assert sum("k-tree" in t.name for t in prog.tasks) == 2
    res = run_mesh_job_pysim(arch, job)
    got = np.array([unpack_int32(v) for v in res["reads"]["y"]]).reshape(rows, -1)
    ref = _wrap32(x.astype(np.int64) @ w.astype(np.int64))
    np.testing.assert_array_equal(got, np.repeat(ref[None], rows, 0))
    np.testing.assert_array_equal(got, _wrap32(execute_gemv(x, w, rows, 2)))
    assert res["cycles"] == mesh_gemv(arch, k, 6, elem_bytes=1, acc_bytes=4).cycles
