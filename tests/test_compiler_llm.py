"""LLM compiler path: tiny transformer / MoE / Mamba layers compiled to fp32 Programs, executed on
the functional model and compared with torch; lowering structure; report; analytical timing.

References are independent of the compiler: torch's own forward for outputs, closed-form MAC and
block counts computed here from the config, torch's ``counts`` output for the expert counts.
"""

from __future__ import annotations


import numpy as np
import pytest
import torch

from tilewright.arch import ArchSpec, load_arch
from tilewright.compiler.frontend import UnsupportedOp, export_model, from_exported
from tilewright.dataflow_sim.compile_flow import compile_llm
from tilewright.compiler.program import (AttentionTask, BgemmTask, GroupedGemmTask, Program,
                                         ScanTask)
from tilewright.compiler.llm_tiling import attention_buffer_bytes, plan_attention_blocks
from tilewright.dataflow_sim.functional import run_program
from tilewright.models.llm_configs import build_llm, get_config

CASES = [("tiny-llama", "prefill"), ("tiny-llama", "decode"), ("tiny-moe", "prefill"),
         ("tiny-moe-sigmoid", "prefill"), ("tiny-mamba", "prefill"), ("tiny-mamba", "decode")]
SEQ, BATCH = 8, 2


def small_arch() -> ArchSpec:
    """A 4x4 array with 4 KiB buffers: forces GEMM tiling, small attention blocks, scan chunks."""
    return ArchSpec.from_dict({"name": "small-ws4x4", "tensor_engine": {
        "rows": 4, "cols": 4, "dataflow": "ws"},
        "memory": {"scratchpad_kib": 4, "accumulator_kib": 2}})


@pytest.fixture(scope="module", params=[pytest.param(a, id=a) for a in ("ws16x16", "small")])
def arch(request) -> ArchSpec:
    return small_arch() if request.param == "small" else load_arch(request.param)


@pytest.fixture(scope="module")
def compiled(arch):
    out = {}
    for name, phase in CASES:
        res = compile_llm(name, arch, seq=SEQ, batch=BATCH, phase=phase, seed=3)
        module, inputs = build_llm(name, seed=3, seq=SEQ, batch=BATCH, phase=phase)
        with torch.no_grad():
            ref = module(*inputs)
        out[(name, phase)] = (res, ref)
    return out


def rel_err(got: np.ndarray, ref: torch.Tensor) -> float:
    r = ref.detach().double().numpy()
    return float(np.abs(got.astype(np.float64) - r).max() / max(np.abs(r).max(), 1e-30))


@pytest.mark.parametrize("case", CASES, ids=[f"{n}-{p}" for n, p in CASES])
def test_functional_fp32_matches_torch(compiled, case):
    res, ref = compiled[case]
    assert len(res.program.outputs) == len(ref)
    for name, r in zip(res.program.outputs, ref):
        got = res.outputs[name]
        assert got.shape == tuple(r.shape), name
        if r.dtype == torch.int64:
            np.testing.assert_array_equal(got, r.numpy())
        else:
            assert rel_err(got, r) <= 1e-5, (case, name, rel_err(got, r))


def _kinds(prog: Program) -> set[str]:
    return {t.kind for t in prog.tasks}


def test_attention_is_one_fused_streaming_task(compiled):
    for phase in ("prefill", "decode"):
        res, _ = compiled[("tiny-llama", phase)]
        att = [t for t in res.program.tasks if isinstance(t, AttentionTask)]
        assert len(att) == 1
        a = att[0]
        cfg = get_config("tiny-llama")
        # decode at context SEQ: SEQ - 1 cached keys + the new one, every key visible; the
        # group's n_heads / n_kv_heads query heads are the rows of one block (GQA: each KV
        # head read once per group)
        assert a.causal_offset == (0 if phase == "prefill" else SEQ - 1)
        assert a.scale == pytest.approx(cfg.head_dim ** -0.5)
        assert (a.s, a.t, a.d) == ((SEQ, SEQ, cfg.head_dim) if phase == "prefill"
                                   else (cfg.n_heads // cfg.n_kv_heads, SEQ, cfg.head_dim))
        # no softmax or S x T mask survives
        assert not any(getattr(t, "op", "") in ("softmax", "masked_fill", "gt")
                       for t in res.program.tasks)


def test_moe_lowered_to_grouped_gemms_with_real_counts(compiled):
    for name in ("tiny-moe", "tiny-moe-sigmoid"):
        res, ref = compiled[(name, "prefill")]
        counts = ref[-1]                      # the MoE FFN's counts: the last output
        cfg = get_config(name)
        t = SEQ * BATCH
        groups = [x for x in res.program.tasks if isinstance(x, GroupedGemmTask)]
        assert len(groups) == 3                                     # gate, up, down
        for g in groups:
            assert g.example_counts == tuple(counts.tolist())       # torch's own counts
            assert g.rows == t * cfg.top_k == sum(g.example_counts)
        # closed form: routed MACs = T * k * 3 * D * F_expert
        assert sum(g.macs for g in groups) == t * cfg.top_k * 3 * cfg.d_model * cfg.d_expert_ffn
        # the O(E * T^2) one-hot dispatch tensors are gone
        for info in res.program.tensors.values():
            assert len(info.shape) < 3 or (info.shape[0], info.shape[-1]) != (t, t), info


def test_scan_is_chunked_primitive(compiled, arch):
    cfg = get_config("tiny-mamba")
    for phase, length in (("prefill", SEQ), ("decode", 1)):
        res, _ = compiled[("tiny-mamba", phase)]
        scans = [t for t in res.program.tasks if isinstance(t, ScanTask)]
        assert len(scans) == 1
        s = scans[0]
        assert (s.batch, s.length, s.channels, s.state) == (BATCH, length, cfg.d_inner,
                                                            cfg.d_state)
        assert s.buffer_bytes() <= arch.memory.scratchpad_bytes
        assert len([t for t in res.program.tasks if getattr(t, "op", "") == "select"]) == 1


def test_report_costs_every_op(compiled, arch):
    for res, _ in compiled.values():
        df = res.report
        assert len(df) == len(res.program.tasks)
        # a view (reshape, slice, select, a permute of size-1 axes) moves nothing: 0 and 0;
        # every other task costs cycles and bytes
        view = np.array([getattr(t, "attrs", {}).get("view", False) for t in res.program.tasks])
        assert (df["cycles"][view] == 0).all() and (df["bytes"][view] == 0).all()
        assert (df["cycles"][~view] > 0).all() and (df["bytes"][~view] > 0).all()
        assert set(df["bound"]) <= {"compute", "fill", "sram", "dram", "vector", "free"}
        assert (df["bound"][view] == "free").all() and (df["bound"][~view] != "free").all()
        roof = np.maximum(df["cycles"], df["mem_cycles"])
        mapped = df["kind"].isin(["bgemm", "grouped_gemm"])
        assert (df["time_cycles"][~mapped] == roof[~mapped]).all()
        # mapped GEMMs take the mapper's pipeline time: never below compute or DRAM time
        assert (df["time_cycles"][mapped] >= roof[mapped]).all()
        assert (df["mapping"][mapped] != "").all()
        assert res.totals()["total_cycles"] == int(df["time_cycles"].sum())


def test_llama_macs_closed_form():
    """Projection + FFN MACs and attention MACs (visited causal blocks) of llama3-8b at seq 2048,
    shapes only, against formulas written from the config."""
    arch = load_arch("ws16x16")
    seq = 2048
    res = compile_llm("llama3-8b", arch, seq=seq)
    cfg = get_config("llama3-8b")
    d, h, hkv, hd, f = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.d_ffn
    proj = seq * (d * h * hd + 2 * d * hkv * hd + h * hd * d + 3 * d * f)
    gemm = sum(t.macs for t in res.program.tasks if isinstance(t, BgemmTask))
    assert gemm == proj
    (att,) = [t for t in res.program.tasks if isinstance(t, AttentionTask)]
    bq, bk = att.block_q, att.block_kv
    assert seq % bq == 0 and seq % bk == 0
    # causal: key block j is visited by query block i iff its first key j*bk <= the block's last
    # query row (i+1)*bq - 1 — counted one pair at a time
    pairs = sum(j * bk <= (i + 1) * bq - 1 for i in range(seq // bq) for j in range(seq // bk))
    row = res.report.set_index("task").loc[att.name]
    assert row["macs"] == h * pairs * 2 * att.block_q * att.block_kv * hd
    assert res.shape_only


def test_attention_buffer_constant_from_128_to_32k():
    """Shapes only: the cascade's on-chip bytes do not depend on the sequence length."""
    arch = load_arch("ws16x16")
    sizes = []
    for seq in (128, 512, 2048, 8192, 32768):
        bq, bk = plan_attention_blocks(arch, seq, seq, 128)
        task = AttentionTask(name="a", q="q", k="k", v="v", out="o", batch=(8, 4), s=seq, t=seq,
                             d=128, scale=1.0, causal_offset=0, block_q=bq, block_kv=bk)
        sizes.append(task.buffer_bytes())
        assert task.buffer_bytes() == attention_buffer_bytes(bq, bk, 128)
        assert task.buffer_bytes() <= arch.memory.scratchpad_bytes
    assert len(set(sizes)) == 1, sizes


def test_analytical_llama3_70b_all_layers_are_80_times_one_layer():
    """Shape-only compile of the real-size models (speed: benchmarks/compile_speed.py)."""
    arch = load_arch("ws16x16")
    res = compile_llm("llama3-8b", arch, seq=2048)
    assert res.totals()["total_cycles"] > 0
    big = compile_llm("llama3-70b", arch, seq=2048)
    total = big.totals(all_layers=True)
    assert total["layers"] == 80 and total["total_cycles"] == 80 * big.totals()["total_cycles"]


def test_program_save_load_round_trip(compiled, tmp_path):
    res, _ = compiled[("tiny-mamba", "prefill")]
    res.program.save(tmp_path / "p")
    back = Program.load(tmp_path / "p")
    assert back.tasks == res.program.tasks
    env = run_program(back, res.inputs)
    for o in back.outputs:
        np.testing.assert_array_equal(env[o], res.outputs[o])


def test_unsupported_op_in_llm_names_op_and_line():
    class Cos(torch.nn.Module):
        def forward(self, x):
            return torch.cos(x) + 1

    with pytest.raises(UnsupportedOp, match=r"aten.cos.*test_compiler_llm.py:\d+"):
        from_exported(export_model(Cos(), (torch.randn(2, 3),)))


def test_topk_of_a_softmax_ranks_the_logits_so_q88_ties_do_not_pick_experts():
    """A router's ``softmax(x).topk(2)``: the indices task reads x (softmax is strictly
    increasing along its axis), the values still the softmax's. Logits whose probabilities the
    vector unit's Q8.8 softmax rounds to the same step (0.2 vs 0.2005 apart by far less than
    2**-8 after the softmax) pick torch's experts with --vector's arithmetic too."""
    from tilewright.compiler.program import VectorTask
    from tilewright.dataflow_sim.compile_flow import compile_module
    from tilewright.dataflow_sim.functional import vector_unit_ops
    from tilewright.dataflow_sim.vector_offload import VectorUnitOps

    class Router(torch.nn.Module):
        def forward(self, x):
            v, i = torch.softmax(x, dim=-1).topk(2, dim=-1)
            return v, i

    arch = load_arch("ws8x8v")
    x = torch.tensor([[0.0, 0.2, 0.2005, -1.0], [1.0, 0.999, 0.9985, 0.0]])
    want = torch.softmax(x, -1).topk(2, -1)
    hook = VectorUnitOps(arch)
    with vector_unit_ops(hook):
        c = compile_module(Router(), (x,), arch, name="router")
    tk = [t for t in c.program.tasks if isinstance(t, VectorTask) and t.op == "topk_indices"]
    sm = [t for t in c.program.tasks if isinstance(t, VectorTask) and t.op == "softmax"]
    assert len(tk) == len(sm) == 1 and tk[0].inputs == sm[0].inputs
    assert any(r.kernel.op == "softmax" for r in hook.records)       # Q8.8 probabilities
    idx = c.outputs[c.program.outputs[1]]
    assert idx.tolist() == want.indices.tolist()
    # the Q8.8 probabilities do tie here: ranking them would have picked the lower index
    probs = c.outputs[c.program.outputs[0]]
    assert probs[0, 0] == probs[0, 1] or probs[1, 0] == probs[1, 1]
