"""Whole-model capacity of a wafer: every mesh command checks weights + KV cache + buffers per
core against the core's SRAM before timing, refuses with the numbers, or plans over several
wafers; causal prefill attention costs the unmasked half; grid options override the ArchSpec.

Expected bytes are computed here by hand from the published model configs (Meta-Llama-3
config.json, Mixtral-8x7B-v0.1 config.json) and the mesh shape: a [k, n] matrix on a pr x pc
grid leaves a ceil(k/pr) x ceil(n/pc) block per core.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import typer
import yaml
from typer.testing import CliRunner

from tests.test_cli import tw
from tilewright.arch import ArchSpecError
from tilewright.dataflow_sim.mesh.capacity import MeshCapacityError

REPO = Path(__file__).parents[1]


def c(a, b):
    return -(-a // b)


def _app():
    from tilewright.app.cli.mesh import mesh
    from tilewright.app.cli.mesh_layer import mesh_layer
    app = typer.Typer()
    app.command("mesh-layer")(mesh_layer)
    app.command("mesh")(mesh)
    return app


def _invoke(*args):
    return CliRunner().invoke(_app(), list(args))


def _decode_weights(d, kvd, ffn, vocab, layers, pr, pc, eb=2):
    """Decode placement (K on rows, N on columns): wq|wk|wv fused [d, d+2kvd], wo [d, d],
    w1|w3 fused [d, 2 ffn], w2 [ffn, d]; embedding [vocab, d] and LM head [d, vocab]."""
    layer = c(d, pr) * c(d + 2 * kvd, pc) + c(d, pr) * c(d, pc) + c(d, pr) * c(2 * ffn, pc) \
        + c(ffn, pr) * c(d, pc)
    return (layer * layers + c(vocab, pr) * c(d, pc) + c(d, pr) * c(vocab, pc)) * eb


def _kv(tokens, kvd, layers, pr, pc, eb=2):
    return c(tokens, pr) * c(2 * kvd, pc) * eb * layers


def _gemv_buf(k, n, pr, pc, eb=2):
    """A decode GEMV's working set: W block, x segment, partial y and its receive buffer."""
    kt, nt = c(k, pr), c(n, pc)
    return kt * nt * eb + kt * eb + 2 * nt * eb


# ---- refusals with the numbers ---------------------------------------------------------------

def test_llama3_70b_decode_on_wse2_is_refused_with_the_numbers():
    d, kvd, ffn, vocab, layers = 8192, 8 * 128, 28672, 128256, 80
    pr, pc = 750, 994
    w = _decode_weights(d, kvd, ffn, vocab, layers, pr, pc)
    kv = _kv(4096, kvd, layers, pr, pc)
    buf = max(_gemv_buf(d, d + 2 * kvd, pr, pc), _gemv_buf(d, 2 * ffn, pr, pc),
              _gemv_buf(ffn, d, pr, pc), _gemv_buf(d, 4096, pr, pc), _gemv_buf(4096, d, pr, pc))
    proc = tw("mesh-layer", "--model", "llama3-70b", "--arch", "configs/wse2.yaml", "--phase", "decode")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for figure in (w + kv + buf, w, kv, buf, 48 * 1024):
        assert f"{figure:,}" in lines[0], (figure, lines[0])
    assert "750x994" in lines[0] and not proc.stdout.strip()      # nothing timed or printed
    assert w > 48 * 1024 * 3                                       # weights alone: > 3x SRAM


def test_mixtral_8x7b_decode_is_refused_with_the_numbers():
    d, kvd, ffn, vocab, layers, e = 4096, 8 * 128, 14336, 32000, 32, 8
    pr, pc = 750, 994
    # 8 expert regions: the 2x4 tiling of 375x248 cores (93,000 cores; ties 1x8's 750x124
    # and is squarer)
    qr, qc = 375, 248
    layer = (c(d, pr) * c(d + 2 * kvd, pc) + c(d, pr) * c(d, pc)      # attention
             + c(d, pr) * c(e, pc)                                     # router
             + 2 * c(d, qr) * c(ffn, qc) + c(ffn, qr) * c(d, qc))      # one expert's w1, w3, w2
    w = (layer * layers + c(vocab, pr) * c(d, pc) + c(d, pr) * c(vocab, pc)) * 2
    kv = _kv(4096, kvd, layers, pr, pc)
    res = _invoke("mesh-layer", "--model", "mixtral-8x7b", "--arch", "wse2", "--phase", "decode")
    assert isinstance(res.exception, MeshCapacityError), res.output
    msg = str(res.exception)
    assert f"weights {w:,} + KV cache {kv:,}" in msg and "49,152 B" in msg, msg


def test_llama3_8b_million_token_context_is_refused():
    d, kvd, ffn, vocab, layers = 4096, 8 * 128, 14336, 128256, 32
    pr, pc = 750, 994
    kv = _kv(1_000_000, kvd, layers, pr, pc)
    w = _decode_weights(d, kvd, ffn, vocab, layers, pr, pc)
    res = _invoke("mesh-layer", "--model", "llama3-8b", "--arch", "wse2", "--phase", "decode", "--context",
                  "1000000")
    assert isinstance(res.exception, MeshCapacityError), res.output
    assert f"weights {w:,} + KV cache {kv:,}" in str(res.exception)
    assert kv > 48 * 1024 * 5                               # the cache alone: > 5x SRAM


def test_gemv_too_big_for_sram_is_refused_with_weights_and_buffers(tmp_path):
    # mesh4x4 with bf16 cores: 16 KiB per core; W [256, 256] on 4x4 -> 64x64 blocks of 8 KiB
    kt = nt = 64
    arch = _mesh_yaml(tmp_path)
    res = _invoke("mesh", "gemv", "--arch", arch, "--k", "512", "--n", "256")
    assert isinstance(res.exception, MeshCapacityError)
    w, buf = 128 * nt * 2, 128 * 2 + 2 * nt * 2
    assert f"weights {w:,} + KV cache 0 + buffers {buf:,}" in str(res.exception)
    res = _invoke("mesh", "gemv", "--arch", arch, "--k", "256", "--n", "256", "--json")
    assert res.exit_code == 0, res.output
    cap = json.loads(res.output)["capacity"]
    assert cap["weight_bytes_per_core"] == kt * nt * 2
    assert cap["bytes_per_core"] == json.loads(res.output)["memory_bytes_max"]  # = the model's


# ---- a case that fits runs, and reports its bytes ------------------------------------------

def _mesh_yaml(tmp_path, name="m", **mesh):
    data = yaml.safe_load((REPO / "configs" / "mesh4x4.yaml").read_text())
    data["mesh"].update(mesh)
    # bf16 cores: 2 bytes per element (the closed forms below use 2)
    data["tensor_engine"].update(input_format="bf16", weight_format="bf16",
                                 accumulator_format="fp32")
    data["name"] = name
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(data))
    return str(p)


# tiny-llama: d 64, 2 layers, 4 heads / 2 KV heads (kvd 32), ffn 128, vocab 256
TINY = dict(d=64, kvd=32, ffn=128, vocab=256, layers=2)


def test_tiny_decode_that_fits_runs_with_hand_computed_bytes(tmp_path):
    arch = _mesh_yaml(tmp_path, core_sram_kib=64)
    t = TINY
    res = _invoke("mesh-layer", "--model", "tiny-llama", "--arch", arch, "--phase", "decode", "--context",
                  "64", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    cap = out["capacity"]
    w = _decode_weights(t["d"], t["kvd"], t["ffn"], t["vocab"], t["layers"], 4, 4)
    assert cap["weight_bytes_per_core"] == w == (2304 * 2 + 2048) * 2
    assert cap["kv_bytes_per_core"] == _kv(64, t["kvd"], t["layers"], 4, 4) == 1024
    assert cap["buffer_bytes_per_core"] == _gemv_buf(64, 256, 4, 4) == 2336
    assert out["cycles"] > 0 and out["whole_model"]["wafers"] == 1
    assert out["model"] == "tiny-llama"       # the Program's own meta, not shadowed by the plan


def test_llama3_8b_decode_fits_wse2_and_runs():
    d, kvd, ffn, vocab, layers = 4096, 8 * 128, 14336, 128256, 32
    pr, pc = 750, 994
    res = _invoke("mesh-layer", "--model", "llama3-8b", "--arch", "wse2", "--phase", "decode", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    cap = out["capacity"]
    assert cap["weight_bytes_per_core"] == _decode_weights(d, kvd, ffn, vocab, layers, pr, pc)
    assert cap["kv_bytes_per_core"] == _kv(4096, kvd, layers, pr, pc)
    assert cap["bytes_per_core"] <= 48 * 1024 and out["cycles"] > 0
    # decode is a network problem: core compute is a few percent of the layer's cycles
    compute = sum(o["compute_cycles"] for o in out["ops"])
    assert compute < 0.05 * out["cycles"]


# ---- several wafers --------------------------------------------------------------------------

def test_wafers_auto_picks_the_fewest_that_fit_and_adds_the_link(tmp_path):
    t = TINY
    # one wafer: 9216 + 4096 (embedding, head) + 1024 KV + 2336 buffers = 16,672 B > 12 KiB;
    # two wafers (one layer each, embedding on the first, head on the second): 9,504 B
    one = _decode_weights(t["d"], t["kvd"], t["ffn"], t["vocab"], 2, 4, 4) + 1024 + 2336
    two = (_decode_weights(t["d"], t["kvd"], t["ffn"], t["vocab"], 1, 4, 4) - 2048) + 512 + 2336
    assert one > 12 * 1024 >= two
    bw, lat = 2.0, 0.5                                      # GB/s, us
    arch = _mesh_yaml(tmp_path, core_sram_kib=12, wafer_link_gbytes_per_s=bw,
                      wafer_link_latency_us=lat)
    res = _invoke("mesh-layer", "--model", "tiny-llama", "--arch", arch, "--phase", "decode", "--context",
                  "64", "--wafers", "auto", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    m = out["whole_model"]
    assert m["wafers"] == 2 and m["layers_per_wafer"] == [1, 1]
    assert out["capacity"]["bytes_per_core"] == two
    link = lat + 64 * 2 / (bw * 1e3)                     # one token's d fp16 values
    assert m["link_us"] == pytest.approx(link)
    assert m["stage_us"] == pytest.approx([out["us"], out["us"]], abs=1e-6)
    assert m["latency_us"] == pytest.approx(2 * out["us"] + link, abs=1e-5)
    # one wafer asked: refused with the numbers; several wafers without a link: refused
    res = _invoke("mesh-layer", "--model", "tiny-llama", "--arch", arch, "--phase", "decode", "--context",
                  "64")
    assert isinstance(res.exception, MeshCapacityError) and f"{one:,} B" in str(res.exception)
    nolink = _mesh_yaml(tmp_path, "nolink", core_sram_kib=12)
    res = _invoke("mesh-layer", "--model", "tiny-llama", "--arch", nolink, "--phase", "decode",
                  "--context", "64", "--wafers", "2")
    assert "no inter-wafer link" in str(res.exception)
    proc = tw("mesh-layer", "--model", "tiny-llama", "--arch", nolink, "--phase", "decode", "--context",
              "64", "--wafers", "auto")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "mesh.wafer_link_gbytes_per_s" in proc.stderr


# ---- causal prefill attention -----------------------------------------------------------------

def test_striped_causal_blocks_hold_t_t_plus_1_over_2_pairs():
    """numpy reference for the closed form: tokens striped over p rows/columns, the causal
    mask's busiest t x t block holds t(t+1)/2 unmasked pairs."""
    from tilewright.compiler.mesh_partition import causal_block_macs
    p, t = 5, 7
    tok = np.arange(p * t)
    mask = tok[:, None] >= tok[None, :]                        # query i sees keys <= i
    row = tok % p                                               # token a*p + i on row i
    counts = np.zeros((p, p), int)
    np.add.at(counts, (row[:, None].repeat(p * t, 1), row[None, :].repeat(p * t, 0)), mask)
    assert counts.max() == t * (t + 1) // 2
    assert causal_block_macs(t, 3, t, t) == counts.max() * 3


def test_causal_prefill_attention_costs_the_unmasked_half(tmp_path):
    from tilewright.arch import load_arch
    from tilewright.compiler.mesh_partition import partition_layer
    arch = load_arch(_mesh_yaml(tmp_path, core_sram_kib=4096))
    s, d, p = 64, 64, 4
    t = c(s, p)
    prog = partition_layer(arch, "tiny-llama", "prefill", tokens=s)
    for op, (mt, kt, nt) in {"q @ k^T (heads along K, causal)": (t, c(d, p), t),
                             "p @ v (heads along N, causal)": (t, t, c(d, p))}.items():
        tasks = [x for x in prog.tasks if x.op == op]
        assert sum(x.useful_macs for x in tasks) == s * (s + 1) // 2 * d
        per_core = sum(x.macs_per_core * x.repeat for x in tasks)
        # MeshGEMM: p compute steps per core, each t(t+1)/2 of its t*t token pairs
        assert per_core == p * mt * kt * nt // t * (t + 1) // 2


# ---- title, grid options, bad input ---------------------------------------------------------

def test_title_names_logical_and_physical_grid_and_options_override(tmp_path):
    arch = _mesh_yaml(tmp_path, core_sram_kib=4096)
    res = CliRunner(env={"COLUMNS": "200"}).invoke(
        _app(), ["mesh-layer", "--model", "tiny-llama", "--arch", arch, "--seq", "16", "--cols", "6"])
    assert res.exit_code == 0, res.output
    assert "logical grid 4x4 of the 4x6 physical mesh" in res.output
    res = _invoke("mesh-layer", "--model", "tiny-llama", "--arch", arch, "--phase", "decode", "--context",
                  "16", "--rows", "2", "--cols", "8", "--json")
    out = json.loads(res.output)
    assert out["grid"] == "2x8" and out["physical_grid"] == "2x8"
    res = _invoke("mesh", "gemv", "--arch", arch, "--k", "16", "--n", "16", "--rows", "0")
    assert isinstance(res.exception, ArchSpecError) and "mesh.rows = 0" in str(res.exception)


def test_hop_latency_option_adds_alpha_per_hop_on_the_critical_path(tmp_path):
    """PLMR: a message's latency is alpha x hops + beta x stages; raising alpha by 1000 adds
    1000 x (hops on the critical path) -- at least 3 on a row of 4 (the x broadcast)."""
    arch = _mesh_yaml(tmp_path, core_sram_kib=4096)
    base = json.loads(_invoke("mesh", "gemv", "--arch", arch, "--k", "64", "--n", "64",
                              "--json").output)
    slow = json.loads(_invoke("mesh", "gemv", "--arch", arch, "--k", "64", "--n", "64",
                              "--hop-latency", "1001", "--json").output)
    assert slow["cycles"] - base["cycles"] >= 3 * 1000
    assert (slow["cycles"] - base["cycles"]) % 1000 == 0


def test_sweep_over_grid_and_link_bandwidth_follows_the_closed_form(tmp_path):
    """A sweep over mesh.rows/mesh.cols and mesh.link_bytes_per_cycle (W) with a mesh GEMV:
    every message's bytes are a multiple of W, so time = A + B / W, where B is the bytes on the
    critical path: x's segment once (kt = 256/side int8 values), the partial sums once per
    K-tree level (2 levels x nt) and y once (nt): B = 4 x 256 / side bytes."""
    from tilewright.app.sweep import ResultsStore, run_sweep, sweep_from_dict
    spec = sweep_from_dict({
        "name": "w", "base": "mesh4x4", "tech": "45nm",
        "axes": {"mesh.rows,mesh.cols": [4, 8], "mesh.link_bytes_per_cycle": [1, 2, 4]},
        "workloads": [{"mesh_gemv": [256, 256]}], "objectives": ["latency"]},
        source="s.yaml")
    db = tmp_path / "w.db"
    run_sweep(spec, db, workers=1)
    with ResultsStore(db) as s:
        df = s.frame("w")
    assert (df["status"] == "ok").all() and len(df) == 6
    clock_hz = 500e6                                       # mesh4x4's clock_mhz
    for side in (4, 8):
        rows = df[df["p:mesh.rows"] == side].set_index("p:mesh.link_bytes_per_cycle")
        cyc = {w: round(rows.loc[w, "latency_s"] * clock_hz) for w in (1, 2, 4)}
        b = 4 * 256 // side
        assert cyc[1] - cyc[2] == b // 2 and cyc[2] - cyc[4] == b // 4, cyc
    # a larger grid: every B term shrinks with the side, so it is faster at every W
    assert df.sort_values("p:mesh.rows").groupby(
        "p:mesh.link_bytes_per_cycle")["latency_s"].apply(lambda x: x.is_monotonic_decreasing).all()


# ---- the whole model end to end ------------------------------------------------------------

def _e2e(arch, *extra):
    res = _invoke("mesh-layer", "--model", "tiny-llama", "--arch", arch, "--all", "--json", *extra)
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def test_all_decode_parts_follow_closed_forms(tmp_path):
    """mesh4x4-like (alpha = beta = 1, W = 4 B/cycle) cut to 2x3 cores: decode after prefill."""
    arch = _mesh_yaml(tmp_path, core_sram_kib=4096)
    out = _e2e(arch, "--phase", "decode", "--context", "16", "--rows", "2", "--cols", "3")
    parts = out["whole_model"]["parts"]
    # embedding: row 0 multicasts ceil(64/3) = 22 fp16 values down its column: 1 hop, 1 stage,
    # 44 B = 11 flits
    assert parts["embedding"]["cycles"] == 1 * 1 + 1 * 1 + 11
    # handover: prefill blocks (2x2 grid) -> decode blocks (2x3); a column block moves at most
    # one hop east, so one relay step; link c -> c+1 carries, for every matrix, the first block
    # row's elements whose prefill column is c and decode column c+1 (computed element by
    # element here)
    d, kvd, ffn, vocab, layers, ctx = 64, 32, 128, 256, 2, 16
    mats = [(d, d + 2 * kvd, layers), (d, d, layers), (d, 2 * ffn, layers), (ffn, d, layers),
            (ctx, 2 * kvd, layers), (vocab, d, 1), (d, vocab, 1)]
    load = [0, 0]
    for r, n, count in mats:
        for x in range(n):
            j, jd = x // c(n, 2), x // c(n, 3)
            assert jd - j in (0, 1)
            if jd == j + 1:
                load[j] += c(r, 2) * 2 * count
    assert parts["handover"]["cycles"] == 1 + 1 + c(max(load), 4)
    m = out["whole_model"]
    total = sum(p["us"] for p in parts.values()) + layers * out["us"]
    assert m["end_to_end_us"] == pytest.approx(total, abs=1e-5)
    for op in out["ops"]:       # the split adds up, per op
        assert op["compute_cycles"] + op["transfer_cycles"] + op["reduction_cycles"] == \
            op["cycles"]


def test_all_prefill_embedding_relay_and_heatmap(tmp_path):
    arch = _mesh_yaml(tmp_path, core_sram_kib=4096)
    png = tmp_path / "links.png"
    out = _e2e(arch, "--seq", "16", "--heatmap", str(png))
    # 4x4: ids at the mean distance round((16 - 1) / 12) = 1 row; each row's 4 tokens x 16
    # fp16 values = 128 B = 32 flits, one hop: alpha + beta + 32
    assert out["whole_model"]["parts"]["embedding"]["cycles"] == 1 + 1 + 32
    assert "handover" not in out["whole_model"]["parts"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_all_refusals(tmp_path):
    res = _invoke("mesh-layer", "--model", "tiny-moe", "--arch", "mesh4x4", "--all")
    assert isinstance(res.exception, MeshCapacityError.__mro__[1]) and "--all" in \
        str(res.exception)
    res = _invoke("mesh-layer", "--model", "tiny-llama", "--arch", "mesh4x4", "--heatmap", "x.jpg")
    assert "--heatmap x.jpg" in str(res.exception)


def test_refusals_of_fields_the_phase_would_ignore():
    res = _invoke("mesh-layer", "--model", "tiny-llama", "--arch", "mesh4x4", "--phase", "decode",
                  "--seq", "8")
    assert "--seq 8" in str(res.exception) and "decode" in str(res.exception)
    res = _invoke("mesh-layer", "--model", "tiny-llama", "--arch", "mesh4x4", "--context", "8")
    assert "--context 8" in str(res.exception) and "prefill" in str(res.exception)


def test_capacity_uses_the_grid_left_by_defects(tmp_path):
    """A dead core at (1, 1): the skip policy drops row 1 and column 1, a 3x3 grid holds the
    model, and the bytes per core grow accordingly."""
    arch = _mesh_yaml(tmp_path, core_sram_kib=12, defective_cores=[[1, 1]])
    t = TINY
    res = _invoke("mesh-layer", "--model", "tiny-llama", "--arch", arch, "--phase", "decode", "--context",
                  "64")
    assert isinstance(res.exception, MeshCapacityError)
    w = _decode_weights(t["d"], t["kvd"], t["ffn"], t["vocab"], t["layers"], 3, 3)
    kv = _kv(64, t["kvd"], t["layers"], 3, 3)
    msg = str(res.exception)
    assert "3x3 grid" in msg and f"weights {w:,} + KV cache {kv:,}" in msg, msg


def test_all_decode_also_checks_the_prefill_it_follows(tmp_path):
    """--all decode hands over from a prefill of --context tokens on the square grid: on a 2x8
    mesh the prefill holds everything on 2x2 cores (> 53 KB of weights), which 32 KiB cannot;
    the decode on 2x8 (about 17 KB) fits."""
    arch = _mesh_yaml(tmp_path, core_sram_kib=32)
    t = TINY
    res = _invoke("mesh-layer", "--model", "tiny-llama", "--arch", arch, "--phase", "decode", "--context",
                  "16", "--rows", "2", "--cols", "8", "--json")
    assert res.exit_code == 0, res.output                 # decode alone fits on 2x8
    res = _invoke("mesh-layer", "--model", "tiny-llama", "--arch", arch, "--phase", "decode", "--context",
                  "16", "--rows", "2", "--cols", "8", "--all")
    assert isinstance(res.exception, MeshCapacityError), res.output
    msg = str(res.exception)
    # prefill weights on 2x2: wq|wk|wv [64, 128], wo [64, 64], w1, w3 [64, 128], w2 [128, 64]
    layer = (32 * 64 + 32 * 32 + 2 * 32 * 64 + 64 * 32) * 2
    w = layer * t["layers"] + (128 * 32 + 32 * 128) * 2
    assert "prefill" in msg and "2x2 grid" in msg and f"weights {w:,}" in msg, msg
