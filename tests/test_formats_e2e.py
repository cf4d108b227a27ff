"""Every number format end to end: the tiny configs of every family compiled for each format,
executed on the functional model, each GEMM-like task checked against torch applying the same
quantization.

Reference (independent of :mod:`tilewright.formats` and ``numerics``): torch's own casts
(``.to(torch.bfloat16)``, ``.to(torch.float8_e4m3fn/e5m2)``, ``torch.round`` = half to even,
``torch.frexp``/``torch.ldexp`` for MX exponents) applied to the task's fp32 operands (the
activation the ``quantize`` task read; the weight as torch exported it), with the documented
rules (scale = amax / qmax in fp32; MX X = floor(log2 amax) - emax_elem), then a float64 matmul.

Bounds, with u = 2**-24 (fp32 unit roundoff):

* **GEMMs** (bgemm, grouped_gemm): the operands are the same exactly (asserted), so the only
  difference is fp32 accumulation: K sequential additions, one product rounding (fp32 elements
  only), fl32(s_a * s_b) and the final scaling, i.e. at most K + 3 roundings per term:
  ``|out - ref| <= gamma_{K+3} * (|A| @ |B|)`` elementwise (Higham, the dot-product bound).
* **attention**: the cascade quantizes p = exp(s - m) per block (bf16 RNE; int8/fp8 per block
  tensor scale; MX per 32-block), the reference does not; with p relative to the row max
  (l >= 1) an element error ``|p^ - p| <= u_p * p + delta`` gives
  ``|o - o_ref| <= (u_p + T * delta + 2 * dS + (2T + d + 20) * u) * max|v|``, where u_p and
  delta are the format's relative and absolute (subnormal / integer step) rounding of p <= 1,
  dS = gamma_{d+3} * max(|q| @ |k|^T) * scale the score error (e^dS - 1 <= 2 dS), and the last
  term covers the fp32 exp/rescale/sum operations of the cascade.
* fp32 format: the model output matches torch's fp32 forward within 1e-5 relative.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tilewright.arch import ArchSpec
from tilewright.compiler.frontend import export_model, from_exported
from tilewright.compiler.lower_llm import lower_graph
from tilewright.compiler.passes import run_flow
from tilewright.compiler.program import (AttentionTask, BgemmTask, GroupedGemmTask, Program,
                                         QuantizeTask)
from tilewright.dataflow_sim.functional import run_program
from tilewright.models.llm_configs import build_llm

U32 = 2.0 ** -24
CASES = [("tiny-llama", "prefill"), ("tiny-llama", "decode"), ("tiny-moe", "prefill"),
         ("tiny-mamba", "prefill"), ("tiny-mamba", "decode")]
FORMATS = [("fp32", "channel"), ("bf16", "channel"), ("int8", "tensor"), ("int8", "channel"),
           ("fp8-e4m3", "channel"), ("fp8-e5m2", "tensor"), ("mxint8", "channel"),
           ("mxfp8", "channel")]
SEQ, BATCH = 8, 1
ARCH = ArchSpec.from_dict({"name": "ws32x32", "tensor_engine": {"rows": 32, "cols": 32,
                                                                 "dataflow": "ws"}})

# ---- independent torch quantization --------------------------------------------------------
_F8 = {"fp8-e4m3": (torch.float8_e4m3fn, 448.0, 8), "fp8-e5m2": (torch.float8_e5m2, 57344.0, 15),
       "mxfp8": (torch.float8_e4m3fn, 448.0, 8)}
#: p (<= 1) rounding of the cascade: (relative u_p, absolute delta)
P_ROUNDING = {"fp32": (0.0, 0.0), "bf16": (2.0 ** -8, 0.0), "fp8-e4m3": (2.0 ** -4, 2.0 ** -10),
              "fp8-e5m2": (2.0 ** -3, 2.0 ** -17), "int8": (U32, 1 / 254),
              "mxint8": (U32, 2.0 ** -7), "mxfp8": (2.0 ** -4, 2.0 ** -10)}


def torch_dequantized(x: np.ndarray, fmt: str, axis: int, gran: str) -> torch.Tensor:
    """float64 values of ``x`` after the documented quantization, computed with torch only."""
    t = torch.from_numpy(np.ascontiguousarray(x, np.float32))
    if fmt == "fp32":
        return t.double()
    if fmt == "bf16":
        return t.to(torch.bfloat16).double()
    if fmt in ("int8", "fp8-e4m3", "fp8-e5m2"):
        qmax = 127.0 if fmt == "int8" else _F8[fmt][1]
        amax = t.abs().amax() if gran == "tensor" else t.abs().amax(dim=axis, keepdim=True)
        s = amax / qmax
        s = torch.where(amax == 0, torch.ones_like(s),
                        torch.clamp(s, min=torch.finfo(torch.float32).smallest_normal * 2 ** -23))
        v = t / s
        if fmt == "int8":
            c = torch.round(v).clamp(-127, 127).double()
        else:
            c = v.clamp(-qmax, qmax).to(_F8[fmt][0]).double()
        return c * s.double()
    # MX: blocks of 32 along axis
    tm = t.movedim(axis, -1)
    k = tm.shape[-1]
    nb = -(-k // 32)
    blocks = torch.nn.functional.pad(tm, (0, nb * 32 - k)).reshape(*tm.shape[:-1], nb, 32)
    amax = blocks.abs().amax(-1, keepdim=True)
    emax = 0 if fmt == "mxint8" else _F8[fmt][2]
    _, e = torch.frexp(amax)
    xexp = torch.where(amax > 0, e - 1 - emax, torch.full_like(e, -127)).clamp(-127, 127)
    v = torch.ldexp(blocks, -xexp.float())
    if fmt == "mxint8":
        el = torch.round(v * 64).clamp(-127, 127).double() / 64
    else:
        el = v.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).double()
    deq = torch.ldexp(el, xexp.double()).reshape(*tm.shape[:-1], nb * 32)[..., :k]
    return deq.movedim(-1, axis)


# ---- compiled programs -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def graphs():
    out = {}
    for name, phase in CASES:
        module, inputs = build_llm(name, seed=5, seq=SEQ, batch=BATCH, phase=phase)
        g = from_exported(export_model(module, inputs), name=name)
        run_flow(g, "llm")
        with torch.no_grad():
            ref = module(*inputs)
        out[(name, phase)] = (g, [x.numpy() for x in inputs], ref)
    return out


def _operand(prog: Program, graph, env, name: str, axis: int):
    """``(fp32 source, (axis, granularity) or None for fp32)`` of a GEMM operand: the tensor the
    Program's quantize task read, or the exported fp32 weight a compile-time quantization read."""
    fmt = prog.meta["format"]
    if fmt == "fp32":
        return env[name], None
    made = [t for t in prog.tasks if isinstance(t, QuantizeTask) and t.out == name]
    if made:
        q = made[0]
        return env[q.x], (q.axis, q.granularity)
    src = name.removesuffix(f".{fmt}")
    gran = {"bf16": "none", "mxint8": "block", "mxfp8": "block"}.get(
        fmt, prog.meta.get("weight_granularity"))
    return graph.tensors[src].data, (axis, gran)


def _deq(x, fmt, spec, stacked=False):
    if spec is None:
        return torch.from_numpy(np.asarray(x, np.float32)).double()
    axis, gran = spec
    if stacked:
        return torch.stack([torch_dequantized(e, fmt, axis, gran) for e in x])
    return torch_dequantized(x, fmt, axis % x.ndim, gran)


def _bound_gemm(a, b, k):
    g = (k + 3) * U32 / (1 - (k + 3) * U32)
    return g * (a.abs() @ b.abs())


@pytest.mark.parametrize("fmt,gran", FORMATS, ids=[f"{f}-{g}" for f, g in FORMATS])
def test_every_gemm_matches_torch_quantized_reference(graphs, fmt, gran):
    for case, (graph, inputs, ref_out) in graphs.items():
        prog = lower_graph(graph, ARCH, fmt=fmt, granularity=gran, name=case[0])
        # formats are visible: every GEMM-like task carries fmt; operands are stored in it
        gemms = [t for t in prog.tasks if isinstance(t, (BgemmTask, GroupedGemmTask,
                                                          AttentionTask))]
        assert gemms and all(t.format == fmt and t.k_block == 32 for t in gemms)
        env = run_program(prog, dict(zip(prog.inputs, inputs)))
        checked = 0
        for t in gemms:
            if isinstance(t, AttentionTask):
                _check_attention(prog, graph, env, t, fmt)
                checked += 1
                continue
            stacked = isinstance(t, GroupedGemmTask)
            assert prog.tensors[t.b].format == fmt and prog.tensors[t.a].format == fmt
            xa, sa = _operand(prog, graph, env, t.a, -1)
            xb, sb = _operand(prog, graph, env, t.b, (1 if t.transpose_b else 0) if stacked
                              else (-1 if t.transpose_b else -2))
            A, B = _deq(xa, fmt, sa), _deq(xb, fmt, sb, stacked)
            if t.transpose_b:
                B = B.transpose(-1, -2)
            if stacked:
                counts = env[t.counts].tolist()
                parts, bparts, start = [], [], 0
                for e, c in enumerate(counts):
                    parts.append(A[start:start + c] @ B[e])
                    bparts.append(_bound_gemm(A[start:start + c], B[e], t.k))
                    start += c
                ref, bound = torch.cat(parts), torch.cat(bparts)
            else:
                ref, bound = A @ B, _bound_gemm(A, B, t.k)
            got = torch.from_numpy(env[t.out].astype(np.float64)).reshape(ref.shape)
            err = (got - ref).abs()
            assert bool((err <= bound + 1e-30).all()), (case, t.name, float((err - bound).max()))
            checked += 1
        assert checked == len(gemms)
        if fmt == "fp32":
            for name, r in zip(prog.outputs, ref_out):
                if r.dtype.is_floating_point:
                    r64 = r.double().numpy()
                    rel = np.abs(env[name] - r64).max() / np.abs(r64).max()
                    assert rel <= 1e-5, (case, name, rel)


def _check_attention(prog, graph, env, t: AttentionTask, fmt: str) -> None:
    q, sq = _operand(prog, graph, env, t.q, -1)
    k, sk = _operand(prog, graph, env, t.k, -1)
    v, sv = _operand(prog, graph, env, t.v, -2)
    Q, K, V = _deq(q, fmt, sq), _deq(k, fmt, sk), _deq(v, fmt, sv)
    S = (Q @ K.transpose(-1, -2)) * t.scale
    if t.causal_offset is not None:
        i = torch.arange(t.s)[:, None]
        j = torch.arange(t.t)[None, :]
        S = S.masked_fill(j > i + t.causal_offset, float("-inf"))
    ref = torch.softmax(S, -1) @ V
    u_p, delta = P_ROUNDING[fmt]
    gd = (t.d + 3) * U32
    ds = gd * float((Q.abs() @ K.abs().transpose(-1, -2)).max()) * abs(t.scale)
    vmax = float(V.abs().max())
    bound = (u_p + t.t * delta + 2 * ds + (2 * t.t + t.d + 20) * U32) * vmax
    err = float((torch.from_numpy(env[t.out].astype(np.float64)) - ref).abs().max())
    assert err <= bound, (t.name, fmt, err, bound)


@pytest.mark.parametrize("fmt", ["bf16", "fp8-e4m3", "mxfp8"])
def test_save_load_round_trips_low_precision_arrays(graphs, fmt, tmp_path):
    graph, inputs, _ = graphs[("tiny-llama", "prefill")]
    prog = lower_graph(graph, ARCH, fmt=fmt, name="tiny-llama")
    assert any(prog.tensors[n].format == fmt for n in prog.constants)
    prog.save(tmp_path / fmt)
    back = Program.load(tmp_path / fmt)
    assert back.tasks == prog.tasks and back.tensors == prog.tensors
    for n, arr in prog.constants.items():
        assert back.constants[n].dtype == arr.dtype, n
        np.testing.assert_array_equal(back.constants[n].view(np.uint8), arr.view(np.uint8))
    a = run_program(prog, dict(zip(prog.inputs, inputs)))
    b = run_program(back, dict(zip(back.inputs, inputs)))
    for o in prog.outputs:
        np.testing.assert_array_equal(a[o], b[o])


def test_quantized_operands_equal_torch_quantization(graphs):
    """The quantize step is the same one torch applies: the Program's codes x scales equal the
    torch-quantized values exactly, for activations (run time) and weights (compile time)."""
    from tilewright.formats import FORMATS as NF, QTensor, dequantize  # noqa: PLC0415
    graph, inputs, _ = graphs[("tiny-llama", "prefill")]
    for fmt, gran in FORMATS[1:]:
        prog = lower_graph(graph, ARCH, fmt=fmt, granularity=gran, name="tiny-llama")
        env = run_program(prog, dict(zip(prog.inputs, inputs)))
        for t in prog.tasks:
            if not isinstance(t, BgemmTask):
                continue
            for name, scale, axis in ((t.a, t.a_scale, -1), (t.b, t.b_scale,
                                                              -1 if t.transpose_b else -2)):
                x, spec = _operand(prog, graph, env, name, axis)
                codes = env[name]
                if scale is None:
                    mine = codes.astype(np.float64)
                else:
                    g = {"e8m0": "block"}.get(prog.tensors[scale].format,
                                              "tensor" if env[scale].size == 1 else "channel")
                    sc = env[scale].reshape((1,) * codes.ndim) if g == "tensor" else env[scale]
                    mine = dequantize(QTensor(fmt, codes, sc, spec[0] % codes.ndim, g)
                                      ).astype(np.float64) if NF[fmt].scaling == "e8m0" else \
                        codes.astype(np.float64) * sc.astype(np.float64)
                np.testing.assert_array_equal(mine, _deq(x, fmt, spec).numpy(),
                                              err_msg=f"{fmt} {name}")
