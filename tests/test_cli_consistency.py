"""One CLI: the same flag for the same thing in every command (issue 21, item 4).

The reference is the table below, written by hand from docs/design.md "CLI conventions" — not
read from the code: each concept's canonical spelling, and the other spellings it had (allowed
only as a declared deprecated alias, which the command rewrites with one warning line).
"""

from __future__ import annotations

import json
from importlib.metadata import version

import pytest
import typer
from typer.testing import CliRunner

from tilewright.app.cli import (DEPRECATED_FLAGS, DEPRECATED_POSITIONAL, DEPRECATED_VALUES,
                                canonical_args)
from tilewright.app.cli.main import app

#: concept -> (canonical long flag, its accepted short aliases, spellings it must never take)
CONCEPTS = {
    "GEMM rows of A": ("--m", {"-m"}, set()),
    "GEMM contraction": ("--k", {"-k"}, set()),
    "GEMM columns of B": ("--n", {"-n"}, set()),
    "sequence length (prefill prompt / training sequence)":
        ("--seq", set(), {"--seq-len", "--tokens", "--seq-length", "--sequence-length"}),
    "model config": ("--model", set(), {"--model-name"}),
    "ArchSpec": ("--arch", set(), {"--arch-file", "--spec"}),
    "top to generate": ("--top", set(), {"--top-level"}),
    "FPGA target family": ("--target", set(), {"--fpga", "--part-family"}),
    "output folder": ("--out", {"-o"}, {"--output", "--out-dir"}),
    "JSON output": ("--json", set(), {"--as-json", "--json-out"}),
}
#: flags a command takes for another concept than the one that forbids the spelling: ``generate
#: --tokens`` is the count of tokens to generate (issue 18's spelling), not a sequence length
#: (generate's prompt is ``--prompt-ids``)
OTHER_CONCEPT = {("generate", "--tokens"): "tokens to generate"}
#: the canonical names of the tops (rtl, sim, fpga) and of the Xilinx 7-series target family
TOP_NAMES = {"core", "axi-core", "accel", "axi-accel", "uart-accel"}
#: the old spellings that still work for one release, as docs/design.md lists them
OLD_SPELLINGS = {
    ("cluster", "--seq-len"): "--seq",
    ("mesh-layer", "--tokens"): "--seq",
}
OLD_VALUES = {
    ("fpga", "--top", "gemm"): "core",
    ("fpga", "--top", "axi"): "axi-core",
    ("rtl", "--synth", "xilinx"): "xc7",
}


def _commands() -> dict[str, object]:
    return typer.main.get_command(app).commands


def _flags(cmd) -> dict[str, object]:
    """Every option spelling of ``cmd`` -> its click parameter."""
    return {o: p for p in cmd.params if p.param_type_name == "option"
            for o in (*p.opts, *p.secondary_opts)}


def test_every_command_is_listed():
    assert set(_commands()) == {"arch", "cycles", "compile", "sim", "rtl", "fpga", "mesh",
                                "mesh-layer", "cluster", "sweep", "report", "models", "demo",
                                "generate"}


@pytest.mark.parametrize("concept", sorted(CONCEPTS))
def test_each_concept_is_spelled_one_way(concept):
    canon, shorts, never = CONCEPTS[concept]
    for name, cmd in _commands().items():
        flags = _flags(cmd)
        clash = {f for f in never & set(flags) if (name, f) not in OTHER_CONCEPT}
        assert not clash, f"{name}: {clash} (use {canon})"
        if canon in flags:       # its short aliases, where present, name the same parameter
            for s in shorts & set(flags):
                assert flags[s] is flags[canon], f"{name}: {s} is not an alias of {canon}"
        for s in shorts & set(flags):
            assert canon in flags, f"{name}: short {s} without its long form {canon}"


def test_gemm_dims_long_and_short_everywhere():
    """cycles and mesh both take --m/--k/--n and -m/-k/-n (each rejected the other's before)."""
    for name in ("cycles", "mesh"):
        flags = _flags(_commands()[name])
        for d in "mkn":
            assert flags[f"--{d}"] is flags[f"-{d}"], name


def test_model_is_an_option_everywhere():
    for name, cmd in _commands().items():
        args = [p.name for p in cmd.params if p.param_type_name == "argument"]
        assert "model" not in args, f"{name}: MODEL is positional; use --model"
    assert DEPRECATED_POSITIONAL == {"mesh-layer": "--model"}


def test_old_spellings_are_declared_not_declared_as_flags():
    assert {(c, o): n for c, m in DEPRECATED_FLAGS.items() for o, n in m.items()} == OLD_SPELLINGS
    assert {(c, o, v): n for (c, o), m in DEPRECATED_VALUES.items()
            for v, n in m.items()} == OLD_VALUES
    for (name, old), new in OLD_SPELLINGS.items():
        flags = _flags(_commands()[name])
        assert old not in flags and new in flags, name


def test_tops_use_one_set_of_names():
    """sim's tops are canonical names; every top the FPGA flow registers is reached from a
    canonical name through `fpga --top` (gemm/axi are the flow's own, internal names)."""
    from tilewright.app.eda.fpga import TOPS as FPGA_TOPS
    from tilewright.app.flows.sim_rtl import TOPS as SIM_TOPS
    assert set(SIM_TOPS) <= TOP_NAMES
    from tilewright.app.cli.fpga import FLOW_TOPS
    assert set(FLOW_TOPS) <= TOP_NAMES and set(FPGA_TOPS) <= set(FLOW_TOPS.values())
    assert _flags(_commands()["fpga"])["--top"].default == "core"


def test_fpga_target_names_are_accepted_by_rtl_synth():
    """The family names of `fpga --target` (ice40, ecp5, xc7) are what `rtl --synth` takes."""
    from tilewright.app.cli.main import _synth_targets
    from tilewright.app.eda.fpga import TARGETS as FPGA
    from tilewright.app.eda.synth import TARGETS as YOSYS
    assert set(FPGA) == {"ice40", "ecp5", "xc7"}
    for t in FPGA:
        assert _synth_targets([t])[0] in YOSYS, t


@pytest.mark.parametrize("name", ["arch", "cycles", "compile", "sim", "rtl", "fpga", "mesh",
                                  "mesh-layer", "cluster", "sweep", "report", "models", "demo",
                                  "generate"])
def test_every_result_command_has_json(name):
    p = _flags(_commands()[name])["--json"]
    assert p.is_flag


def test_version():
    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0
    assert res.stdout.strip() == f"tilewright {version('tilewright')}"


# ---- the deprecation rule: old spelling works, one warning line, same result ----------------

def _run(*argv):
    res = CliRunner().invoke(app, list(argv))
    assert res.exit_code == 0, res.output
    return res.stdout, [ln for ln in res.stderr.splitlines() if ln.strip()]


def test_cycles_short_and_long_same_result():
    a, ea = _run("cycles", "--arch", "ws16x16", "-m", "64", "-k", "32", "-n", "48", "--json")
    b, eb = _run("cycles", "--arch", "ws16x16", "--m", "64", "--k", "32", "--n", "48", "--json")
    assert a == b and ea == eb == []
    d = json.loads(a)
    # a weight-stationary 16x16 array folds K/16 x N/16 weight tiles: 2 x 3 = 6 (by hand)
    assert (d["m"], d["k"], d["n"], d["folds"]) == (64, 32, 48, 6)


def test_mesh_layer_tokens_and_positional_model_deprecated():
    new, e_new = _run("mesh-layer", "--model", "tiny-llama", "--arch", "mesh4x4", "--seq", "8",
                      "--json")
    old, e_old = _run("mesh-layer", "tiny-llama", "--arch", "mesh4x4", "--tokens", "8", "--json")
    assert e_new == []
    assert e_old == ["warning: the positional MODEL is deprecated; use --model MODEL",
                     "warning: --tokens is deprecated; use --seq"]
    assert json.loads(old) == json.loads(new)


def test_cluster_seq_len_deprecated():
    args = ["cluster", "--cluster", "h100-8x-nvlink", "--model", "tiny-llama", "--mode", "train",
            "--tp", "4", "--dp", "2", "--micro-batches", "2", "--json"]
    new, e_new = _run(*args, "--seq", "16")
    old, e_old = _run(*args, "--seq-len", "16")
    longer, _ = _run(*args, "--seq", "64")
    assert e_new == [] and e_old == ["warning: --seq-len is deprecated; use --seq"]
    a, b, c = json.loads(new), json.loads(old), json.loads(longer)
    for d in (a, b, c):
        d.pop("wall_s", None), d.pop("events_per_s", None)      # host timings
    assert a == b
    assert a["step_s"] < c["step_s"]       # the flag is not ignored: 4x the tokens take longer


@pytest.mark.parametrize("old,new", [("gemm", "core"), ("axi", "axi-core")])
def test_fpga_old_top_names(monkeypatch, tmp_path, old, new):
    """`fpga --top gemm|axi` reach the flow as the same top as `core|axi-core` (the flow itself
    is stopped: no synthesis here), with one warning line."""
    import tilewright.app.eda.fpga as flow
    seen = []

    class Stop(Exception):
        pass

    def fake(spec, target, out, *, top, pnr, freq_mhz, board, bitstream, baud, mem_words,
             share):
        seen.append(top)
        raise Stop

    monkeypatch.setattr(flow, "run_fpga", fake)
    for word in (old, new):
        res = CliRunner().invoke(app, ["fpga", "--arch", "ws16x16", "--target", "ice40", "-o",
                                       str(tmp_path / "o"), "--top", word])
        assert isinstance(res.exception, Stop)
        lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
        assert lines == ([f"warning: --top {old} is deprecated; use --top {new}"]
                         if word == old else [])
    assert seen[0] == seen[1]


def test_rtl_synth_xilinx_means_xc7(capsys):
    """`rtl --synth xilinx` is rewritten to xc7 with one warning; both reach the same flow."""
    from tilewright.app.cli.main import _synth_targets
    out = canonical_args("rtl", ["--arch", "a", "--synth", "xilinx", "--synth=xilinx"],
                         {"--arch", "--synth"})
    assert out == ["--arch", "a", "--synth", "xc7", "--synth=xc7"]
    assert capsys.readouterr().err.splitlines() == [
        "warning: --synth xilinx is deprecated; use --synth xc7"] * 2
    assert _synth_targets(["xc7"]) == _synth_targets(["xilinx"])


def test_rewrite_leaves_values_and_after_double_dash_alone():
    out = canonical_args("mesh-layer", ["--arch", "--tokens", "--", "--tokens"], {"--arch"})
    assert out == ["--arch", "--tokens", "--", "--tokens"]


# ---- the --json outputs added for issue 21: one JSON object, checked against the sources ----

def test_arch_json_matches_the_yaml():
    import yaml
    from pathlib import Path
    raw = yaml.safe_load((Path(__file__).parents[1] / "configs" / "ws16x16.yaml").read_text())
    out, err = _run("arch", "ws16x16", "--json")
    d = json.loads(out)
    assert err == [] and d["valid"] is True
    assert d["arch"]["tensor_engine"]["rows"] == raw["tensor_engine"]["rows"] == 16
    assert d["arch"]["clock_mhz"] == raw["clock_mhz"]
    presets, _ = _run("arch", "--json")
    names = {p.stem for p in (Path(__file__).parents[1] / "configs").glob("*.yaml")}
    assert set(json.loads(presets)["presets"]) == names


def test_models_json():
    out, err = _run("models", "--json")
    d = json.loads(out)["models"]
    # Llama 3 8B: 32 layers, d_model 4096 (Meta, "The Llama 3 Herd of Models", 2024, Table 3)
    assert d["llama3-8b"]["layers"] == 32 and d["llama3-8b"]["config"]["d_model"] == 4096
    assert d["llama3-8b"]["family"] == "llama" and err == []
    # the demo's MLPs too: mlp-tiny's Linear layers hold i*o weights + o biases each
    sizes = d["mlp-tiny"]["config"]["sizes"]
    assert d["mlp-tiny"]["params"] == sum(i * o + o for i, o in zip(sizes, sizes[1:]))


def test_sweep_and_report_json(tmp_path, monkeypatch):
    """A 2-point grid sweep: --json counts 2 evaluated points (the grid's size by hand) and names
    the database; report --json lists the pages it wrote, which exist."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(
        "name: two\nbase: ws16x16\ntech: 7nm\naxes:\n  tensor_engine.dataflow: [ws, os]\n"
        "workloads:\n  - {gemm: [64, 64, 64], format: int8}\nobjectives: [latency, area]\n"
        "search: {method: grid}\n")
    out, _ = _run("sweep", str(tmp_path / "s.yaml"), "--db", "s.db", "--workers", "1", "--json")
    d = json.loads(out)
    assert (d["sweep"], d["evaluated"], d["reused"], d["db"]) == ("two", 2, 0, "s.db")
    assert 1 <= d["pareto_points"] <= 2 and d["objectives"] == ["latency_s", "area_mm2"]
    out, _ = _run("report", "s.db", "-o", "rep", "--json")
    r = json.loads(out)
    assert (tmp_path / r["report"]).is_file() and r["files"]
    assert all((tmp_path / "rep" / f).is_file() for f in r["files"])


def test_rtl_json_manifest_matches_the_file(tmp_path):
    """rtl --json prints the manifest it wrote; its sha256 is the Verilog file's (hashlib)."""
    import hashlib
    out, err = _run("rtl", "--arch", "ws8x8", "-o", str(tmp_path / "v"), "--json")
    d = json.loads(out)
    f = d["manifest"]["files"][0]
    data = (tmp_path / "v" / f["path"]).read_bytes()
    assert f["sha256"] == hashlib.sha256(data).hexdigest() and f["bytes"] == len(data)
    assert json.loads((tmp_path / "v" / "manifest.json").read_text()) == d["manifest"]


def test_fpga_json_prints_the_flow_manifest(monkeypatch, tmp_path):
    import tilewright.app.eda.fpga as flow
    manifest = {"fpga": {"part": "x"}, "handoff": {}, "flow_seconds": 0.5}
    monkeypatch.setattr(flow, "run_fpga", lambda *a, **k: manifest)
    out, _ = _run("fpga", "--arch", "ws8x8", "--target", "ice40", "-o", str(tmp_path / "o"),
                  "--json")
    assert json.loads(out) == {"out": str(tmp_path / "o"), "manifest": manifest}


def test_sim_json():
    out, _ = _run("sim", "--model", "tiny-llama", "--arch", "ws8x8", "--json")
    d = json.loads(out)
    assert d["ok"] is True and d["rtl"] is False and d["model"] == "tiny-llama"
    assert d["checks"] and all(c["ok"] for c in d["checks"])
