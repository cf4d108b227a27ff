"""The accelerator top's vector engine: LOAD_V / VECTOR / SCAN / STORE_V code from vector kernels,
run in Verilator and driven by Programs.

References are independent of the code under test: each kernel's result against the units' own
numpy arithmetic (argmax: ``np.argmax``; requant: a Python-integer closed form written here;
``vector_numerics``: elementwise ops, per-row reductions, softmax composed in the
test from the unit's primitives; ``scan_numerics``: the scan recurrence and C-projection per
channel, and ``scan_task_fixed`` for a whole scan task) and against numpy float softmax; the instruction-level
model against the RTL word for word; cycles against the cycle model (which reads only the ISA)
and, for one small program, against a count summed by hand from the timing contract.

Two small builds cover both DMA gearboxes: 4 lanes behind a 4-byte port (every 16-byte vector
word travels as 4 beats; latency 10 cycles) and 8 lanes behind the default 32-byte port.
"""

from __future__ import annotations

import numpy as np
import pytest

from tilewright.arch import ArchSpec, default_arch, load_arch
from tilewright.compiler.codegen import (VBUF_WORDS, AssemblerError, CodegenError, Instr,
                                         assemble, beats_per_word, disassemble)
from tilewright.compiler.layout import DoesNotFit
from tilewright.compiler.vector_codegen import (VectorKernel, batch_kernels, codegen_vector,
                                                pack_vector_words, unpack_vector_words)
from tilewright.dataflow_sim import scan_numerics as sn
from tilewright.dataflow_sim import vector_numerics as vn
from tilewright.dataflow_sim import accel_timing
from tilewright.dataflow_sim.accel_timing import predict_segment
from tilewright.dataflow_sim.vector_isa import kernel_reference


def _arch(lanes: int, bw: float, lat: float, name: str) -> ArchSpec:
    base = default_arch().model_dump(mode="json", exclude_none=True)
    base.update(name=name, offchip={"bandwidth_gbps": bw, "latency_ns": lat},
                memory={"scratchpad_kib": 2, "accumulator_kib": 2}, vector_unit={"lanes": lanes})
    base["tensor_engine"].update(rows=4, cols=4, dataflow="ws")
    return ArchSpec.from_dict(base)


#: 4 lanes, W = 4 bytes (2 GB/s at 500 MHz), L = 10 cycles; 8 lanes, W = 32 bytes, L = 50
ARCHS = {"narrow4": _arch(4, 2.0, 20.0, "vec4-narrow"), "wide8": _arch(8, 16.0, 100.0, "vec8")}

_RNG = np.random.default_rng(11)
_EDGE = np.array([vn.Q_MIN, vn.Q_MAX, 0, 1, -1, 256, -256, 4096, -4096, 4095, 2047, -2048, 177])


def _operand(shape, lo=-3000, hi=3000, edges=True):
    x = _RNG.integers(lo, hi, shape)
    if edges:
        flat = x.reshape(-1)
        flat[:min(len(_EDGE), flat.size)] = _EDGE[:flat.size]
    return x


def _softmax_composed(row: np.ndarray) -> np.ndarray:
    """Softmax of one raw Q8.8 row from the unit's primitives, as the module docstring of
    compiler/vector_codegen.py states it (written out here, not taken from the code)."""
    m = vn.reduce("rmax", row)
    neg = int(vn.elementwise("mul", np.array([m]), np.array([-256]))[0])
    e = vn.elementwise("exp", vn.elementwise("add", row, np.full_like(row, neg)))
    s = vn.reduce("sum", e)
    r = int(vn.elementwise("recip", np.array([s]))[0])
    return vn.elementwise("mul", e, np.full_like(e, r))


def _suite():
    """(kernel, operands, independent reference) — random values with the Q8.8 corner cases."""
    out = []
    for op in ("add", "sub", "mul", "max"):
        shape = (3, 11)
        a, b = _operand(shape), _operand(shape)[::-1].copy()
        out.append((VectorKernel(op, "elementwise", op, shape), [a, b], vn.elementwise(op, a, b)))
    for op in ("exp", "recip", "rsqrt", "silu", "softplus"):
        a = _operand((37,), -1500, 1500)
        out.append((VectorKernel(op, "elementwise", op, a.shape), [a], vn.elementwise(op, a)))
    # square (a norm's x ** 2): mul with b reading a's words; the closed form in Python
    # integers, round half up, saturating from |a| = 2897 raw (2896 is the largest that fits)
    a = _operand((3, 11))
    a.reshape(-1)[-6:] = (2896, 2897, -2896, -2897, 11, 12)
    out.append((VectorKernel("square", "elementwise", "square", a.shape), [a],
                np.array([min((int(v) ** 2 + 128) // 256, 32767) for v in a.ravel()]
                         ).reshape(a.shape)))
    # neg (-x): mul by the broadcast -1.0 word; min(-a, 32767) in Python integers — exact but
    # for -32768 (+128.0 saturates), the edges include both extremes; 3 x 11 is 9 words on 4 lanes
    a = _operand((3, 11))
    out.append((VectorKernel("neg", "elementwise", "neg", a.shape), [a],
                np.array([min(-int(v), 32767) for v in a.ravel()]).reshape(a.shape)))
    # copy: any int32 lanes (e.g. fp32 bits) back unchanged, the extremes included
    c = _RNG.integers(I32_MIN, I32_MAX, (5, 7), endpoint=True)
    c.reshape(-1)[:4] = (I32_MIN, I32_MAX, 0, -1)
    out.append((VectorKernel("copy", "copy", "copy", c.shape), [c], c.copy()))
    for op in ("sum", "rmax"):
        x = _operand((5, 13))
        out.append((VectorKernel(f"r{op}", "row", op, x.shape), [x],
                    np.array([vn.reduce(op, r) for r in x])))
    # rows of 600 elements: 150 words on 4 lanes, longer than a VECTOR segment (127 beats), so
    # one instruction per row on the narrow arch
    x = _operand((2, 600), -100, 100)
    out.append((VectorKernel("longsum", "row", "sum", x.shape), [x],
                np.array([vn.reduce("sum", r) for r in x])))
    # row means (sum, then rescale by 1/n): rows of squares (S >= 0) of odd and even lengths,
    # and signed rows of a power-of-two length, against floor(S / n + 1/2) in Python integers;
    # 600 elements: one sum instruction per row on the narrow arch
    # 8 rows of 508: two chunks on the narrow arch (7 rows of 127 words and their sums fit)
    for shape, lo in (((5, 13), 0), ((3, 48), 0), ((2, 600), 0), ((4, 16), -32768),
                      ((8, 508), 0)):
        x = _RNG.integers(lo, 32768, shape)
        x[0, :2] = (32767, 0)
        out.append((VectorKernel(f"mean{shape[1]}", "row", "mean", shape), [x],
                    np.array([(2 * int(t) + shape[1]) // (2 * shape[1]) for t in x.sum(1)])))
    for rows, length in ((6, 9), (2, 1), (1, 127)):
        x = _operand((rows, length), -1200, 1200, edges=False)
        out.append((VectorKernel(f"softmax{length}", "row", "softmax", x.shape), [x],
                    np.stack([_softmax_composed(r) for r in x])))
    for shape in ((2, 9, 3, 3), (1, 5, 2, 1)):
        ops = _scan_operands(shape)
        out.append((VectorKernel(f"scan{shape[1]}", "scan", "scan", shape), ops,
                    _scan_composed(*ops)))
    for name, x in (("argmax", _argmax_rows()), ("longargmax", _long_argmax_row())):
        out.append((VectorKernel(name, "row", "argmax", x.shape), [x], np.argmax(x, axis=1)))
    acc, mult, shift = _requant_operands()
    out.append((VectorKernel("requant", "requant", "requant", acc.shape), [acc, mult, shift],
                _requant_closed(acc, mult, shift)))
    # per-tensor int8 quantize (qshift, then requant by 1): the edge values (-32768: shift 9),
    # |x| <= 127 (shift 0, codes = x), all zeros, and ties at shift 3 (x = +-4, +-12), against
    # the closed form in Python integers written here
    ties = _operand((2, 7), -500, 500, edges=False)
    ties.reshape(-1)[:5] = (509, 4, -4, 12, -12)
    for name, x in (("quant", _operand((3, 11))), ("quant0", _operand((5,), -127, 128, False)),
                    ("quantz", np.zeros((2, 9), np.int64)), ("quantties", ties)):
        out.append((VectorKernel(name, "quantize", "quantize", x.shape), [x], _quant_closed(x)))
    # an embedding lookup: row 29 of a 37 x 19 int32 table fetched by LOAD_VI from the index
    # register (the table stays in external memory; 19 = 4 words + 3 lanes on 4 lanes)
    table = _RNG.integers(I32_MIN, I32_MAX, (37, 19), endpoint=True)
    out.append((VectorKernel("gather", "gather", "gather", table.shape), [table, np.array([29])],
                table[29]))
    # a prompt's lookup: rows 29, 3, 36, 29, 0 of the same table, each id an index word in
    # external memory that LOAD_IDX puts into the index register before its LOAD_VI
    ids = np.array([29, 3, 36, 29, 0])
    out.append((VectorKernel("lookup", "lookup", "lookup", (len(ids), *table.shape)),
                [table, ids], table[ids]))
    return out


I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1


def _quant_closed(x: np.ndarray):
    """(codes, [k]) of a per-tensor int8 quantize by its definition in Python integers: k the
    smallest shift with round-half-up(max |x| / 2**k) <= 127, codes round-half-up(x / 2**k)."""
    amax = int(np.abs(x).max()) if x.size else 0
    k = next(k for k in range(20) if (2 * amax + (1 << k)) // (2 << k) <= 127)
    codes = np.array([(2 * int(v) + (1 << k)) // (2 << k) for v in x.ravel()], np.int64)
    return codes.reshape(x.shape), np.array([k])


def _argmax_rows():
    """int32 rows: all equal, a tied negative maximum, full-range random, all int32 minimum (the
    padding's value: a real element still wins), small values with many ties."""
    x = _RNG.integers(-40, 40, (5, 13))
    x[0] = 7
    x[1] = -_RNG.integers(2, 60, 13)
    x[1, [4, 9]] = -1
    x[2] = _RNG.integers(I32_MIN, I32_MAX, 13)
    x[3] = I32_MIN
    x[4] = _RNG.integers(-2, 2, 13)
    return x


def _long_argmax_row():
    """One row of 600 (150 words on 4 lanes: longer than a segment, one VECTOR per row), its
    maximum tied at 597 and 598."""
    x = _RNG.integers(-1000, 1000, (1, 600))
    x[0, [597, 598]] = 5000
    return x


def _requant_operands():
    """acc [5, 11] int32 (extremes and accumulator-like values), per-channel multipliers
    (extremes and TFLite-range [2**30, 2**31)) and shifts (0, 63 and typical ones)."""
    acc = _RNG.integers(-(1 << 21), 1 << 21, (5, 11))
    acc[0, :4] = [I32_MIN, I32_MAX, -3, 3]
    mult = _RNG.integers(1 << 30, I32_MAX, 11)
    mult[:4] = [I32_MIN, I32_MAX, 1, 1]
    shift = _RNG.integers(28, 36, 11)
    shift[:4] = [63, 0, 1, 1]
    return acc, mult, shift


def _requant_closed(acc, mult, shift):
    """clamp(floor((acc * m + 2**(s-1)) / 2**s), -128, 127) per channel in Python integers."""
    out = np.zeros(acc.shape, np.int64)
    for (i, j), v in np.ndenumerate(acc):
        p, s = int(v) * int(mult[j]), int(shift[j])
        out[i, j] = min(127, max(-128, (p + (1 << s >> 1)) // (1 << s)))
    return out


def _scan_operands(shape):
    """a, b, c, h0 codes with corner cases: a = 0 and the largest code, saturating b."""
    bt, length, d, n = shape
    a = _RNG.integers(0, 1 << 16, shape)
    a.reshape(-1)[:2] = [0, (1 << 16) - 1]
    b = _RNG.integers(-(1 << 20), 1 << 20, shape)
    b.reshape(-1)[:2] = [sn.DEFAULT_FORMAT.h_max, sn.DEFAULT_FORMAT.h_min]
    return [a, b, _RNG.integers(-(1 << 17), 1 << 17, (bt, length, n)),
            _RNG.integers(-(1 << 20), 1 << 20, (bt, d, n))]


def _scan_composed(a, b, c, h0):
    """(y [B, L, D], final h [B, D, N]) channel by channel from scan_numerics' step functions."""
    bt, length, d, n = a.shape
    y, h_last = np.zeros((bt, length, d), np.int64), np.zeros((bt, d, n), np.int64)
    for i in range(bt):
        for j in range(d):
            h = sn.scan_codes(a[i, :, j], b[i, :, j], h0[i, j])
            y[i, :, j] = sn.project_codes(c[i], h)
            h_last[i, j] = h[-1]
    return y, h_last


def _equal(got, ref) -> bool:
    if isinstance(ref, tuple):
        return all(np.array_equal(g, r) for g, r in zip(got, ref)) and len(got) == len(ref)
    return np.array_equal(got, ref)


def test_isa_encodes_the_vector_instructions_and_refuses_bad_fields():
    code = [Instr("LOAD_V", {"vaddr": 5, "count": 3, "addr": 77}),
            Instr("VECTOR", {"vop": 3, "count": 4, "a": 1, "b": 2, "b_inc": 1, "dst": 9,
                             "seg": 2}),
            Instr("STORE_V", {"vaddr": 9, "count": 4, "addr": 1 << 20}),
            Instr("SCAN", {"count": 8, "ab": 0, "c": 16, "h0": 17, "dst": 30}),
            Instr("SYNC", {"dma": 1, "gemm": 0, "vec": 1}), Instr("END")]
    assert disassemble(assemble(code)) == code
    with pytest.raises(AssemblerError, match=r"VECTOR\): field count=0 does not fit: accepted "
                                             r"1 \.\. 4095"):
        assemble([Instr("VECTOR", {"vop": 0, "count": 0, "a": 0, "b": 0, "b_inc": 0, "dst": 0,
                                   "seg": 0})])
    with pytest.raises(AssemblerError, match=r"LOAD_V\): field vaddr=4096 does not fit"):
        assemble([Instr("LOAD_V", {"vaddr": 4096, "count": 1, "addr": 0})])


def test_kernels_on_the_instruction_model_equal_the_units_arithmetic():
    arch = ARCHS["narrow4"]
    for kernel, ops, ref in _suite():
        assert _equal(kernel_reference(kernel, arch, *ops), ref), kernel.name
    # softmax in Q8.8 against float softmax: within 3 LSB (measured max 0.012 on these rows)
    x = _operand((6, 9), -1200, 1200, edges=False)
    got = kernel_reference(VectorKernel("s", "row", "softmax", x.shape), arch, x) / 256
    xf = x / 256
    e = np.exp(xf - xf.max(axis=1, keepdims=True))
    assert np.abs(got - e / e.sum(axis=1, keepdims=True)).max() <= 3 / 256


def test_scan_kernel_equals_the_scan_units_task_model():
    """A whole scan task in float (Mamba-like a in (0, 1)) through the kernel equals
    scan_numerics.scan_task_fixed, the scan unit's independent task-level twin; 40 channels of
    12 steps overflow one vector-buffer chunk (1,024 words / 27 per channel), so chunks too."""
    arch = ARCHS["wide8"]
    rng = np.random.default_rng(3)
    bt, length, d, n = 2, 12, 40, 6
    af = np.exp(-rng.uniform(0.01, 2, (bt, length, d, n)))
    bf, cf = rng.normal(0, 1, (bt, length, d, n)), rng.normal(0, 1, (bt, length, n))
    h0f = rng.normal(0, 1, (bt, d, n))
    k = VectorKernel("s", "scan", "scan", af.shape)
    isa = codegen_vector(arch, [k])
    assert len(isa.segments[0].chunks) == 2 * 2
    y, h = kernel_reference(k, arch, sn.to_a_code(af), sn.to_h_code(bf), sn.to_h_code(cf),
                            sn.to_h_code(h0f), isa=isa)
    y_ref, h_ref = sn.scan_task_fixed(af, bf, cf, h0f, chunk_l=4, chunk_d=8)
    assert np.array_equal(sn.from_h_code(y).astype(np.float32), y_ref)
    assert np.array_equal(sn.from_h_code(h).astype(np.float32), h_ref)


def test_elementwise_longer_than_the_vector_buffer_is_chunked():
    arch = ARCHS["wide8"]
    a = _operand((VBUF_WORDS * 8 + 21,), -1500, 1500)          # 1,027 words > 1,024
    k = VectorKernel("big", "elementwise", "silu", a.shape)
    isa = codegen_vector(arch, [k])
    assert len(isa.segments[0].chunks) == 2
    assert np.array_equal(kernel_reference(k, arch, a, isa=isa), vn.elementwise("silu", a))


def test_vector_words_round_trip():
    x = _operand((7, 4))
    assert np.array_equal(unpack_vector_words(pack_vector_words(x), 4), x)


def test_cycle_model_matches_a_count_by_hand():
    """LOAD_V 2 words, VECTOR exp over 2 beats, STORE_V 2 words, END on 4 lanes behind a 4-byte
    port (r = 4 beats per word, L = 10): fetch in cycle 1; LOAD_V issues in 2, busy 10 + 2*4 =
    18 cycles (free from 21); VECTOR waits for the DMA: issues in 21, busy 2 + 5 = 7 (free from
    29); STORE_V waits for the vector engine: issues in 29, busy 1 + 8 = 9 (free from 39); END
    issues in 39: 39 cycles."""
    arch = ARCHS["narrow4"]
    assert beats_per_word(arch)["v"] == 4
    isa = codegen_vector(arch, [VectorKernel("e", "elementwise", "exp", (8,))])
    assert [i.op for i in disassemble(list(isa.words))] == ["LOAD_V", "VECTOR", "STORE_V", "END"]
    t = predict_segment(isa, isa.segments[0], arch)
    assert (t.cycles, t.vector_cycles, t.dma_cycles) == (39, 7, 18 + 9)


def test_square_code_and_cycle_model_match_a_count_by_hand():
    """square of 8 elements on the same arch: one operand loaded once, then ``mul`` (opcode 1)
    with b = a = word 0 stepping with a (b_inc): LOAD_V 2 words issues in 2, busy 18 (free from
    21); VECTOR 2 beats in 21, busy 7 (free from 29); STORE_V in 29, busy 9 (free from 39); END
    in 39 — the count of the exp kernel above, one LOAD_V fewer than a two-operand mul."""
    arch = ARCHS["narrow4"]
    isa = codegen_vector(arch, [VectorKernel("q", "elementwise", "square", (8,))])
    ins = disassemble(list(isa.words))
    assert [i.op for i in ins] == ["LOAD_V", "VECTOR", "STORE_V", "END"]
    assert {k: ins[1].fields[k] for k in ("vop", "count", "a", "b", "b_inc", "dst")} == \
        {"vop": 1, "count": 2, "a": 0, "b": 0, "b_inc": 1, "dst": 0}
    t = predict_segment(isa, isa.segments[0], arch)
    assert (t.cycles, t.vector_cycles, t.dma_cycles) == (39, 7, 18 + 9)


def test_neg_and_copy_code_and_cycle_model_match_a_count_by_hand():
    """Same arch (r = 4 beats per word, L = 10). neg of 8 elements: LOAD_V of the -1.0 word into
    the buffer's last word issues in 2, busy 10 + 4 = 14 (free from 17); LOAD_V of x (2 words)
    in 17, busy 18 (free from 36); VECTOR ``mul`` (opcode 1) with b on that word, not stepping
    (b_inc 0), 2 beats in 36, busy 7 (free from 44); STORE_V in 44, busy 9 (free from 54); END
    in 54. copy of 8 lanes: LOAD_V 2 words in 2 (free from 21), STORE_V in 21 (free from 31),
    END in 31, no VECTOR. A neg longer than the buffer (1,023 words and the constant) loads the
    constant once; a copy's chunks are whole buffers."""
    arch = ARCHS["narrow4"]
    isa = codegen_vector(arch, [VectorKernel("n", "elementwise", "neg", (8,))])
    assert [str(i) for i in disassemble(list(isa.words))] == [
        "LOAD_V vaddr=1023 count=1 addr=0", "LOAD_V vaddr=0 count=2 addr=4",
        "VECTOR vop=1 count=2 a=0 b=1023 b_inc=0 dst=0 seg=0",
        "STORE_V vaddr=0 count=2 addr=12", "END"]
    t = predict_segment(isa, isa.segments[0], arch)
    assert (t.cycles, t.vector_cycles, t.dma_cycles) == (54, 7, 14 + 18 + 9)
    assert [isa.segments[0].image(arch, np.zeros(8, np.int64))[a] for a in range(4)] == \
        [-256 & 0xFFFFFFFF] * 4
    isa = codegen_vector(arch, [VectorKernel("c", "copy", "copy", (2, 4))])
    assert [str(i) for i in disassemble(list(isa.words))] == [
        "LOAD_V vaddr=0 count=2 addr=0", "STORE_V vaddr=0 count=2 addr=8", "END"]
    t = predict_segment(isa, isa.segments[0], arch)
    assert (t.cycles, t.vector_cycles, t.dma_cycles) == (31, 0, 18 + 9)
    x = _operand((VBUF_WORDS * 4 + 5,))
    k = VectorKernel("n", "elementwise", "neg", x.shape)
    isa = codegen_vector(arch, [k])
    ops = [i for i in disassemble(list(isa.words)) if i.op == "LOAD_V"]
    assert len(isa.segments[0].chunks) == 2 and len(ops) == 3 and ops[0].fields["count"] == 1
    assert kernel_reference(k, arch, x, isa=isa).tolist() == [min(-int(v), 32767) for v in x]
    y = _RNG.integers(I32_MIN, I32_MAX, VBUF_WORDS * 4 + 5)
    k = VectorKernel("c", "copy", "copy", y.shape)
    isa = codegen_vector(arch, [k])
    assert [c.in_words for c in isa.segments[0].chunks] == [VBUF_WORDS, 2]
    assert np.array_equal(kernel_reference(k, arch, y, isa=isa), y)


def test_neg_and_copy_offload_and_leave_the_host_list():
    """neg of fp32 x is -to_fixed(x) on the unit (min(-a, 32767) of the Q8.8 code a), within
    2**-9 of numpy's -x inside the Q8.8 range and 128 - 2**-8 for x = -128 (saturated); copy
    returns the fp32 bits unchanged (NaN, infinities, a subnormal, -0.0 included: no Q8.8 on
    the way); a copy of another dtype stays on the host (None). host_ops then lists neither."""
    from tilewright.app.flows.generate import host_ops
    from tilewright.compiler.program import VectorTask
    from tilewright.dataflow_sim.vector_offload import VectorUnitOps
    hook = VectorUnitOps(ARCHS["wide8"])
    x = np.concatenate([(_RNG.standard_normal(200) * 20), [-128.0, -127.99, 127.9961, 1 / 512,
                                                             -1 / 512, 3 / 512, 0.0]]
                       ).astype(np.float32)
    neg = VectorTask(name="n", op="neg", inputs=("x",), out="y", attrs={"format": "fp32"})
    got = hook(neg, [x])
    assert hook.records[-1].kernel == VectorKernel("v0_n", "elementwise", "neg", x.shape)
    assert got.dtype == np.float32
    want = np.array([min(-int(v), 32767) for v in vn.to_fixed(x)]) / 256
    assert np.array_equal(got.astype(np.float64), want)
    assert got[-7] == 127.99609375 and got[-5] == -127.99609375
    inside = np.abs(x) < 128 - 2.0 ** -9
    assert (np.abs(got[inside] + x[inside].astype(np.float64)) <= 2.0 ** -9).all()
    y = np.array([[np.nan, np.inf, -np.inf, 1e-40], [-0.0, np.pi, 1e30, -3.5]], np.float32)
    copy = VectorTask(name="c", op="copy", inputs=("y",), out="z")
    got = hook(copy, [y])
    assert hook.records[-1].kernel == VectorKernel("v1_c", "copy", "copy", (2, 4))
    assert got.dtype == np.float32 and np.array_equal(got.view(np.int32), y.view(np.int32))
    assert hook(copy, [np.arange(6, dtype=np.int64)]) is None and len(hook.records) == 2

    class Prog:                        # host_ops reads a program's tasks only
        tasks = [neg, copy]
    assert host_ops(Prog(), ()) == ["copy x1", "neg x1"]
    assert host_ops(Prog(), tuple(r.task for r in hook.records)) == []


def test_pow_offload_is_the_units_square_and_only_for_exponent_2():
    """A pow task with exponent 2 (2 or 2.0) becomes a ``square`` kernel whose fp32 result is
    the closed form min(floor((a**2 + 128) / 256), 32767) / 256 of the Q8.8 input a, within
    2|x| 2**-9 + 2**-18 + 2**-9 of numpy's x**2 (input rounding, its square, output rounding);
    other exponents stay on the functional model (None) and so stay on the host's list by name
    (generate's host_ops)."""
    from tilewright.app.flows.generate import host_ops
    from tilewright.compiler.program import VectorTask
    from tilewright.dataflow_sim.vector_offload import VectorUnitOps
    hook = VectorUnitOps(ARCHS["wide8"])
    x = (_RNG.standard_normal((3, 40)) * 3).astype(np.float32)
    for e in (2, 2.0):
        task = VectorTask(name=f"p{e}", op="pow", inputs=("x",), out="y", attrs={"exponent": e})
        got = hook(task, [x])
        assert got.shape == x.shape and got.dtype == np.float32
        assert hook.records[-1].kernel.op == "square"
        a = vn.to_fixed(x)
        want = np.array([min((int(v) ** 2 + 128) // 256, 32767) for v in a.ravel()]) / 256
        assert np.array_equal(got.ravel().astype(np.float64), want)
        x64 = x.astype(np.float64)
        assert (np.abs(got - x64 ** 2) <= 2 * np.abs(x64) * 2.0 ** -9 + 2.0 ** -18
                + 2.0 ** -9).all()
    n = len(hook.records)
    other = [VectorTask(name=f"q{i}", op="pow", inputs=("x",), out="y", attrs={"exponent": e})
             for i, e in enumerate((3, 0.5, True))]
    assert all(hook(t, [x]) is None for t in other) and len(hook.records) == n

    class Prog:                        # host_ops reads a program's tasks only
        tasks = [task, *other]
    assert host_ops(Prog(), (task.name,)) == ["pow x3"]


def test_sub_offload_is_the_units_sub_with_the_scalar_on_its_side():
    """sub tasks (two tensors broadcast, a tensor minus a scalar, a scalar minus a tensor) become
    elementwise ``sub`` kernels (opcode 13) whose fp32 results are clamp(a - b) / 256 of the
    Q8.8 operands, here exactly numpy's fp32 difference of the Q8.8-rounded inputs (none
    saturates)."""
    from tilewright.compiler.codegen import VECTOR_OPCODES
    from tilewright.compiler.program import VectorTask
    from tilewright.dataflow_sim.vector_offload import VectorUnitOps
    assert VECTOR_OPCODES["sub"] == 13
    hook = VectorUnitOps(ARCHS["wide8"])
    x = (_RNG.standard_normal((4, 6)) * 4).astype(np.float32)
    y = (_RNG.standard_normal((1, 6)) * 4).astype(np.float32)
    qx, qy = (vn.to_fixed(v) / 256 for v in (x, y))
    cases = [({}, [x, y], qx - qy), ({"scalar": 1.5}, [x], qx - 1.5),
             ({"scalar": 1.5, "scalar_first": True}, [x], 1.5 - qx)]
    for i, (attrs, ins, want) in enumerate(cases):
        task = VectorTask(name=f"s{i}", op="sub", inputs=tuple(f"i{j}" for j in range(len(ins))),
                          out="o", attrs=attrs)
        got = hook(task, ins)
        assert hook.records[-1].kernel == VectorKernel(f"v{i}_s{i}", "elementwise", "sub",
                                                       (4, 6))
        assert got.dtype == np.float32 and np.array_equal(got, want.astype(np.float32)), attrs


def test_scan_cycle_model_matches_a_count_by_hand():
    """One channel of 3 steps, N = 2, same arch: LOAD_V c (3 words) issues in 2, busy
    10 + 3*4 = 22 (free from 25); LOAD_V a/b/h0 (7 words) issues in 25, busy 10 + 28 = 38
    (free from 64); SCAN waits: issues in 64, busy 3 + 4 = 7 (free from 72); STORE_V y + state
    (ceil(3/4) + 1 = 2 words) issues in 72, busy 1 + 8 = 9 (free from 82); END in 82."""
    arch = ARCHS["narrow4"]
    isa = codegen_vector(arch, [VectorKernel("s", "scan", "scan", (1, 3, 1, 2))])
    ops = [i.op for i in disassemble(list(isa.words))]
    assert ops == ["LOAD_V", "LOAD_V", "SCAN", "STORE_V", "END"]
    t = predict_segment(isa, isa.segments[0], arch)
    assert (t.cycles, t.vector_cycles, t.dma_cycles) == (82, 7, 22 + 38 + 9)


def test_requant_and_argmax_cycle_model_match_a_count_by_hand():
    """Same arch. requant of 2 rows x 4 channels: LOAD_V of the multiplier and shift words (2)
    issues in 2, busy 10 + 2*4 = 18 (free from 21); LOAD_V of the accumulators (2 words) issues
    in 21, busy 18 (free from 40); VECTOR requant (2 beats) issues in 40, busy 2 + 5 = 7 (free
    from 48); STORE_V (2 words) issues in 48, busy 1 + 8 = 9 (free from 58); END in 58.
    argmax of one row of 8: LOAD_V (2 words) in 2, free from 21; VECTOR argmax (2 beats) in 21,
    busy 7 (free from 29); STORE_V of 1 word in 29, busy 1 + 4 = 5 (free from 35); END in 35."""
    arch = ARCHS["narrow4"]
    for kernel, ops, want in (
            (VectorKernel("q", "requant", "requant", (2, 4)),
             ["LOAD_V", "LOAD_V", "VECTOR", "STORE_V", "END"], (58, 7, 18 + 18 + 9)),
            (VectorKernel("a", "row", "argmax", (1, 8)),
             ["LOAD_V", "VECTOR", "STORE_V", "END"], (35, 7, 18 + 5))):
        isa = codegen_vector(arch, [kernel])
        assert [i.op for i in disassemble(list(isa.words))] == ops
        t = predict_segment(isa, isa.segments[0], arch)
        assert (t.cycles, t.vector_cycles, t.dma_cycles) == want, kernel


def test_mean_code_and_cycle_model_match_a_count_by_hand():
    """Same arch. mean of 2 rows x 8 (2 words per row): one LOAD_V of the rows and, after them,
    the multiplier and shift words (6 words) issues in 2, busy 10 + 6*4 = 34 (free from 37);
    VECTOR sum (4 beats, 2 segments) in 37, busy 4 + 5 = 9 (free from 47); VECTOR rescale (2
    beats, b = the multiplier word 4) in 47, busy 2 + 5 = 7 (free from 55); STORE_V of the 2
    result words in 55, busy 1 + 8 = 9 (free from 65); END in 65. The parameters are 2**30 and
    33 (n = 8), in external memory right after the rows; a mean row longer than MEAN_MAX_ROW
    does not fit."""
    from tilewright.compiler.vector_codegen import MEAN_MAX_ROW
    arch = ARCHS["narrow4"]
    isa = codegen_vector(arch, [VectorKernel("m", "row", "mean", (2, 8))])
    ins = disassemble(list(isa.words))
    assert [(i.op, i.fields.get("vop"), i.fields.get("count")) for i in ins] == [
        ("LOAD_V", None, 6), ("VECTOR", 8, 4), ("VECTOR", 12, 2), ("STORE_V", None, 2),
        ("END", None, None)]
    assert ins[2].fields["b"] == 4 and ins[1].fields["dst"] == ins[2].fields["a"] == 6
    t = predict_segment(isa, isa.segments[0], arch)
    assert (t.cycles, t.vector_cycles, t.dma_cycles) == (65, 9 + 7, 34 + 9)
    image = isa.segments[0].image(arch, np.zeros((2, 8), np.int64))
    # W = 4: one lane a beat; 4 row words of 4 beats, then the parameter words
    assert [image[a] for a in range(16, 24)] == [2 ** 30] * 4 + [33] * 4
    with pytest.raises(DoesNotFit, match="mean of a row"):
        codegen_vector(ARCHS["wide8"], [VectorKernel("m", "row", "mean", (1, MEAN_MAX_ROW + 1))])


def test_quantize_code_and_cycle_model_match_a_count_by_hand():
    """Same arch. quantize of 2 x 4 (2 words): one LOAD_V of the words and, after them, the
    multiplier word (3 words) issues in 2, busy 10 + 3*4 = 22 (free from 25); VECTOR qshift (2
    beats, one segment) in 25, busy 2 + 5 = 7 (free from 33), its shift to word 3; VECTOR
    requant (a = 0 in place, b = the multiplier word 2, the shift in word 3) in 33, busy 7 (free
    from 41); STORE_V of the 4 words in 41, busy 1 + 16 = 17 (free from 59); END in 59. The
    multiplier word (1 in every lane) follows the tensor in external memory; a tensor of more
    than VBUF_WORDS - 2 words does not fit, and a double-buffered arch runs the same code."""
    arch = ARCHS["narrow4"]
    k = VectorKernel("q", "quantize", "quantize", (2, 4))
    isa = codegen_vector(arch, [k])
    ins = disassemble(list(isa.words))
    assert [str(i) for i in ins] == [
        "LOAD_V vaddr=0 count=3 addr=0",
        "VECTOR vop=14 count=2 a=0 b=0 b_inc=0 dst=3 seg=0",
        "VECTOR vop=11 count=2 a=0 b=2 b_inc=0 dst=0 seg=0",
        "STORE_V vaddr=0 count=4 addr=12", "END"]
    t = predict_segment(isa, isa.segments[0], arch)
    assert (t.cycles, t.vector_cycles, t.dma_cycles) == (59, 7 + 7, 22 + 17)
    image = isa.segments[0].image(arch, np.zeros((2, 4), np.int64))
    assert [image[a] for a in range(8, 12)] == [1] * 4
    x = np.array([[-511, 511, 3, -6], [4, -4, 12, -12]])
    codes, kk = kernel_reference(k, arch, x, isa=isa)
    assert kk.tolist() == [3] and codes.tolist() == [[-64, 64, 0, -1], [1, 0, 2, -1]]
    db = ArchSpec.from_dict({**arch.model_dump(mode="json", exclude_none=True),
                             "vector_unit": {"lanes": 4, "double_buffer": True}})
    assert codegen_vector(db, [k]).words == isa.words
    with pytest.raises(DoesNotFit, match="quantize of 4089 elements needs 1025 vector-buffer"):
        codegen_vector(arch, [VectorKernel("q", "quantize", "quantize", (4089,))])


def test_quantize_offload_is_the_units_per_tensor_int8():
    """A per-tensor int8 QuantizeTask becomes a quantize kernel: its codes and scale are the
    closed form on the Q8.8 input (written here), the scale is 2**(k-8) and within twice
    formats.quantize's amax / 127, and every dequantized value is within half a step plus the
    Q8.8 rounding of x; the functional model takes the pair (codes into ``out``, the scale into
    ``scale_out``). Channel granularity, another format or a tensor larger than the vector
    buffer stays on the host (None)."""
    from tilewright.compiler.program import QuantizeTask
    from tilewright.dataflow_sim.functional import run_vector, vector_unit_ops
    from tilewright.dataflow_sim.vector_offload import VectorUnitOps
    from tilewright.formats import quantize
    arch = ARCHS["wide8"]
    hook = VectorUnitOps(arch)
    x = (np.random.default_rng(3).standard_normal((3, 40)) * 2.5).astype(np.float32)
    task = QuantizeTask(name="q", x="x", out="c", scale_out="s", format="int8",
                        granularity="tensor", axis=-1)
    codes, scale = hook(task, [x])
    assert hook.records[-1].kernel == VectorKernel("v0_q", "quantize", "quantize", (3, 40))
    want_c, (k,) = _quant_closed(vn.to_fixed(x))
    assert codes.dtype == np.int8 and np.array_equal(codes, want_c)
    assert scale.dtype == np.float32 and scale.shape == (1, 1) and scale[0, 0] == 2.0 ** (k - 8)
    assert np.abs(codes).max() <= 127
    # the step against formats.quantize's amax / 127 of the same (Q8.8) values: at least
    # amax / 127.5 (no code beyond 127), under twice it
    ref = quantize(vn.to_fixed(x) / 256.0, "int8", axis=-1, granularity="tensor").scales[0, 0]
    assert ref * 127 / 127.5 <= scale[0, 0] < 2 * ref
    err = np.abs(codes * scale.astype(np.float64) - x)
    assert err.max() <= scale[0, 0] / 2 + 2.0 ** -9
    env = {"x": x}
    with vector_unit_ops(VectorUnitOps(arch)):
        got = run_vector(task, env)
    assert np.array_equal(got, codes) and np.array_equal(env["s"], scale)
    for other in (task.model_copy(update={"granularity": "channel"}),
                  task.model_copy(update={"format": "fp8-e4m3"})):
        assert hook(other, [x]) is None
    assert hook(task, [np.ones(VBUF_WORDS * 8, np.float32)]) is None
    assert len(hook.records) == 1


def test_reduce_mean_offload_is_the_units_row_mean():
    """A reduce_mean task over the last axis becomes a row ``mean`` kernel whose fp32 result is
    within 2**-8 of numpy's mean (the bound vector_numerics derives); over another axis, or of a
    row too long, it stays on the functional model (None)."""
    from tilewright.compiler.program import VectorTask
    from tilewright.compiler.vector_codegen import MEAN_MAX_ROW
    from tilewright.dataflow_sim.vector_offload import VectorUnitOps
    arch = ARCHS["wide8"]
    hook = VectorUnitOps(arch)
    x = (_RNG.standard_normal((2, 3, 40)) ** 2).astype(np.float32)
    task = VectorTask(name="m", op="reduce_mean", inputs=("x",), out="y",
                      attrs={"axes": [2], "keepdim": True})
    got = hook(task, [x])
    assert got.shape == (2, 3, 1) and got.dtype == np.float32
    assert hook.records[-1].kernel == VectorKernel("v0_m", "row", "mean", (6, 40))
    err = np.abs(got.astype(np.float64) - x.astype(np.float64).mean(-1, keepdims=True))
    assert err.max() <= 2.0 ** -8
    other = VectorTask(name="m1", op="reduce_mean", inputs=("x",), out="y",
                       attrs={"axes": [1], "keepdim": True})
    assert hook(other, [x]) is None
    assert hook(task, [np.ones((1, MEAN_MAX_ROW + 1), np.float32)]) is None


def test_lookup_code_and_cycle_model_match_a_count_by_hand():
    """lookup of ids [3, 1] in a 5 x 4 table on 4 lanes behind a 4-byte port (one word per row,
    r = 4 beats per vector word, one beat per index word, L = 10): LOAD_IDX issues in 2, busy
    10 + 1 = 11 (free from 14); LOAD_VI waits for the DMA: 14, busy 10 + 4 = 14 (free from 29);
    LOAD_IDX 29 (free from 41); LOAD_VI 41 (free from 56); STORE_V of 2 words in 56, busy
    1 + 8 = 9 (free from 66); END in 66. The index words follow the table; a table wider than
    the index register reaches, or an id outside the table, is refused."""
    arch = ARCHS["narrow4"]
    k = VectorKernel("lk", "lookup", "lookup", (2, 5, 4))
    isa = codegen_vector(arch, [k])
    code = disassemble(list(isa.words))
    assert [str(i) for i in code] == [
        "LOAD_IDX addr=20", "LOAD_VI vaddr=0 count=1 addr=0", "LOAD_IDX addr=21",
        "LOAD_VI vaddr=1 count=1 addr=0", "STORE_V vaddr=0 count=2 addr=22", "END"]
    t = predict_segment(isa, isa.segments[0], arch)
    assert (t.cycles, t.dma_cycles) == (66, 11 + 14 + 11 + 14 + 9)
    table = np.arange(20).reshape(5, 4)
    assert kernel_reference(k, arch, table, np.array([3, 1]), isa=isa).tolist() == [
        [12, 13, 14, 15], [4, 5, 6, 7]]
    with pytest.raises(ValueError, match=r"lookup operand ids: integers in \[0, 4\] expected"):
        isa.segments[0].image(arch, table, np.array([3, 5]))
    with pytest.raises(DoesNotFit, match="a table of 65537 rows; the index register"):
        codegen_vector(arch, [VectorKernel("lk", "lookup", "lookup", (1, 65537, 1))])


def test_codegen_refuses_what_cannot_run():
    with pytest.raises(CodegenError, match="ws8x8 has no vector_unit"):
        codegen_vector(load_arch("ws8x8"), [VectorKernel("e", "elementwise", "exp", (4,))])
    with pytest.raises(DoesNotFit, match="softmax row of 128 elements.*at most 127"):
        codegen_vector(ARCHS["wide8"], [VectorKernel("s", "row", "softmax", (2, 128))])
    with pytest.raises(ValueError, match="elementwise op 'sum'; accepted: add, sub, mul, max, exp"):
        VectorKernel("x", "elementwise", "sum", (4,))
    with pytest.raises(ValueError, match="a row op takes a 2-D operand"):
        VectorKernel("x", "row", "sum", (4,))
    with pytest.raises(CodegenError, match="distinct names"):
        codegen_vector(ARCHS["wide8"], [VectorKernel("x", "elementwise", "exp", (4,))] * 2)
    seg = codegen_vector(ARCHS["wide8"], [VectorKernel("x", "elementwise", "exp", (4,))]).segments[0]
    with pytest.raises(ValueError, match=r"raw Q8.8 integers in \[-32768, 32767\]"):
        seg.image(ARCHS["wide8"], np.array([0.5, 1, 2, 3]))


def test_batches_fit_the_instruction_memory():
    # a softmax kernel of 20 rows is 2 LOAD_V + 7 VECTOR + STORE_V + END = 11 words: 93 kernels
    # per 1,024-word batch
    ks = [VectorKernel(f"s{i}", "row", "softmax", (20, 5)) for i in range(200)]
    assert len(codegen_vector(ARCHS["wide8"], ks[:1]).words) == 11
    batches = batch_kernels(ARCHS["wide8"], ks)
    assert [len(b) for b in batches] == [93, 93, 14]
    assert [k for b in batches for k in b] == ks


def test_segmented_vector_instruction_on_the_model():
    """One VECTOR rmax over 7 beats in segments of 3 gives 3 words (beats 0-2, 3-5, 6); an add
    with b stepping once per segment adds word b+0 to beats 0-2, b+1 to 3-5, b+2 to beat 6."""
    from tilewright.compiler.codegen import VECTOR_OPCODES
    from tilewright.compiler.vector_codegen import VectorIsa, VectorSegment
    from tilewright.dataflow_sim.vector_isa import run_vector_segment
    arch = ARCHS["narrow4"]
    x = _operand((7, 4))
    bw = _operand((3, 4))
    code = [Instr("VECTOR", {"vop": VECTOR_OPCODES["rmax"], "count": 7, "a": 0, "b": 0,
                             "b_inc": 0, "dst": 20, "seg": 3}),
            Instr("VECTOR", {"vop": VECTOR_OPCODES["add"], "count": 7, "a": 0, "b": 10,
                             "b_inc": 0, "dst": 30, "seg": 3}),
            Instr("END")]
    seg = VectorSegment(VectorKernel("h", "elementwise", "add", (1,)), 0, 2, 4, 0, -1, ())
    isa = VectorIsa(arch.content_hash(), tuple(assemble(code)), (seg,), 0)
    buf = np.zeros((VBUF_WORDS, 4), np.int64)
    buf[0:7], buf[10:13] = x, bw
    buf = run_vector_segment(isa, "h", arch, {}, buf)
    assert buf[20:23].tolist() == [[vn.reduce("rmax", x[i:i + 3])] * 4 for i in (0, 3, 6)]
    assert np.array_equal(buf[30:37], vn.elementwise("add", x, bw[[0, 0, 0, 1, 1, 1, 2]]))


@pytest.mark.parametrize("name", list(ARCHS))
def test_vector_kernels_on_the_rtl_bit_exact_and_cycle_exact(name, monkeypatch):
    from tilewright.cosim import sim as cosim
    from tilewright.cosim.program_jobs import KernelBatch
    arch = ARCHS[name]
    suite = _suite()
    batch = KernelBatch([k for k, _, _ in suite], {k.name: ops for k, ops, _ in suite})
    run = cosim.run("accel", batch, arch)
    for kernel, ops, ref in suite:
        assert _equal(run.outputs[kernel.name], ref), kernel.name
    for row in run.comparison(arch):
        assert row["equal"], row
    assert all(r["retired"] > 0 for r in run.records)
    # not vacuous: the cycle model one cycle off per VECTOR, or one bit of a result flipped,
    # and the comparisons fail for the new instructions
    monkeypatch.setattr(accel_timing, "VECTOR_OVERHEAD_CYCLES",
                        accel_timing.VECTOR_OVERHEAD_CYCLES + 1)
    off = {r["kernel"]: r["equal"] for r in run.comparison(arch)}
    assert not any(off[k] for k in ("argmax", "longargmax", "requant", "mean13")), off
    monkeypatch.undo()
    # the gather read row 29, not its neighbours (the index register reached the DMA); the
    # lookup's rows are the ids' (LOAD_IDX wrote each id before its LOAD_VI), not a neighbour's
    table = dict((kk.name, ops) for kk, ops, _ in suite)["gather"][0]
    assert not any(np.array_equal(run.outputs["gather"], table[i]) for i in (0, 28, 30))
    for j, i in enumerate((29, 3, 36, 29, 0)):
        assert not any(np.array_equal(run.outputs["lookup"][j], table[n])
                       for n in (i - 1, i + 1) if 0 <= n < len(table))
    for k in ("argmax", "requant", "gather", "lookup", "mean48", "square", "sub", "neg", "copy"):
        flipped = run.outputs[k].copy()
        flipped.reshape(-1)[-1] ^= 1
        assert not _equal(flipped, dict((kk.name, r) for kk, _, r in suite)[k])
    # quantize: one code's bit or the shift one off (the scale twice or half) is caught
    codes, k = run.outputs["quant"]
    assert k.tolist() == [9]
    ref = dict((kk.name, r) for kk, _, r in suite)["quant"]
    bad = codes.copy()
    bad.reshape(-1)[-1] ^= 1
    assert not _equal((bad, k), ref) and not _equal((codes, k + 1), ref)
    if name == "narrow4":         # the C++ fast driver agrees with the cocotb bench
        fast = cosim.run("accel", batch, arch, driver="fast")
        for kernel, _, ref in suite:
            assert _equal(fast.outputs[kernel.name], ref), kernel.name
        keys = ("task", "cycles", "retired", "read_beats", "write_beats")
        assert [{k: r[k] for k in keys} for r in fast.records] == \
            [{k: r[k] for k in keys} for r in run.records]


@pytest.mark.parametrize("model,arch,needle,fast", [
    ("tiny-moe", "ws8x8v", "softmax", True), ("tiny-mamba", "ws8x8v", "scan", True),
    ("tiny-mamba", "cube2x4x2v", "scan", False)])
def test_cli_runs_a_layers_vector_ops_on_the_rtl(model, arch, needle, fast):
    """tiny-moe (its softmax) and tiny-mamba (its scan on the scan unit) on the fast driver;
    tiny-mamba again on a cube engine's accelerator top (tile-MAC core + vector engine) on the
    cocotb bench — the CLI's cocotb path with the vector engine (a whole tiny-moe layer under
    cocotb took 64 s of CI for no path the cube case does not take)."""
    from tests.test_cli import tw
    res = tw("sim", "--model", model, "--arch", arch, "--rtl", "--top", "accel",
             "--vector", *(["--fast"] if fast else []), columns=240)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    for check in ("RTL vector engine == instruction-level model (bit-exact)",
                  "layer output with RTL GEMMs and vector ops == functional (bit-exact)",
                  "RTL cycles == accelerator cycle model (every vector kernel, DMA included)"):
        line = next((ln for ln in out.splitlines() if check in ln), "")
        assert "PASS" in line, out
    assert needle in out and "all cross-checks passed" in out


@pytest.mark.parametrize("args,msg", [
    (["--arch", "ws8x8", "--vector"], "ws8x8 has no vector_unit section"),
    (["--arch", "ws8x8v", "--vector", "--rtl"], "needs --top accel"),
    (["--arch", "ws8x8v", "--vector", "--rtl", "--top", "accel", "--trace", "/tmp/x"],
     "no --trace"),
])
def test_cli_vector_errors_are_one_line(args, msg):
    from tests.test_cli import tw
    res = tw("sim", "--model", "tiny-moe", *args)
    out = res.stdout + res.stderr
    assert res.returncode == 2, out
    assert msg in " ".join(out.replace("│", " ").split()) and "Traceback" not in out


def test_tilewright_rtl_writes_the_accelerator_top_lint_clean(tmp_path):
    """`tilewright rtl --top accel`: the whole top with its vector engine, Verilator -Wall clean;
    the manifest names its ports and the ISA's memory sizes."""
    import json

    from tests.test_cli import tw
    res = tw("rtl", "--arch", "ws8x8v", "--top", "accel", "-o", str(tmp_path), "--lint")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "lint-only -Wall: clean" in " ".join(res.stdout.split())
    man = json.loads((tmp_path / "manifest.json").read_text())
    assert man["top"] == "tw_accel" and man["vector_engine"] == {"lanes": 8,
                                                                  "buffer_words": VBUF_WORDS}
    names = {p["name"] for p in man["ports"]}
    assert {"mem_req_valid", "mem_rd_data", "imem_wr_data", "start", "done", "vec_busy"} <= names
    bad = tw("rtl", "--arch", "ws8x8v", "--top", "soc", "-o", str(tmp_path / "x"))
    assert bad.returncode == 2 and "--top 'soc': accepted: core, accel, axi-accel" in bad.stderr


def test_sim_vector_without_rtl_runs_the_units_arithmetic_in_the_functional_model():
    """`--vector` alone: the layer's vector ops and scan in the units' fixed-point arithmetic,
    checked against torch (no RTL); the recorded kernels name the ops taken."""
    from tilewright.arch import load_arch
    from tilewright.app.flows.sim_rtl import TORCH_REL_L2_BOUND, simulate_model
    base = simulate_model("tiny-mamba", load_arch("ws8x8v"))
    res = simulate_model("tiny-mamba", load_arch("ws8x8v"), vector=True)
    assert res.ok and not res.rtl
    assert {"scan", "exp", "softplus", "silu", "rsqrt"} <= {r["kernel"] for r in res.vector_rows}
    # fixed point costs accuracy, but stays inside the bound the fp32 run is held to
    assert base.rel_l2_vs_torch < res.rel_l2_vs_torch <= TORCH_REL_L2_BOUND


def test_take_rows_offload_picks_gather_or_lookup():
    """VectorUnitOps on take_rows of an fp32 table: one id -> ``gather`` (index register),
    several ids of an embedding lookup -> ``lookup`` (LOAD_IDX per id), the rows' fp32 bits
    exactly; several ids of another gather (MoE dispatch) and a lookup longer than the
    instruction memory (1,024 words; 2 per id) stay on the host (None)."""
    from tilewright.compiler.program import VectorTask
    from tilewright.dataflow_sim.vector_offload import VectorUnitOps
    arch = ARCHS["wide8"]
    table = _RNG.normal(0, 1, (40, 19)).astype(np.float32)
    ops = VectorUnitOps(arch)

    def task(attrs):
        return VectorTask(name="t", op="take_rows", inputs=("w", "i"), out="o", attrs=attrs)
    emb = {"lookup": "embedding"}
    for ids, kind in ((np.array([7]), "gather"), (np.array([7, 0, 39, 7]), "lookup")):
        got = ops(task(emb), [table, ids])
        assert ops.records[-1].kernel.kind == kind
        assert got.dtype == np.float32 and np.array_equal(got.view(np.int32),
                                                          table[ids].view(np.int32))
    assert ops(task({}), [table, np.array([1, 2])]) is None
    assert ops(task(emb), [table, np.arange(600) % 40]) is None
