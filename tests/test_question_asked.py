"""Every run answers the question asked or refuses (issue: every answer is to the question asked).

Before: ``sim --rtl --top accel`` on an fp8-e4m3 ArchSpec compiled the layer to int8, ran an int8
accelerator and printed "all cross-checks passed"; ``demo --arch <fp8>`` printed an fp8 header
and ran int8; ``mesh --rtl`` printed cycle- and bit-exactness as True/False and exited 0 either
way.
"""

from __future__ import annotations

import pytest

from tests.test_cli import tw
from tilewright.arch import ArchSpec, ArchSpecError

FP8 = {"name": "fp8-8x8", "tensor_engine": {
    "rows": 8, "cols": 8, "dataflow": "ws", "input_format": "fp8-e4m3",
    "weight_format": "fp8-e4m3", "accumulator_format": "fp32"}}


#: a format `tilewright sim` does not run (fp8 and MX run since issue 20; fp32 operands do not)
FP32 = {"name": "fp32-8x8", "tensor_engine": {
    "rows": 8, "cols": 8, "dataflow": "ws", "input_format": "fp32",
    "weight_format": "fp32", "accumulator_format": "fp32"}}
#: an MX design: its GEMMs run on the accelerator top's MX core only
MX = {"name": "mx-32x8", "tensor_engine": {
    "rows": 32, "cols": 8, "dataflow": "ws", "input_format": "mxfp8",
    "weight_format": "mxfp8", "accumulator_format": "fp32"}}


def test_sim_refuses_a_design_in_a_format_it_would_replace():
    from tilewright.app.flows.sim_rtl import simulate_model
    arch = ArchSpec.from_dict(FP32)
    for rtl in (False, True):
        with pytest.raises(ArchSpecError, match=r"tensor_engine.input_format = 'fp32'.*"
                                                r"accepted: int8, bf16, fp8-e4m3, fp8-e5m2, "
                                                r"mxint8, mxfp8, mxfp8-e5m2"):
            simulate_model("tiny-llama", arch, rtl=rtl, top="accel")


def test_demo_refuses_a_design_that_is_not_int8():
    from tilewright.app.flows.demo import demo_result
    with pytest.raises(ArchSpecError, match="input_format/weight_format = fp8-e4m3/fp8-e4m3"):
        demo_result(arch=ArchSpec.from_dict(FP8))


def test_cli_sim_unrun_format_and_mx_off_the_accelerator_exit_2_one_line(tmp_path):
    for spec, rtl, needle in ((FP32, (), "input_format = 'fp32'"),
                              (FP32, ("--rtl", "--top", "accel"), "formats fp32 -> fp32"),
                              (MX, ("--rtl",), "MX core (tilewright.rtl.mx_core): needs --top "
                                               "accel")):
        p = tmp_path / f"{spec['name']}.yaml"
        p.write_text(ArchSpec.from_dict(spec).to_yaml())
        res = tw("sim", "--model", "tiny-llama", "--arch", str(p), *rtl)
        assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
        assert needle in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("rtl_result,code", [
    ({"model_cycles": 100, "rtl_cycles": 100, "bit_exact": True}, 0),
    ({"model_cycles": 100, "rtl_cycles": 101, "bit_exact": True}, 1),
    ({"model_cycles": 100, "rtl_cycles": 100, "bit_exact": False}, 1),
])
@pytest.mark.parametrize("as_json", [False, True])
def test_mesh_rtl_check_that_fails_exits_1(monkeypatch, rtl_result, code, as_json):
    import typer
    from typer.testing import CliRunner

    import tilewright.app.cli.mesh as cli_mesh
    monkeypatch.setattr(cli_mesh, "_rtl_check", lambda *a, **k: dict(rtl_result))
    app = typer.Typer()
    app.command("mesh")(cli_mesh.mesh)
    app.command("noop")(lambda: None)
    args = ["mesh", "gemm", "--arch", "mesh4x4", "--m", "16", "--k", "32", "--n", "16",
            "--elem-bytes", "1", "--rtl"] + (["--json"] if as_json else [])
    res = CliRunner().invoke(app, args)
    assert res.exit_code == code, res.output


@pytest.mark.parametrize("args,needle", [
    (["compile", "--model", "tiny-llama", "--arch", "ws8x8", "--phase", "decode", "--seq", "512"],
     "tiny-llama: --seq 512 needs 512 positions (context: seq - 1 cached + 1 new token); the "
     "config's context is max_seq_len = 256"),
    (["sim", "--model", "tiny-llama", "--arch", "ws8x8", "--seq", "300"],
     "--seq 300 needs 300 positions (prompt tokens)"),
    (["demo", "--model", "tiny-llama"], "unknown model config 'tiny-llama'; known: mlp-small"),
])
def test_inputs_beyond_a_models_limits_exit_2_one_line(args, needle):
    """Before: tracebacks from inside torch.export (the context) and the MLP config table."""
    res = tw(*args)
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert needle in res.stderr and "Traceback" not in res.stderr


def test_a_sequence_beyond_this_machines_memory_is_refused_before_allocation():
    """Before: tiny-mamba at --seq 1e9 tried to allocate 256 GB and died in torch's allocator."""
    from tilewright.models.llm_configs import ModelInputError, build_llm
    with pytest.raises(ModelInputError, match=r"--seq 1000000000 x --batch 1 needs about "
                                              r"[\d,]+ GiB .* this machine has [\d,]+ GiB"):
        build_llm("tiny-mamba", seq=10**9)


def test_cli_rtl_of_a_format_the_rtl_does_not_build_exit_2(tmp_path):
    """Before: a traceback (ValueError from the generator). (fp8 and MX are built on a WS array
    since issue 20; not on an OS one.)"""
    p = tmp_path / "fp8os.yaml"
    p.write_text(ArchSpec.from_dict({"name": "fp8-os8x8", "tensor_engine": {
        **FP8["tensor_engine"], "dataflow": "os"}}).to_yaml())
    res = tw("rtl", "--arch", str(p), "-o", str(tmp_path / "out"))
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "tensor_engine formats fp8-e4m3 -> fp32 on the os systolic array" in res.stderr
    assert not (tmp_path / "out").exists()
