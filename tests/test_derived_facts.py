"""Facts derived once: each is defined in one place and every user reads it from there; the
compiler's imports go one way (never rtl, dataflow_sim, cosim or app) and stay at module level."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from tilewright.arch import MAX_ARRAY_DIM, RTL_MAX_ARRAY_DIM, ArchSpec, ArchSpecError, load_arch
from tilewright.compiler import codegen, layout, mesh_isa
from tilewright.compiler.layout import MAX_GEMM_DIM, DoesNotFit, GemmLayout, ab_buffer_bytes
from tilewright.compiler.mesh_schedule import FlowBatch, MessageBatch
from tilewright.dataflow_sim import energy_area, vector_numerics
from tilewright.dataflow_sim.mesh import Flows
from tilewright.formats import FORMATS, bits_of

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(imported module, at module level?) of every import statement in ``path``."""
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body}
    top |= {id(n) for b in tree.body if isinstance(b, ast.If) for n in b.body}  # TYPE_CHECKING
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.module, id(node) in top))
        elif isinstance(node, ast.Import):
            out += [(a.name, id(node) in top) for a in node.names]
    return out


@pytest.mark.parametrize("folder", ["compiler", "models"])
def test_no_function_local_project_imports(folder: str) -> None:
    bad = [f"{p.relative_to(ROOT)}: {mod}" for p in sorted((ROOT / folder).rglob("*.py"))
           for mod, top in _imports(p) if mod.startswith("tilewright") and not top]
    assert not bad, bad


def test_compiler_imports_no_upper_layer() -> None:
    upper = ("tilewright.rtl", "tilewright.dataflow_sim", "tilewright.cosim", "tilewright.app",
             "tilewright.cocotb_tests")
    bad = [f"{p.relative_to(ROOT)}: {mod}" for p in sorted((ROOT / "compiler").rglob("*.py"))
           for mod, _ in _imports(p) if mod.startswith(upper)]
    assert not bad, bad


def test_vector_opcodes_have_one_table() -> None:
    from tilewright.rtl.vector_unit import OP_NAMES, VectorOp

    assert {n: o.value for n, o in OP_NAMES.items()} == codegen.VECTOR_OPCODES
    assert [o.name.lower() for o in VectorOp] == list(codegen.VECTOR_OPCODES)
    assert vector_numerics.OPS == tuple(codegen.VECTOR_OPCODES)
    assert vector_numerics.REDUCTION_OPS == tuple(codegen.VECTOR_REDUCTIONS)
    assert set(vector_numerics.UNARY_OPS) | set(vector_numerics.BINARY_OPS) \
        | (set(vector_numerics.INT32_OPS) - set(codegen.VECTOR_REDUCTIONS)) \
        == set(vector_numerics.ELEMENTWISE_OPS)
    # kinds and lane formats derive from the one row per op
    assert codegen.VECTOR_REDUCTIONS == ("sum", "rmax", "argmax", "qshift")
    assert codegen.VECTOR_INT32_OPS == ("argmax", "requant", "rescale")
    assert len(set(codegen.VECTOR_OPCODES.values())) == len(codegen.VECTOR_OPCODES) \
        <= 2 ** codegen.field_slices("VECTOR")["vop"][1]


@pytest.mark.parametrize("preset", ["ws8x8", "os16x16"])
def test_scratchpad_split_is_one_function(preset: str) -> None:
    arch = load_arch(preset)
    ab = ab_buffer_bytes(arch)
    assert ab == arch.memory.scratchpad_kib * 1024 // 2
    wb = GemmLayout.word_bytes(arch)
    da, db, _ = GemmLayout.depths(arch)
    assert (da, db) == (ab // wb["a"], ab // wb["b"])
    assert energy_area.sram_bank_kib(arch)[0] == ab / 1024 / arch.memory.scratchpad_banks
    assert layout.half_depth(da) == da // 2


def test_bit_widths_come_from_the_formats_registry() -> None:
    from tilewright.rtl import cube, systolic, systolic_bf16

    assert (bits_of("int8"), bits_of("bf16"), bits_of("int32"), bits_of("fp32")) == (8, 16, 32, 32)
    assert (systolic.ELEMENT_BITS, systolic.ACC_BITS) == (bits_of("int8"), bits_of("int32"))
    assert (cube.ELEMENT_BITS, cube.ACC_BITS) == (bits_of("int8"), bits_of("int32"))
    assert (systolic_bf16.ELEMENT_BITS, systolic_bf16.ACC_BITS) == (bits_of("bf16"),
                                                                    bits_of("fp32"))
    assert (mesh_isa.LANE_BITS, mesh_isa.WORD_BITS) == (bits_of("int8"), bits_of("int32"))
    from tilewright.compiler.lower_llm import ELEM_BYTES
    assert ELEM_BYTES == {n: f.bits // 8 for n, f in FORMATS.items()}
    with pytest.raises(ValueError, match="number format 'int4'"):
        bits_of("int4")


def test_array_and_gemm_limits_are_distinct() -> None:
    from tilewright.rtl.cube import check_dim

    assert (MAX_ARRAY_DIM, RTL_MAX_ARRAY_DIM, MAX_GEMM_DIM) == (512, 64, 65535)
    spec = {"name": "t", "tensor_engine": {"rows": MAX_ARRAY_DIM + 1, "cols": 4}}
    with pytest.raises(ArchSpecError, match=f"from 1 to {MAX_ARRAY_DIM}"):
        ArchSpec.from_dict(spec)
    with pytest.raises(ValueError, match=f"from 1 to {RTL_MAX_ARRAY_DIM}"):
        check_dim("rows", RTL_MAX_ARRAY_DIM + 1)
    arch = load_arch("ws8x8")
    with pytest.raises(DoesNotFit, match=f"from 1 to {MAX_GEMM_DIM}"):
        GemmLayout.for_arch(arch, MAX_GEMM_DIM + 1, 8, 8).check_fits(arch)


def test_message_batches_share_one_definition() -> None:
    assert issubclass(Flows, MessageBatch) and issubclass(FlowBatch, MessageBatch)
    f = Flows.make([0, 1], [0, 0], [0, 1], [3, 0], flits=4)       # the second is local: dropped
    b = FlowBatch.make([0, 1], [0, 0], [0, 1], [3, 0], nbytes=4)
    assert len(f) == len(b) == 1 and f.hops.tolist() == b.hops.tolist() == [3]
    assert Flows.concat([f, None, f]).flits.tolist() == [4, 4]
    assert FlowBatch.field_names()[4] == "nbytes" and Flows.field_names()[4] == "flits"
    np.testing.assert_array_equal(Flows.make(0, 0, 0, 1, 2, times=0).sr, [])


def test_decoder_layer_ops_are_shared_by_program_and_plan() -> None:
    from tilewright.compiler.mesh_partition import partition_layer
    from tilewright.dataflow_sim.mesh.llm import plan_layer

    arch = load_arch("configs/mesh4x4.yaml")
    for phase in ("prefill", "decode"):
        plan = plan_layer(arch, "tiny-llama", phase, tokens=16, context=16, elem_bytes=1)
        prog = partition_layer(arch, "tiny-llama", phase, tokens=16, context=16, elem_bytes=1)
        assert [o.name for o in plan.ops] == list(dict.fromkeys(t.op for t in prog.tasks))


def test_mesh_tile_decodes_the_compilers_isa() -> None:
    from tilewright.rtl.mesh_tile import MeshTile

    tile = MeshTile(lanes=4, sram_words=64, imem_depth=4)
    assert tile.instr_bits == sum(w for _, w in mesh_isa.instr_fields(tile.addr_bits))
    assert tile.addr_bits == mesh_isa.addr_bits(64)
