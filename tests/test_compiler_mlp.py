"""First compiler path: MLP -> int8 Program, checked against independent torch references.

* Bit-exact: the functional model running the Program == ``models.quantized_reference`` (torch
  int64 ops written from the documented semantics) fed the Program's quantized parameters.
* Quantization parameters == an independent torch computation from the float weights.
* Float: the dequantized output is within error bounds derived in the test below.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch

from tilewright.arch import ArchSpec, load_arch
from tilewright.compiler import compile_model
from tilewright.compiler.layout import DoesNotFit, GemmLayout
from tilewright.compiler.passes import requant_params
from tilewright.compiler.program import Program, VectorTask
from tilewright.dataflow_sim.functional import run_program
from tilewright.models.configs import build
from tilewright.models.quantized_reference import QuantLinear, run_int8_layers


def tiny_arch(dataflow: str, rows: int, cols: int, kib: int) -> ArchSpec:
    return ArchSpec.from_dict({"name": f"tiny-{dataflow}{rows}x{cols}", "tensor_engine": {
        "rows": rows, "cols": cols, "dataflow": dataflow},
        "memory": {"scratchpad_kib": kib, "accumulator_kib": 1}})


ARCHS = {
    "ws8x8": lambda: load_arch("ws8x8"),
    "os16x16": lambda: load_arch("os16x16"),
    # 1 KiB buffers: forces N splits (and M splits for mlp-small's K=128 layers)
    "tiny-os4x4": lambda: tiny_arch("os", 4, 4, 1),
    "tiny-ws8x8": lambda: tiny_arch("ws", 8, 8, 2),
}
MODELS = ["mlp-tiny", "mlp-small"]


def quantize_input(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.clamp(torch.round(x.double() / scale), -128, 127).to(torch.int8)


def layers_from_program(prog: Program) -> list[QuantLinear]:
    """The quantized parameters, taken from the Program's constants by name (meta["layers"])."""
    out = []
    for lay in prog.meta["layers"]:
        c = prog.constants
        out.append(QuantLinear(weight=torch.from_numpy(c[lay["weight"]]).T.contiguous(),
                               bias=torch.from_numpy(c[lay["bias"]]),
                               multiplier=torch.from_numpy(c[lay["multiplier"]]),
                               shift=torch.from_numpy(c[lay["shift"]]), relu=lay["relu"]))
    return out


@pytest.fixture(scope="module")
def compiled() -> dict[tuple[str, str], tuple[torch.nn.Module, torch.Tensor, Program]]:
    out = {}
    for name in MODELS:
        model, x = build(name)
        for arch_name, make in ARCHS.items():
            out[name, arch_name] = model, x, compile_model(model, x, make())
    return out


@pytest.mark.parametrize("arch_name", list(ARCHS))
@pytest.mark.parametrize("name", MODELS)
def test_functional_equals_torch_integer_reference(compiled, name: str, arch_name: str) -> None:
    model, x, prog = compiled[name, arch_name]
    layers = layers_from_program(prog)
    gen = torch.Generator().manual_seed(11)
    # the calibration batch, and a wider batch that saturates some int8 values
    for xf in (x, 3.0 * torch.randn(x.shape, generator=gen)):
        xq = quantize_input(xf, prog.meta["input_scale"])
        got = run_program(prog, {"x": xq.numpy()})[prog.outputs[0]]
        expect = run_int8_layers(xq, layers)
        assert got.dtype == np.int8
        assert torch.equal(torch.from_numpy(got), expect)


@pytest.mark.parametrize("name", MODELS)
def test_program_contract(compiled, name: str) -> None:
    model, x, prog = compiled[name, "ws8x8"]
    arch = load_arch("ws8x8")
    assert prog.name == name and prog.arch_hash == arch.content_hash()
    assert prog.inputs == ["x"] and prog.tensors["x"].format == "int8"
    assert prog.tensors["x"].shape == tuple(x.shape)
    assert prog.tensors[prog.outputs[0]].format == "int8"
    assert isinstance(prog.meta["input_scale"], float)
    assert isinstance(prog.meta["output_scale"], float)
    sizes = model.sizes
    assert [(l["k"], l["n"]) for l in prog.meta["layers"]] == list(zip(sizes[:-1], sizes[1:]))
    assert [l["relu"] for l in prog.meta["layers"]] == [True] * (len(sizes) - 2) + [False]
    kinds = [(t.kind, getattr(t, "op", None)) for t in prog.tasks]
    assert kinds == [("gemm", None), ("vector", "requantize")] * (len(sizes) - 1)
    for g in prog.gemms():
        assert prog.tensors[g.a].format == prog.tensors[g.b].format == "int8"
        assert prog.tensors[g.out].format == "int32"
        assert g.b in prog.constants and "mlp.py:" in g.source
    prog.check()


@pytest.mark.parametrize("arch_name", ["tiny-os4x4", "tiny-ws8x8"])
def test_split_path_tiles_fit_and_are_exercised(compiled, arch_name: str) -> None:
    arch = ARCHS[arch_name]()
    _, _, prog = compiled["mlp-small", arch_name]
    assert len(prog.gemms()) > len(prog.meta["layers"])  # something was split
    for g in prog.gemms():
        GemmLayout.for_arch(arch, g.m, g.k, g.n).check_fits(arch)
    slices = [t for t in prog.tasks if isinstance(t, VectorTask) and t.op == "slice"]
    assert {t.attrs["axis"] for t in slices} == ({0, 1} if arch_name == "tiny-os4x4" else {1})
    # GEMM tiles of a layer cover its M x N output exactly once
    for lay in prog.meta["layers"]:
        tiles = [g for g in prog.gemms() if g.name.startswith(lay["name"] + ".gemm")]
        assert sum(g.m * g.n for g in tiles) == lay["m"] * lay["n"]
        assert all(g.k == lay["k"] for g in tiles)


def test_k_that_cannot_fit_raises_naming_layer() -> None:
    model, x = build("mlp-small")  # layers.1 has K = 128: B needs 128 words, buffer holds 64
    with pytest.raises(DoesNotFit, match=r"layers\.1.*K=128"):
        compile_model(model, x, tiny_arch("ws", 8, 8, 1))


@pytest.mark.parametrize("name", MODELS)
def test_quantized_parameters_match_independent_torch(compiled, name: str) -> None:
    model, x, prog = compiled[name, "ws8x8"]
    # activation scales: max |activation| / 127 on the calibration batch (= example input)
    acts = [x.double()]
    for i, lin in enumerate(model.layers):
        h = lin(acts[-1].float()).double()
        acts.append(torch.relu(h) if i < len(model.layers) - 1 else h)
    scales = [float(a.abs().max()) / 127 for a in acts]
    assert prog.meta["input_scale"] == pytest.approx(scales[0], rel=1e-6)
    assert prog.meta["output_scale"] == pytest.approx(scales[-1], rel=1e-5)
    for lin, lay in zip(model.layers, prog.meta["layers"]):
        w = lin.weight.detach().double()
        s_w = w.abs().amax(dim=1) / 127
        w_q = torch.clamp(torch.round(w / s_w[:, None]), -127, 127).to(torch.int8)
        assert torch.equal(torch.from_numpy(prog.constants[lay["weight"]]).T, w_q)
        s_x, s_y = lay["input_scale"], lay["output_scale"]
        b_q = torch.round(lin.bias.detach().double() / (s_x * s_w)).to(torch.int32)
        assert torch.equal(torch.from_numpy(prog.constants[lay["bias"]]), b_q)
        for c, (m, s) in enumerate(zip(prog.constants[lay["multiplier"]].tolist(),
                                       prog.constants[lay["shift"]].tolist())):
            real = Fraction(s_x) * Fraction(float(s_w[c])) / Fraction(s_y)
            assert 2**30 <= m < 2**31 and s >= 1
            assert abs(Fraction(m, 2**s) - real) <= Fraction(1, 2 ** (s + 1))


@pytest.mark.parametrize("name", MODELS)
def test_dequantized_output_within_derived_bounds(compiled, name: str) -> None:
    """Float check: ``|s_out * y_q - model(x)|`` against two bounds propagated layer by layer.

    Worst case (must always hold). With x̂ = s_x x_q (|x̂ - x| <= e_x), Ŵ = s_w W_q
    (|Ŵ - W| <= s_w / 2; no clipping since |W / s_w| <= 127) and b̂ = s_x s_w b_q
    (|b̂ - b| <= s_x s_w / 2), the accumulator represents x̂ Ŵᵀ + b̂ exactly, so
    |acc - (x Wᵀ + b)| <= e_x |Ŵ|ᵀ + |x| (s_w / 2)ᵀ + s_x s_w / 2. Requantization adds
    <= s_y / 2 (rounding) + s_y |acc + b_q| 2**-(shift+1) (multiplier error, ~1e-6 LSB). ReLU and
    the clamp to [lo, 127] s_y (an interval holding the true value, because the batch is the
    calibration batch) are 1-Lipschitz, so they add nothing; e_x of the input is s_in / 2.
    This bound assumes every rounding error aligns, so it grows ~K/2x per layer (hundreds of LSBs
    at the output here): true but weak.

    Typical case (the meaningful one). Modelling each rounding error as independent and uniform
    on ±step/2 (variance step²/12; Widrow's quantization-noise model), the variances propagate as
    v_acc = v_x Ŵ²ᵀ + x² (s_w² / 12)ᵀ + (s_x s_w)² / 12, then + s_y² / 12 per requantization.
    The error is a sum of many such terms, ~Gaussian; we require every output within 6 sigma
    (chance of a false failure per element ~2e-9). That is 6-8 output LSBs for these models (the
    observed maximum is ~2 LSBs).
    """
    model, x, prog = compiled[name, "ws8x8"]
    xq = quantize_input(x, prog.meta["input_scale"])
    y_q = run_program(prog, {"x": xq.numpy()})[prog.outputs[0]]
    y_hat = torch.from_numpy(y_q).double() * prog.meta["output_scale"]
    h = x.double()
    worst = torch.full_like(h, prog.meta["input_scale"] / 2)
    var = torch.full_like(h, prog.meta["input_scale"] ** 2 / 12)
    with torch.no_grad():
        for i, (lin, lay) in enumerate(zip(model.layers, prog.meta["layers"])):
            s_x, s_y = lay["input_scale"], lay["output_scale"]
            s_w = torch.tensor(lay["weight_scales"], dtype=torch.float64)
            w_hat = torch.from_numpy(prog.constants[lay["weight"]]).double().T * s_w[:, None]
            acc_max = lay["k"] * 128 * 127 + np.abs(prog.constants[lay["bias"]]).max()
            mult_err = s_y * acc_max * 2.0 ** -(prog.constants[lay["shift"]].min() + 1)
            worst = worst @ w_hat.abs().T + h.abs() @ (s_w / 2).expand(lay["k"], -1) \
                + s_x * s_w / 2 + s_y / 2 + mult_err
            var = var @ (w_hat ** 2).T + (h ** 2) @ (s_w ** 2 / 12).expand(lay["k"], -1) \
                + (s_x * s_w) ** 2 / 12 + s_y ** 2 / 12
            h = lin(h.float()).double()
            h = torch.relu(h) if i < len(model.layers) - 1 else h
        err = (y_hat - model(x).double()).abs()
    slack = 1e-5  # float32 evaluation of the model vs the float64 propagation above
    assert (err <= worst + slack).all(), float((err - worst).max())
    six_sigma = 6 * var.sqrt()
    lsb = prog.meta["output_scale"]
    assert (err <= six_sigma + slack).all(), (float(err.max()) / lsb, float(six_sigma.max()) / lsb)
    assert float(six_sigma.max()) < 10 * lsb  # the statistical bound is a few LSBs, not vacuous


def test_save_load_round_trip(compiled, tmp_path) -> None:
    _, x, prog = compiled["mlp-small", "tiny-os4x4"]
    back = Program.load(prog.save(tmp_path / "p"))
    assert back.model_dump() == prog.model_dump()
    assert back.constants.keys() == prog.constants.keys()
    for k, v in prog.constants.items():
        assert back.constants[k].dtype == v.dtype and np.array_equal(back.constants[k], v)
    xq = quantize_input(x, prog.meta["input_scale"]).numpy()
    a, b = run_program(prog, {"x": xq}), run_program(back, {"x": xq})
    assert np.array_equal(a[prog.outputs[0]], b[back.outputs[0]])


def test_calibration_batch_sets_scales() -> None:
    model, x = build("mlp-tiny")
    arch = load_arch("ws8x8")
    default = compile_model(model, x, arch)
    calib = compile_model(model, x, arch, calibration=2 * x)
    assert default.meta["input_scale"] == pytest.approx(float(x.abs().max()) / 127)
    assert calib.meta["input_scale"] == pytest.approx(2 * default.meta["input_scale"])


def test_requant_params_exact() -> None:
    for real in (Fraction(1, 3), Fraction(3, 4), Fraction(1), Fraction(5, 2**32),
                 Fraction(1, 2**33), Fraction(1000)):
        m, s = requant_params(real)
        assert 2**30 <= m < 2**31 and 1 <= s <= 63
        assert abs(Fraction(m, 2**s) - real) <= Fraction(1, 2 ** (s + 1))
    assert requant_params(Fraction(1, 2)) == (2**30, 31)
    # rounding carries into bit 31: 1 - 2**-33 -> 2**31 - 1/4 rounds up to 2**31 = 2**30 * 2
    assert requant_params(1 - Fraction(1, 2**33)) == (2**30, 30)
    for bad in (Fraction(0), Fraction(-1, 2), Fraction(2**30), Fraction(1, 2**34)):
        with pytest.raises(ValueError):
            requant_params(bad)
