"""The main job, end to end, exactly as the README promises: `tilewright demo` exits 0 and prints
the summary (every cross-check PASS). Runs the real compiler, Verilator build and cocotb bench."""

from __future__ import annotations

import pytest

from tests.test_cli import tw


@pytest.mark.verilator
@pytest.mark.slow
def test_tilewright_demo_end_to_end():
    proc = tw("demo", timeout=1200)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    for needle in ("cross-checks", "RTL cycles == cycle model", "RTL GEMM outputs == functional",
                   "functional == torch integer", "wall time per stage", "all cross-checks passed"):
        assert needle in out, needle
    assert "FAIL" not in out


@pytest.mark.verilator
def test_demo_fails_when_a_cross_check_fails(monkeypatch):
    """The demo's checks can fail: a cycle model that is off by one cycle makes it report FAIL."""
    from rich.console import Console

    import tilewright.dataflow_sim.cycle as cycle
    from tilewright.app.flows.demo import demo_result

    real = cycle.tensor_engine_gemm_cycles       # what cycle.gemm_report calls

    def off_by_one(*args, **kwargs):
        cycles, folds = real(*args, **kwargs)
        return cycles + 1, folds

    monkeypatch.setattr(cycle, "tensor_engine_gemm_cycles", off_by_one)
    result = demo_result(console=Console(file=open("/dev/null", "w")))
    assert not result.ok
    failed = [name for name, ok, _ in result.checks if not ok]
    assert failed == ["RTL cycles == cycle model (every GEMM)"]


@pytest.mark.verilator
def test_demo_fails_when_an_rtl_record_is_missing(monkeypatch):
    """The per-GEMM cycle check pairs RTL records with the model's rows: one record fewer must
    fail it (a pairing by zip alone would compare the rest and pass)."""
    from rich.console import Console

    import tilewright.cosim.sim as sim
    from tilewright.app.flows.demo import demo_result

    real = sim.run

    def drop_last(*args, **kwargs):
        res = real(*args, **kwargs)
        res.records = res.records[:-1]
        return res

    monkeypatch.setattr(sim, "run", drop_last)
    result = demo_result(console=Console(file=open("/dev/null", "w")))
    failed = [name for name, ok, _ in result.checks if not ok]
    assert not result.ok and failed == ["RTL cycles == cycle model (every GEMM)"]


@pytest.mark.verilator
@pytest.mark.slow
def test_demo_json_is_one_document_with_every_check():
    """`demo --json`: stdout is one JSON document (progress went to stderr), every check passed,
    and there is one GEMM per nn.Linear of the model that torch builds for the same name."""
    import json

    from torch import nn

    from tilewright.models.configs import build

    proc = tw("demo", "--json", timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["ok"] is True and doc["model"] == "mlp-tiny"
    names = [c["check"] for c in doc["checks"]]
    assert "RTL cycles == cycle model (every GEMM)" in names
    assert all(c["ok"] for c in doc["checks"]), doc["checks"]
    module, _ = build("mlp-tiny")
    linears = [m for m in module.modules() if isinstance(m, nn.Linear)]
    assert len(doc["gemms"]) == len(linears)
    assert set(doc["stage_seconds"]) and all(v >= 0 for v in doc["stage_seconds"].values())
