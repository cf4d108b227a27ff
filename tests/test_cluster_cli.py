"""`tilewright cluster` as a Typer command: --json prints one object; user errors are
ClusterSpecError (the CLI turns them into one `error:` line, exit status 2)."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from tilewright.app.cli.cluster import cluster
from tilewright.dataflow_sim.cluster import ClusterSpecError, PlanError

app = typer.Typer()
app.command()(cluster)


@app.command()
def _other() -> None:   # a second command keeps `cluster` a named sub-command, as in the CLI
    pass


def run(*args: str):
    return CliRunner().invoke(app, ["cluster", *args])


def test_train_json(tmp_path):
    res = run("--cluster", "h100-8x-nvlink", "--model", "llama3-8b", "--mode", "train",
              "--tp", "8", "--seq", "1024", "--micro-batches", "2", "--json",
              "--trace", str(tmp_path / "t.json"))
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["mode"] == "train" and d["step_s"] > 0 and d["chips"] == 8
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]


def test_serve_json():
    res = run("--cluster", "h100-8x-nvlink", "--model", "llama3-8b", "--mode", "serve",
              "--requests", "40", "--rate", "20", "--prompt-tokens", "64-256",
              "--output-tokens", "16", "--json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["finished"] == 40 and d["ttft_p99_s"] >= d["ttft_p50_s"] > 0
    res = run("--cluster", "h100-8x-nvlink", "--model", "llama3-8b", "--mode", "serve",
              "--requests", "10", "--tp", "2", "--pp", "2", "--output-tokens", "4", "--json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["plan"] == "tp=2 ep=1 pp=2" and d["replicas"] == 2 and d["finished"] == 10


def test_mamba_serve_and_train_json():
    """A Mamba model serves with state slots (no KV tokens) and trains with TP over d_inner."""
    res = run("--cluster", "h100-8x-nvlink", "--model", "mamba-2.8b", "--mode", "serve",
              "--requests", "20", "--tp", "2", "--prompt-tokens", "64-512",
              "--output-tokens", "8", "--json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["finished"] == 20 and d["kv_tokens_per_replica"] == 0
    assert d["state_slots_per_replica"] > 0 and d["state_bytes_per_seq_chip"] > 0
    res = run("--cluster", "h100-8x-nvlink", "--model", "mamba-2.8b", "--mode", "train",
              "--tp", "4", "--dp", "2", "--seq", "1024", "--micro-batches", "2", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["step_s"] > 0


@pytest.mark.parametrize("args,exc,needle", [
    (["--mode", "fly"], ClusterSpecError, "--mode = 'fly'"),
    (["--tp", "3", "--dp", "1"], PlanError, "tp=3 does not divide n_heads = 32"),
    (["--mode", "serve", "--prompt-tokens", "9-3"], ClusterSpecError, "--prompt-tokens = '9-3'"),
    (["--schedule", "gpipe"], ClusterSpecError, "--schedule = 'gpipe'"),
])
def test_user_errors_are_cluster_spec_errors(args, exc, needle):
    res = run("--cluster", "h100-8x-nvlink", "--model", "llama3-8b", *args)
    assert isinstance(res.exception, exc), res.output
    assert needle in str(res.exception) and "\n" not in str(res.exception)


def test_cost_source_option(tmp_path):
    arch = ("name: a1\nchip:\n  kind: arch\n  arch: {name: t16, clock_mhz: 800.0, tensor_engine: "
            "{rows: 16, cols: 16, dataflow: ws}, offchip: {bandwidth_gbps: 50.0, capacity_gib: "
            "16}}\n")
    path = tmp_path / "a1.yaml"
    path.write_text(arch)
    out = {}
    for src in ("compiler", "table"):
        res = run("--cluster", str(path), "--model", "tiny-llama", "--mode", "train",
                  "--seq", "16", "--micro-batches", "2", "--json", "--cost-source", src)
        assert res.exit_code == 0, res.output
        out[src] = json.loads(res.output)
        assert out[src]["cost_source"] == src
    res = run("--cluster", str(path), "--model", "tiny-llama", "--cost-source", "magic",
              "--seq", "16")
    assert isinstance(res.exception, ClusterSpecError) and "must be one of" in str(res.exception)
    res = run("--cluster", "h100-8x-nvlink", "--model", "llama3-8b", "--cost-source", "compiler",
              "--tp", "8")
    assert isinstance(res.exception, ClusterSpecError) and "GPU preset" in str(res.exception)


def test_db_appends_each_run_to_the_results_store(tmp_path):
    from tilewright.app.sweep.store import ResultsStore

    db = tmp_path / "runs.sqlite"
    outs = []
    for bucket in ("25", "0"):
        res = run("--cluster", "h100-8x-nvlink", "--model", "llama3-8b", "--tp", "4", "--dp", "2",
                  "--seq", "512", "--micro-batches", "2", "--grad-bucket-mb", bucket,
                  "--json", "--db", str(db))
        assert res.exit_code == 0, res.output
        outs.append(json.loads(res.output))
    with ResultsStore(db) as store:
        df = store.frame("cluster")
    assert len(df) == 2 and list(df["step_s"]) == [o["step_s"] for o in outs]
    assert list(df["p:grad_bucket_mb"].fillna(0)) == [25.0, 0.0]
    assert (df["p:model"] == "llama3-8b").all() and (df["status"] == "ok").all()
    res = run("--cluster", "h100-8x-nvlink", "--model", "llama3-8b", "--inlayer-comm", "both")
    assert isinstance(res.exception, ClusterSpecError) and "--inlayer-comm = 'both'" in str(
        res.exception)
