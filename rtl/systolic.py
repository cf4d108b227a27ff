"""Systolic PE arrays (signed int8 x int8 -> int32) in Amaranth: weight- and output-stationary.

Both arrays are a grid of ``rows x cols`` processing elements (PEs); PE(i, j) is row i, column j.
Operands enter at the array edge and are skewed inside the array (row i / column j delayed i / j
cycles), so callers present plain vectors, one per cycle. All products are exact int16 and every
accumulation wraps modulo 2**32 (int32 two's complement), exactly like
:func:`tilewright.dataflow_sim.functional.gemm_int8`.

Timing contracts (a "cycle" is one period of the ``sync`` domain; "at cycle t" means the value is
visible between rising edges t and t+1):

:class:`WeightStationaryArray` (WS, double-buffered weights)
    ``w_in``: every cycle ``w_in.valid`` is high, the *shadow* weight rows shift down by one and
    shadow row 0 takes ``w_in.payload``. After ``rows`` transfers of B rows in the order
    r = rows-1, ..., 0, shadow PE(i, j) holds B[i, j]. Shifting may go on while activations use
    the *active* weights.
    ``a_in``: ``a`` is a vector of ``rows`` activations (A[m, 0..rows-1]) and ``commit`` marks the
    first row of a new tile; accepted every cycle it is valid (always ready). A row with
    ``commit`` makes each PE copy its shadow weight into its active weight as the row passes it
    (PE(i, j) at i + j cycles after the row was on ``a_in``) and use the new weight for that row.
    So the shadow may be reloaded from ``rows + cols - 2`` cycles after a committing row was on
    ``a_in`` (the last PE copies at that cycle and shifting in the same cycle is safe).
    The result row sum_i A[m, i] * W[i, j] appears on ``c_out`` exactly ``rows + cols - 1``
    cycles after the cycle ``a_in`` carried A[m, :], with ``c_out.valid`` high for that one
    cycle. ``c_out`` has no back-pressure: the consumer takes every row.

:class:`OutputStationaryArray` (OS, double-buffered outputs)
    ``ab_in``: per cycle one column of A (``a``: A[0..rows-1, k]), one row of B (``b``:
    B[k, 0..cols-1]) and ``first``. A row with ``first`` high reaches PE(i, j) i + j cycles after
    it was on ``ab_in``; there the PE copies its finished sum into its *output* register and
    restarts its sum with this row's product (or 0 when ``ab_in.valid`` is low: a flush row that
    only captures). Otherwise valid rows accumulate: PE(i, j) holds sum_k A[i, k] * B[k, j].
    A tile's last k must precede the next ``first`` row.
    ``drain``: while high, the output registers shift down one row per cycle and ``c_out``
    carries the bottom row (``c_out.valid`` = ``drain``): the first drain cycle yields row
    rows-1, the next rows-2, ... Drain only after the capturing ``first`` row has passed the last
    PE (``rows + cols - 2`` cycles after it was on ``ab_in``) and finish draining before the
    next ``first`` row reaches PE(0, 0); accumulation of the next tile goes on meanwhile.
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from tilewright.arch import RTL_MAX_ARRAY_DIM as MAX_ARRAY_DIM  # the RTL generators' own limit
from tilewright.formats import bits_of
from tilewright.rtl.fpga_primitives import family_of, registered_product

__all__ = ["WeightStationaryArray", "OutputStationaryArray", "ws_latency_cycles", "delay",
           "ws_array", "os_finish_cycles", "ELEMENT_BITS", "ACC_BITS"]

ELEMENT_BITS = bits_of("int8")   #: bits of an input/weight element (signed int8)
ACC_BITS = bits_of("int32")      #: bits of an accumulator (signed int32, wrapping)


def ws_latency_cycles(rows: int, cols: int, pe_cycles: int = 0) -> int:
    """Cycles from ``a_in`` carrying a row to ``c_out`` carrying its result (WS): rows + cols - 1,
    plus ``pe_cycles``, the registers in each PE's multiply (``pe_operand``, ``pe_product``:
    :attr:`WeightStationaryArray.pe_cycles`)."""
    return rows + cols - 1 + int(pe_cycles)


def os_finish_cycles(rows: int, cols: int) -> int:
    """Cycles from a ``first`` row on ``ab_in`` until every PE has captured its finished sum into
    its output register, i.e. until ``drain`` may begin (OS)."""
    return rows + cols - 1


def _check_dims(rows: int, cols: int) -> None:
    for name, v in (("rows", rows), ("cols", cols)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError(f"{name} must be an int, not {type(v).__name__}")
        if not 1 <= v <= MAX_ARRAY_DIM:
            raise ValueError(f"{name} must be from 1 to {MAX_ARRAY_DIM}, not {v}")


def delay(m: Module, sig, cycles: int, name: str):
    """``sig`` delayed by ``cycles`` registers (0 returns ``sig`` itself)."""
    for d in range(cycles):
        reg = Signal.like(sig, name=f"{name}_d{d}")
        m.d.sync += reg.eq(sig)
        sig = reg
    return sig


def pe_units(m: Module, make_unit):
    """The ``pe`` callback of :func:`ws_array` for PEs that are components of their own:
    ``make_unit()`` returns one with ``a``, ``w``, ``p_in`` (0 in row 0) and ``p_out`` ports,
    added to ``m`` as ``pe_<i>_<j>``."""
    def pe(i, j, a, w, p_above):
        unit = make_unit()
        m.submodules[f"pe_{i}_{j}"] = unit
        m.d.comb += [unit.a.eq(a), unit.w.eq(w),
                     unit.p_in.eq(0 if p_above is None else p_above)]
        return unit.p_out
    return pe


def ws_array(m: Module, arr, element_shape, acc_shape, pe, *, product=None,
             pe_cycles: int = 0) -> None:
    """Elaborate into ``m`` the WS dataflow of ``arr`` (a component with ``rows``, ``cols`` and the
    ``w_in``/``a_in``/``c_out`` ports and timing of :class:`WeightStationaryArray`): the shadow
    weight chain, the input skew, activations and commit flags passed right, each PE's active
    weight (copied from the shadow by a committing row), one psum register per PE, the output
    deskew and ``c_out.valid``. ``pe(i, j, a, w, p_above)`` is the PE's arithmetic: the value
    its psum register takes from activation ``a`` and weight ``w`` (``p_above`` is the psum of
    the PE above, None in row 0). Elements are of ``element_shape``, psums of ``acc_shape``.
    With ``product`` (``product(m, name, a, w)``: the PE's product ``pe_cycles`` cycles late,
    through its registers: :func:`~tilewright.rtl.fpga_primitives.registered_product`)
    ``pe(i, j, product, None, p_above)`` adds the registered product: every result leaves
    ``pe_cycles`` later (:func:`ws_latency_cycles`)."""
    R, C = arr.rows, arr.cols
    # shadow weights: a shift chain down each column, loaded while the active set computes
    w_sh = [[Signal(element_shape, name=f"wsh_{i}_{j}") for j in range(C)] for i in range(R)]
    w_act = [[Signal(element_shape, name=f"w_{i}_{j}") for j in range(C)] for i in range(R)]
    with m.If(arr.w_in.valid):
        for j in range(C):
            m.d.sync += w_sh[0][j].eq(arr.w_in.payload[j])
            for i in range(1, R):
                m.d.sync += w_sh[i][j].eq(w_sh[i - 1][j])

    # input skew: row i sees its element (and the row's commit/valid flags) i cycles late
    p = arr.a_in.payload
    x = [delay(m, p.a[i], i, f"skew_a{i}") for i in range(R)]
    xc = [delay(m, p.commit & arr.a_in.valid, i, f"skew_c{i}") for i in range(R)]
    a_reg = [[Signal(element_shape, name=f"a_{i}_{j}") for j in range(C)] for i in range(R)]
    c_reg = [[Signal(name=f"c_{i}_{j}") for j in range(C)] for i in range(R)]
    p_reg = [[Signal(acc_shape, name=f"p_{i}_{j}") for j in range(C)] for i in range(R)]
    for i in range(R):
        for j in range(C):
            a_seen = x[i] if j == 0 else a_reg[i][j - 1]
            commit = xc[i] if j == 0 else c_reg[i][j - 1]
            if j < C - 1:
                m.d.sync += [a_reg[i][j].eq(a_seen), c_reg[i][j].eq(commit)]
            # a committing row uses the new weight as it copies it into the active register
            w = Signal(element_shape, name=f"wuse_{i}_{j}")
            m.d.comb += w.eq(Mux(commit, w_sh[i][j], w_act[i][j]))
            with m.If(commit):
                m.d.sync += w_act[i][j].eq(w_sh[i][j])
            above = None if i == 0 else p_reg[i - 1][j]
            if product is None:
                m.d.sync += p_reg[i][j].eq(pe(i, j, a_seen, w, above))
            else:               # registered multiply: the psum adds the product pe_cycles late
                prod_q = product(m, f"{i}_{j}", a_seen, w)
                m.d.sync += p_reg[i][j].eq(pe(i, j, prod_q, None, above))

    # output deskew: column j leaves the bottom j cycles after column 0; align to the last
    for j in range(C):
        m.d.comb += arr.c_out.payload[j].eq(delay(m, p_reg[R - 1][j], C - 1 - j, f"dsk{j}"))
    lat = ws_latency_cycles(R, C, pe_cycles if product is not None else 0)
    m.d.comb += arr.c_out.valid.eq(delay(m, arr.a_in.valid, lat, "valid"))


class _Dims:
    """``rows`` and ``cols`` (read-only) of an array or core that sets ``_rows``/``_cols``."""

    @property
    def rows(self) -> int:
        return self._rows

    @property
    def cols(self) -> int:
        return self._cols


class _PEArray(_Dims, wiring.Component):
    """Shared parameters of the PE arrays: ``rows`` and ``cols`` (read-only)."""

    def __init__(self, signature: dict, *, rows: int, cols: int):
        self._rows, self._cols = rows, cols
        super().__init__(signature)


class WeightStationaryArray(_PEArray):
    """WS systolic array with double-buffered weights; see the module docstring for the contract.

    Parameters (keyword-only): ``rows`` (PE rows = reduction depth of a tile, 1..64),
    ``cols`` (PE columns = output width of a tile, 1..64), ``pe_operand`` (registers on each
    PE's activation and selected weight before the multiply) and ``pe_product`` (a register on
    each PE's product): each makes results leave one cycle later (:attr:`pe_cycles`,
    :func:`ws_latency_cycles`; default False). Elaborated for
    :class:`~tilewright.rtl.fpga_primitives.FpgaFamily` "ecp5" those registers are a MULT18X18D's
    own (:func:`~tilewright.rtl.fpga_primitives.registered_product`).
    """

    def __init__(self, *, rows: int, cols: int, pe_product: bool = False,
                 pe_operand: bool = False):
        _check_dims(rows, cols)
        for name, v in (("pe_product", pe_product), ("pe_operand", pe_operand)):
            if not isinstance(v, bool):
                raise TypeError(f"{name} must be a bool, not {type(v).__name__}")
        self._pe_product, self._pe_operand = pe_product, pe_operand
        a_layout = data.StructLayout({
            "a": data.ArrayLayout(signed(ELEMENT_BITS), rows),
            "commit": 1,
        })
        super().__init__({
            "w_in": In(stream.Signature(data.ArrayLayout(signed(ELEMENT_BITS), cols),
                                        always_ready=True)),
            "a_in": In(stream.Signature(a_layout, always_ready=True)),
            "c_out": Out(stream.Signature(data.ArrayLayout(signed(ACC_BITS), cols),
                                          always_ready=True)),
        }, rows=rows, cols=cols)

    @property
    def pe_product(self) -> bool:
        """True when each PE registers its product (one more cycle of latency)."""
        return self._pe_product

    @property
    def pe_operand(self) -> bool:
        """True when each PE registers its multiplier's operands (one more cycle of latency)."""
        return self._pe_operand

    @property
    def pe_cycles(self) -> int:
        """Cycles the PEs' multiply registers add to every result (cycles)."""
        return int(self._pe_product) + int(self._pe_operand)

    def elaborate(self, platform):
        m = Module()
        family = family_of(platform)
        product = None
        if self.pe_cycles:
            def product(m, name, a, w):
                return registered_product(m, name, a, w, operand=self._pe_operand,
                                          product=self._pe_product, family=family)
        ws_array(m, self, signed(ELEMENT_BITS), signed(ACC_BITS), _mac, product=product,
                 pe_cycles=self.pe_cycles)
        return m


def _mac(i: int, j: int, a, w, p_above):
    """The int8 PE: exact product, int32 sum (wrapping on the register's width); with ``w``
    None, ``a`` is the (registered) product itself."""
    prod = a if w is None else a * w
    return prod if p_above is None else p_above + prod


class OutputStationaryArray(_PEArray):
    """OS systolic array; see the module docstring for the timing contract.

    Parameters (keyword-only): ``rows`` (PE rows = output rows M of a tile, 1..64) and ``cols``
    (PE columns = output columns N of a tile, 1..64).
    """

    def __init__(self, *, rows: int, cols: int):
        _check_dims(rows, cols)
        layout = data.StructLayout({
            "a": data.ArrayLayout(signed(ELEMENT_BITS), rows),
            "b": data.ArrayLayout(signed(ELEMENT_BITS), cols),
            "first": 1,
        })
        super().__init__({
            "ab_in": In(stream.Signature(layout, always_ready=True)),
            "drain": In(1),
            "c_out": Out(stream.Signature(data.ArrayLayout(signed(ACC_BITS), cols),
                                          always_ready=True)),
        }, rows=rows, cols=cols)

    def elaborate(self, platform):
        m = Module()
        R, C = self._rows, self._cols
        p = self.ab_in.payload
        xa = [delay(m, p.a[i], i, f"skew_a{i}") for i in range(R)]
        xv = [delay(m, self.ab_in.valid, i, f"skew_v{i}") for i in range(R)]
        xf = [delay(m, p.first, i, f"skew_f{i}") for i in range(R)]
        yb = [delay(m, p.b[j], j, f"skew_b{j}") for j in range(C)]

        a_reg = [[Signal(signed(ELEMENT_BITS), name=f"a_{i}_{j}") for j in range(C)]
                 for i in range(R)]
        v_reg = [[Signal(name=f"v_{i}_{j}") for j in range(C)] for i in range(R)]
        f_reg = [[Signal(name=f"f_{i}_{j}") for j in range(C)] for i in range(R)]
        b_reg = [[Signal(signed(ELEMENT_BITS), name=f"b_{i}_{j}") for j in range(C)]
                 for i in range(R)]
        acc = [[Signal(signed(ACC_BITS), name=f"acc_{i}_{j}") for j in range(C)] for i in range(R)]
        out = [[Signal(signed(ACC_BITS), name=f"out_{i}_{j}") for j in range(C)] for i in range(R)]
        for i in range(R):
            for j in range(C):
                a_seen = xa[i] if j == 0 else a_reg[i][j - 1]
                v_seen = xv[i] if j == 0 else v_reg[i][j - 1]
                f_seen = xf[i] if j == 0 else f_reg[i][j - 1]
                b_seen = yb[j] if i == 0 else b_reg[i - 1][j]
                if j < C - 1:
                    m.d.sync += [a_reg[i][j].eq(a_seen), v_reg[i][j].eq(v_seen),
                                 f_reg[i][j].eq(f_seen)]
                if i < R - 1:
                    m.d.sync += b_reg[i][j].eq(b_seen)
                prod = a_seen * b_seen
                # accumulate; a `first` row restarts the sum (with its product, or 0 if invalid)
                with m.If(f_seen):
                    m.d.sync += acc[i][j].eq(Mux(v_seen, prod, 0))
                with m.Elif(v_seen):
                    m.d.sync += acc[i][j].eq(acc[i][j] + prod)
                # output registers: drain shifts down; otherwise a `first` row captures the sum
                with m.If(self.drain):
                    m.d.sync += out[i][j].eq(0 if i == 0 else out[i - 1][j])
                with m.Elif(f_seen):
                    m.d.sync += out[i][j].eq(acc[i][j])
        for j in range(C):
            m.d.comb += self.c_out.payload[j].eq(out[R - 1][j])
        m.d.comb += self.c_out.valid.eq(self.drain)
        return m
