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
    proc = tw("mesh-layer", "llama3-70b", "--arch", "configs/wse2.yaml", "--phase", "decode")
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
    res = _invoke("mesh-layer", "mixtral-8x7b", "--arch", "wse2", "--phase", "decode")
    assert isinstance(res.exception, MeshCapacityError), res.output
    msg = str(res.exception)
    assert f"weights {w:,} + KV cache {kv:,}" in msg and "49,152 B" in msg, msg


def test_llama3_8b_million_token_context_is_refused():
    d, kvd, ffn, vocab, layers = 4096, 8 * 128, 14336, 128256, 32
    pr, pc = 750, 994
    kv = _kv(1_000_000, kvd, layers, pr, pc)
    w = _decode_weights(d, kvd, ffn, vocab, layers, pr, pc)
    res = _invoke("mesh-layer", "llama3-8b", "--arch", "wse2", "--phase", "decode", "--context",
                  "1000000")
    assert isinstance(res.exception, MeshCapacityError), res.output
    assert f"weights {w:,} + KV cache {kv:,}" in str(res.exception)
    assert kv > 48 * 1024 * 5                               # the cache alone: > 5x SRAM


def test_gemv_too_big_for_sram_is_refused_with_weights_and_buffers():
    # mesh4x4: 16 KiB per core; W [256, 256] fp16 on 4x4 -> 64x64 blocks of 8 KiB + buffers
    kt = nt = 64
    res = _invoke("mesh", "gemv", "--arch", "mesh4x4", "--k", "512", "--n", "256")
    assert isinstance(res.exception, MeshCapacityError)
    w, buf = 128 * nt * 2, 128 * 2 + 2 * nt * 2
    assert f"weights {w:,} + KV cache 0 + buffers {buf:,}" in str(res.exception)
    res = _invoke("mesh", "gemv", "--arch", "mesh4x4", "--k", "256", "--n", "256", "--json")
    assert res.exit_code == 0, res.output
    cap = json.loads(res.output)["capacity"]
    assert cap["weight_bytes_per_core"] == kt * nt * 2
    assert cap["bytes_per_core"] == json.loads(res.output)["memory_bytes_max"]  # = the model's


# ---- a case that fits runs, and reports its bytes ------------------------------------------

def _mesh_yaml(tmp_path, name="m", **mesh):
    data = yaml.safe_load((REPO / "configs" / "mesh4x4.yaml").read_text())
    data["mesh"].update(mesh)
    data["name"] = name
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(data))
    return str(p)


# tiny-llama: d 64, 2 layers, 4 heads / 2 KV heads (kvd 32), ffn 128, vocab 256
TINY = dict(d=64, kvd=32, ffn=128, vocab=256, layers=2)


def test_tiny_decode_that_fits_runs_with_hand_computed_bytes(tmp_path):
    arch = _mesh_yaml(tmp_path, core_sram_kib=64)
    t = TINY
    res = _invoke("mesh-layer", "tiny-llama", "--arch", arch, "--phase", "decode", "--context",
                  "64", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    cap = out["capacity"]
    w = _decode_weights(t["d"], t["kvd"], t["ffn"], t["vocab"], t["layers"], 4, 4)
    assert cap["weight_bytes_per_core"] == w == (2304 * 2 + 2048) * 2
    assert cap["kv_bytes_per_core"] == _kv(64, t["kvd"], t["layers"], 4, 4) == 1024
    assert cap["buffer_bytes_per_core"] == _gemv_buf(64, 256, 4, 4) == 2336
    assert out["cycles"] > 0 and out["model"]["wafers"] == 1


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
    res = _invoke("mesh-layer", "tiny-llama", "--arch", arch, "--phase", "decode", "--context",
                  "64", "--wafers", "auto", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    m = out["model"]
    assert m["wafers"] == 2 and m["layers_per_wafer"] == [1, 1]
    assert out["capacity"]["bytes_per_core"] == two
    link = lat + 64 * 2 / (bw * 1e3)                     # one token's d fp16 values
    assert m["link_us"] == pytest.approx(link)
    assert m["stage_us"] == pytest.approx([out["us"], out["us"]], abs=1e-6)
    assert m["latency_us"] == pytest.approx(2 * out["us"] + link, abs=1e-5)
    # one wafer asked: refused with the numbers; several wafers without a link: refused
    res = _invoke("mesh-layer", "tiny-llama", "--arch", arch, "--phase", "decode", "--context",
                  "64")
    assert isinstance(res.exception, MeshCapacityError) and f"{one:,} B" in str(res.exception)
    nolink = _mesh_yaml(tmp_path, "nolink", core_sram_kib=12)
    res = _invoke("mesh-layer", "tiny-llama", "--arch", nolink, "--phase", "decode",
                  "--context", "64", "--wafers", "2")
    assert "no inter-wafer link" in str(res.exception)
    proc = tw("mesh-layer", "tiny-llama", "--arch", nolink, "--phase", "decode", "--context",
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
        _app(), ["mesh-layer", "tiny-llama", "--arch", arch, "--tokens", "16", "--cols", "6"])
    assert res.exit_code == 0, res.output
    assert "logical grid 4x4 of the 4x6 physical mesh" in res.output
    res = _invoke("mesh-layer", "tiny-llama", "--arch", arch, "--phase", "decode", "--context",
                  "16", "--rows", "2", "--cols", "8", "--json")
    out = json.loads(res.output)
    assert out["grid"] == "2x8" and out["physical_grid"] == "2x8"
    res = _invoke("mesh", "gemv", "--arch", arch, "--k", "16", "--n", "16", "--rows", "0")
    assert isinstance(res.exception, ArchSpecError) and "mesh.rows = 0" in str(res.exception)


def test_link_bandwidth_and_hop_options_change_time_as_a_closed_form(tmp_path):
    """A column broadcast-free GEMV time's serialization scales with 1/link bytes: doubling
    --link-bytes cannot slow the op, and a huge --hop-latency adds at least alpha x hops."""
    arch = _mesh_yaml(tmp_path, core_sram_kib=4096)
    base = json.loads(_invoke("mesh", "gemv", "--arch", arch, "--k", "64", "--n", "64",
                              "--json").output)
    slow = json.loads(_invoke("mesh", "gemv", "--arch", arch, "--k", "64", "--n", "64",
                              "--hop-latency", "1001", "--json").output)
    # mesh4x4 alpha = 1: every hop on the critical path costs 1000 cycles more; the K-tree
    # reduction and the row broadcast cross at least 3 hops in a row of 4
    assert slow["cycles"] - base["cycles"] >= 3 * 1000
    assert (slow["cycles"] - base["cycles"]) % 1000 == 0
