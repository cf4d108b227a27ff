"""``tilewright generate``: a whole tiny model decoding greedily on the functional model, each
step costed by the cycle model (tilewright.app.flows.generate).

References: torch fp32 greedy decoding written here (the whole sequence through
``CausalLM.forward`` at every step, no cache); the closed form of the KV cache's bytes; the
``compile`` path's Reports of parts compiled alone (a step of the whole model costs ``n_layers``
layers compiled as ``compile --phase decode --seq CONTEXT`` compiles them, plus embedding, final
norm and LM head); the trace's structure against the steps' busy cycles.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys

import numpy as np
import pytest
import torch
from torch import nn

from tilewright.app.cli.main import main
from tilewright.app.flows.generate import (ARGMAX_CHECK, GATHER_CHECK, LOGITS_REL_L2_BOUND,
                                           StepResult, _checks, generate)
from tilewright.arch import load_arch
from tilewright.compiler.operand_formats import arch_for_format
from tilewright.dataflow_sim.compile_flow import compile_llm, compile_module
from tilewright.dataflow_sim.report import report_totals
from tilewright.dataflow_sim.timeline import TRACKS
from tilewright.models.llm_configs import build_lm, get_config

PROMPT = [1, 2, 3, 4]
TOKENS = 4
ARCH = "ws8x8v"


def _cli(*args: str) -> tuple[int, str, str]:
    """The real entry point (its error path included) in this process: (exit code, stdout,
    stderr)."""
    old, out, err = sys.argv, io.StringIO(), io.StringIO()
    sys.argv = ["tilewright", *args]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    finally:
        sys.argv = old
    return code, out.getvalue(), err.getvalue()


@torch.no_grad()
def _torch_greedy(model: str, prompt: list[int], n: int):
    """fp32 greedy decoding, the whole sequence recomputed at every step."""
    lm = build_lm(model, seed=0, device="cpu")
    seq, logits = list(prompt), []
    for _ in range(n):
        z = lm(torch.tensor([seq]))[0, -1].double().numpy()
        logits.append(z)
        seq.append(int(z.argmax()))
    return seq[len(prompt):], logits


def _assert_agrees_with_torch(model: str, tokens: list[int], prompt: list[int] = PROMPT) -> None:
    """Torch's tokens, or a first divergence at a near-tie the logit bound allows."""
    ref, logits = _torch_greedy(model, prompt, len(tokens))
    div = next((i for i, (a, b) in enumerate(zip(tokens, ref)) if a != b), None)
    if div is not None:
        z = logits[div]
        assert z[ref[div]] - z[tokens[div]] <= 2 * LOGITS_REL_L2_BOUND * np.linalg.norm(z)


def _arch_with_capacity(tmp_path, gib: float):
    spec = load_arch(ARCH)
    spec = spec.model_copy(update={"offchip": spec.offchip.model_copy(
        update={"capacity_gib": gib})})
    path = tmp_path / f"arch-{gib:g}.yaml"
    path.write_text(spec.to_yaml())
    return path


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """``generate --json --trace`` on tiny-llama through the CLI, with 1 GiB off-chip stated."""
    tmp = tmp_path_factory.mktemp("gen")
    trace = tmp / "trace.json"
    code, out, err = _cli("generate", "--model", "tiny-llama", "--arch",
                          str(_arch_with_capacity(tmp, 1.0)), "--prompt-ids",
                          ",".join(map(str, PROMPT)), "--tokens", str(TOKENS), "--json",
                          "--trace", str(trace))
    assert code == 0, out + err
    return json.loads(out), json.loads(trace.read_text())


def test_llama_tokens_agree_with_torch(llama):
    res, _ = llama
    assert res["ok"] and len(res["tokens"]) == TOKENS
    _assert_agrees_with_torch("tiny-llama", res["tokens"])
    assert [c["ok"] for c in res["checks"]] == [True, True]


def test_llama_kv_cache_bytes_closed_form(llama):
    """The states the run holds at the whole context are the KV cache: layers x (K, V) x kv
    heads x head_dim x tokens, fp32 as the Program keeps it."""
    res, _ = llama
    cfg = get_config("tiny-llama")
    ctx = len(PROMPT) + TOKENS
    assert res["memory"]["context"] == ctx
    assert res["memory"]["states_bytes"] == cfg.n_layers * 2 * cfg.n_kv_heads * cfg.head_dim \
        * ctx * 4
    assert res["memory"]["capacity_bytes"] == 2**30


class _EmbedNormHead(nn.Module):
    """What a step runs besides its layers: embedding, final norm and LM head (last position)."""

    def __init__(self, lm) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, ids):
        return self.lm.lm_head(self.lm.norm(self.lm.embed(ids)[:, -1:]))


def test_llama_step_cycles_equal_the_compile_path_parts(llama):
    """Every step's cycles = n_layers x one layer as `compile` costs it (prefill of the prompt,
    decode at the step's context) + embedding, final norm and LM head compiled alone; a
    Llama layer's cost does not depend on its weights, so the parts are compiled separately."""
    res, _ = llama
    spec = arch_for_format(load_arch(ARCH), "int8")
    cfg = get_config("tiny-llama")
    head = _EmbedNormHead(build_lm("tiny-llama", seed=0, device="cpu")).eval()
    seen = {}
    for st in res["steps"]:
        key = (st["phase"], st["context"])
        if key not in seen:
            layer = compile_llm("tiny-llama", spec, phase=st["phase"], seq=st["context"],
                                fmt="int8").totals()["total_cycles"]
            rest = report_totals(compile_module(head, (torch.ones(1, st["tokens_in"],
                                                                  dtype=torch.int64),),
                                                spec, fmt="int8").report)["total_cycles"]
            seen[key] = cfg.n_layers * layer + rest
        assert st["cycles"] == seen[key], st
    s = res["summary"]
    dec = [st["cycles"] for st in res["steps"][1:]]
    assert s["prefill_cycles"] == res["steps"][0]["cycles"]
    assert s["decode_cycles_per_token"] == sum(dec) / len(dec)
    assert s["decode_tokens_per_s"] == pytest.approx(500e6 * len(dec) / sum(dec))


def test_llama_trace_tracks_do_not_overlap_and_sum_to_busy_cycles(llama):
    res, trace = llama
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert set(TRACKS) <= set(names.values())
    tid = {v: k for k, v in names.items()}
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    for track in TRACKS:
        ev = sorted((e for e in slices if e["tid"] == tid[track]),
                    key=lambda e: e["args"]["start_cycle"])
        for a, b in zip(ev, ev[1:]):
            assert a["args"]["start_cycle"] + a["args"]["cycles"] <= b["args"]["start_cycle"]
        want = sum(st["busy_cycles"]["time" if track == "instruction issue" else track]
                   for st in res["steps"])
        assert sum(e["args"]["cycles"] for e in ev) == want, track
        assert all(e["dur"] == pytest.approx(e["args"]["cycles"] / 500.0) for e in ev)
    assert sum(st["cycles"] for st in res["steps"]) == trace["otherData"]["total_cycles"]
    assert [e["name"] for e in slices if e["tid"] == tid["steps"]] == \
        ["prefill"] + [f"token {i}" for i in range(2, TOKENS + 1)]
    busy = {t: sum(st["busy_cycles"][t] for st in res["steps"]) for t in ("array", "dma")}
    assert busy["array"] > 0 and busy["dma"] > 0


@pytest.mark.parametrize("model", ["tiny-moe", "tiny-mamba"])
def test_moe_and_mamba_generate_like_torch(model):
    res = generate(model, load_arch(ARCH), PROMPT, TOKENS)
    assert res.ok, res.checks
    _assert_agrees_with_torch(model, res.tokens)
    assert [s.phase for s in res.steps] == ["prefill"] + ["decode"] * (TOKENS - 1)
    assert all(s.cycles == s.busy["time"] > 0 for s in res.steps)
    if model == "tiny-mamba":          # the scan runs on the scan unit, every step
        assert all(s.busy["scan"] > 0 for s in res.steps)
        cfg = get_config(model)        # conv and SSM state per layer, fp32, whatever the context
        assert res.memory["states_bytes"] == cfg.n_layers * cfg.d_inner * (cfg.d_conv
                                                                           + cfg.d_state) * 4


def test_vector_without_rtl_takes_the_token_from_the_units_argmax():
    """--vector alone: the next token is the vector unit's argmax on its instruction-level model
    (checked against numpy's argmax of the fp32 logits), and the host list says what of it
    stays on the host (the order keys) instead of the argmax."""
    res = generate("tiny-llama", load_arch(ARCH), PROMPT[:2], 2, vector=True)
    checks = {c: (ok, d) for c, ok, d in res.checks}
    assert res.ok, res.checks
    assert checks[ARGMAX_CHECK] == (True, "2 steps on the instruction-level model")
    host = " ".join(res.host_ops)
    assert "order keys" in host and "argmax of the logits" not in host
    _assert_agrees_with_torch("tiny-llama", res.tokens, PROMPT[:2])


def _step(token: int, ref: int, rel: float) -> StepResult:
    return StepResult("decode", 1, 5, token, 10, {"time": 10}, rel_l2=rel, torch_token=ref)


def test_divergence_check_fails_outside_the_bound():
    """A divergence at a near-tie passes; one where torch's margin exceeds what the bound allows
    fails, and so does a step whose logits are further than the bound."""
    z = np.zeros(8)
    z[3], z[5] = 1.0, 0.99                     # torch picks 3; 5 is 0.01 behind
    ref = [torch.from_numpy(z)]
    ok = _checks([_step(5, 3, 0.01)], [5], [3], ref)
    assert all(c[1] for c in ok), ok
    z2 = z.copy()
    z2[5] = -1.0                                # 2.0 behind: > 2 * 0.03 * |z|
    bad = _checks([_step(5, 3, 0.01)], [5], [3], [torch.from_numpy(z2)])
    assert not bad[1][1] and "FAILS" in bad[1][2]
    far = _checks([_step(3, 3, 2 * LOGITS_REL_L2_BOUND)], [3], [3], ref)
    assert not far[0][1]


@pytest.mark.parametrize("args,needle", [
    (["--prompt-ids", "1,256"], "token id 256 is outside tiny-llama's vocabulary (accepted: 0 "
                                "to 255)"),
    (["--tokens", "0"], "--tokens 0: the number of tokens to generate must be from 1"),
    (["--tokens", "253"], "= 257 tokens; tiny-llama's max_seq_len is 256"),
    (["--prompt-ids", "1,x"], "--prompt-ids '1,x': give token ids as integers"),
    (["--fast"], "--fast selects the RTL driver; add --rtl"),
])
def test_bad_input_one_line_exit_2(args, needle):
    base = {"--prompt-ids": ",".join(map(str, PROMPT)), "--tokens": "4"}
    for flag, value in zip(args[::2], args[1::2]):
        if flag in base:
            base[flag] = value
    extra = [a for a in args if a == "--fast"]
    code, out, err = _cli("generate", "--model", "tiny-llama", "--arch", ARCH,
                          *[x for kv in base.items() for x in kv], *extra)
    assert code == 2, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], err


def test_rtl_refuses_a_format_it_does_not_run():
    code, out, err = _cli("generate", "--model", "tiny-llama", "--arch", "ws4x4-fp8",
                          "--prompt-ids", "1,2", "--tokens", "2", "--rtl", "--fast")
    assert code == 2, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "tensor_engine.input_format = 'fp8-e4m3'" in lines[0] \
        and "accepted: int8" in lines[0], err


def test_memory_refusals_one_line_exit_2(tmp_path, llama):
    """A model bigger than offchip.capacity_gib, and a context whose KV cache does not fit
    beside the weights, are refused naming the field."""
    res, _ = llama
    weights = res["memory"]["weights_bytes"]
    tiny = _arch_with_capacity(tmp_path, 1024 / 2**30)
    code, _, err = _cli("generate", "--model", "tiny-llama", "--arch", str(tiny),
                        "--prompt-ids", "1,2", "--tokens", "2")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "weights take" in err and "offchip.capacity_gib" in err
    # room for the weights and 2 tokens of KV cache (512 B each), not for 4
    tight = _arch_with_capacity(tmp_path, (weights + 2 * 512) / 2**30)
    code, _, err = _cli("generate", "--model", "tiny-llama", "--arch", str(tight),
                        "--prompt-ids", "1,2", "--tokens", "2")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "KV cache of 2,048 bytes" in err and "offchip.capacity_gib" in err


# ---- --rtl: every step's GEMMs on the Verilated accelerator top --------------------------------
# ws8x8v's accelerator top (8x8 WS core + vector engine) with the C++ fast driver: the build
# tests/test_vector_accel.py makes, reused here (same key)
def _generate_on_rtl(model: str) -> dict:
    """``generate --rtl --fast --vector --json`` of ``model`` on ARCH (PROMPT, TOKENS): exit 0,
    every check passed at every step, the next token the RTL argmax's, tokens as torch's (or a
    first divergence the bound allows); the JSON result."""
    code, out, err = _cli("generate", "--model", model, "--arch", ARCH,
                          "--prompt-ids", ",".join(map(str, PROMPT)), "--tokens", str(TOKENS),
                          "--rtl", "--fast", "--vector", "--json")
    assert code == 0, out + err
    res = json.loads(out)
    checks = {c["check"]: c for c in res["checks"]}
    assert all(c["ok"] for c in checks.values()), checks
    for name in ("RTL GEMMs == numpy int32 (bit-exact)",
                 "RTL vector engine == instruction-level model (bit-exact)",
                 "layer output with RTL GEMMs and vector ops == functional (bit-exact)",
                 "RTL cycles == accelerator cycle model (every GEMM, DMA included)",
                 "RTL cycles == accelerator cycle model (every vector kernel, DMA included)"):
        assert checks[name]["detail"] == f"all {TOKENS} steps", name
    assert checks[ARGMAX_CHECK]["detail"] == f"{TOKENS} steps on the RTL vector engine"
    vocab, lanes = get_config(model).vocab_size, load_arch(ARCH).vector_unit.lanes
    for st in res["steps"]:
        r = st["rtl"]
        assert r["gemms"] > 0 and r["rtl_cycles"] == r["model_cycles"] > 0
        assert r["vector_kernels"] > 0 and r["vector_rtl_cycles"] == r["vector_model_cycles"] > 0
        # the next token is the RTL argmax's index; its kernel's cycles are the model's: one
        # row of at least `vocab` int32 lanes, more than ceil(vocab / lanes) beats
        assert st["token"] == r["token"]
        assert r["argmax_rtl_cycles"] == r["argmax_model_cycles"] > -(-vocab // lanes)
    _assert_agrees_with_torch(model, res["tokens"])
    host = " ".join(res["on_the_host"])
    for op in ("order keys", "int32 results to fp32"):
        assert op in host, op
    # the per-tensor int8 quantize of each GEMM's activation: qshift + requant on the RTL
    assert "quantize" not in host, host
    assert "rsqrt" not in host          # on the vector engine with --vector
    # the norms' mean too: a row mean kernel (sum, then rescale by 1/n) on the RTL
    assert "reduce_mean" not in host, host
    # and the norms' square (pow, exponent 2): a square kernel (mul of x by itself) on the RTL
    assert "pow" not in host, host
    # RoPE's sub (x1 cos - x2 sin) on the vector unit's sub (opcode 13)
    assert "sub x" not in host, host
    assert "argmax of the logits" not in host
    # every step's embedding rows came from LOAD_VI (bit-exact vs the table's rows): the
    # decode steps' token id in the index register, the prefill's prompt ids each loaded by
    # LOAD_IDX from external memory; no embedding gather left on the host
    assert checks[GATHER_CHECK]["detail"] == f"all {TOKENS} steps"
    assert "embedding gather" not in host
    return res


# ws8x8v's accelerator top (8x8 WS core + vector engine) with the C++ fast driver: the build
# tests/test_vector_accel.py makes, reused here (same key)
def test_rtl_fast_tiny_llama_bit_exact_and_cycle_exact():
    res = _generate_on_rtl("tiny-llama")
    assert "KV append" in " ".join(res["on_the_host"])


@pytest.mark.nightly
@pytest.mark.parametrize("model", ["tiny-moe", "tiny-mamba"])
def test_rtl_fast_moe_and_mamba_bit_exact_and_cycle_exact(model):
    """The other two families on the same build (nightly: tiny-llama's run covers the flow in
    CI; 4-6 s each measured with the build cached, 11-13 s as a fresh CLI process): every
    check at every step."""
    res = _generate_on_rtl(model)
    host = " ".join(res["on_the_host"])
    if model == "tiny-mamba":           # the scan on the vector engine's scan unit
        assert "scan" not in host and all(st["busy_cycles"]["scan"] > 0 for st in res["steps"])
        # A = -exp(A_log)'s neg (mul by -1.0) and the conv state's copy (LOAD_V + STORE_V of its
        # fp32 bits) on the vector engine, every step that has them (the copy: decode steps)
        assert "neg x" not in host and "copy x" not in host, host
        off = [st["rtl"]["offloaded"] for st in res["steps"]]
        assert all(sum(t.endswith(".neg") for t in o) == 2 for o in off)
        assert all(sum(t.endswith(".copy") for t in o) == 2 for o in off[1:])
    else:                               # MoE routing stays on the host, by name
        assert "topk_indices" in host, host


@pytest.mark.parametrize("mutation", ["bit", "cycle", "argmax", "gather", "quantize"])
def test_rtl_one_bit_or_one_cycle_off_exits_1(monkeypatch, mutation):
    """A one-bit error in one RTL GEMM result, one cycle more in one RTL GEMM, or (--vector)
    the RTL argmax's token one off, or one bit of each step's embedding rows fetched by
    LOAD_VI (the prefill's through LOAD_IDX), or (--vector) one RTL quantize's shift one off
    (its scale twice the model's), fails `generate --rtl` (exit 1, the check named FAIL)."""
    from tilewright.app.flows import sim_rtl

    real = sim_rtl.run

    def wrong(*args, **kwargs):
        sim = real(*args, **kwargs)
        if mutation == "argmax":
            if "lm_head.argmax" in sim.outputs:
                sim.outputs["lm_head.argmax"] = np.asarray(sim.outputs["lm_head.argmax"]) ^ 1
        elif mutation == "gather":
            for k in [k for k in sim.outputs if k.endswith("embed.take_rows")]:
                row = np.array(sim.outputs[k], copy=True)
                row.reshape(-1)[0] ^= 1
                sim.outputs[k] = row
        elif mutation == "quantize":          # the first quantize kernel of a vector run
            for k in [k for k in sim.outputs if k.endswith(".quantize")][:1]:
                codes, shift = sim.outputs[k]
                sim.outputs[k] = (codes, np.asarray(shift) + 1)
        elif mutation == "bit":
            c0 = np.array(sim.outputs["c0"], copy=True)
            c0.reshape(-1)[0] ^= 1
            sim.outputs["c0"] = c0
        else:
            sim.records[0]["cycles"] += 1
        return sim

    monkeypatch.setattr(sim_rtl, "run", wrong)
    code, out, err = _cli("generate", "--model", "tiny-llama", "--arch", ARCH,
                          "--prompt-ids", "1,2", "--tokens", "2" if mutation == "gather" else "1",
                          "--rtl", "--fast", "--json",
                          *(["--vector"] if mutation in ("argmax", "gather", "quantize")
                            else []))
    assert code == 1, out + err
    failed = {c["check"] for c in json.loads(out)["checks"] if not c["ok"]}
    want = {"bit": {"RTL GEMMs == numpy int32 (bit-exact)"},
            "cycle": {"RTL cycles == accelerator cycle model (every GEMM, DMA included)"},
            "argmax": {ARGMAX_CHECK, "RTL vector engine == instruction-level model (bit-exact)"},
            "gather": {GATHER_CHECK, "RTL vector engine == instruction-level model (bit-exact)"},
            "quantize": {"RTL vector engine == instruction-level model (bit-exact)"}
            }[mutation]
    assert want <= failed, failed
