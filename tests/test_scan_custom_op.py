"""The selective scan as one torch custom op (``tilewright::ssm_scan``) and the IR's
producer/consumer index.

References are independent of the code under test: a float64 numpy recurrence, finite
differences (``gradcheck``), the explicit torch loop the model used before (``unrolled``), and a
brute-force search over ``graph.ops`` for the index.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from tilewright.arch import load_arch
from tilewright.compiler.frontend import export_model, from_exported
from tilewright.compiler.ir import Graph, Op, Tensor
from tilewright.dataflow_sim.compile_flow import compile_llm, compile_module
from tilewright.models.llm_configs import build_llm
from tilewright.models.ssm import scan_loop, selective_scan, ssm_scan

SCAN = torch.ops.tilewright.ssm_scan.default


def _operands(bt=2, length=9, di=5, n=3, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(bt, length, di, n, generator=g, dtype=dtype)           # decays in (0, 1)
    b = torch.randn(bt, length, di, n, generator=g, dtype=dtype)
    c = torch.randn(bt, length, n, generator=g, dtype=dtype)
    h0 = torch.randn(bt, di, n, generator=g, dtype=dtype)
    return a, b, c, h0


def _scan_numpy(a, b, c, h0):
    """h[t] = a[t] h[t-1] + b[t]; y[t] = sum_n h[t, :, n] c[t, n] — one element at a time."""
    a, b, c, h0 = (x.numpy() for x in (a, b, c, h0))
    bt, length, di, n = a.shape
    y = np.zeros((bt, length, di))
    h = h0.copy()
    for i in range(bt):
        for t in range(length):
            for d in range(di):
                for k in range(n):
                    h[i, d, k] = a[i, t, d, k] * h[i, d, k] + b[i, t, d, k]
                    y[i, t, d] += h[i, d, k] * c[i, t, k]
    return y, h


def test_custom_op_equals_numpy_recurrence_and_the_explicit_loop():
    ops = _operands()
    y_np, h_np = _scan_numpy(*ops)
    y, h = ssm_scan(*ops)
    y_loop, h_loop = scan_loop(*ops)
    assert np.abs(y.numpy() - y_np).max() < 1e-12 and np.abs(h.numpy() - h_np).max() < 1e-12
    assert torch.equal(y, y_loop) and torch.equal(h, h_loop)


def test_selective_scan_one_op_equals_unrolled_loop_in_fp32():
    g = torch.Generator().manual_seed(3)
    u, delta = torch.randn(2, 11, 6, generator=g), torch.rand(2, 11, 6, generator=g)
    a_mat = -torch.rand(6, 4, generator=g) * 3
    b_mat, c_mat, d = (torch.randn(2, 11, 4, generator=g), torch.randn(2, 11, 4, generator=g),
                       torch.randn(6, generator=g))
    h0 = torch.randn(2, 6, 4, generator=g)
    for init in (None, h0):
        y1, h1 = selective_scan(u, delta, a_mat, b_mat, c_mat, d, init)
        y2, h2 = selective_scan(u, delta, a_mat, b_mat, c_mat, d, init, unrolled=True)
        assert torch.equal(y1, y2) and torch.equal(h1, h2)


def test_custom_op_gradients_match_finite_differences():
    ops = [x.clone().requires_grad_() for x in _operands(bt=1, length=4, di=3, n=2, seed=1)]
    assert torch.autograd.gradcheck(lambda *x: ssm_scan(*x), ops)


def test_fake_impl_gives_shapes_on_meta_and_checks_them():
    meta = [x.to("meta") for x in _operands(length=7)]
    y, h = ssm_scan(*meta)
    assert y.shape == (2, 7, 5) and h.shape == (2, 5, 3) and y.is_meta
    with pytest.raises(RuntimeError, match="ssm_scan: c"):
        ssm_scan(meta[0], meta[1], meta[2][:, :, :2], meta[3])


@pytest.mark.parametrize("seq", [4, 64])
def test_export_records_one_scan_node_whatever_the_length(seq):
    layer, example = build_llm("tiny-mamba", seq=seq)
    nodes = [n for n in export_model(layer, example).graph.nodes if n.op == "call_function"]
    targets = [n.target for n in nodes]
    assert targets.count(SCAN) == 1
    assert torch.ops.aten.stack.default not in targets
    # torch's decomposition tables leave the op whole (it has no decomposition)
    decomposed = export_model(layer, example).run_decompositions()
    assert [n.target for n in decomposed.graph.nodes].count(SCAN) == 1
    # the graph does not grow with the sequence: same node count at 4 and 64 steps
    assert len(nodes) == len([n for n in export_model(*build_llm("tiny-mamba", seq=8)).graph.nodes
                              if n.op == "call_function"])


def test_frontend_maps_the_op_to_the_ir_scan():
    layer, example = build_llm("tiny-mamba", seq=6, batch=2)
    graph = from_exported(export_model(layer, example))
    scans = [op for op in graph.ops if op.kind == "scan"]
    assert len(scans) == 1
    a, b, c, h0 = (graph.tensors[x].shape for x in scans[0].inputs)
    y, h = (graph.tensors[x].shape for x in scans[0].outputs)
    di, n = layer.mixer.d_inner, layer.mixer.d_state
    assert (a, b, c, h0, y, h) == ((2, 6, di, n), (2, 6, di, n), (2, 6, n), (2, di, n),
                                   (2, 6, di), (2, di, n))


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_one_op_and_unrolled_capture_compile_to_the_same_costs_and_outputs(phase):
    """Same Program scan task, same Report cycles, same functional outputs (fp32, bit for bit),
    and both within 1e-5 of torch."""
    ws16 = load_arch("ws16x16")
    runs = []
    for unrolled in (False, True):
        layer, example = build_llm("tiny-mamba", seq=8, batch=2, phase=phase)
        layer.mixer.unrolled_scan = unrolled
        runs.append(compile_module(layer, example, ws16))
        with torch.no_grad():
            want = layer(*example)
    fast, slow = runs
    scan_f, scan_s = ([t for t in r.program.tasks if t.kind == "scan"] for r in runs)
    assert len(scan_f) == len(scan_s) == 1
    keys = ("batch", "length", "channels", "state", "chunk_l", "chunk_d")
    assert {k: getattr(scan_f[0], k) for k in keys} == {k: getattr(scan_s[0], k) for k in keys}
    assert fast.totals()["total_cycles"] == slow.totals()["total_cycles"]
    for got_f, got_s, ref in zip(fast.outputs.values(), slow.outputs.values(), want):
        assert np.array_equal(got_f, got_s)
        assert np.abs(got_f - ref.numpy()).max() <= 1e-5 * max(1.0, np.abs(ref.numpy()).max())


def test_mamba_2p8b_shape_only_compile_at_seq_8192_has_one_scan_of_8192_steps():
    r = compile_llm("mamba-2.8b", load_arch("ws16x16"), seq=8192)
    scans = [t for t in r.program.tasks if t.kind == "scan"]
    assert len(scans) == 1 and scans[0].length == 8192 and scans[0].channels == 5120
    assert len(r.graph.ops) < 100


# ---- the IR's producer/consumer index ----------------------------------------------------------
def _brute(graph: Graph):
    prod = {t: op for op in graph.ops for t in op.outputs}
    cons: dict[str, set[int]] = {}
    for op in graph.ops:
        for t in op.inputs:
            cons.setdefault(t, set()).add(id(op))
    return prod, cons


def _assert_index_exact(graph: Graph):
    prod, cons = _brute(graph)
    for t in graph.tensors:
        assert graph.producer(t) is prod.get(t), t
        assert {id(o) for o in graph.consumers(t)} == cons.get(t, set()), t
    graph.check()


def test_index_follows_every_kind_of_edit():
    """Random edits of every kind (ops list and op name lists); after each, the O(1) lookups
    equal a brute-force search over the ops."""
    rng = random.Random(5)
    g = Graph()
    names = [f"t{i}" for i in range(40)]
    for n in names:
        g.add_tensor(Tensor(n, (2,), "fp32"))
    g.inputs = ["t0"]

    def new_op():
        return Op("add", rng.sample(names, 2), [rng.choice(names)])

    for _ in range(10):
        g.ops.append(new_op())
    edits = [
        lambda: g.ops.append(new_op()),
        lambda: g.ops.insert(rng.randrange(len(g.ops) + 1), new_op()),
        lambda: g.ops.remove(rng.choice(g.ops)) if g.ops else None,
        lambda: g.ops.pop(rng.randrange(len(g.ops))) if g.ops else None,
        lambda: g.ops.__setitem__(rng.randrange(len(g.ops)), new_op()) if g.ops else None,
        lambda: g.ops.__setitem__(slice(1, 3), [new_op(), new_op(), new_op()]),
        lambda: g.ops.__delitem__(slice(0, 2)),
        lambda: g.ops.extend([new_op(), new_op()]),
        lambda: setattr(g, "ops", [o for o in g.ops if rng.random() < 0.8]),
        lambda: setattr(rng.choice(g.ops), "outputs", [rng.choice(names)]) if g.ops else None,
        lambda: rng.choice(g.ops).inputs.__setitem__(0, rng.choice(names)) if g.ops else None,
        lambda: rng.choice(g.ops).inputs.append(rng.choice(names)) if g.ops else None,
        lambda: g.ops.reverse(),
    ]
    for step in range(400):
        rng.choice(edits)()
        prod, cons = _brute(g)
        # a valid graph has one producer per tensor; with random duplicates compare the sets
        for t in names:
            p = g.producer(t)
            producers = [o for o in g.ops if t in o.outputs]
            assert (p is None) == (not producers) and (p is None or p in producers), (step, t)
            assert {id(o) for o in g.consumers(t)} == cons.get(t, set()), (step, t)


def test_index_on_a_compiled_graph_and_after_copy():
    import copy
    import pickle

    r = compile_llm("tiny-mamba", load_arch("ws16x16"), seq=4, execute=False)
    _assert_index_exact(r.graph)
    for clone in (copy.deepcopy(r.graph), pickle.loads(pickle.dumps(r.graph))):
        _assert_index_exact(clone)
        assert all(clone.producer(t) is not r.graph.producer(t) for op in clone.ops
                   for t in op.outputs)


def test_check_refuses_a_stale_index():
    g = Graph()
    for n in "abc":
        g.add_tensor(Tensor(n, (1,), "fp32"))
    g.inputs, g.outputs = ["a"], ["c"]
    g.add_op(Op("relu", ["a"], ["b"]))
    g.add_op(Op("relu", ["b"], ["c"]))
    g._prod.pop("c")                       # what an untracked edit would leave
    with pytest.raises(ValueError, match="index out of date"):
        g.check()
    g.reindex()
    g.check()


# ---- Mamba-2 SSD through the same op -----------------------------------------------------------
def _ssd_numpy(x, dt, a_head, b_mat, c_mat, h0):
    """Mamba-2's recurrence per head, element by element (float64)."""
    x, dt, a_head, b_mat, c_mat, h0 = (t.double().numpy()
                                       for t in (x, dt, a_head, b_mat, c_mat, h0))
    bt, length, heads, p = x.shape
    groups, n = b_mat.shape[2:]
    h, y = h0.copy(), np.zeros(x.shape)
    for i in range(bt):
        for t in range(length):
            for hd in range(heads):
                g = hd // (heads // groups)
                decay = np.exp(dt[i, t, hd] * a_head[hd])
                for q in range(p):
                    for k in range(n):
                        h[i, hd, q, k] = decay * h[i, hd, q, k] \
                            + dt[i, t, hd] * x[i, t, hd, q] * b_mat[i, t, g, k]
                        y[i, t, hd, q] += h[i, hd, q, k] * c_mat[i, t, g, k]
    return y, h


@pytest.mark.parametrize("groups", [1, 2])
def test_ssd_scan_equals_mamba2_recurrence(groups):
    from tilewright.models.ssm import ssd_scan

    g = torch.Generator().manual_seed(11)
    bt, length, heads, p, n = 2, 5, 4, 3, 2
    x = torch.randn(bt, length, heads, p, generator=g)
    dt = torch.nn.functional.softplus(torch.randn(bt, length, heads, generator=g))
    a_head = -torch.rand(heads, generator=g) * 2
    b_mat, c_mat = (torch.randn(bt, length, groups, n, generator=g) for _ in range(2))
    h0 = torch.randn(bt, heads, p, n, generator=g)
    y, h = ssd_scan(x, dt, a_head, b_mat, c_mat, h0)
    y_np, h_np = _ssd_numpy(x, dt, a_head, b_mat, c_mat, h0)
    assert np.abs(y.numpy() - y_np).max() <= 1e-5 * np.abs(y_np).max()
    assert np.abs(h.numpy() - h_np).max() <= 1e-5 * np.abs(h_np).max()


def test_ssd_scan_compiles_to_one_scan_per_group_and_runs_like_torch():
    from tilewright.models.ssm import ssd_scan

    class SSD(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.A = torch.nn.Parameter(-torch.rand(4, generator=torch.Generator().manual_seed(1)))

        def forward(self, x, dt, b_mat, c_mat):
            return ssd_scan(x, dt, self.A, b_mat, c_mat)[0]

    g = torch.Generator().manual_seed(12)
    ex = (torch.randn(1, 6, 4, 2, generator=g), torch.rand(1, 6, 4, generator=g),
          torch.randn(1, 6, 2, 3, generator=g), torch.randn(1, 6, 2, 3, generator=g))
    mod = SSD()
    res = compile_module(mod, ex, load_arch("ws16x16"))
    assert [t.length for t in res.program.tasks if t.kind == "scan"] == [6, 6]
    with torch.no_grad():
        want = mod(*ex).numpy()
    got = next(iter(res.outputs.values()))
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
