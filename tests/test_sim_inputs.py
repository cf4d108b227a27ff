"""``tilewright sim`` takes every model form the resolver takes (issue 14): a small Hugging Face
config.json (one layer built with seeded weights, never on the meta device), a
``path/file.py:factory`` module and an ONNX file, run in int8 on the functional model against
torch's float forward pass of the same module; with ``--rtl --fast`` (one case) the GEMMs of a
config.json layer on the Verilated core. Bad inputs: one line, exit status 2.

References: torch's float forward pass of the module sim built (relative L2 within
:data:`~tilewright.app.flows.sim_rtl.TORCH_REL_L2_BOUND`); numpy's int32 GEMMs and the cycle
model's closed form (the RTL case's checks); the parameter count of the too-large layer written
here from the Llama field meanings, not read back from the code.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

from tests.test_cli import tw_here
from tilewright.app.flows.sim_rtl import MAX_SIM_LAYER_PARAMS, TORCH_REL_L2_BOUND

REPO = Path(__file__).resolve().parents[1]
ARCH = str(REPO / "configs" / "ws16x16.yaml")

LLAMA = {"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
         "max_position_embeddings": 256, "rope_theta": 10000.0, "hidden_act": "silu",
         "rms_norm_eps": 1e-5, "intermediate_size": 128}

MLP_FACTORY = """
import torch
def make():
    torch.manual_seed(3)
    m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 16))
    return m.eval(), torch.randn(4, 32)
def outlier():
    torch.manual_seed(3)
    m = torch.nn.Linear(32, 16)
    with torch.no_grad():
        m.weight[:, 0] = 0.0
    x = torch.randn(4, 32)
    x[:, 0] = 1e4
    return m.eval(), x
def broken():
    raise RuntimeError("no weights here")
"""



def _json_sim(capsys, model: str, *extra: str) -> dict:
    code, out, err = tw_here(capsys, "sim", "--model", model, "--arch", ARCH, "--json", *extra)
    assert code == 0, out + err
    return json.loads(out)


def _rel_l2(check: dict) -> float:
    return float(check["detail"].split()[0])


def test_config_json_layer_on_the_functional_model(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA))
    res = _json_sim(capsys, str(path))
    assert res["ok"] and not res["rtl"]
    (check,) = res["checks"]
    assert check["check"].startswith("functional vs torch float")
    assert 0 < _rel_l2(check) <= TORCH_REL_L2_BOUND       # int8 vs float: not zero, within bound
    # the folder form resolves to the same config
    assert _json_sim(capsys, str(tmp_path))["checks"][0]["detail"] == check["detail"]


def test_factory_module_on_the_functional_model(tmp_path, capsys):
    path = tmp_path / "net.py"
    path.write_text(MLP_FACTORY)
    res = _json_sim(capsys, f"{path}:make")
    (check,) = res["checks"]
    assert res["ok"] and 0 < _rel_l2(check) <= TORCH_REL_L2_BOUND


def test_onnx_file_on_the_functional_model(tmp_path, capsys):
    pytest.importorskip("onnx")
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.LayerNorm(16),
                            torch.nn.Linear(16, 4)).eval()
    path = tmp_path / "m.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")               # the TorchScript exporter's deprecation
        torch.onnx.export(m, (torch.randn(2, 8),), str(path), dynamo=False)
    res = _json_sim(capsys, str(path))
    (check,) = res["checks"]
    assert res["ok"] and 0 < _rel_l2(check) <= TORCH_REL_L2_BOUND


def test_the_torch_check_can_fail(tmp_path, capsys):
    """A module int8 cannot represent (an input column of 1e4 the weights ignore: the
    per-tensor activation scale rounds every other input to zero) fails the torch check: exit 1,
    FAIL printed, never a silent pass."""
    path = tmp_path / "net.py"
    path.write_text(MLP_FACTORY)
    code, out, _ = tw_here(capsys, "sim", "--model", f"{path}:outlier", "--arch", ARCH)
    assert code == 1 and "FAIL" in out and "a cross-check FAILED" in out


def _llama_layer_params(d: int, h: int, kv: int, ffn: int) -> int:
    """One Llama decoder layer from the HF field meanings: q, o (d x d), k, v (d x kv*hd),
    gate/up/down (3 d ffn), two RMSNorm weights."""
    hd = d // h
    return 2 * d * d + 2 * d * kv * hd + 3 * d * ffn + 2 * d


@pytest.mark.parametrize("make,needle", [
    (lambda p: _big(p), "one layer has {n:,} parameters; tilewright sim builds it with real "
                        "weights and runs it in int8 up to {limit:,} parameters per layer"),
    (lambda p: _unknown(p), "architecture 'GPT2LMHeadModel' is not supported"),
    (lambda p: _factory(p) + ":broken", "net.py:broken raised RuntimeError: no weights here"),
    (lambda p: _factory(p) + ":nope", "net.py: no factory 'nope'"),
    (lambda p: "tiny-mlp-nope", "unknown model 'tiny-mlp-nope'"),
    (lambda p: "mlp-tiny", "--model mlp-tiny: a demo MLP; run it with `tilewright demo"),
])
def test_bad_model_one_line_exit_2(tmp_path, capsys, make, needle):
    code, out, err = tw_here(capsys, "sim", "--model", make(tmp_path), "--arch", ARCH)
    n = _llama_layer_params(1024, 8, 4, 2816)
    assert code == 2, out + err
    assert needle.format(n=n, limit=MAX_SIM_LAYER_PARAMS) in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_user_model_refuses_config_options(tmp_path, capsys):
    code, _, err = tw_here(capsys, "sim", "--model", _factory(tmp_path) + ":make", "--arch", ARCH,
                        "--seq", "16")
    assert code == 2 and "--seed/--seq/--batch apply to configs" in err


def _big(tmp_path: Path) -> str:
    path = tmp_path / "big.json"
    path.write_text(json.dumps({**LLAMA, "hidden_size": 1024, "intermediate_size": 2816,
                                "num_attention_heads": 8, "num_key_value_heads": 4}))
    return str(path)


def _unknown(tmp_path: Path) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "n_embd": 8}))
    return str(path)


def _factory(tmp_path: Path) -> str:
    path = tmp_path / "net.py"
    path.write_text(MLP_FACTORY)
    return str(path)


@pytest.mark.verilator
def test_config_json_gemms_on_the_rtl_fast_driver(tmp_path):
    """One RTL case: the config.json layer's int8 GEMMs on the Verilated core (C++ fast driver;
    the default ArchSpec, the build test_sim_rtl's fast-driver case caches): bit-exact against
    numpy, the layer replayed bit-exact, every GEMM's cycles equal to the cycle model's."""
    from tests.test_cli import tw
    from tilewright.arch import default_arch

    arch = tmp_path / "arch.yaml"
    arch.write_text(default_arch().to_yaml())
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA))
    r = tw("sim", "--model", str(path), "--arch", str(arch), "--rtl", "--fast", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(r.stdout)
    names = [c["check"] for c in res["checks"]]
    assert res["ok"] and res["rtl"] and len(names) == 4, res["checks"]
    assert "RTL cycles == cycle model (every GEMM)" in names
    assert len(res["gemms"]) >= 7 and all(g["rtl"] == g["model"] > 0 for g in res["gemms"])
