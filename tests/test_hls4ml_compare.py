"""hls4ml side by side with tilewright (tilewright.app.flows.hls4ml_compare), checked against references
derived independently of either tool: torch float32, a numpy model of ap_fixed arithmetic, and
error bounds derived from the two number formats.

One hls4ml C-simulation build (g++, ~5-15 s on a loaded machine) for mlp-tiny; the unsupported
cases fail before any build.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tilewright.arch import default_arch
from tilewright.app.flows.demo import FLOAT_ERROR_BOUND_LSB
from tilewright.app.flows.hls4ml_compare import (build_side_by_side, compare_hls4ml, numerics, run_hls4ml,
                                       run_tilewright, small_cnn)

PRECISION = "ap_fixed<16,6>"  # hls4ml's default: 16 bits, 6 integer bits, truncation, wrap-around
FRAC_BITS, WIDTH = 10, 16
Q = 2.0 ** -FRAC_BITS  # its quantization step


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    module, x = build_side_by_side("mlp-tiny")
    out = tmp_path_factory.mktemp("hls4ml") / "mlp-tiny"
    return module, x, compare_hls4ml(module, x, default_arch(), precision=PRECISION,
                                     out_dir=out)


# ---- an independent model of hls4ml's arithmetic ------------------------------------------------
def _wrap(v: np.ndarray) -> np.ndarray:
    """Two's-complement wrap-around to WIDTH bits (AP_WRAP)."""
    v = v & ((1 << WIDTH) - 1)
    return np.where(v >= 1 << (WIDTH - 1), v - (1 << WIDTH), v)


def _to_fixed(a: np.ndarray) -> np.ndarray:
    """Float -> integer count of Q, rounded toward -inf (AP_TRN)."""
    return _wrap(np.floor(np.asarray(a, np.float64) / Q).astype(np.int64))


def _ap_fixed_mlp(module, x: torch.Tensor) -> np.ndarray:
    """The MLP in ap_fixed<16,6> as hls4ml's ``dense_latency`` computes it with every type of the
    layer equal to that format: input, weights and bias truncated to Q; each product x*w (exact,
    a multiple of Q**2) truncated to Q; sums in the 16-bit accumulator; ReLU ``x > 0 ? x : 0``."""
    h = _to_fixed(x.numpy())
    last = len(module.layers) - 1
    for i, lin in enumerate(module.layers):
        w = _to_fixed(lin.weight.detach().numpy().T)   # [K, N]
        b = _to_fixed(lin.bias.detach().numpy())
        prod = _wrap(np.floor_divide(h[:, :, None] * w[None], 1 << FRAC_BITS))
        acc = np.broadcast_to(b, (h.shape[0], b.size)).copy()
        for k in range(prod.shape[1]):
            acc = _wrap(acc + prod[:, k])
        h = acc if i == last else np.where(acc > 0, acc, 0)
    return h * Q


def _ap_fixed_error_interval(module, x: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Interval [lo, hi] (float units) holding ``y_hls4ml - y_torch`` for every output, derived
    from the format alone (AP_TRN with step Q; no overflow, since every |value| < 32 here).

    Per layer, with x̂ = x + e, Ŵ = floor(W / Q) Q and b̂ = floor(b / Q) Q, the accumulator
    holds x̂ Ŵᵀ + b̂ + t with t the product truncations, so the error is
    x (Ŵ - W)ᵀ + (b̂ - b)  (known exactly from the weights)  +  e Ŵᵀ  +  t.
    e is carried as an interval (its mean) plus a variance; each nonzero product's truncation
    is uniform on the multiples of Q² in (-Q, 0] (mean -(Q - Q²)/2, variance (Q² - Q⁴)/12,
    Widrow's quantization-noise model); a zero input (after ReLU) gives an exact zero product.
    The input's own truncation lies in [-Q, 0]. ReLU passes the error of a unit that is clearly
    active in torch (|h| beyond the unit's error band = |mean| + 6 sigma), zeroes a clearly
    inactive one, and for a unit inside the band allows any error in [-band, band] (either side
    may be clipped) and counts its product as possibly nonzero. Result: the mean interval
    widened by 6 sigma (false-failure odds ~1e-9 per element)."""
    h = x.double().numpy()
    lo, hi = np.full_like(h, -Q), np.zeros_like(h)
    var = np.zeros_like(h)
    nz_lo = nz_hi = np.full((h.shape[0], 1), h.shape[1])
    t_mean, t_var = (Q - Q * Q) / 2, (Q * Q - Q ** 4) / 12
    last = len(module.layers) - 1
    for i, lin in enumerate(module.layers):
        w = lin.weight.detach().double().numpy()
        b = lin.bias.detach().double().numpy()
        wq, bq = np.floor(w / Q) * Q, np.floor(b / Q) * Q
        wp, wn = np.maximum(wq, 0), np.minimum(wq, 0)
        known = h @ (wq - w).T + (bq - b)
        lo, hi = (lo @ wp.T + hi @ wn.T + known - t_mean * nz_hi,
                  hi @ wp.T + lo @ wn.T + known - t_mean * nz_lo)
        var = var @ (wq ** 2).T + t_var * nz_hi
        h = h @ w.T + b
        if i < last:
            band = np.maximum(np.abs(lo), np.abs(hi)) + 6 * np.sqrt(var)
            unsure = np.abs(h) <= band
            on = (h > 0) & ~unsure
            lo = np.where(on, lo, np.where(unsure, -band, 0.0))
            hi = np.where(on, hi, np.where(unsure, band, 0.0))
            var = np.where(on, var, 0.0)
            nz_lo, nz_hi = on.sum(1, keepdims=True), (on | unsure).sum(1, keepdims=True)
            h = np.maximum(h, 0)
    six_sigma = 6 * np.sqrt(var)
    return lo - six_sigma, hi + six_sigma


# ---- the MLP through both routes ----------------------------------------------------------------
def test_hls4ml_project_has_generated_hls_cpp(mlp) -> None:
    _, _, comp = mlp
    r = comp.route("hls4ml")
    assert r.status == "ok", r.message
    top = (r.project_dir / "firmware" / "myproject.cpp").read_text()
    assert "void myproject(" in top and "nnet::dense" in top
    assert (r.project_dir / "firmware" / "parameters.h").is_file()


def test_hls4ml_csim_matches_numpy_ap_fixed_model(mlp) -> None:
    """g++ C simulation == the numpy model of ap_fixed<16,6> arithmetic, bit for bit."""
    module, x, comp = mlp
    np.testing.assert_array_equal(comp.route("hls4ml").outputs, _ap_fixed_mlp(module, x))


def test_hls4ml_error_vs_torch_within_format_bound(mlp) -> None:
    module, x, comp = mlp
    r = comp.route("hls4ml")
    err = r.outputs - module(x).detach().double().numpy()
    lo, hi = _ap_fixed_error_interval(module, x)
    slack = 1e-6  # float32 torch vs the float64 propagation
    assert ((err >= lo - slack) & (err <= hi + slack)).all(), (err.min(), err.max())
    # the bound is meaningful: well inside the output's own range
    assert max(-lo.min(), hi.max()) < 0.5 * np.abs(comp.reference).max()
    assert r.max_abs_err == pytest.approx(np.abs(err).max())
    assert r.output_lsb == Q
    # hls4ml gives no latency/resources without the vendor's synthesis: no number is invented
    assert r.latency_cycles is None and "synthesis" in r.latency_source


def test_tilewright_error_vs_torch_within_int8_bound(mlp) -> None:
    """The int8 flow's output is within the 6-sigma rounding bound derived for these MLPs in
    tests/test_compiler_mlp.py (``FLOAT_ERROR_BOUND_LSB`` output LSBs)."""
    module, x, comp = mlp
    r = comp.route("tilewright")
    assert r.status == "ok", r.message
    err = np.abs(r.outputs - module(x).detach().double().numpy())
    assert err.max() <= FLOAT_ERROR_BOUND_LSB * r.output_lsb
    assert r.max_abs_err == pytest.approx(err.max())
    # cycles: at least MACs / PEs (an 8x8 array does at most 64 MACs per cycle)
    macs = sum(layer.in_features * layer.out_features for layer in module.layers) * x.shape[0]
    assert r.latency_cycles >= macs / 64


def test_table_has_both_routes(mlp) -> None:
    df = mlp[2].to_frame()
    assert list(df["route"]) == ["hls4ml", "tilewright"]
    assert {"max_abs_err", "rel_l2", "argmax_agree", "latency_cycles", "resources",
            "wall_s"} <= set(df.columns)


# ---- what a tool cannot take --------------------------------------------------------------------
def test_hls4ml_refusals_are_one_line_messages(tmp_path) -> None:
    module, x = build_side_by_side("tiny-llama")
    r = run_hls4ml(module, x, out_dir=tmp_path / "llama")
    assert r.status == "unsupported" and r.outputs is None
    assert "TraceError" in r.message and "transformer.py:" in r.message  # the model's own line
    assert "\n" not in r.message

    class Gelu(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.gelu(self.fc(x))

    r = run_hls4ml(Gelu().eval(), torch.randn(2, 4), out_dir=tmp_path / "gelu")
    assert r.status == "unsupported" and "gelu" in r.message


def test_tilewright_runs_the_conv_net_as_im2col_gemms() -> None:
    """The small CNN (which tilewright refused before convolutions were lowered) runs on the
    functional model in the design's int8: its output is torch's within int8 error."""
    module, x = small_cnn()
    r = run_tilewright(module, x, default_arch(), name="cnn-small")
    assert r.status == "ok", r.message
    ref = module(x).detach().numpy()
    got = np.asarray(r.outputs, dtype=np.float64).reshape(ref.shape)
    assert numerics(got, ref)["rel_l2"] < 0.05


@pytest.mark.parametrize("kwargs, field", [({"precision": "float32"}, "precision"),
                                            ({"reuse_factor": 0}, "reuse_factor"),
                                            ({"backend": "oneAPI"}, "backend")])
def test_bad_arguments_name_the_field(tmp_path, kwargs, field) -> None:
    module, x = build_side_by_side("mlp-tiny")
    with pytest.raises(ValueError, match=field):
        compare_hls4ml(module, x, default_arch(), out_dir=tmp_path, **kwargs)


def test_numerics_closed_form() -> None:
    ref = np.array([[3.0, 0.0], [0.0, 4.0]])
    y = np.array([[3.0, 0.0], [5.0, 4.0]])  # second row's argmax flips to column 0
    got = numerics(y, ref)
    assert got["max_abs_err"] == 5.0
    assert got["rel_l2"] == pytest.approx(5.0 / 5.0)
    assert got["argmax_agree"] == 0.5
    assert numerics(np.zeros(3), np.ones(3))["argmax_agree"] is None
