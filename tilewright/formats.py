"""Number formats: a registry of the element formats accelerator architects compare, with
bit-exact numpy quantization (ml_dtypes element types). Imports numpy only; ml_dtypes is imported
the first time a float format's dtype or limits are read (it costs ~0.5 s of CPU at start-up).

Every format stores *element codes* in a numpy dtype plus, for scaled formats, scales:

==============  =====================  ======  ==================  =========================
name            element dtype          bits    scale               overflow of an element
==============  =====================  ======  ==================  =========================
``fp32``        float32                32      none                IEEE (inf), no rounding
``bf16``        ml_dtypes.bfloat16     16      none                IEEE (inf)
``int8``        int8 (symmetric)       8       fp32, tensor|channel saturate to +-127
``int16``       int16 (symmetric)      16      fp32, tensor|channel saturate to +-32767
``fp8-e4m3``    float8_e4m3fn          8       fp32, tensor|channel saturate to +-448
``fp8-e5m2``    float8_e5m2            8       fp32, tensor|channel saturate to +-57344
``mxint8``      int8 code, x 2**-6     8       E8M0 per 32-block   saturate to +-127/64
``mxfp8``       float8_e4m3fn          8       E8M0 per 32-block   saturate to +-448
``mxfp8-e5m2``  float8_e5m2            8       E8M0 per 32-block   saturate to +-57344
==============  =====================  ======  ==================  =========================

Rounding, exactly (all arithmetic in IEEE fp32, round-to-nearest-even = RNE):

* Input ``x`` is first converted to fp32 (RNE). Scaled formats reject inf/NaN (ValueError).
* ``bf16``: ``v = RNE_bf16(x)``; overflow to +-inf, NaN stays NaN (IEEE, like torch ``.to``).
* ``int8``, ``int16``, ``fp8-*`` (scale ``s`` in fp32, per tensor or per channel):
  ``amax = max|x|`` over the group; ``s = amax / qmax`` in fp32 (qmax = 127, 32767, 448 or 57344;
  ``s = 1`` when ``amax == 0``; ``s`` is raised to the smallest fp32 subnormal if it underflows);
  ``v = x / s`` in fp32 (RNE); int8: ``code = clip(rint(v), -127, 127)`` (rint = RNE, -128 never
  produced), int16 likewise with +-32767 (16-bit fixed point: a code times its fp32 scale, the
  scale a power of two or not; -32768 never produced); fp8:
  ``code = RNE_fp8(clip(v, -qmax, qmax))`` — saturating RNE, never inf/NaN.
  Dequantized value: ``code * s`` in fp32 (RNE; may round for fp8 codes with a non-dyadic ``s``).
* MX (OCP Microscaling Formats v1.0, section 6.3), blocks of 32 consecutive elements along the
  reduction axis (the last block zero-padded): ``X = floor(log2(amax_block)) - emax_elem``
  (emax_elem = 8 for E4M3, 15 for E5M2, 0 for INT8), clamped to [-127, 127]; an all-zero block
  gets ``X = -127``. ``X`` is stored as its E8M0 code ``X + 127`` (uint8; 0xFF = NaN is never
  produced). Elements are the saturating RNE of ``x / 2**X`` (an exact power-of-two scaling) in the
  element format; MXINT8 codes are ``clip(rint(x / 2**X * 64), -127, 127)`` (symmetric, as in the
  OCP reference library: the spec's code -128 = -2.0 is never produced, though it dequantizes).
  Dequantization ``element * 2**X`` is exact in fp32.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

from types import ModuleType


class _NumpyOnDemand(ModuleType):
    """``np`` of this module: numpy imported on first attribute use (the light commands —
    ``--help``, ``arch``, ``models`` — import the formats but never compute with them)."""

    def __getattr__(self, name: str) -> Any:
        import numpy  # noqa: PLC0415  (lazy: ~0.1 s of CPU the light commands never need)
        globals()["np"] = numpy
        return getattr(numpy, name)


np: Any = _NumpyOnDemand("numpy")

__all__ = ["NumberFormat", "QTensor", "FORMATS", "ACCUMULATORS", "get_format", "round_to_element",
           "element_values", "quantize", "dequantize", "MX_BLOCK", "E8M0_BIAS", "bits_of"]

Granularity = Literal["none", "tensor", "channel", "block"]
Scaling = Literal["none", "fp32", "e8m0"]
Overflow = Literal["ieee", "saturate"]

#: elements sharing one E8M0 scale in the MX formats (OCP MX v1.0, k = 32)
MX_BLOCK = 32
#: E8M0 code = X + E8M0_BIAS, X in [-127, 127]; code 0xFF is NaN
E8M0_BIAS = 127
class _Accumulators(dict):
    """Accumulator format name -> numpy dtype, resolved on lookup (numpy on demand)."""

    def __getitem__(self, name: str) -> Any:
        return getattr(np, dict.__getitem__(self, name))

    def values(self):  # type: ignore[override]
        return [self[k] for k in self]

    def items(self):  # type: ignore[override]
        return [(k, self[k]) for k in self]


#: accumulator format name -> numpy dtype
ACCUMULATORS: dict[str, Any] = _Accumulators({"fp32": "float32", "int32": "int32"})


@dataclass(frozen=True)
class NumberFormat:
    """One operand (element) format.

    ``element`` names the numpy or ``ml_dtypes`` scalar type holding the element codes
    (``"float32"``, ``"bfloat16"``, ``"float8_e4m3fn"``, ``"int8"``, ``"int16"``); ``dtype``
    resolves it. For a float format ``bits``, ``max_finite``, ``emax``, ``mantissa_bits`` and
    ``emin`` come from ``ml_dtypes.finfo`` of that type, computed on first use (so listing
    formats or checking a name
    does not import ml_dtypes). ``max_finite`` is the largest finite element *value* (after the
    implicit element scale ``2**element_exp``: MXINT8 code 127 means 127/64; an integer format's
    largest code is ``2**(bits - 1) - 1``, symmetric: 127 for int8, 32767 for int16).
    ``mantissa_bits``/``emin`` describe float elements (explicit fraction bits; exponent of the
    smallest normal) and are None for integers; ``emax`` is the exponent of the largest normal
    element (OCP ``emax_elem``; 0 for integers). ``scaling`` says where scales live: none, fp32 per
    tensor/channel, or E8M0 per ``block_size`` elements of the reduction axis. ``rounding`` states
    the rounding and overflow rule.
    """

    name: str
    kind: Literal["float", "int"]
    element: str
    element_exp: int
    scaling: Scaling
    overflow: Overflow
    default_acc: Literal["fp32", "int32"]
    rounding: str

    @cached_property
    def dtype(self) -> Any:
        """The scalar type of the element codes (numpy, or ml_dtypes for bf16 and fp8)."""
        if hasattr(np, self.element):
            return getattr(np, self.element)
        import ml_dtypes  # noqa: PLC0415  (lazy: ~0.5 s of CPU; only bf16/fp8 codes need it)
        return getattr(ml_dtypes, self.element)

    @cached_property
    def _finfo(self) -> Any:
        import ml_dtypes  # noqa: PLC0415  (lazy: ~0.5 s of CPU; only float limits need it)
        return ml_dtypes.finfo(self.dtype)

    @property
    def bits(self) -> int:
        """Bits of one element code."""
        return np.dtype(self.dtype).itemsize * 8

    @property
    def block_size(self) -> int | None:
        """Elements sharing one E8M0 scale (MX formats), None otherwise."""
        return MX_BLOCK if self.scaling == "e8m0" else None

    @property
    def max_finite(self) -> float:
        """Largest finite element value (ml_dtypes.finfo max; ``(2**(bits - 1) - 1) *
        2**element_exp`` for ints: 127 for int8, 32767 for int16)."""
        if self.kind == "int":
            return (2 ** (self.bits - 1) - 1) * 2.0 ** self.element_exp
        return float(self._finfo.max)

    @property
    def emax(self) -> int:
        """Exponent of the largest normal element (OCP emax_elem; 0 for integers)."""
        return 0 if self.kind == "int" else int(np.floor(np.log2(self.max_finite)))

    @property
    def mantissa_bits(self) -> int | None:
        """Explicit fraction bits of a float element; None for integers."""
        return None if self.kind == "int" else int(self._finfo.nmant)

    @property
    def emin(self) -> int | None:
        """Exponent of the smallest normal float element; None for integers."""
        return None if self.kind == "int" else int(np.log2(float(self._finfo.smallest_normal)))

    @property
    def granularities(self) -> tuple[str, ...]:
        """Scale granularities :func:`quantize` accepts for this format."""
        return {"none": ("none",), "fp32": ("tensor", "channel"), "e8m0": ("block",)}[self.scaling]

    @property
    def max_code(self) -> int:
        """Largest integer code of an int format (127 for int8 and MXINT8, 32767 for int16)."""
        if self.kind != "int":
            raise ValueError(f"{self.name} is not an integer format")
        return int(round(self.max_finite * 2.0 ** -self.element_exp))


def _float(name: str, element: str, scaling: Scaling, overflow: Overflow, rounding: str
           ) -> NumberFormat:
    """A float element format held in scalar type ``element`` (numpy or ml_dtypes name)."""
    return NumberFormat(name=name, kind="float", element=element, element_exp=0, scaling=scaling,
                        overflow=overflow, default_acc="fp32", rounding=rounding)


def _int(name: str, element_exp: int, scaling: Scaling, rounding: str, element: str = "int8"
         ) -> NumberFormat:
    """A symmetric integer format held in numpy type ``element`` (int8 or int16) whose code 1 is
    worth 2**element_exp; accumulates in int32 unless MX-scaled (fp32)."""
    return NumberFormat(name=name, kind="int", element=element, element_exp=element_exp,
                        scaling=scaling, overflow="saturate",
                        default_acc="fp32" if scaling == "e8m0" else "int32", rounding=rounding)


_SAT_FP = "x/s in fp32 (RNE), then saturating RNE (|v| > max -> +-max; never inf/NaN)"
_MX = "OCP MX v1.0: X = floor(log2 amax_block) - emax_elem; element = saturating RNE of x / 2**X"

#: format name -> NumberFormat (operand formats; accumulators are in ACCUMULATORS)
FORMATS: dict[str, NumberFormat] = {f.name: f for f in [
    _float("fp32", "float32", "none", "ieee", "identity on fp32 input (IEEE binary32)"),
    _float("bf16", "bfloat16", "none", "ieee", "RNE; overflow -> +-inf; NaN kept (IEEE)"),
    _int("int8", 0, "fp32", "symmetric: code = clip(rint(x/s), -127, 127), rint = RNE, s fp32"),
    _int("int16", 0, "fp32", "symmetric: code = clip(rint(x/s), -32767, 32767), rint = RNE, "
         "s fp32", element="int16"),
    _float("fp8-e4m3", "float8_e4m3fn", "fp32", "saturate", _SAT_FP),
    _float("fp8-e5m2", "float8_e5m2", "fp32", "saturate", _SAT_FP),
    _int("mxint8", -6, "e8m0", _MX + "; code = clip(rint(64 x / 2**X), -127, 127)"),
    _float("mxfp8", "float8_e4m3fn", "e8m0", "saturate", _MX + " (E4M3 elements)"),
    _float("mxfp8-e5m2", "float8_e5m2", "e8m0", "saturate", _MX + " (E5M2 elements)"),
]}


def get_format(name: str | NumberFormat) -> NumberFormat:
    """The registered format called ``name``; ValueError listing the known names otherwise."""
    if isinstance(name, NumberFormat):
        return name
    try:
        return FORMATS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown number format {name!r}; known: {', '.join(FORMATS)}") from None


def bits_of(name: str) -> int:
    """Bits of one value of ``name``: an element format of :data:`FORMATS` (its ``bits``) or an
    accumulator format of :data:`ACCUMULATORS` (its dtype's width: 32 for int32 and fp32)."""
    if name in FORMATS:
        return FORMATS[name].bits
    if name in ACCUMULATORS:
        return np.dtype(ACCUMULATORS[name]).itemsize * 8
    raise ValueError(f"number format {name!r}: known are {', '.join([*FORMATS, *ACCUMULATORS])}")


def round_to_element(v: np.ndarray, fmt: str | NumberFormat) -> np.ndarray:
    """Round fp32 element *values* ``v`` to element codes of ``fmt`` (RNE, the format's overflow
    rule: saturate to +-max_finite, or IEEE inf for fp32/bf16). No scale is applied."""
    f = get_format(fmt)
    v = np.asarray(v, dtype=np.float32)
    if f.kind == "int":
        if not np.isfinite(v).all():
            raise ValueError(f"{f.name}: cannot round inf/NaN to an integer code")
        codes = np.rint(np.ldexp(v, -f.element_exp))  # exact power-of-two scaling, then RNE
        return np.clip(codes, -f.max_code, f.max_code).astype(f.dtype)
    if f.overflow == "saturate":
        v = np.clip(v, -f.max_finite, f.max_finite)  # NaN passes through; RNE <= max after clip
    with np.errstate(invalid="ignore", over="ignore"):  # NaN in, or IEEE overflow to inf
        return v.astype(f.dtype)


def element_values(codes: np.ndarray, fmt: str | NumberFormat) -> np.ndarray:
    """fp32 values of element codes (exact: every element value is representable in fp32)."""
    f = get_format(fmt)
    vals = np.asarray(codes).astype(np.float32)
    return np.ldexp(vals, f.element_exp) if f.element_exp else vals


@dataclass(frozen=True, eq=False)
class QTensor:
    """A quantized tensor: element codes, scales and where they apply.

    ``values``: codes in ``FORMATS[format].dtype``, same shape as the source tensor.
    ``axis``: the reduction axis (non-negative). ``scales`` by ``granularity``:
    ``none`` -> None (scale 1); ``tensor`` -> fp32 of shape (1,)*ndim; ``channel`` -> fp32 with
    ``shape[axis] == 1`` (one scale per slice along the other axes); ``block`` -> uint8 E8M0 codes
    with ``shape[axis] == ceil(values.shape[axis] / 32)``.
    """

    format: str
    values: np.ndarray
    scales: np.ndarray | None
    axis: int
    granularity: Granularity

    def __post_init__(self) -> None:
        f = get_format(self.format)
        if self.values.dtype != np.dtype(f.dtype):
            raise TypeError(f"{f.name} values must be {np.dtype(f.dtype)}, got {self.values.dtype}")
        if not 0 <= self.axis < max(self.values.ndim, 1):
            raise ValueError(f"axis {self.axis} out of range for shape {self.values.shape}")
        if self.granularity not in f.granularities:
            # unscaled codes (scale 1) are allowed for any non-MX format
            if not (self.granularity == "none" and f.scaling == "fp32"):
                raise ValueError(f"{f.name}: granularity {self.granularity!r} not in "
                                 f"{f.granularities}")
        if (self.scales is None) != (self.granularity == "none"):
            raise ValueError("scales must be None exactly when granularity is 'none'")
        if self.scales is not None:
            want = [1] * self.values.ndim if self.granularity == "tensor" else \
                list(self.values.shape)
            if self.granularity == "channel":
                want[self.axis] = 1
            if self.granularity == "block":
                want[self.axis] = -(-self.values.shape[self.axis] // MX_BLOCK)
            dt = np.uint8 if self.granularity == "block" else np.float32
            if self.scales.shape != tuple(want) or self.scales.dtype != dt:
                raise ValueError(f"{self.granularity} scales must be {np.dtype(dt)}{tuple(want)}, "
                                 f"got {self.scales.dtype}{self.scales.shape}")

    @property
    def fmt(self) -> NumberFormat:
        return FORMATS[self.format]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.values.shape)

    @property
    def scale_exponents(self) -> np.ndarray:
        """MX only: the shared exponents X (int32), shape of ``scales``; scale = 2**X."""
        if self.granularity != "block" or self.scales is None:
            raise ValueError(f"{self.format} ({self.granularity}) has no E8M0 block scales")
        return self.scales.astype(np.int32) - E8M0_BIAS

    def block_exponents(self) -> np.ndarray:
        """MX only: X expanded to one per element (int32, shape of ``values``)."""
        x = np.repeat(self.scale_exponents, MX_BLOCK, axis=self.axis)
        return np.take(x, np.arange(self.values.shape[self.axis]), axis=self.axis)


def _fp32_scale(x: np.ndarray, f: NumberFormat, axis: int, granularity: str) -> np.ndarray:
    """fp32 scale ``amax / qmax`` (keepdims) for tensor or channel granularity."""
    if granularity == "tensor":
        amax = np.max(np.abs(x), keepdims=True) if x.size else np.zeros([1] * x.ndim, np.float32)
    else:
        amax = np.max(np.abs(x), axis=axis, keepdims=True)
    s = amax / np.float32(f.max_finite)
    s = np.where(amax == 0, np.float32(1), np.maximum(s, np.finfo(np.float32).smallest_subnormal))
    return s.astype(np.float32).reshape([1] * x.ndim if granularity == "tensor" else amax.shape)


def _mx_quantize(x: np.ndarray, f: NumberFormat, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """(codes, E8M0 scale codes) of ``x`` blocked by 32 along ``axis``."""
    xm = np.moveaxis(x, axis, -1)
    k = xm.shape[-1]
    nb = -(-k // MX_BLOCK)
    xp = np.pad(xm, [(0, 0)] * (xm.ndim - 1) + [(0, nb * MX_BLOCK - k)])
    blocks = xp.reshape(*xm.shape[:-1], nb, MX_BLOCK)
    amax = np.max(np.abs(blocks), axis=-1)
    _, e = np.frexp(amax)  # amax = m * 2**e, m in [0.5, 1): floor(log2 amax) = e - 1 (exact)
    xexp = np.where(amax > 0, e.astype(np.int32) - 1 - f.emax, -E8M0_BIAS)
    xexp = np.clip(xexp, -E8M0_BIAS, E8M0_BIAS).astype(np.int32)
    v = np.ldexp(blocks, -xexp[..., None])  # exact unless the result is below fp32's normal range
    codes = round_to_element(v, f).reshape(*xm.shape[:-1], nb * MX_BLOCK)[..., :k]
    return (np.ascontiguousarray(np.moveaxis(codes, -1, axis)),
            np.ascontiguousarray(np.moveaxis((xexp + E8M0_BIAS).astype(np.uint8), -1, axis)))


def quantize(x: np.ndarray, fmt: str | NumberFormat, *, axis: int = -1,
             granularity: Literal["tensor", "channel"] | None = None) -> QTensor:
    """Quantize ``x`` (converted to fp32) to ``fmt`` with the rules in the module docstring.

    ``axis`` is the reduction axis (for ``a @ b``: -1 for ``a``, 0 for ``b``); MX blocks run along
    it and ``channel`` scales are per slice across it. ``granularity`` applies to the fp32-scaled
    formats (int8, fp8-*; default ``tensor``); fp32/bf16 are unscaled and MX is always per block,
    so for them it must be None.
    """
    f = get_format(fmt)
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 0:
        raise ValueError("quantize needs at least a 1-D array")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis {axis} out of range for a {x.ndim}-D array")
    axis %= x.ndim
    if f.scaling == "fp32":
        granularity = granularity or "tensor"
        if granularity not in ("tensor", "channel"):
            raise ValueError(f"{f.name}: granularity must be 'tensor' or 'channel', got "
                             f"{granularity!r}")
    elif granularity is not None:
        raise ValueError(f"{f.name} has fixed scaling ({f.granularities[0]}); pass no granularity")
    if f.scaling != "none" and not np.isfinite(x).all():
        raise ValueError(f"{f.name}: input contains inf/NaN; scaled formats need finite input")
    if f.scaling == "none":
        return QTensor(f.name, round_to_element(x, f), None, axis, "none")
    if f.scaling == "e8m0":
        codes, scales = _mx_quantize(x, f, axis)
        return QTensor(f.name, codes, scales, axis, "block")
    s = _fp32_scale(x, f, axis, granularity)
    return QTensor(f.name, round_to_element(x / s, f), s, axis, granularity)


def dequantize(q: QTensor) -> np.ndarray:
    """fp32 values of ``q``: ``element * scale`` (fp32 RNE for fp32 scales; exact for MX)."""
    vals = element_values(q.values, q.format)
    if q.granularity == "none":
        return vals
    if q.granularity == "block":
        return np.ldexp(vals, q.block_exponents())
    return (vals * q.scales).astype(np.float32)
