"""3-D cube tensor engine (int8 x int8 -> int32): Tm x Tn dot products of length Tk per cycle.

The cube is the general member of the "tile-MAC" engine families compared in the
tensor-processing-engine literature; the multiplier-adder tree (:mod:`tilewright.rtl.adder_tree`,
Tm = Tn = 1) and the 2-D outer-product matrix (:mod:`tilewright.rtl.outer_product`, Tk = 1) are its
degenerate shapes and reuse its datapath, so the three can never drift apart.

Datapath: Tm·Tk·Tn signed int8 multipliers (exact int16 products, registered), then for each of
the Tm·Tn outputs a pipelined binary adder tree over its Tk products (one register level per tree
level, ``ceil(log2 Tk)`` levels, exact widths), then an int32 accumulator that wraps modulo 2**32
exactly like :func:`tilewright.dataflow_sim.functional.gemm_int8`.

Timing contract (a "cycle" is one period of the ``sync`` domain; "at cycle t" means visible between
rising edges t and t+1; engine-level stream interface shared by all three families, see
:mod:`tilewright.rtl.engine_top`):

``ops_in`` (``ready`` is always high: no back-pressure): per valid cycle an A tile ``a``
(Tm x Tk, row-major, element ``i*Tk + k`` = A[m0+i, k0+k]), a B tile ``b`` (Tk x Tn, row-major,
element ``k*Tn + j`` = B[k0+k, n0+j]) and two flags: ``first`` (this beat starts a new
accumulation: the accumulator is replaced, not added to) and ``last`` (this beat ends it: the
finished Tm x Tn tile is emitted). A beat may be both first and last. Beats may arrive every
cycle; gaps (``valid`` low) are allowed.

``c_out`` (no back-pressure: ``c_out.ready`` is ignored, the consumer takes every tile): the
finished tile C (Tm x Tn, row-major, int32) is on ``c_out`` with ``c_out.valid`` high for exactly
one cycle, ``latency_cycles(Tk) = 2 + ceil(log2 Tk)`` cycles after the cycle ``ops_in`` carried
its ``last`` beat (1 product register + tree levels + 1 accumulator/output register). Output tiles
never collide, so the engine streams an unbounded sequence of tiles at one beat per cycle.

GEMM cycles: streaming C = A·B (M x K by K x N, zero-padded to whole tiles) back to back takes
``ceil(M/Tm)·ceil(N/Tn)·ceil(K/Tk)`` beats; from the first beat (cycle 0) to the last output
(inclusive) that is beats + latency_cycles(Tk) cycles — the closed form in
:func:`tilewright.compiler.engine_timing.engine_gemm_cycles`, which the RTL suite checks exactly.
"""

from __future__ import annotations

from amaranth import Module, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from tilewright.arch import RTL_MAX_ARRAY_DIM as MAX_ARRAY_DIM  # the RTL generators' own limit
from tilewright.formats import bits_of

__all__ = ["TileMacEngine", "CubeEngine", "latency_cycles", "tree_levels", "ELEMENT_BITS",
           "ACC_BITS", "MAX_ARRAY_DIM", "check_dim", "operand_layout", "result_layout"]

ELEMENT_BITS = bits_of("int8")   #: bits of an A/B element (signed int8)
ACC_BITS = bits_of("int32")      #: bits of an accumulator / output element (signed int32, wrapping)


def tree_levels(tk: int) -> int:
    """Register levels of a binary adder tree over ``tk`` inputs: ceil(log2 tk) (0 for tk = 1)."""
    return (tk - 1).bit_length()


def latency_cycles(tk: int) -> int:
    """Cycles from the ``last`` beat on ``ops_in`` to its tile on ``c_out`` (see module doc)."""
    return 2 + tree_levels(tk)


def check_dim(name: str, value: int) -> None:
    """Raise TypeError/ValueError naming ``name`` unless ``value`` is an int from 1 to MAX_ARRAY_DIM."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not 1 <= value <= MAX_ARRAY_DIM:
        raise ValueError(f"{name} must be from 1 to {MAX_ARRAY_DIM}, not {value}")


def operand_layout(tm: int, tk: int, tn: int) -> data.StructLayout:
    """Payload layout of ``ops_in``: flat row-major A (Tm x Tk) and B (Tk x Tn) tiles + flags."""
    return data.StructLayout({
        "a": data.ArrayLayout(signed(ELEMENT_BITS), tm * tk),
        "b": data.ArrayLayout(signed(ELEMENT_BITS), tk * tn),
        "first": 1,
        "last": 1,
    })


def result_layout(tm: int, tn: int) -> data.ArrayLayout:
    """Payload layout of ``c_out``: the flat row-major Tm x Tn int32 tile."""
    return data.ArrayLayout(signed(ACC_BITS), tm * tn)


class TileMacEngine(wiring.Component):
    """Tm x Tk x Tn tile-MAC engine; see the module docstring for the timing contract.

    Parameters (keyword-only, each 1..64): ``tm`` (output rows per beat), ``tk`` (reduction depth
    per beat = adder-tree inputs) and ``tn`` (output columns per beat). Peak MAC/cycle = tm·tk·tn.
    """

    def __init__(self, *, tm: int, tk: int, tn: int):
        for name, v in (("tm", tm), ("tk", tk), ("tn", tn)):
            check_dim(name, v)
        self._tm, self._tk, self._tn = tm, tk, tn
        super().__init__({
            "ops_in": In(stream.Signature(operand_layout(tm, tk, tn))),
            "c_out": Out(stream.Signature(result_layout(tm, tn))),
        })

    @property
    def dims(self) -> tuple[int, int, int]:
        """(Tm, Tk, Tn) in elements."""
        return self._tm, self._tk, self._tn

    @property
    def macs_per_cycle(self) -> int:
        """Peak multiply-accumulates per cycle."""
        return self._tm * self._tk * self._tn

    @property
    def latency(self) -> int:
        """Cycles from a ``last`` beat to its tile on ``c_out``."""
        return latency_cycles(self._tk)

    def elaborate(self, platform):
        m = Module()
        tm, tk, tn = self._tm, self._tk, self._tn
        p = self.ops_in.payload
        m.d.comb += self.ops_in.ready.eq(1)   # always ready; c_out.ready is ignored (see contract)
        # stage 1: Tm·Tk·Tn exact int16 products, registered, with the beat's flags
        v1, f1, l1 = Signal(name="v1"), Signal(name="first1"), Signal(name="last1")
        m.d.sync += [v1.eq(self.ops_in.valid), f1.eq(p.first), l1.eq(p.last)]
        prods = {}
        for i in range(tm):
            for j in range(tn):
                row = []
                for k in range(tk):
                    r = Signal(signed(2 * ELEMENT_BITS), name=f"prod_{i}_{k}_{j}")
                    m.d.sync += r.eq(p.a[i * tk + k] * p.b[k * tn + j])
                    row.append(r)
                prods[i, j] = row
        # stages 2..: pipelined binary adder trees (odd element passes through a register)
        flags = (v1, f1, l1)
        for level in range(tree_levels(tk)):
            nxt = tuple(Signal(name=f"{n}_t{level}") for n in ("v", "first", "last"))
            m.d.sync += [d.eq(s) for d, s in zip(nxt, flags)]
            flags = nxt
            for key, vals in prods.items():
                width = 2 * ELEMENT_BITS + level + 1
                out = []
                for q in range(0, len(vals), 2):
                    r = Signal(signed(width), name=f"sum_{key[0]}_{key[1]}_l{level}_{q // 2}")
                    m.d.sync += r.eq(vals[q] + vals[q + 1] if q + 1 < len(vals) else vals[q])
                    out.append(r)
                prods[key] = out
        # last stage: int32 accumulators (wrapping) and the output register
        valid, first, last = flags
        for i in range(tm):
            for j in range(tn):
                acc = Signal(signed(ACC_BITS), name=f"acc_{i}_{j}")
                total = prods[i, j][0]
                nxt = Signal(signed(ACC_BITS), name=f"accn_{i}_{j}")
                with m.If(first):
                    m.d.comb += nxt.eq(total)
                with m.Else():
                    m.d.comb += nxt.eq(acc + total)
                with m.If(valid):
                    m.d.sync += acc.eq(nxt)
                    with m.If(last):
                        m.d.sync += self.c_out.payload[i * tn + j].eq(nxt)
        m.d.sync += self.c_out.valid.eq(valid & last)
        return m


class CubeEngine(TileMacEngine):
    """3-D cube: Tm x Tn dot products of length Tk per cycle (Tm·Tk·Tn MAC/cycle).

    Parameters (keyword-only, each 1..64): ``tm``, ``tk``, ``tn`` as in :class:`TileMacEngine`.
    """
