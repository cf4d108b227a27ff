"""GemmCore: a systolic array with its A/B scratchpads, accumulator SRAM and a GEMM sequencer.

The host fills the A and B buffers through write ports (layouts: :mod:`tilewright.compiler.layout`),
sets ``m``, ``k``, ``n`` and pulses ``start``; the core runs every fold of the GEMM and leaves
C (int32) in the accumulator, which the host reads back through ``acc_rd``.

Ports (all in the ``sync`` domain)
    ``a_wr_en/addr/data``, ``b_wr_en/addr/data``: buffer write ports (one word per cycle).
    ``acc_rd_addr`` -> ``acc_rd_data``: accumulator read port, data one cycle after the address
    (with ArchSpec ``tensor_engine.pipeline.host_read``: two cycles, both registers advanced
    only while the extra input ``acc_rd_en`` is high).
    ``m``, ``k``, ``n`` (16 bit): GEMM sizes, sampled while ``start`` is high and held until done.
    ``start``: begins a GEMM when sampled high while ``busy`` is low.
    ``busy``: high from the cycle after ``start`` was sampled until the GEMM's last write.
    ``cycles``: cycles ``busy`` was high during the last GEMM (a performance counter).
    ``a_half``, ``b_half``, ``acc_half`` (only with ``halves=True``, the double buffer of
    :mod:`tilewright.rtl.accel_top`): sampled with ``start``; the GEMM uses word ``x`` of a
    buffer at address ``half * (depth // 2) + x``. Timing is unchanged.

Timing contract (the cycle model :mod:`tilewright.dataflow_sim.cycle` states the same closed form)
    ``busy`` stays high for exactly the cycles below. R = rows, C = cols, SRAM read latency 1:

    * WS (double-buffered weights, folds overlap): R cycles preload fold 0's weights; then each
      fold but the last takes a period P = max(M, 2R + C - 2) — it streams its M activation rows
      while the next fold's R weight rows are read into the shadow registers, starting R + C - 2
      cycles into the period (when this fold's commit wavefront has passed the last PE); the
      last fold streams M rows and drains: M + R + C + 1 cycles (+1 SRAM latency, R + C - 1
      array latency, 1 accumulator read-modify-write). Total with F = ceil(K/R)*ceil(N/C) folds:
      R + (F - 1) * P + M + R + C + 1. Each pipeline stage of the ArchSpec
      (``tensor_engine.pipeline``: ``sram_read``, ``pe_operand``, ``pe_product``, ``acc_read``) adds one cycle to that total.
    * OS (double-buffered outputs, folds overlap): F = ceil(M/R) * ceil(N/C) folds. Fold 0
      streams its K operand columns (K cycles); every later fold takes a period
      P = max(K, 2R + C): it streams its K columns while its ``first`` row captures the
      previous tile into the output registers (the wave passes the last PE R + C - 1 cycles into
      the period, +1 SRAM latency) and that tile drains, one row per cycle for R cycles; a final
      flush period of 2R + C cycles captures and drains the last tile.
      Total: K + (F - 1) * P + 2R + C.
"""

from __future__ import annotations

from amaranth import Array, Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from tilewright.arch import ArchSpec, ArchSpecError
from tilewright.compiler.layout import MAX_GEMM_DIM, GemmLayout, half_depth
from tilewright.rtl.fpga_primitives import (RDWR_UNDEFINED, ecp5_ram, ecp5_ram_width,
                                             family_of)
from tilewright.rtl.systolic import (ACC_BITS, ELEMENT_BITS, OutputStationaryArray, _Dims,
                                     WeightStationaryArray, delay, ws_latency_cycles)

__all__ = ["GemmCore", "GENERATOR_VERSION", "memories", "run_state", "ws_sequencer",
           "word_ports", "half_offsets", "check_core_arch", "HALF_PORTS"]

#: bump when the generated hardware's behaviour or ports change
GENERATOR_VERSION = "0.4.0"

_DIM_BITS = MAX_GEMM_DIM.bit_length()


def _abits(depth: int) -> int:
    return max(1, (depth - 1).bit_length())


class _Offset:
    """A memory port seen through a base offset: the sequencer drives ``addr`` (a word index inside
    one half); the real port gets ``addr + offset``. Other attributes pass through."""

    def __init__(self, m: Module, port, offset):
        self._port = port
        self.addr = Signal.like(port.addr, name="half_addr")
        m.d.comb += port.addr.eq(self.addr + offset)

    def __getattr__(self, name):
        return getattr(self._port, name)


def core_ports(rows: int, cols: int, depths: tuple[int, int, int], element_bits: int) -> dict:
    """The host ports of a GEMM core with ``rows`` x ``cols`` lanes of ``element_bits`` and
    (A, B, accumulator) buffers of ``depths`` words (see module docstring)."""
    return word_ports((rows * element_bits, cols * element_bits, cols * ACC_BITS), depths)


def word_ports(widths: tuple[int, int, int], depths: tuple[int, int, int]) -> dict:
    """The host ports of a GEMM core whose (A, B, accumulator) buffers hold ``depths`` words of
    ``widths`` bits (see module docstring)."""
    (wa, wb, wc), (da, db, dc) = widths, depths
    return {
        "a_wr_en": In(1), "a_wr_addr": In(_abits(da)), "a_wr_data": In(wa),
        "b_wr_en": In(1), "b_wr_addr": In(_abits(db)), "b_wr_data": In(wb),
        "acc_rd_addr": In(_abits(dc)), "acc_rd_data": Out(wc),
        "m": In(_DIM_BITS), "k": In(_DIM_BITS), "n": In(_DIM_BITS),
        "start": In(1), "busy": Out(1), "cycles": Out(32),
    }


#: the double-buffer ports of a core with ``halves=True`` (see module docstring)
HALF_PORTS = {"a_half": In(1), "b_half": In(1), "acc_half": In(1), "accumulate": In(1)}


class _CoreShape(_Dims):
    """``rows``, ``cols`` and ``depths`` of a GEMM core that sets ``_rows``, ``_cols`` and
    ``_depths``."""

    @property
    def depths(self) -> tuple[int, int, int]:
        """(A, B, accumulator) buffer depths in words."""
        return self._depths


class _CoreArch:
    """``arch`` and ``banks`` of a core that sets ``_arch`` and ``_banks``."""

    @property
    def arch(self) -> ArchSpec:
        return self._arch

    @property
    def banks(self) -> tuple[int, int, int]:
        """(A, B, accumulator) SRAM banks (ArchSpec ``memory.*_banks``)."""
        return self._banks


class _PortSignals:
    """The address/data/enable signals of one port of a banked memory (a read port's enable
    is 1 unless the caller drives it: the read register holds while it is low)."""

    def __init__(self, name: str, abits: int, width: int, write: bool):
        self.addr = Signal(abits, name=f"{name}_addr")
        self.data = Signal(width, name=f"{name}_data")
        self.en = Signal(name=f"{name}_en", init=0 if write else 1)


def banked_memory(m: Module, name: str, width: int, depth: int, banks: int,
                  reads: tuple[bool, ...], attrs: dict | None = None):
    """A ``width``-bit x ``depth``-word memory with one write port and one synchronous read
    port per entry of ``reads`` (True: transparent for the write port), split into ``banks``
    equal banks (a power of two; ``lib.memory.Memory`` each) interleaved on the low address
    bits: word ``a`` lives in bank ``a % banks`` at row ``a // banks``. Every bank has every port,
    so accesses never conflict and the timing is the single memory's (read data one cycle after
    the address; the bank of a read is registered with it). Returns (write port, [read ports])
    with ``addr``/``data`` (and ``en``) signals. ``attrs``: each bank's Memory attributes."""
    k = banks.bit_length() - 1          # banks >= 2, a power of two
    abits = _abits(depth)
    w = _PortSignals(f"{name}_w", abits, width, write=True)
    rs = [_PortSignals(f"{name}_r{i}", abits, width, write=False) for i in range(len(reads))]
    outs: list[list[Signal]] = [[] for _ in reads]
    for b in range(banks):
        mem = memory.Memory(shape=unsigned(width), depth=-(-depth // banks), init=[],
                            attrs=attrs)
        m.submodules[f"{name}_bank{b}"] = mem
        wp = mem.write_port()
        m.d.comb += [wp.en.eq(w.en & (w.addr[:k] == b)), wp.addr.eq(w.addr[k:]),
                     wp.data.eq(w.data)]
        for i, (r, transparent) in enumerate(zip(rs, reads)):
            rp = mem.read_port(transparent_for=(wp,) if transparent else ())
            m.d.comb += [rp.addr.eq(r.addr[k:]), rp.en.eq(r.en)]
            outs[i].append(rp.data)
    for i, r in enumerate(rs):
        sel = Signal(k, name=f"{name}_r{i}_bank")
        with m.If(r.en):
            m.d.sync += sel.eq(r.addr[:k])
        m.d.comb += r.data.eq(Array(outs[i])[sel])
    return w, rs


def memories(m: Module, core, element_bits: int, widths: tuple[int, int, int] | None = None,
             *, acc_transparent: bool = True, out_regs: tuple[bool, bool, bool] = (False,) * 3,
             host_reg: bool = False, family: str | None = None):
    """The A, B and accumulator buffers of ``core`` (``rows``/``cols`` lanes of
    ``element_bits``, ``cols`` lanes of ACC_BITS, or words of ``widths`` bits when given;
    ``core.depths`` words; split into
    ``core.banks`` = (scratchpad, scratchpad, accumulator) banks, :func:`banked_memory`, 1 if
    the core has no ``banks``). Returns the engine's ports (``a_r``, ``b_r``, ``c_r``, ``c_w``;
    the accumulator read port transparent for its write port unless ``acc_transparent`` is
    False) and the statements that wire the
    host's ports (``a_wr_*``, ``b_wr_*``, ``acc_rd_*``) for the caller to add to ``m.d.comb``.

    A transparent read port costs a bypass multiplexer after the block RAM's data output (Yosys
    emulates the transparency in logic on ECP5 and iCE40), which then sits between the RAM's
    clock-to-out and whatever follows; a caller that never reads a word in the cycle it is
    written passes ``acc_transparent=False`` (see :func:`ws_sequencer`'s ``acc_read``).

    The A and B buffers (one write port, the host's or DMA's; one read port, the engine's) carry
    :data:`~tilewright.rtl.fpga_primitives.RDWR_UNDEFINED`: the engine reads them only while it
    runs, from words (or the half of a double buffer) the writer does not write then, so a read
    never meets a write to its word in one cycle and the FPGA flow lets Yosys drop the logic that
    would emulate the simulator's read-old-data there (a block RAM's two ports do not define
    it). So does the accumulator when its engine read port is not transparent: the engine then
    never reads a word in the cycle it writes it, and the host reads results when the engine is
    idle, or from the half it does not write.

    ``out_regs`` (A, B, accumulator): the caller registers that engine read's data
    (``sram_read``; for the accumulator ``acc_read``, asked only with ``acc_write`` too). On
    ``family`` "ecp5" such a buffer (one bank, at most 16,384 words; the accumulator's engine
    read not transparent) is built of DP16KD tiles whose output register is that stage
    (:func:`~tilewright.rtl.fpga_primitives.ecp5_ram`): its engine port has ``registered`` True
    and the caller leaves its own register out. Yosys never uses that register, and a DP16KD's
    5.83 ns clock-to-out without it bounds every RAM -> register path on ECP5 (docs/fpga.md).
    (Without ``acc_write`` the accumulator's loop would run RAM -> adder -> the write ports of
    both copies, engine and host read, in one cycle: 85.95 MHz on ws8x8 against 109.15 with
    ``acc_read`` in the fabric.)

    ``host_reg`` (ArchSpec ``pipeline.host_read``): the host's accumulator read passes a
    register too, both its registers enabled by ``core.acc_rd_en``: ``acc_rd_data`` is the word
    addressed two enabled cycles earlier. On ECP5 (under the conditions above, the engine read
    not transparent) that register is the block RAMs' output register."""
    if widths is None:
        widths = (core.rows * element_bits, core.cols * element_bits, core.cols * ACC_BITS)
    wa, wb, wc = widths
    da, db, dc = core.depths
    ba, bb, bc = getattr(core, "banks", (1, 1, 1))
    prim = [family == "ecp5" and reg and banks == 1 and ecp5_ram_width(depth) is not None
            for reg, banks, depth in zip(out_regs, (ba, bb, bc), (da, db, dc))]
    ecp5_acc = (family == "ecp5" and bc == 1 and ecp5_ram_width(dc) is not None
                and not acc_transparent)
    prim[2] = ecp5_acc and (out_regs[2] or host_reg)
    if any(prim):
        def plain(name, wd, dp, bk, reads, attrs):
            """A buffer left to Yosys: one Memory, or banks."""
            if bk > 1:
                return banked_memory(m, name, wd, dp, bk, reads, attrs)
            m.submodules[name] = mem = memory.Memory(shape=unsigned(wd), depth=dp, init=[],
                                                      attrs=attrs)
            wp = mem.write_port()
            return wp, [mem.read_port(transparent_for=(wp,) if tr else ()) for tr in reads]
        a_w, (a_r,) = (ecp5_ram(m, "mem_a", wa, da, (True,)) if prim[0] else
                       plain("mem_a", wa, da, ba, (False,), RDWR_UNDEFINED))
        b_w, (b_r,) = (ecp5_ram(m, "mem_b", wb, db, (True,)) if prim[1] else
                       plain("mem_b", wb, db, bb, (False,), RDWR_UNDEFINED))
        c_w, (c_r, host_r) = (ecp5_ram(m, "mem_acc", wc, dc, (out_regs[2], host_reg))
                              if prim[2] else
                              plain("mem_acc", wc, dc, bc, (acc_transparent, False),
                                    None if acc_transparent else RDWR_UNDEFINED))
    elif (ba, bb, bc) == (1, 1, 1):     # one Memory each (the Verilog names its ports a_w, ...)
        mem_a = memory.Memory(shape=unsigned(wa), depth=da, init=[], attrs=RDWR_UNDEFINED)
        mem_b = memory.Memory(shape=unsigned(wb), depth=db, init=[], attrs=RDWR_UNDEFINED)
        mem_c = memory.Memory(shape=unsigned(wc), depth=dc, init=[],
                              attrs=None if acc_transparent else RDWR_UNDEFINED)
        m.submodules.mem_a, m.submodules.mem_b, m.submodules.mem_acc = mem_a, mem_b, mem_c
        a_w, b_w, c_w = mem_a.write_port(), mem_b.write_port(), mem_c.write_port()
        a_r, b_r = mem_a.read_port(), mem_b.read_port()
        c_r = mem_c.read_port(transparent_for=(c_w,) if acc_transparent else ())
        host_r = mem_c.read_port()
    else:
        a_w, (a_r,) = banked_memory(m, "mem_a", wa, da, ba, (False,), RDWR_UNDEFINED)
        b_w, (b_r,) = banked_memory(m, "mem_b", wb, db, bb, (False,), RDWR_UNDEFINED)
        c_w, (c_r, host_r) = banked_memory(m, "mem_acc", wc, dc, bc, (acc_transparent, False),
                                           None if acc_transparent else RDWR_UNDEFINED)
    host = [
        a_w.en.eq(core.a_wr_en), a_w.addr.eq(core.a_wr_addr), a_w.data.eq(core.a_wr_data),
        b_w.en.eq(core.b_wr_en), b_w.addr.eq(core.b_wr_addr), b_w.data.eq(core.b_wr_data),
        host_r.addr.eq(core.acc_rd_addr),
    ]
    if not host_reg:
        host.append(core.acc_rd_data.eq(host_r.data))
    else:
        host.append(host_r.en.eq(core.acc_rd_en))
        if getattr(host_r, "registered", False):      # the RAMs' output register
            host.append(core.acc_rd_data.eq(host_r.data))
        else:
            q = Signal.like(host_r.data, name="acc_rd_q")
            with m.If(core.acc_rd_en):
                m.d.sync += q.eq(host_r.data)
            host.append(core.acc_rd_data.eq(q))
    return a_r, b_r, c_r, c_w, host


def half_offsets(m: Module, core, a_r, b_r, c_r, c_w):
    """The double buffer of a core with ``halves=True``: ``a_half``/``b_half``/``acc_half`` and
    ``accumulate`` sampled with ``start``; returns the engine's ports seen through their half's
    base offset (``half * depth // 2``) and the sampled ``accumulate`` (a, b, c_r, c_w, acc_q)."""
    acc_q = Signal(name="accumulate_q")
    with m.If(core.start & ~core.busy):
        m.d.sync += acc_q.eq(core.accumulate)
    offs = []
    for port, depth in zip(("a", "b", "acc"), core.depths):
        half_q = Signal(name=f"{port}_half_q")
        with m.If(core.start & ~core.busy):
            m.d.sync += half_q.eq(getattr(core, f"{port}_half"))
        offs.append(Mux(half_q, half_depth(depth), 0))
    return (_Offset(m, a_r, offs[0]), _Offset(m, b_r, offs[1]), _Offset(m, c_r, offs[2]),
            _Offset(m, c_w, offs[2]), acc_q)


def check_core_arch(arch: ArchSpec, what: str) -> None:
    """Refuse (one line) an ArchSpec the int8 RTL cores cannot build: a ``what`` component."""
    if not isinstance(arch, ArchSpec):
        raise TypeError(f"{what} takes an ArchSpec, not {type(arch).__name__}")
    te = arch.tensor_engine
    if (te.input_format, te.weight_format, te.accumulator_format) != ("int8", "int8", "int32"):
        raise ArchSpecError(
            f"{arch.name}: the RTL GEMM core implements int8 x int8 -> int32 only, not "
            f"tensor_engine.input_format = {te.input_format!r} -> "
            f"accumulator_format = {te.accumulator_format!r} (other formats run on the "
            f"functional and cycle models)")


def run_state(m: Module, core):
    """The run state of ``core`` (ports ``m``, ``k``, ``n``, ``start``, ``busy``, ``cycles``):
    sizes registered at ``start``, ``running`` (= ``busy``), the cycle ``t`` within the current
    fold (cleared at start; the sequencer advances it) and the ``cycles`` counter. Returns
    (running, t, mr, kr, nr)."""
    mr, kr, nr = (Signal(_DIM_BITS, name=x) for x in ("m_r", "k_r", "n_r"))
    running = Signal()
    # cycle within the current fold: at most M + R + C + 2 (WS) or max(K, 2R + C) (OS) with
    # R, C <= 64, so 17 bits
    t = Signal(_DIM_BITS + 1)
    cycles = Signal(32)
    m.d.comb += [core.busy.eq(running), core.cycles.eq(cycles)]
    with m.If(running):
        m.d.sync += cycles.eq(cycles + 1)
    with m.If(core.start & ~running):
        m.d.sync += [running.eq(1), t.eq(0), cycles.eq(0),
                     mr.eq(core.m), kr.eq(core.k), nr.eq(core.n)]
    return running, t, mr, kr, nr


def acc_read_needs_no_bypass(rows: int, cols: int, distance: int = 2) -> bool:
    """True when a WS core whose read-modify-write writes an accumulator word ``distance``
    cycles after reading it (1 + ``acc_read`` + ``acc_write``; 2 with one of them) never reads a
    word in the cycle it is written, so its read port needs no transparency (no bypass logic
    after the RAM): the word is read again one fold period ``P >= 2R + C - 2`` later, so
    ``P >= distance + 1`` keeps the re-read strictly after the write (with ``acc_read`` alone:
    every array but 1x2 and 1x1)."""
    return 2 * rows + cols - 2 >= distance + 1


def ws_sequencer(m: Module, arr, start, running, t, mr, kr, nr, a_r, b_r, c_r, c_w, *,
                 element_bits: int, accumulate, acc_q=None, sram_read: bool = False,
                 acc_read: bool = False, acc_write: bool = False) -> None:
    """WS sequencer: preload fold 0's weights, then one period per fold with the next fold's
    weights loaded into the shadow while this fold streams (see module docstring), for the WS
    array ``arr`` (int8 :class:`WeightStationaryArray` or the bf16 twin) with ``element_bits``
    lanes in the A/B buffer words. ``start`` begins a GEMM of the sizes ``mr``, ``kr``, ``nr``
    (registered) while ``running`` (cycle ``t`` of the fold); ``a_r``/``b_r`` read A and B,
    ``c_r``/``c_w`` read and write the accumulator. ``accumulate(m, new, old, first)`` is the
    value written back: ``new`` (the array's output row) added to ``old`` (the accumulator's
    word), or ``new`` alone where ``first`` (the first k-block of the output, unless ``acc_q``:
    accumulate onto the accumulator's contents). ``sram_read`` puts a register after the A and
    B reads and ``acc_read`` one after the accumulator read, before the adder (one more cycle
    per GEMM each, ``PipelineSpec``; ``acc_read`` needs a fold period of at least 2 cycles, i.e.
    not a 1x1 array); an array's ``pe_operand``/``pe_product`` registers add their own cycles
    (``pe_cycles``, :func:`ws_latency_cycles`).

    Timing closure: every bound the fold loop tests is a register computed ahead (during the
    weight preload, which lasts R >= 1 cycles, and at each fold's end): ``k_more``/``n_more``
    (another k-/n-block follows), the remaining K/N elements ``k_rem``/``n_rem``, the fold's last
    cycle and ``fold_end`` itself (set one cycle ahead), so no adder or magnitude comparator of the sizes sits between the
    fold counters and the loop's decisions. Cycle for cycle the same as computing them
    combinationally."""
    R, C = arr.rows, arr.cols
    pe_cycles = int(getattr(arr, "pe_cycles", 0))   # the PEs' multiply registers
    extra = int(sram_read) + pe_cycles + int(acc_read) + int(acc_write)   # cycles per GEMM
    if (acc_read or acc_write) and 2 * R + C - 2 < 1 + int(acc_read) + int(acc_write):
        raise ValueError("acc_read/acc_write need a fold period of at least 1 + acc_read + "
                         "acc_write cycles")
    a_base = Signal.like(a_r.addr, name="a_base")
    b_base = Signal.like(b_r.addr, name="b_base")
    acc_base = Signal.like(c_w.addr, name="acc_base")
    pre = Signal(init=1)          # preloading fold 0's weights (t counts 0..R-1)
    # fold-loop bounds, registered (set during the preload, advanced at each fold's end)
    k_rem = Signal(signed(_DIM_BITS + 1), name="k_rem")   # K elements after this k-block
    n_rem = Signal(signed(_DIM_BITS + 1), name="n_rem")   # N elements after this n-block
    k_more, n_more = Signal(name="k_more"), Signal(name="n_more")   # k_rem > 0, n_rem > 0
    k_first = Signal(name="k_first")                      # this is the first k-block
    # the fold's final t, minus ``ahead``: the last fold's is M + R + C + extra, the others'
    # P - 1 with P = max(M, 2R + C - 2); ``fold_end`` is a register set one cycle ahead except on
    # a 1x1 array (P may be 1 there: a fold can end at t = 0, so it is compared at t itself)
    ahead = int(2 * R + C - 2 >= 2)
    end_last = Signal.like(t, name="end_last")
    end_period = Signal.like(t, name="end_period")
    last_fold, fold_end = Signal(), Signal(name="fold_end")
    reload_at = R + C - 2         # period cycle at which the next fold's weight reads start
    m.d.comb += last_fold.eq(~k_more & ~n_more)
    if 2 * R + C - 2 >= 3:
        # this fold's final t (minus ahead), a register valid from t = 1 of the fold: at t = 0
        # it still holds the previous fold's (>= 1, so no false end: P >= 3 never ends at t <= 1)
        end_sel = Signal.like(t, name="end_sel")
        m.d.sync += end_sel.eq(Mux(last_fold, end_last, end_period))
        at_end = t == end_sel
    else:
        at_end = Mux(last_fold, t == end_last, t == end_period)
    # what the fold's end does, decided with it: next k-block, next n-block, or the GEMM's end
    end_k, end_n, end_all = Signal(name="end_k"), Signal(name="end_n"), Signal(name="end_all")
    ends = [(fold_end, at_end), (end_k, at_end & k_more), (end_n, at_end & ~k_more & n_more),
            (end_all, at_end & last_fold)]
    if ahead:    # t + 1 reaches the end next cycle; a fold (P >= 2) never ends at its t = 0
        with m.If(running & ~pre & ~fold_end):
            m.d.sync += [sig.eq(v) for sig, v in ends]
        with m.Else():
            m.d.sync += [sig.eq(0) for sig, _ in ends]
    else:
        m.d.comb += [sig.eq(running & ~pre & v) for sig, v in ends]

    # weight reads: preload (fold 0) or, during a period, the next fold's rows R-1 .. 0
    # the read addresses are registers, each set one cycle ahead: the B address counts down
    # from row R-1 of the fold's B block (b_base + R-1 - t in the preload; b_base + 2R-1 -
    # (t - reload_at) in a period's reload window), the A address up from a_base (a_base + t)
    ld, st = Signal(), Signal()
    b_addr = Signal.like(b_r.addr, name="b_addr")
    a_addr = Signal.like(a_r.addr, name="a_addr")
    with m.If(pre):
        m.d.comb += ld.eq(running)
    with m.Else():
        m.d.comb += ld.eq(running & ~last_fold & (t >= reload_at) & (t < reload_at + R))
    # st (this fold streams A row t: t < M) is a register too, set one cycle ahead
    mr_last = Signal.like(mr, name="m_last")             # M - 1, the last streamed t
    m.d.comb += [a_r.addr.eq(a_addr), b_r.addr.eq(b_addr)]
    ld_q, st_q, commit_q = Signal(), Signal(), Signal()
    first_row = Signal(name="first_row")                  # st and t == 0, a register
    m.d.sync += [ld_q.eq(ld), st_q.eq(st), commit_q.eq(first_row)]
    a_data, b_data = a_r.data, b_r.data
    if sram_read:                 # a register after the buffer reads: data and flags one later
        # (the RAM's own output register where the buffer has one: ``registered`` ports)
        a_data, b_data = (p.data if getattr(p, "registered", False) else
                          delay(m, p.data, 1, f"{n}_rd") for p, n in ((a_r, "a"), (b_r, "b")))
        ld_q, st_q, commit_q = (delay(m, x, 1, n) for x, n in
                                ((ld_q, "ld_rd"), (st_q, "st_rd"), (commit_q, "commit_rd")))
    eb = element_bits
    for j in range(C):
        m.d.comb += arr.w_in.payload[j].eq(b_data[j * eb:(j + 1) * eb])
    for i in range(R):
        m.d.comb += arr.a_in.payload.a[i].eq(a_data[i * eb:(i + 1) * eb])
    m.d.comb += [arr.w_in.valid.eq(ld_q), arr.a_in.valid.eq(st_q),
                 arr.a_in.payload.commit.eq(commit_q)]

    # sideband: each row's accumulator address and "first k-block" flag ride beside the
    # array (SRAM latency + pipeline + array latency) so write-back needs no per-fold state
    tag_addr = Signal.like(c_w.addr, name="tag_addr")
    tag_first = Signal(name="tag_first")
    first = k_first if acc_q is None else (k_first & ~acc_q)
    m.d.sync += [tag_addr.eq(acc_base + t), tag_first.eq(first)]
    lat = ws_latency_cycles(R, C, pe_cycles) + int(sram_read)
    out_addr = delay(m, tag_addr, lat, "wb_addr")
    out_first = delay(m, tag_first, lat, "wb_first")

    # accumulator read-modify-write: read at c_out.valid, write one cycle later (two with
    # acc_read: the read data is registered before the adder; safe because the same word is
    # read again one fold period P >= 2 later, when the transparent read port sees the write)
    out_q = Signal(C * ACC_BITS)
    wr_q, first_q = Signal(), Signal()
    addr_q = Signal.like(c_w.addr)
    m.d.comb += c_r.addr.eq(out_addr)
    m.d.sync += [wr_q.eq(arr.c_out.valid), first_q.eq(out_first), addr_q.eq(out_addr),
                 out_q.eq(Cat(*arr.c_out.payload))]
    old = c_r.data
    if acc_read:
        wr_q, first_q, addr_q, out_q = (
            delay(m, x, 1, f"{n}_acc") for x, n in
            ((wr_q, "wr"), (first_q, "first"), (addr_q, "addr"), (out_q, "out")))
        if not getattr(c_r, "registered", False):   # else the RAM's output register holds it
            old = delay(m, old, 1, "old_acc")
    written = accumulate(m, out_q, old, first_q)
    if acc_write:                 # a register on the write: data, address and enable
        wr_q, addr_q, written = (delay(m, x, 1, f"{n}_wq") for x, n in
                                 ((wr_q, "wr"), (addr_q, "addr"), (written, "written")))
    m.d.comb += [c_w.en.eq(wr_q), c_w.addr.eq(addr_q), c_w.data.eq(written)]

    # sequencing: nb outer, kb inner
    with m.If(start & ~running):
        m.d.sync += [pre.eq(1), b_addr.eq(R - 1)]        # b_base is 0 between GEMMs
    m.d.sync += first_row.eq(0)
    with m.If(running & ~pre & ~fold_end):
        m.d.sync += st.eq(st & (t != mr_last))
    with m.Else():
        m.d.sync += st.eq(0)
    with m.If(running):
        m.d.sync += [t.eq(t + 1), b_addr.eq(b_addr - 1), a_addr.eq(a_addr + 1)]
        if reload_at >= 1:      # the reload window opens at t = reload_at of this fold
            with m.If(~pre & (t == reload_at - 1)):
                m.d.sync += b_addr.eq(b_base + (2 * R - 1))
        with m.If(pre):
            m.d.sync += a_addr.eq(0)                      # a_base is 0 in the preload
            # the loop's bounds for this GEMM (mr, kr, nr are registered at start)
            m.d.sync += [k_rem.eq(kr - R), k_more.eq(kr > R), k_first.eq(1),
                         n_rem.eq(nr - C), n_more.eq(nr > C),
                         end_last.eq(mr + (R + C + extra - ahead)),
                         # compare and subtract side by side (two short chains, not one long)
                         end_period.eq(Mux(mr > 2 * R + C - 2, mr - (1 + ahead),
                                           2 * R + C - 2 - (1 + ahead)))]
            m.d.sync += mr_last.eq(mr - 1)
            with m.If(t == R - 1):
                m.d.sync += [pre.eq(0), t.eq(0), st.eq(mr != 0), first_row.eq(mr != 0)]
                if reload_at == 0:      # 1x1: the window opens at t = 0
                    m.d.sync += b_addr.eq(b_base + (2 * R - 1))
    # a fold's end (fold_end and its decision end_k / end_n / end_all are registers set one
    # cycle ahead, each the whole enable of its registers)
    with m.If(fold_end):
        m.d.sync += [t.eq(0), b_base.eq(b_base + R)]
        if reload_at == 0:
            m.d.sync += b_addr.eq(b_base + (3 * R - 1))
    with m.If(end_k):
        m.d.sync += [k_rem.eq(k_rem - R), k_more.eq(k_rem > R), k_first.eq(0),
                     a_base.eq(a_base + mr), a_addr.eq(a_base + mr)]
    with m.If(end_n | end_all):
        m.d.sync += [k_rem.eq(kr - R), k_more.eq(kr > R), k_first.eq(1),
                     a_base.eq(0), a_addr.eq(0)]
    with m.If(end_k | end_n):                            # another fold: it streams from t = 0
        m.d.sync += [st.eq(mr != 0), first_row.eq(mr != 0)]
    with m.If(end_n):
        m.d.sync += [n_rem.eq(n_rem - C), n_more.eq(n_rem > C), acc_base.eq(acc_base + mr)]
    with m.If(end_all):
        m.d.sync += [running.eq(0), acc_base.eq(0), b_base.eq(0), pre.eq(1)]


def _int32_accumulate(m: Module, new, old, first):
    """int32 lanes: ``new`` alone on the first k-block, else ``new + old`` wrapping per lane."""
    summed = []
    for j in range(len(new) // ACC_BITS):
        lo, hi = j * ACC_BITS, (j + 1) * ACC_BITS
        summed.append((new[lo:hi] + old[lo:hi])[:ACC_BITS])
    return Mux(first, new, Cat(*summed))


class GemmCore(_CoreShape, _CoreArch, wiring.Component):
    """The systolic GEMM core for one :class:`~tilewright.arch.ArchSpec` (see module docstring)."""

    def __init__(self, arch: ArchSpec, *, halves: bool = False):
        check_core_arch(arch, "GemmCore")
        te = arch.tensor_engine
        if not isinstance(halves, bool):
            raise TypeError(f"GemmCore halves must be a bool, not {type(halves).__name__}")
        self._arch = arch
        self._halves = halves
        self._rows, self._cols, self._dataflow = te.rows, te.cols, te.dataflow
        self._depths = tuple(GemmLayout.depths(arch))
        mem = arch.memory
        self._banks = (mem.scratchpad_banks, mem.scratchpad_banks, mem.accumulator_banks)
        for buf, d in zip(("A", "B", "accumulator"), self._depths):
            if d < 1:
                raise ValueError(f"memory is too small for a {te.rows}x{te.cols} array: "
                                 f"{buf} buffer would hold {d} words")
        super().__init__({
            **core_ports(te.rows, te.cols, self._depths, ELEMENT_BITS),
            # halves=True (the accelerator top's double buffer): each buffer is used as two
            # halves of depth // 2 words; the GEMM reads/writes half a_half/b_half/acc_half
            # (sampled with start) at word offset half * (depth // 2)
            # and ``accumulate`` (sampled with start) adds C to the accumulator half's contents
            **(HALF_PORTS if halves else {}),
            # pipeline.host_read: the host read's two registers advance while acc_rd_en is high
            **({"acc_rd_en": In(1)} if te.pipeline.host_read else {}),
        })

    def elaborate(self, platform):
        m = Module()
        pipe = self._arch.tensor_engine.pipeline
        distance = 1 + int(pipe.acc_read) + int(pipe.acc_write)
        acc_transparent = not (self._dataflow == "ws" and distance > 1
                               and acc_read_needs_no_bypass(self._rows, self._cols, distance))
        ws = self._dataflow == "ws"
        a_r, b_r, c_r, c_w, host = memories(
            m, self, ELEMENT_BITS, acc_transparent=acc_transparent, family=family_of(platform),
            out_regs=(ws and pipe.sram_read, ws and pipe.sram_read,
                      ws and pipe.acc_read and pipe.acc_write), host_reg=pipe.host_read)
        acc_q = None
        if self._halves:       # double buffer: offset every engine address by its half's base
            a_r, b_r, c_r, c_w, acc_q = half_offsets(m, self, a_r, b_r, c_r, c_w)
        m.d.comb += host

        running, t, mr, kr, nr = run_state(m, self)
        if self._dataflow == "ws":
            self._ws(m, running, t, mr, kr, nr, a_r, b_r, c_r, c_w, acc_q)
        else:
            self._os(m, running, t, mr, kr, nr, a_r, b_r, c_w, c_r, acc_q)
        return m

    # ---------------------------------------------------------------------------------------
    def _ws(self, m, running, t, mr, kr, nr, a_r, b_r, c_r, c_w, acc_q=None):
        """WS: the array and :func:`ws_sequencer` with int32 (wrapping) accumulation."""
        pipe = self._arch.tensor_engine.pipeline
        m.submodules.array = arr = WeightStationaryArray(rows=self._rows, cols=self._cols,
                                                         pe_product=pipe.pe_product,
                                                         pe_operand=pipe.pe_operand)
        ws_sequencer(m, arr, self.start, running, t, mr, kr, nr, a_r, b_r, c_r, c_w,
                     element_bits=ELEMENT_BITS, accumulate=_int32_accumulate, acc_q=acc_q,
                     sram_read=pipe.sram_read, acc_read=pipe.acc_read,
                     acc_write=pipe.acc_write)

    # ---------------------------------------------------------------------------------------
    def _os(self, m, running, t, mr, kr, nr, a_r, b_r, c_w, c_r=None, acc_q=None):
        """OS sequencer: fold 0 streams K columns; each later fold streams its K columns while
        the previous tile, captured by this fold's ``first`` row, drains; a final flush period
        captures and drains the last tile (see module docstring)."""
        R, C = self._rows, self._cols
        m.submodules.array = arr = OutputStationaryArray(rows=R, cols=C)
        m_base, n_base = Signal(_DIM_BITS + 7), Signal(_DIM_BITS + 7)
        a_base = Signal.like(a_r.addr, name="a_base")
        b_base = Signal.like(b_r.addr, name="b_base")
        acc_base = Signal.like(c_w.addr, name="acc_base")
        drain_base = Signal.like(c_w.addr, name="drain_base")
        fold0 = Signal(init=1)        # in the first fold's period (no tile to drain yet)
        flush = Signal()              # in the final period: capture and drain the last tile
        period = Signal(_DIM_BITS + 1)
        drain_at = R + C              # period cycle of the first drain cycle
        m.d.comb += period.eq(Mux(fold0, kr, Mux(kr > 2 * R + C, kr, 2 * R + C)))
        period_end = Signal()
        m.d.comb += period_end.eq(Mux(flush, t == 2 * R + C - 1, t == period - 1))

        rd = Signal()
        m.d.comb += [rd.eq(running & ~flush & (t < kr)), a_r.addr.eq(a_base + t),
                     b_r.addr.eq(b_base + t)]
        rd_q, first_q = Signal(), Signal()
        m.d.sync += [rd_q.eq(rd), first_q.eq(running & (t == 0))]
        p = arr.ab_in.payload
        for i in range(R):
            m.d.comb += p.a[i].eq(a_r.data[i * ELEMENT_BITS:(i + 1) * ELEMENT_BITS])
        for j in range(C):
            m.d.comb += p.b[j].eq(b_r.data[j * ELEMENT_BITS:(j + 1) * ELEMENT_BITS])
        m.d.comb += [p.first.eq(first_q), arr.ab_in.valid.eq(rd_q)]

        # drain of the previous tile: period cycles R + C .. 2R + C - 1 write PE rows R-1 .. 0
        drain = Signal()
        m.d.comb += drain.eq(running & ~fold0 & (t >= drain_at) & (t < drain_at + R))
        m.d.comb += arr.drain.eq(drain)
        m.d.comb += [c_w.en.eq(drain), c_w.addr.eq(drain_base + (R - 1) - (t - drain_at)[:8])]
        if acc_q is None:
            m.d.comb += c_w.data.eq(Cat(*arr.c_out.payload))
        else:   # accumulate: read each drained row's old sums one cycle ahead, add while writing
            m.d.comb += c_r.addr.eq(drain_base + (R - 1) - (t + 1 - drain_at)[:8])
            summed = [(arr.c_out.payload[j] + c_r.data[j * ACC_BITS:(j + 1) * ACC_BITS])
                      [:ACC_BITS] for j in range(C)]
            m.d.comb += c_w.data.eq(Mux(acc_q, Cat(*summed), Cat(*arr.c_out.payload)))

        # sequencing: nb outer, mb inner; the tile of the period that ends drains in the next
        with m.If(self.start & ~running):
            m.d.sync += [fold0.eq(1), flush.eq(0)]
        with m.If(running):
            m.d.sync += t.eq(t + 1)
            with m.If(period_end):
                m.d.sync += [t.eq(0), fold0.eq(0)]
                with m.If(flush):
                    m.d.sync += [running.eq(0), flush.eq(0), fold0.eq(1), acc_base.eq(0),
                                 b_base.eq(0), a_base.eq(0), m_base.eq(0), n_base.eq(0)]
                with m.Else():
                    m.d.sync += [drain_base.eq(acc_base), acc_base.eq(acc_base + R)]
                    with m.If(m_base + R < mr):
                        m.d.sync += [m_base.eq(m_base + R), a_base.eq(a_base + kr)]
                    with m.Else():
                        m.d.sync += [m_base.eq(0), a_base.eq(0)]
                        with m.If(n_base + C < nr):
                            m.d.sync += [n_base.eq(n_base + C), b_base.eq(b_base + kr)]
                        with m.Else():
                            m.d.sync += flush.eq(1)
