"""Vector unit: the bit-exact reference (dataflow_sim.vector_numerics) against torch within its
documented error bounds, and the RTL (rtl.vector_unit) against the reference bit for bit.

Ladder: closed-form spot values and API errors of the reference (no simulator); the reference's
error against float64 torch over every Q8.8 input, within the bound stated in its docstring;
the Amaranth component in Amaranth's simulator (constructor validation, a short mixed stream);
then the acceptance test on one Verilator build (4 lanes): every one of the 65536 Q8.8 inputs
through each non-linear function, random and corner-case add/mul/max, reductions, the latency and
one-beat-per-cycle contract, and a run with random back-pressure. The int32 ops (argmax,
requant, rescale) are checked against references written here (Python-integer closed form, the functional
model's ``requantize``, ``torch.argmax``) on corner cases in Amaranth's simulator and in the same
Verilator run.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from amaranth.sim import Simulator

from tilewright.arch import ArchSpec, load_arch
from tilewright.dataflow_sim import vector_numerics as vn
from tilewright.rtl.vector_unit import LATENCY, OP_NAMES, VectorUnit

ALL = np.arange(-32768, 32768, dtype=np.int64)           # every Q8.8 raw value
CORNERS = np.array([0, 1, -1, 2, -2, 255, 256, -256, 257, 32767, -32768, 32766, -32767, 4095,
                    4096, -4096, -4097, 1279, 1280, -1792, -2560])


def _arch(lanes: int = 4) -> ArchSpec:
    a = load_arch("configs/ws8x8.yaml")
    return ArchSpec.model_validate({**a.model_dump(), "vector_unit": {"lanes": lanes}})


# ---- reference: closed forms, API ------------------------------------------------------------

def test_reference_spot_values():
    q = vn.to_fixed
    assert vn.elementwise("exp", q([0.0, 1.0]))[0] == 256                  # e**0 = 1
    assert vn.elementwise("exp", q([10.0, -100.0])).tolist() == [32767, 0]  # saturate / flush
    assert vn.elementwise("recip", q([1.0, -2.0, 0.0])).tolist() == [256, -128, 32767]
    assert vn.elementwise("rsqrt", q([4.0, 1.0, 0.0, -1.0])).tolist() == [128, 256, 32767, 32767]
    assert vn.elementwise("silu", q([0.0, 20.0, -20.0])).tolist() == [0, 5120, 0]
    assert vn.elementwise("add", [32767, -32768, 3], [1, -1, 4]).tolist() == [32767, -32768, 7]
    # 1.5 * 1.5 = 2.25 exactly; 2**-8 * 2**-8 = 2**-16 rounds to 0; -1 * 127 = -127
    assert vn.elementwise("mul", q([1.5, 2 ** -8, -1.0]), q([1.5, 2 ** -8, 127.0])).tolist() \
        == [576, 0, -32512]
    assert vn.elementwise("mul", [128, -128], [1, 1]).tolist() == [1, 0]    # 0.5 LSB: half up
    assert vn.elementwise("max", [1, -5], [-1, -4]).tolist() == [1, -4]
    # sub (opcode 13): exact a - b inside the range (1.5 - 2.25 = -0.75), saturating like add
    # both ways; -(-128.0) alone does not fit, yet 0 - (-32768) is 32767 and -1 - (-32768)
    # is 32767 exactly (no negation first)
    assert vn.elementwise("sub", [384, -32768, 32767, 0, -1, 5], [576, 1, -1, -32768, -32768, 5]
                          ).tolist() == [-192, -32768, 32767, 32767, 32767, 0]
    assert vn.reduce("sum", [32767] * 3) == 98301
    assert vn.reduce("rmax", [-3, -7]) == -3


def test_reference_float_convenience_quantizes_and_rounds():
    assert vn.to_fixed([0.5 / 256, 1.5 / 256, 1e9, -1e9]).tolist() == [0, 2, 32767, -32768]
    assert vn.apply_float("exp", [0.0, 1.0]).tolist() == [1.0, 696 / 256]   # e = 2.71875 Q8.8
    assert vn.apply_float("sum", [1.0, 2.5, -0.25]) == 3.25
    assert vn.apply_float("mul", [3.0], [-0.5]).tolist() == [-1.5]


def test_reference_rejects_bad_input():
    with pytest.raises(ValueError, match="elementwise Q8.8 ops are"):
        vn.elementwise("gelu", [1])
    with pytest.raises(ValueError, match="needs a second operand"):
        vn.elementwise("add", [1])
    with pytest.raises(TypeError, match="raw Q8.8 integers"):
        vn.elementwise("exp", np.array([0.5]))
    with pytest.raises(ValueError, match=r"\[-32768, 32767\]"):
        vn.elementwise("exp", [40000])
    with pytest.raises(ValueError, match="reductions are"):
        vn.reduce("mean", [1])
    z = np.zeros((2, 2), np.int64)
    with pytest.raises(ValueError, match="beat 1: rmax inside a sum run"):
        vn.run_beats(["sum", "rmax"], z, z, [False, True])
    with pytest.raises(ValueError, match="beat 0: op 'gelu'"):
        vn.run_beats(["gelu"], z[:1], z[:1], [True])


def test_reference_tables_are_the_documented_closed_forms():
    assert vn.exp2_table()[[0, 32, 64]].tolist() == [32768, round(2 ** 15 * 2 ** 0.5), 65536]
    assert vn.recip_table()[[0, 64]].tolist() == [32768, 16384]
    assert vn.rsqrt_table()[:, 0].tolist() == [32768, round(2 ** 15 / 2 ** 0.5)]
    assert vn.pwl_table("softplus")[128] == round(256 * np.log(2.0))


# ---- reference against torch, every Q8.8 input -----------------------------------------------

_TORCH = {"exp": torch.exp, "recip": torch.reciprocal, "rsqrt": torch.rsqrt,
          "silu": torch.nn.functional.silu, "softplus": torch.nn.functional.softplus}


@pytest.mark.parametrize("op", vn.UNARY_OPS)
def test_reference_error_against_torch_within_documented_bound(op):
    x = ALL / 256.0
    exact = _TORCH[op](torch.tensor(x, dtype=torch.float64)).numpy()
    keep = ~np.isnan(exact)                                       # rsqrt of negatives
    exact = np.clip(exact[keep], vn.Q_MIN / 256, vn.Q_MAX / 256)  # saturation is specified
    got = vn.from_fixed(vn.elementwise(op, ALL))[keep]
    err = np.abs(got - exact)
    bound = vn.error_bound(op, x[keep])
    worst = int(np.argmax(err - bound))
    assert np.all(err <= bound), (op, x[keep][worst], got[worst], exact[worst], bound[worst])
    # and the bound is not vacuous: within a few LSB where the output is O(1)
    assert np.max(bound[np.abs(exact) <= 4]) < 6 / 256
    if op == "rsqrt":                                            # negatives and 0 saturate
        assert np.all(vn.elementwise(op, ALL[ALL <= 0]) == vn.Q_MAX)


# ---- Amaranth component ----------------------------------------------------------------------

def test_constructor_validation():
    with pytest.raises(TypeError, match="lanes must be an int"):
        VectorUnit(lanes="4")
    with pytest.raises(ValueError, match="lanes must be from 1 to 64"):
        VectorUnit(lanes=0)
    with pytest.raises(ValueError, match="vector_unit.lanes = 128"):
        VectorUnit.from_arch(_arch(128))
    assert set(OP_NAMES) == set(vn.OPS)


def _mixed_stream(rng, lanes: int, per_op: int):
    ops, last, a, b = [], [], [], []
    for op in (o for o in vn.ELEMENTWISE_OPS if o not in vn.INT32_OPS):   # Q8.8 ops
        for j in range(per_op):
            hi = (32768, 2048, 256)[j % 3]       # small operands too, so mul does not saturate
            ops.append(op)
            last.append(False)
            a.append(rng.integers(-hi, hi, lanes))
            b.append(rng.integers(-hi, hi, lanes))
    for op, n in (("sum", 3), ("rmax", 2), ("sum", 1), ("rmax", 4)):
        for j in range(n):
            ops.append(op)
            last.append(j == n - 1)
            a.append(rng.integers(-32768, 32768, lanes))
            b.append(np.zeros(lanes, np.int64))
    return ops, np.array(a), np.array(b), last


def test_amaranth_sim_mixed_stream_matches_reference():
    lanes = 2
    rng = np.random.default_rng(7)
    ops, a, b, last = _mixed_stream(rng, lanes, 6)
    a[:6] = CORNERS[:12].reshape(6, 2)
    want = vn.run_beats(ops, a, b, last)
    got, cycles = _sim_unit(lanes, ops, a, b, np.zeros_like(a), last)
    assert got == want
    assert cycles[0] == LATENCY           # beat in during cycle 0 is out during cycle LATENCY


# ---- argmax and requant: whole int32 lanes ---------------------------------------------------

I32 = (-(1 << 31), (1 << 31) - 1)


def _requant_exact(x, m, s, lo: int = -128, hi: int = 127) -> list[int]:
    """clamp(round_half_up(x * m / 2**s), lo, hi) with Python Fractions (no shifts); the
    default bounds are requant's int8, rescale's are Q8.8's -32768..32767."""
    from fractions import Fraction
    out = []
    for xi, mi, si in zip(np.ravel(x), np.ravel(m), np.ravel(s)):
        q = Fraction(int(xi) * int(mi), 2 ** int(si))
        out.append(max(lo, min(hi, int(np.floor(q + Fraction(1, 2))))))
    return out


def _rescale_exact(x, m, s) -> list[int]:
    return _requant_exact(x, m, s, -32768, 32767)


#: (x, multiplier, shift): shift 0 and 63, multiplier extremes, ties of both signs, saturation
RQ_CORNERS = [(5, -3, 0), (1, 127, 0), (1, 128, 0), (-1, 129, 0), (0, I32[0], 0),
              (I32[0], I32[0], 63), (I32[1], I32[1], 63), (I32[0], I32[1], 63),
              (I32[1], I32[0], 63),
              (3, 1, 1), (-3, 1, 1), (1, 1, 1), (-1, 1, 1), (5, 1, 2), (-5, 1, 2), (-6, 1, 2),
              (-7, 1, 2), (6, 1, 2), (I32[1], 1 << 30, 31), (I32[0], 1 << 30, 31),
              (255, 1 << 30, 31), (-257, 1 << 30, 31), (-259, 1 << 30, 31), (253, 1 << 30, 31),
              (12345, I32[1], 38), (-12345, I32[1], 38), (12345, 1 << 30, 30), (7, 0, 5),
              (-(1 << 20), I32[0], 40), (1 << 20, I32[0], 40), (100, -1, 0), (-100, -1, 0)]


def _requant_beats(rng, lanes: int, n_random: int):
    """(x, m, s) rows: the corners, then accumulator-like values with TFLite-range multipliers."""
    x, m, s = (np.array(v, np.int64) for v in zip(*RQ_CORNERS))
    x = np.concatenate([x, rng.integers(-(1 << 22), 1 << 22, n_random)])
    m = np.concatenate([m, rng.integers(1 << 30, 1 << 31, n_random)])
    s = np.concatenate([s, rng.integers(28, 40, n_random)])
    pad = -len(x) % lanes
    return (np.pad(x, (0, pad)).reshape(-1, lanes), np.pad(m, (0, pad)).reshape(-1, lanes),
            np.pad(s, (0, pad)).reshape(-1, lanes))


def _argmax_runs(rng, lanes: int):
    """Runs (beats, lanes) of int32 lanes: ties within and across beats, all equal, all
    negative, int32 extremes, one beat, and random values with many ties."""
    runs = [np.full((3, lanes), 7), np.full((1, lanes), -5),
            np.array([[1] * (lanes - 1) + [9], [9] + [0] * (lanes - 1)]),
            -rng.integers(1, 50, (4, lanes)),
            np.full((2, lanes), I32[0]), rng.integers(-3, 3, (5, lanes)),
            rng.integers(*I32, (6, lanes))]
    runs[4][-1, -1] = I32[1]
    return runs


def test_requant_reference_is_the_closed_form_and_the_functional_models_requantize():
    from tilewright.compiler.program import VectorTask
    from tilewright.dataflow_sim.functional import run_vector
    x, m, s = _requant_beats(np.random.default_rng(2), 1, 2000)
    got = vn.requant(x, m, s).ravel().tolist()
    assert got == _requant_exact(x, m, s)
    assert got[:9] == [-15, 127, 127, -128, 0, 1, 0, 0, 0]       # closed forms, by hand
    assert got[9:17] == [2, -1, 1, 0, 1, -1, -1, -2]               # ties round half up
    # the compiler's requantize (bias 0, no ReLU) is the same op where its shift is 1..63
    keep = s.ravel() >= 1
    task = VectorTask(name="rq", op="requantize", inputs=("acc", "b", "m", "s"), out="y")
    env = {"acc": x.ravel()[keep][None].astype(np.int32), "b": np.zeros(keep.sum(), np.int32),
           "m": m.ravel()[keep].astype(np.int32), "s": s.ravel()[keep].astype(np.int32)}
    assert run_vector(task, env)[0].tolist() == np.array(got)[keep].tolist()
    with pytest.raises(ValueError, match="shifts are integers 0..63"):
        vn.requant([1], [1], [64])
    with pytest.raises(ValueError, match=r"int32 values lie in"):
        vn.requant([1 << 31], [1], [0])
    with pytest.raises(ValueError, match="takes int32 lanes"):
        vn.apply_float("argmax", [1.0])


def test_rescale_reference_is_the_closed_form():
    """rescale = requant's product and rounding clamped to Q8.8: the corners (ties of both
    signs, int32 extremes, shifts 0 and 63) and random sums against Fractions; by hand: 5 x -3
    = -15, a Q24.8 sum 300 000 x 2**30 / 2**36 = 4687.5 -> 4688 (half up), saturation both
    ways."""
    x, m, s = _requant_beats(np.random.default_rng(4), 1, 2000)
    assert vn.rescale(x, m, s).ravel().tolist() == _rescale_exact(x, m, s)
    assert vn.rescale([5, 300_000, 300_000, -300_000, I32[1], I32[0]],
                      [-3, 1 << 30, 1 << 30, 1 << 30, 1, 1],
                      [0, 36, 0, 2, 0, 0]).tolist() == [-15, 4688, 32767, -32768, 32767, -32768]
    with pytest.raises(ValueError, match="shifts are integers 0..63"):
        vn.rescale([1], [1], [64])


def test_square_reference_is_the_closed_form():
    """The square kernel's reference (mul of x by itself) on all 65536 Q8.8 inputs against
    min(floor((x**2 + 128) / 256), 32767) in Python integers; by hand: 1.0 -> 1.0, 11 raw
    (0.043) -> 0, 12 raw -> 1 (144 + 128 >= 256), -1.5 -> 2.25, 2896 raw -> 32761 (the
    largest that fits), 2897 raw and -32768 raw saturate to 32767."""
    x = np.arange(-32768, 32768)
    assert vn.square(x).tolist() == [min((int(v) ** 2 + 128) // 256, 32767) for v in x]
    assert vn.square([256, 11, 12, -384, 2896, 2897, -32768]).tolist() == \
        [256, 0, 1, 576, 32761, 32767, 32767]


def test_neg_reference_is_the_closed_form():
    """The neg kernel's reference (mul by -1.0, -256 raw) on all 65536 Q8.8 inputs against
    min(-x, 32767) in Python integers; by hand: 1.0 -> -1.0, one LSB -> minus one LSB, 0 -> 0,
    32767 -> -32767, and -32768 (-128.0) -> 32767: +128.0 is outside Q8.8 and saturates, where
    numpy's int16 negation wraps to -32768 (the only code where the two differ)."""
    x = np.arange(-32768, 32768)
    assert vn.neg(x).tolist() == [min(-int(v), 32767) for v in x]
    assert vn.neg([256, 1, 0, 32767, -32768]).tolist() == [-256, -1, 0, -32767, 32767]
    with np.errstate(over="ignore"):
        wrapped = np.negative(x.astype(np.int16)).astype(np.int64)
    assert np.flatnonzero(vn.neg(x) != wrapped).tolist() == [0]        # x = -32768 only
    assert wrapped[0] == -32768


def test_mean_reference_is_the_row_mean_rounded_half_up():
    """The unit's row mean (sum, then rescale by mean_params) against floor(S/n + 1/2) in
    Python integers: every S >= 0 for n = 1..130 and a few long rows, every S for n a power of
    two; S < 0 with another n is that or one LSB below (only at a tie). By hand: [1, 2, 3] -> 2,
    [1, 2] -> 2 (1.5 half up), [-1, -2] -> -1 (-1.5 half up), [0, 0, 1] -> 0, [1, 1, 0] -> 1,
    S = 3 over 6 -> 1 (0.5). Floats: the mean of fp32 squares within 2**-8 of torch.mean."""
    from tilewright.compiler.vector_codegen import MEAN_MAX_ROW, mean_params
    by_hand = [([1, 2, 3], 2), ([1, 2], 2), ([-1, -2], -1), ([0, 0, 1], 0), ([1, 1, 0], 1),
               ([1, 1, 1, 0, 0, 0], 1), ([32767] * 7, 32767), ([-32768] * 4, -32768)]
    for row, want in by_hand:
        assert vn.mean(np.array([row])).tolist() == [want], row
    rng = np.random.default_rng(6)

    def half_up(v, n):
        return [(2 * int(t) + n) // (2 * n) for t in v.sum(axis=1)]
    for n in list(range(1, 131)) + [600, 1000, 4097, MEAN_MAX_ROW]:
        m, sh = mean_params(n)
        assert 2 ** 29 < m <= 2 ** 30 and sh <= 63
        x = rng.integers(0, 32768, (40, n))
        x[0], x[1] = 32767, 0
        x[2, :] = 0
        x[2, 0] = n // 2 if n % 2 == 0 else 0        # S / n = 0.5 exactly: a tie, up to 1
        assert vn.mean(x).tolist() == half_up(x, n), n
        y = rng.integers(-32768, 32768, (40, n))
        d = np.array(vn.mean(y)) - np.array(half_up(y, n))
        if n & (n - 1) == 0:
            assert not d.any(), n
        else:
            assert set(d.tolist()) <= {0, -1}, n
    with pytest.raises(ValueError, match="rows of 1 to 8191"):
        mean_params(MEAN_MAX_ROW + 1)
    xf = torch.randn(50, 64, generator=torch.Generator().manual_seed(0)) * 1.5
    sq = (xf * xf).numpy().astype(np.float32)
    got = vn.mean(vn.to_fixed(sq)) / 256.0
    err = np.abs(got - torch.mean(xf * xf, dim=-1).double().numpy())
    assert err.max() <= 2.0 ** -8 and err.max() > 0


def _qshift_exact(amax: int) -> int:
    """The int8 shift by its definition, in Python integers: the smallest k >= 0 with
    round-half-up(amax / 2**k) <= 127."""
    return next(k for k in range(20) if (2 * amax + (1 << k)) // (2 << k) <= 127)


def test_qshift_and_quantize_reference_by_hand():
    """qshift / quantize_tensor (qshift, then requant by 1): the shift at every threshold by
    hand, codes of a small vector by hand (ties half up, both signs), zero input, the -32768
    corner, and over every magnitude the definition in Python integers; the codes never reach
    -128 and the step 2**k stays under twice the fp32 absmax step amax / 127 (k >= 1)."""
    hand = {0: 0, 1: 0, 127: 0, 128: 1, 254: 1, 255: 2, 509: 2, 510: 3, 1019: 3, 1020: 4,
            32639: 8, 32640: 9, 32767: 9, 32768: 9}
    assert {a: vn.qshift(a) for a in hand} == hand
    codes, k = vn.quantize_tensor([-511, 511, 3, -6, 6, 4, -4, 12, -12, 0])
    # 511 / 8 = 63.875 -> 64; 6 / 8 = 0.75 -> 1; 4 / 8 = 0.5 -> 1 and -0.5 -> 0 (half up);
    # 12 / 8 = 1.5 -> 2, -1.5 -> -1
    assert k == 3 and codes.tolist() == [-64, 64, 0, -1, 1, 1, 0, 2, -1, 0]
    codes, k = vn.quantize_tensor(np.zeros((2, 3), np.int64))
    assert k == 0 and codes.shape == (2, 3) and not codes.any()
    codes, k = vn.quantize_tensor([-32768, 32767, 127, -128])
    assert k == 9 and codes.tolist() == [-64, 64, 0, 0]          # 127 / 512 rounds to 0
    codes, k = vn.quantize_tensor([127, -127, 5])                 # |x| < 0.5: codes = x
    assert k == 0 and codes.tolist() == [127, -127, 5]
    ks = np.array([_qshift_exact(a) for a in range(32769)])
    assert [vn.qshift(a) for a in range(32769)] == ks.tolist()
    for amax in [0, 1, 32767, 32768] + [t + d for t in [128] + [255 << j for j in range(8)]
                                         for d in (-1, 0)]:
        assert vn.reduce("qshift", [3, -amax, 0]) == ks[amax]
        if amax < 32768:
            assert vn.reduce("qshift", [amax, -2]) == ks[max(amax, 2)]
    top = np.arange(1, 32768)                    # the largest magnitude, negative: never -128
    assert vn.requant(-top, 1, ks[1:32768]).min() == -127
    assert vn.requant(top, 1, ks[1:32768]).max() == 127
    assert np.all((2.0 ** ks[top] < 2 * top / 127) | (ks[top] == 0))
    with pytest.raises(ValueError, match="gives a shift"):
        vn.apply_float("qshift", [1.0])


def test_argmax_reference_is_torch_argmax():
    for run in _argmax_runs(np.random.default_rng(4), 3):
        assert vn.argmax(run) == int(torch.argmax(torch.tensor(run.ravel()))), run
    assert vn.argmax([[7, 7], [7, 7]]) == 0 and vn.argmax([-9, -3, -3]) == 1


def test_argmax_over_fp32_order_keys_is_torch_argmax():
    """fp32 values (logits) as the unit's int32 order keys: their argmax on the instruction-level
    model (``argmax_record``, the kernel ``generate --vector`` runs on the LM head's logits) is
    torch.argmax's index on the floats — ties, +0/-0 (equal in torch: the first wins), the
    infinities, subnormals, the largest finite values; the keys sort as the floats do; NaN is
    refused."""
    from tilewright.dataflow_sim.vector_offload import argmax_record

    arch = load_arch("ws8x8v")
    rng = np.random.default_rng(9)
    tiny = np.float32(np.finfo(np.float32).smallest_subnormal)
    big = np.finfo(np.float32).max
    runs = [rng.standard_normal(300).astype(np.float32) * 7,
            np.array([-0.0, 0.0, -1.0], np.float32),                  # max is +-0: index 0
            np.array([-3.0, 0.0, -0.0, -tiny], np.float32),           # +0 first, -0 ties
            np.array([-tiny, -2 * tiny, -tiny], np.float32),          # negative subnormals
            np.array([-np.inf, -big, -np.inf], np.float32),
            np.array([big, np.inf, 1.0, np.inf], np.float32),
            np.full(37, -2.5, np.float32)]
    tied = rng.integers(-4, 4, 41).astype(np.float32) / 4
    runs.append(tied)
    for x in runs:
        rec = argmax_record(x, arch, "t")
        assert int(rec.result[0]) == int(torch.argmax(torch.from_numpy(x))), x
    x = np.concatenate(runs)
    keys = vn.order_keys(x)
    assert keys.min() > vn.I32_MIN and keys.max() <= vn.I32_MAX
    # equal floats <=> equal keys, and the same order: the keys' stable sort is the floats'
    assert np.array_equal(np.argsort(keys, kind="stable"), np.argsort(x, kind="stable"))
    with pytest.raises(ValueError, match="NaN"):
        vn.order_keys(np.array([1.0, np.nan], np.float32))
    with pytest.raises(TypeError, match="fp32"):
        vn.order_keys(np.array([1.0]))


def _sim_unit(lanes, ops, a, b, s, last):
    """(result beats, cycle of the first result) of the Amaranth unit in Amaranth's simulator."""
    dut, got, cycles = VectorUnit(lanes=lanes), [], []
    want = sum(1 for op, lst in zip(ops, last) if op not in vn.REDUCTION_OPS or lst)

    async def bench(ctx):
        ctx.set(dut.results.ready, 1)
        cycle = 0
        while len(got) < want:
            if cycle < len(ops):
                ctx.set(dut.operands.valid, 1)
                ctx.set(dut.operands.payload, {"op": OP_NAMES[ops[cycle]], "last": last[cycle],
                                               "a": a[cycle].tolist(), "b": b[cycle].tolist(),
                                               "s": s[cycle].tolist()})
            else:
                ctx.set(dut.operands.valid, 0)
            await ctx.tick()
            cycle += 1
            if ctx.get(dut.results.valid):
                got.append([ctx.get(dut.results.payload.data[i]) for i in range(lanes)])
                cycles.append(cycle)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return got, cycles


def test_amaranth_sim_requant_and_argmax_bit_exact_on_corner_cases():
    """3 lanes (an odd lane tree): every requant corner and 60 random accumulators, then the
    argmax runs back to back (an exp beat inside one run), each against the closed form /
    torch.argmax written here; the whole stream also equals vector_numerics.run_beats."""
    lanes, rng = 3, np.random.default_rng(9)
    x, m, s = _requant_beats(rng, lanes, 60)
    ops, last = ["requant"] * len(x), [False] * len(x)
    rows_a, rows_b, rows_s = [x], [m], [s]
    runs = _argmax_runs(rng, lanes)
    for k, run in enumerate(runs):
        n = len(run)
        ops += ["argmax"] * n
        last += [False] * (n - 1) + [True]
        rows_a.append(run)
        if k == 5:                                  # an elementwise beat inside the run
            ops.insert(len(ops) - 1, "exp")
            last.insert(len(last) - 1, False)
            rows_a[-1] = np.insert(run, n - 1, [256] * lanes, axis=0)
        rows_b.append(np.zeros_like(rows_a[-1]))
        rows_s.append(np.zeros_like(rows_a[-1]))
    a, b, sh = (np.concatenate(r) for r in (rows_a, rows_b, rows_s))
    got, cycles = _sim_unit(lanes, ops, a, b, sh, last)
    assert got[:len(x)] == np.array(_requant_exact(x, m, s)).reshape(-1, lanes).tolist()
    arg = [row for row in got[len(x):] if row != [696] * lanes]     # drop the exp beat (e)
    assert arg == [[int(torch.argmax(torch.tensor(r.ravel())))] * lanes for r in runs]
    assert got == vn.run_beats(ops, a, b, last, sh)
    assert cycles[0] == LATENCY


def test_amaranth_sim_rescale_bit_exact_on_corner_cases():
    """3 lanes: rescale of every requant corner and 60 random Q24.8-like sums against the
    closed form written here (requant's rounding, Q8.8 clamp); requant beats after them still
    clamp to int8 (the clamp's bounds follow each beat's op)."""
    lanes, rng = 3, np.random.default_rng(12)
    x, m, s = _requant_beats(rng, lanes, 60)
    ops = ["rescale"] * len(x) + ["requant"] * len(x)
    a, b, sh = (np.concatenate([v, v]) for v in (x, m, s))
    got, cycles = _sim_unit(lanes, ops, a, b, sh, [False] * len(ops))
    assert got[:len(x)] == np.array(_rescale_exact(x, m, s)).reshape(-1, lanes).tolist()
    assert got[len(x):] == np.array(_requant_exact(x, m, s)).reshape(-1, lanes).tolist()
    assert got == vn.run_beats(ops, a, b, [False] * len(ops), sh)
    assert cycles[0] == LATENCY


def _qshift_runs(rng, lanes: int) -> list[np.ndarray]:
    """qshift runs: each threshold's magnitude and one below it, both signs, as one-beat runs,
    then multi-beat runs of random values (the largest magnitude in a later beat)."""
    thr = [128] + [255 << j for j in range(8)]
    runs = []
    for t in thr + [1, 0, 32768]:
        for v in (t, t - 1, -t, -(t - 1)):
            if -32768 <= v <= 32767:
                beat = np.zeros((1, lanes), np.int64)
                beat[0, -1] = v
                runs.append(beat)
    for n in (2, 5):
        run = rng.integers(-300, 300, (n, lanes))
        run[-1, 0] = -int(rng.integers(1000, 32769))
        runs.append(run)
    return runs


def test_amaranth_sim_qshift_bit_exact_on_thresholds():
    """3 lanes: qshift runs at every threshold (and one below, both signs) and longer runs,
    each against the definition written here (_qshift_exact of max |x|); an rmax run after them
    still gives the signed max (the shared tree takes magnitudes only for qshift)."""
    lanes, rng = 3, np.random.default_rng(14)
    runs = _qshift_runs(rng, lanes) + [np.array([[-5, -9, -7]])]
    ops, last = [], []
    for i, run in enumerate(runs):
        ops += ["rmax" if i == len(runs) - 1 else "qshift"] * len(run)
        last += [False] * (len(run) - 1) + [True]
    a = np.concatenate(runs)
    z = np.zeros_like(a)
    got, cycles = _sim_unit(lanes, ops, a, z, z, last)
    want = [[_qshift_exact(int(np.abs(r).max()))] * lanes for r in runs[:-1]] + [[-5] * lanes]
    assert got == want
    assert got == vn.run_beats(ops, a, z, last, z)
    assert {row[0] for row in got[:-1]} == set(range(10))          # every shift 0..9 met


# ---- Verilator acceptance --------------------------------------------------------------------

def test_rtl_bit_exact_exhaustive_unary_and_random_binary():
    from tilewright.cosim import sim as cosim
    from tilewright.cosim.vector_jobs import VectorBeats
    lanes, rng = 4, np.random.default_rng(11)
    ops, rows_a, rows_b, last = [], [], [], []
    for op in vn.UNARY_OPS:                                   # every Q8.8 input, each function
        blk = ALL.reshape(-1, lanes)
        ops += [op] * len(blk)
        rows_a.append(blk)
        rows_b.append(np.zeros_like(blk))
        last += [False] * len(blk)
    for op in ("add", "sub", "mul", "max"):                  # corners x corners, then random
        ca, cb = np.meshgrid(CORNERS, CORNERS)
        pa = np.concatenate([ca.ravel(), rng.integers(-32768, 32768, 2000),
                             rng.integers(-2048, 2048, 2000)])
        pb = np.concatenate([cb.ravel(), rng.integers(-32768, 32768, 2000),
                             rng.integers(-2048, 2048, 2000)])
        pad = -len(pa) % lanes
        pa, pb = np.pad(pa, (0, pad)), np.pad(pb, (0, pad))
        ops += [op] * (len(pa) // lanes)
        rows_a.append(pa.reshape(-1, lanes))
        rows_b.append(pb.reshape(-1, lanes))
        last += [False] * (len(pa) // lanes)
    for op, n in (("sum", 7), ("rmax", 5), ("sum", 1), ("rmax", 1), ("sum", 16400)):
        blk = rng.integers(-32768, 32768, (n, lanes))
        if n == 16400:
            blk[:] = 32767                            # 65600 x 32767 > 2**31 - 1: wraps
        ops += [op] * n
        rows_a.append(blk)
        rows_b.append(np.zeros_like(blk))
        last += [False] * (n - 1) + [True]
    n_q88 = len(ops)
    x, m, s = _requant_beats(rng, lanes, 4000)       # int32 ops: requant, rescale, argmax
    ops += ["requant"] * len(x) + ["rescale"] * len(x)
    last += [False] * (2 * len(x))
    rows_a += [x, x]
    rows_b += [m, m]
    qruns, runs = _qshift_runs(rng, lanes), _argmax_runs(rng, lanes)
    for op, op_runs in (("qshift", qruns), ("argmax", runs)):    # reductions: one result each
        for run in op_runs:
            ops += [op] * len(run)
            last += [False] * (len(run) - 1) + [True]
            rows_a.append(run)
            rows_b.append(np.zeros_like(run))
    a, b = np.concatenate(rows_a), np.concatenate(rows_b)
    sh = np.zeros_like(a)
    sh[n_q88:n_q88 + len(x)] = s
    sh[n_q88 + len(x):n_q88 + 2 * len(x)] = s
    want = np.array(vn.run_beats(ops, a, b, last, sh))
    run = cosim.run("vector", VectorBeats(ops, a, b, last, s=sh), _arch(lanes)).records[0]
    assert run.outputs.shape == want.shape
    bad = np.argwhere(run.outputs != want)
    assert len(bad) == 0, [(int(r), int(c), int(run.outputs[r, c]), int(want[r, c]))
                           for r, c in bad[:5]]
    # one beat per cycle in, fixed latency out (ready held high)
    assert np.all(np.diff(run.in_cycles) == 1)
    elem = [i for i, op in enumerate(ops[:n_q88]) if op in vn.ELEMENTWISE_OPS]
    assert np.all(run.out_cycles[:len(elem)] - run.in_cycles[elem] == LATENCY)
    # the wrapping int32 sum, independently: 65600 * 32767 - 2**32 (the fifth Q8.8 reduction,
    # after every Q8.8 elementwise result)
    first_rq = sum(op not in vn.REDUCTION_OPS for op in ops[:n_q88]) + 5
    assert run.outputs[first_rq - 1].tolist() == [65600 * 32767 - 2 ** 32] * lanes
    # sub against the closed form clamp(a - b) in Python integers (corners x corners: both
    # saturations), independently of the reference
    sub = [i for i, op in enumerate(ops) if op == "sub"]
    sa, sb = a[sub].ravel().tolist(), b[sub].ravel().tolist()
    assert run.outputs[sub].ravel().tolist() == [max(-32768, min(32767, p - q))
                                                 for p, q in zip(sa, sb)]
    assert {32767, -32768} <= set(run.outputs[sub].ravel().tolist())
    # requant and argmax against the closed form and torch.argmax written in this file
    assert run.outputs[first_rq:first_rq + len(x)].tolist() == \
        np.array(_requant_exact(x, m, s)).reshape(-1, lanes).tolist()
    assert run.outputs[first_rq + len(x):first_rq + 2 * len(x)].tolist() == \
        np.array(_rescale_exact(x, m, s)).reshape(-1, lanes).tolist()
    assert run.outputs[-len(runs):, 0].tolist() == \
        [int(torch.argmax(torch.tensor(r.ravel()))) for r in runs]
    # qshift against its definition in Python integers (every threshold, both signs)
    q0 = -len(runs) - len(qruns)
    assert run.outputs[q0:-len(runs)].tolist() == \
        [[_qshift_exact(int(np.abs(r).max()))] * lanes for r in qruns]


def test_rtl_back_pressure_keeps_results_and_order():
    from tilewright.cosim import sim as cosim
    from tilewright.cosim.vector_jobs import VectorBeats
    lanes, rng = 4, np.random.default_rng(5)
    ops, a, b, last = _mixed_stream(rng, lanes, 8)
    ready = rng.integers(0, 2, 37).tolist() + [1]
    run = cosim.run("vector", VectorBeats(ops, a, b, last, ready), _arch(lanes)).records[0]
    want = vn.run_beats(ops, a, b, last)
    assert run.outputs.tolist() == want
    assert run.out_last.tolist() == [False] * (len(want) - 4) + [True] * 4
    assert run.cycles > len(ops)                                  # it did stall


def test_rtl_lints_clean_with_the_documented_waivers():
    from tilewright.cosim.build import build
    from tilewright.cosim.verilator import lint
    ok, out = lint(build("vector", _arch(4)))
    assert ok, out[-2000:]
