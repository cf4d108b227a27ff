"""``aten.embedding`` in the compiler: the frontend turns it into a row gather (``take_rows``),
the functional model executes it exactly (vs torch's own embedding), and the Report costs it by
the bytes it moves (rows gathered + ids), not by the table size."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tilewright.arch import ArchSpec
from tilewright.dataflow_sim.compile_flow import compile_module
from tilewright.compiler.frontend import UnsupportedOp

ARCH = ArchSpec.model_validate({"name": "t16", "clock_mhz": 800.0,
                                "tensor_engine": {"rows": 16, "cols": 16, "dataflow": "ws"},
                                "offchip": {"bandwidth_gbps": 50.0, "capacity_gib": 16}})


class EmbedThenScale(torch.nn.Module):
    """Embedding lookup followed by an elementwise op (the gather feeds later tasks)."""

    def __init__(self, vocab: int, d: int) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)

    def forward(self, ids):
        return self.emb(ids) * 2.0


@pytest.mark.parametrize("ids_shape", [(9,), (2, 7), (2, 3, 4)])
def test_functional_gather_equals_torch_embedding(ids_shape):
    torch.manual_seed(0)
    vocab, d = 50, 24
    model = EmbedThenScale(vocab, d).eval()
    ids = torch.randint(0, vocab, ids_shape)
    ids[(0,) * len(ids_shape)] = vocab - 1            # the last row too
    out = compile_module(model, (ids,), ARCH, execute=True)
    gathers = [t for t in out.program.tasks if getattr(t, "op", "") == "take_rows"]
    assert len(gathers) == 1 and gathers[0].attrs == {"lookup": "embedding"}
    got = out.outputs[out.program.outputs[0]]
    ref = model(ids).detach().numpy()
    assert got.shape == ref.shape
    np.testing.assert_array_equal(got, ref)            # a gather and a x2: exact in fp32


@pytest.mark.parametrize("tokens,vocab,d", [(8, 1000, 32), (100, 64, 16)])
def test_report_bytes_are_the_rows_moved_plus_the_ids(tokens, vocab, d):
    """bytes = tokens · d · elem_bytes (fp32: 4) + tokens · 8 (int64 ids), whatever the vocab;
    the gather's elementwise work is one pass over the gathered elements."""
    emb = torch.nn.Embedding(vocab, d).eval()
    ids = torch.randint(0, vocab, (tokens,))
    out = compile_module(emb, (ids,), ARCH, execute=True)
    rep = out.report
    assert list(rep.op) == ["take_rows"]
    row = rep.iloc[0]
    assert row.bytes == tokens * d * 4 + tokens * 8
    assert row.vector_ops == tokens * d
    assert row.cycles == -(-tokens * d // 16)          # 16 lanes: the array's columns
    np.testing.assert_array_equal(out.outputs[out.program.outputs[0]], emb(ids).detach().numpy())


def test_int8_table_on_meta_is_costed_at_one_byte_per_element():
    """Shape-only compile of an int8 table (how the cluster model uses it)."""
    with torch.device("meta"):
        emb = torch.nn.Embedding(128_256, 64)
        emb.weight = torch.nn.Parameter(torch.empty(128_256, 64, dtype=torch.int8),
                                        requires_grad=False)
    out = compile_module(emb, (torch.empty(256, dtype=torch.int64, device="meta"),), ARCH,
                         fmt="int8", execute=False)
    assert out.report.bytes.sum() == 256 * 64 * 1 + 256 * 8


def test_sparse_embedding_is_refused_with_the_op_named():
    class Sparse(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(10, 4))

        def forward(self, ids):
            return torch.nn.functional.embedding(ids, self.w, sparse=True)

    with pytest.raises(UnsupportedOp, match="embedding.*sparse=True"):
        compile_module(Sparse(), (torch.tensor([1, 2]),), ARCH, execute=True)
