"""``quantize_int8``: ``linear`` (fp32) -> ``qlinear`` (int8 weights and activations).

Scales are float64 "float units per integer step"; a quantized tensor q stands for ``scale * q``.

* **weights**, per output channel c, symmetric: ``s_w[c] = max|W[c, :]| / 127``,
  ``W_q = clamp(round_half_even(W / s_w[c]), -127, 127)`` (int8). A channel whose weights are all
  zero uses ``s_w[c] = 1/127`` (its W_q is 0 whatever the scale).
* **activations**, per tensor, symmetric: ``s = absmax / 127`` where ``absmax`` is the largest
  |value| of that tensor on the calibration batch (``meta["absmax"]``, set by
  :func:`~tilewright.compiler.frontend.calibrate`); ``s = 1/127`` if absmax is 0.
* **bias**: int32, ``b_q[c] = round_half_even(b[c] / (s_x * s_w[c]))``, the accumulator's scale.
* **requantization** of the int32 accumulator to the next layer's int8 input (scale ``s_y``):
  the real multiplier ``r[c] = s_x * s_w[c] / s_y`` is written ``r ~= mult * 2**-shift`` with
  ``mult`` an int32 in ``[2**30, 2**31)`` (gemmlowp/TFLite style) by :func:`requant_params`, and
  the ``requantize`` vector op computes
  ``y = clamp(floor(((acc + b_q) * mult + 2**(shift-1)) / 2**shift), lo, 127)``
  i.e. ``round_half_up((acc + b_q) * mult / 2**shift)``; ``lo = 0`` with a fused ReLU else -128.
  The last layer requantizes to int8 with its own output scale (relu=False).

The ``qlinear`` op: inputs ``(x int8 [M,K], weight int8 [N,K], bias int32 [N], multiplier
int32 [N], shift int32 [N])``, output int8 [M,N]; attrs ``relu``, ``layer``, ``input_scale``,
``output_scale``, ``weight_scales`` (list, per channel).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from tilewright.compiler.ir import Graph, Op, Tensor

__all__ = ["QuantizeInt8", "requant_params", "activation_scale", "MULT_BITS", "SHIFT_RANGE"]

MULT_BITS = 31
"""multiplier lies in [2**(MULT_BITS-1), 2**MULT_BITS)"""
SHIFT_RANGE = (1, 63)
"""inclusive range of the requantization shift (bits) the requantize op accepts"""


def requant_params(real: Fraction | float) -> tuple[int, int]:
    """Exact fixed-point form of a positive real multiplier: ``(mult, shift)`` with
    ``2**30 <= mult < 2**31``, ``SHIFT_RANGE[0] <= shift <= SHIFT_RANGE[1]`` and
    ``mult = round_half_up(real * 2**shift)``, so ``|mult * 2**-shift - real| <= 2**-(shift+1)``
    (relative error <= 2**-31). Computed with Python ints/Fractions, no floating point.

    Raises ValueError if ``real`` is not positive or needs a shift outside SHIFT_RANGE
    (``real >= 2**30`` or ``real < 2**-33``).
    """
    r = Fraction(real)
    if r <= 0:
        raise ValueError(f"requantization multiplier must be positive, got {float(r)!r}")
    e = r.numerator.bit_length() - r.denominator.bit_length()  # floor(log2 r) is e or e - 1
    if (Fraction(2) ** e) > r:
        e -= 1
    shift = (MULT_BITS - 1) - e  # r * 2**shift in [2**30, 2**31)
    scaled = r * Fraction(2) ** shift
    mult = math.floor(scaled + Fraction(1, 2))  # round half up
    if mult == 1 << MULT_BITS:  # rounding carried into bit 31
        mult >>= 1
        shift -= 1
    if not SHIFT_RANGE[0] <= shift <= SHIFT_RANGE[1]:
        raise ValueError(f"requantization multiplier {float(r)!r} needs shift {shift}, outside "
                         f"{SHIFT_RANGE[0]}..{SHIFT_RANGE[1]}")
    return mult, shift


def activation_scale(t: Tensor) -> float:
    """Per-tensor symmetric scale of activation ``t`` (float units per int8 step)."""
    if "scale" in t.meta:
        return float(t.meta["scale"])
    if "absmax" not in t.meta:
        raise ValueError(f"tensor {t.name} has no calibration range (meta['absmax']); "
                         "run frontend.calibrate first")
    absmax = float(t.meta["absmax"])
    return absmax / 127.0 if absmax > 0 else 1.0 / 127.0


class QuantizeInt8:
    name = "quantize_int8"

    def match(self, op: Op) -> bool:
        return op.kind == "linear"

    def transform(self, graph: Graph, op: Op) -> None:
        x, y = graph.tensors[op.inputs[0]], graph.tensors[op.outputs[0]]
        w = graph.const(op.inputs[1]).astype(np.float64)
        n, k = w.shape
        b = graph.const(op.inputs[2]).astype(np.float64) if len(op.inputs) > 2 else np.zeros(n)
        layer = graph.tensors[op.inputs[1]].meta.get("torch_name", op.name)
        layer = layer.removesuffix(".weight")
        where = f"layer {layer} ({op.source})"

        s_x, s_y = activation_scale(x), activation_scale(y)
        absmax_w = np.abs(w).max(axis=1)
        s_w = np.where(absmax_w > 0, absmax_w / 127.0, 1.0 / 127.0)
        w_q = np.clip(np.rint(w / s_w[:, None]), -127, 127).astype(np.int8)
        b_q = np.rint(b / (s_x * s_w))
        if np.abs(b_q).max(initial=0) > 2**31 - 1:
            raise ValueError(f"{where}: quantized bias exceeds int32 (bias / (s_x*s_w) up to "
                             f"{np.abs(b_q).max():.3g})")
        mults, shifts = [], []
        for c in range(n):
            try:
                m, s = requant_params(Fraction(s_x) * Fraction(float(s_w[c])) / Fraction(s_y))
            except ValueError as exc:
                raise ValueError(f"{where}, output channel {c}: {exc}") from None
            mults.append(m)
            shifts.append(s)

        for t, s in ((x, s_x), (y, s_y)):
            t.format = "int8"
            t.meta["scale"] = s
        consts = {
            "weight": w_q,
            "bias": b_q.astype(np.int32),
            "multiplier": np.array(mults, np.int32),
            "shift": np.array(shifts, np.int32),
        }
        names = []
        for kind, arr in consts.items():
            name = f"{layer}.{kind}"
            graph.add_tensor(Tensor(name, arr.shape, str(arr.dtype), data=arr))
            names.append(name)
        new = Op("qlinear", [x.name, *names], [y.name], source=op.source, name=layer,
                 attrs={"relu": bool(op.attrs.get("relu", False)), "layer": layer,
                        "input_scale": s_x, "output_scale": s_y,
                        "weight_scales": [float(v) for v in s_w]})
        graph.ops[graph.ops.index(op)] = new
