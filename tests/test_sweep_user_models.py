"""Sweep workloads take a user module (issue 14: every model form wherever a model is named):
``path/file.py:factory`` and an ``.onnx`` file, costed whole by what ``compile`` calls for them;
the shape fields of an LLM config (seq, batch, phase, layers) are refused on such a workload in
one line naming the sweep file and field, exit status 2; ``cluster`` and ``mesh-layer`` refuse a
user module in one line saying a decoder LLM's shapes are needed.

References: ``tilewright compile --json``'s totals of the same module on the same design (the
figures the sweep must reproduce), and the MACs of the module's GEMMs by hand
(4x32x64 + 4x64x16 = 12,288 for the factory MLP; 2x8x16 + 2x16x4 = 384 for the ONNX MLP).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

from tests.test_cli import tw_here
from tests.test_sim_inputs import ARCH, MLP_FACTORY
from tilewright.app.sweep import load_sweep
from tilewright.app.sweep.evaluate import evaluate_point, workload_report
from tilewright.app.sweep.report import _wl_title

REPO = Path(__file__).resolve().parents[1]

SWEEP = """name: user-model
base: {arch}
axes:
  offchip.bandwidth_gbps: [16.0]
workloads:
  - {{model: {model}{extra}}}
objectives: [latency]
"""


def _sweep_file(tmp_path: Path, model: str, extra: str = "") -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(SWEEP.format(arch=ARCH, model=model, extra=extra))
    return path


def _onnx(tmp_path: Path) -> Path:
    pytest.importorskip("onnx")
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                            torch.nn.Linear(16, 4)).eval()
    path = tmp_path / "m.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")               # the TorchScript exporter's deprecation
        torch.onnx.export(m, (torch.randn(2, 8),), str(path), dynamo=False)
    return path


def _agree(tmp_path, capsys, model_in_file: str, model_for_compile: str, macs: int) -> None:
    spec = load_sweep(_sweep_file(tmp_path, model_in_file))
    (w,) = spec.workloads_for()
    assert w["model"].startswith(str(tmp_path.resolve()))   # found beside the sweep file
    r = evaluate_point(spec.base.model_dump(mode="json", exclude_none=True), [w], "45nm")
    assert r["status"] == "ok", r.get("error")
    code, out, err = tw_here(capsys, "compile", "--model", model_for_compile, "--arch", ARCH,
                          "--json")
    assert code == 0, err
    layer = json.loads(out)["layer"]
    m = r["metrics"]
    assert (m["w0:cycles"], m["w0:macs"], m["w0:dram_bytes"]) == \
        (layer["total_cycles"], layer["macs"], layer["bytes"])
    assert m["w0:macs"] == macs                       # the GEMMs counted by hand
    # the sweep report's per-op breakdown: the same module, titled without config shape fields
    assert workload_report(spec.base, w)["macs"].sum() == macs
    assert "seq=" not in _wl_title(w) and "its example inputs" in _wl_title(w)


def test_factory_workload_costs_as_compile(tmp_path, capsys):
    (tmp_path / "net.py").write_text(MLP_FACTORY)
    _agree(tmp_path, capsys, "net.py:make", str(tmp_path / "net.py") + ":make",
           4 * 32 * 64 + 4 * 64 * 16)


def test_onnx_workload_costs_as_compile(tmp_path, capsys):
    path = _onnx(tmp_path)
    _agree(tmp_path, capsys, path.name, str(path), 2 * 8 * 16 + 2 * 16 * 4)


@pytest.mark.parametrize("extra,field", [(", seq: 64", "seq"), (", phase: decode", "phase"),
                                         (", layers: all", "layers"), (", batch: 2", "batch")])
def test_config_fields_on_a_user_module_refused(tmp_path, capsys, extra, field):
    (tmp_path / "net.py").write_text(MLP_FACTORY)
    path = _sweep_file(tmp_path, "net.py:make", extra)
    code, out, err = tw_here(capsys, "sweep", str(path), "--db", str(tmp_path / "s.db"))
    assert code == 2, out + err
    assert f"{path}: workloads[0].{field} = " in err and "user module" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "s.db").exists()


def test_bad_factory_in_a_sweep_one_line(tmp_path, capsys):
    (tmp_path / "net.py").write_text(MLP_FACTORY)
    path = _sweep_file(tmp_path, "net.py:broken")
    code, out, err = tw_here(capsys, "sweep", str(path), "--db", str(tmp_path / "s.db"))
    assert code == 2, out + err
    assert f"{path}: workloads[0].model: " in err and "no weights here" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("cmd", [
    ["cluster", "--cluster", "h100-8x-nvlink"],
    ["mesh-layer", "--arch", str(REPO / "configs" / "mesh4x4.yaml")]])
def test_cluster_and_mesh_layer_refuse_a_user_module(tmp_path, capsys, cmd):
    (tmp_path / "net.py").write_text(MLP_FACTORY)
    model = str(tmp_path / "net.py") + ":make"
    code, out, err = tw_here(capsys, *cmd, "--model", model)
    assert code == 2, out + err
    assert "a user module has no LLM config" in err and "decoder LLM's shapes" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_cluster_workload_of_a_user_module_refused(tmp_path, capsys):
    (tmp_path / "net.py").write_text(MLP_FACTORY)
    path = tmp_path / "sweep.yaml"
    path.write_text("name: c\nbase: ws16x16\naxes:\n  plan.tp: [1]\nworkloads:\n"
                    "  - {cluster: h100-8x-nvlink, model: net.py:make, plan: {dp: auto}}\n"
                    "objectives: [latency]\n")
    code, out, err = tw_here(capsys, "sweep", str(path), "--db", str(tmp_path / "s.db"))
    assert code == 2, out + err
    assert f"{path}: workloads[0]: model = net.py:make: a user module has no LLM config" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_resume_refuses_when_the_model_file_changed(tmp_path):
    """A stored point of a factory workload depends on the module's code, not only on its path:
    after the user edits ``net.py``, ``--resume`` on the same database is refused (the definition
    changed) instead of returning the old module's figures."""
    from tilewright.app.sweep import run_sweep  # noqa: PLC0415  (lazy: the sweep runner)
    from tilewright.app.sweep.runner import SweepError  # noqa: PLC0415  (lazy: the sweep runner)

    net = tmp_path / "net.py"
    net.write_text(MLP_FACTORY)
    path = _sweep_file(tmp_path, "net.py:make")
    db = tmp_path / "r.db"
    first = run_sweep(load_sweep(path), db, workers=1)
    assert first.evaluated == 1
    same = run_sweep(load_sweep(path), db, workers=1, resume=True)
    assert (same.evaluated, same.reused) == (0, 1)           # unchanged file: reused
    net.write_text(MLP_FACTORY.replace("64", "96"))          # a wider hidden layer
    with pytest.raises(SweepError, match="workloads changed"):
        run_sweep(load_sweep(path), db, workers=1, resume=True)
