"""Controller of the accelerator top: fetch and issue of the ISA defined in the compiler.

The program lives in an on-chip instruction memory (:data:`~tilewright.compiler.codegen.IMEM_WORDS`
64-bit words) that the host fills through ``imem_wr_en/addr/data`` while the controller is idle.
The decoder is generated from :data:`~tilewright.compiler.codegen.ISA`: each field of each op is
the bit slice the table gives, so assembler and hardware cannot disagree.

Control/status (``sync`` domain)
    ``start`` (sampled while ``busy`` is low) begins execution at instruction ``entry``.
    ``busy``: from the cycle after ``start`` through the cycle END issues. ``done``: high after an
    END (or an error) until the next ``start``. ``error``: the last run stopped at an unknown
    opcode (``pc`` holds its address). ``cycles``: cycles ``busy`` was high in the last run.
    ``retired``: instructions issued in the last run (END included).

Timing contract
    One fetch cycle after ``start``; then instruction ``i`` issues in the first cycle ``c >=
    c_{i-1} + 1`` in which its condition holds (LOAD_A/LOAD_B/STORE: ``dma_busy`` low; GEMM:
    ``gemm_busy`` low; SYNC: every selected unit's busy low; END: both low). Issuing pulses the
    unit's ``*_start`` for that one cycle with the decoded fields; the next instruction is read in
    the same cycle (read latency 1), so back-to-back issue costs one cycle per instruction.

    With ``fetch_reg`` (ArchSpec ``tensor_engine.pipeline.fetch``) the memory reads ahead into
    a prefetch buffer of :data:`PREFETCH_WORDS` registers, and the issue test reads the oldest
    word from there: three fetch cycles after ``start`` instead of one (the first word is read,
    leaves the memory's output register, enters the buffer), then the same issue rule (the next
    instruction always waits in the buffer). The memory's read enable is decided
    from the buffer's registers alone (a word is read when the buffer will have room for it),
    so neither the decode nor the issue decision touches the block RAM: on ECP5 the RAM's
    clock-to-out and its routing begin no path through the issue test and its read enable ends
    none (docs/fpga.md).
    The memory also keeps each word's issue classes (:data:`_CLASSES`) beside it, decoded as the
    word is written, so the issue test starts at the output register; for that the host's write
    passes a register: a word written in cycle ``t`` is in the memory from ``t + 2``, and
    ``start`` may follow the last write in ``t + 1``.

    With ``issue_reg`` (ArchSpec ``tensor_engine.pipeline.issue``) every unit's command passes a
    register: the ``*_start`` pulse and the decoded fields of an instruction issued in cycle
    ``c`` reach the unit in ``c + 1`` (the unit is busy from ``c + 2``), and the controller counts
    a command in that register as its unit busy, so the issue rule is unchanged and each
    DMA/GEMM/VECTOR/SCAN instruction keeps its unit one cycle longer. A zero-count transfer
    starts nothing (as without the register, where the DMA ignores it): the register carries
    ``dma_start`` only for ``count != 0``, so the DMA needs no count test after it. The issue
    decision then drives one register per unit instead of the units' command registers' clock
    enables (the ECP5 top's critical path, docs/fpga.md).

Scales (``Controller(scales=True, lanes=L)``, the fp8 top with L = the array's columns)
    ``scale_a``: the per-tensor A scale, ``scale_b``: L lanes of B scales (fp32 patterns, lane
    ``j`` in bits ``32 j ..``), set by ``SCALE`` (B: every lane) and ``SCALE_COL`` (one lane;
    a ``lane`` >= L is an unknown instruction: ``error``), ready when ``dma_busy`` is low, busy
    for no cycle; all 1.0 from each ``start``. Without ``scales`` the controller decodes
    neither (an unknown opcode: ``error``), and its logic is the one it had before ``SCALE``
    existed.

Indirect loads (``Controller(indirect=True)``, the tops with a vector unit)
    ``idx`` (:data:`~tilewright.compiler.codegen.IDX_BITS` bits) is sampled with ``start`` into
    the run's index register, driven on ``dma_idx``; ``LOAD_VI`` issues as ``LOAD_V`` does (DMA
    op :data:`~tilewright.rtl.dma.OP_LOAD_VI`, same fields and readiness), the DMA computing
    its address from ``dma_idx``. ``LOAD_IDX`` issues as a DMA op
    (:data:`~tilewright.rtl.dma.OP_LOAD_IDX`, ``count`` 1, its ``addr``) when ``dma_busy`` is low;
    the DMA writes the index word it read through ``idx_wr_en``/``idx_wr_data`` (in its last
    beat's cycle), which replaces the register from the next cycle — the first cycle the DMA is
    idle again, so a ``LOAD_VI`` waiting for the DMA always sees the new value (no other
    interlock). ``start`` has priority (a new run samples ``idx``). Without ``indirect``
    ``LOAD_VI`` and ``LOAD_IDX`` are unknown opcodes and the logic is the one it had before
    ``LOAD_VI`` existed.

Double-buffered vector buffer (``Controller(double_buffer=True, vec_lanes=L)``, ArchSpec
``vector_unit.double_buffer``)
    The decoder computes the current instruction's vector-buffer banks with
    :func:`~tilewright.compiler.codegen.vbuf_bank_mask` (the ISA's rule, on the decoded fields)
    and keeps the banks of the last vector-buffer DMA transfer (none for the other DMA ops) and
    of the last ``VECTOR``/``SCAN`` in registers written at issue. ``LOAD_V``/``LOAD_VI``/
    ``STORE_V`` are ready when ``dma_busy`` is low and (``vec_busy`` is low or the engine's banks
    and theirs are disjoint); ``VECTOR``/``SCAN`` when ``vec_busy`` is low and (``dma_busy`` is
    low or the DMA's banks and theirs are disjoint). Without it the logic is the one it had
    before the option existed.
"""

from __future__ import annotations

import functools
import operator

from amaranth import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from tilewright.compiler.codegen import (IDX_BITS, IMEM_WORDS, INDEX_OPS, ISA, OPCODE_BITS,
                                         OPCODES, VBUF_BANKS, WORD_BITS, field_slices,
                                         vbuf_bank_mask)
from tilewright.formats import bits_of
from tilewright.rtl.fpga_primitives import RDWR_UNDEFINED, ecp5_ram, family_of
from tilewright.rtl.dma import (ADDR_BITS, COUNT_BITS, OP_LOAD_A, OP_LOAD_B, OP_LOAD_IDX,
                                OP_LOAD_V, OP_LOAD_VI, OP_STORE, OP_STORE_V, VBUF_ADDR_BITS)

__all__ = ["Controller", "PC_BITS"]

PC_BITS = (IMEM_WORDS - 1).bit_length()
#: the words the prefetch buffer of ``pipeline.fetch`` holds (:meth:`Controller._prefetch`)
PREFETCH_WORDS = 4
_DMA_OPS = {"LOAD_A": OP_LOAD_A, "LOAD_B": OP_LOAD_B, "STORE": OP_STORE}
_VDMA_OPS = {"LOAD_V": OP_LOAD_V, "STORE_V": OP_STORE_V}
_SCALE_BITS = field_slices("SCALE")["value"][1]     #: an fp32 pattern
assert _SCALE_BITS == bits_of("fp32")
_LANE_BITS = field_slices("SCALE_COL")["lane"][1]   #: SCALE_COL's lane field
_ONE = 0x3F800000                                    #: fp32 1.0: the scales of every new run
#: an instruction's issue classes (:meth:`Controller._classes`); with ``fetch_reg`` they are
#: decoded as the word is written and stored beside it in the instruction memory
_CLASS_OPS = {"dma": ("LOAD_A", "LOAD_B", "STORE", "LOAD_IDX"), "gemm": ("GEMM",),
              "vdma": ("LOAD_V", "STORE_V", "LOAD_VI"),
              "vec": ("LOAD_V", "STORE_V", "LOAD_VI", "VECTOR", "SCAN"), "sync": ("SYNC",),
              "end": ("END",), "scale": ("SCALE", "SCALE_COL")}
_CLASSES = ("known", *_CLASS_OPS)
#: the classes of the all-zero word (the opcode-0 instruction): the memory stores the classes
#: XOR these, so a word never written (zero) still decodes as that instruction
_ZERO_CLASSES = {"known": 1, **{c: int(OPCODES[0] in ops) for c, ops in _CLASS_OPS.items()}}


#: the command outputs that are an instruction field as it stands: op -> ((output, field), ...)
_FIELDS = {"GEMM": (("gemm_m", "m"), ("gemm_k", "k"), ("gemm_n", "n"), ("gemm_a_half", "a_buf"),
                    ("gemm_b_half", "b_buf"), ("gemm_c_half", "c_buf"),
                    ("gemm_accumulate", "acc")),
           "VECTOR": (("vec_op", "vop"),)
           + tuple((f"vec_{f}", f) for f in ("count", "a", "b", "b_inc", "dst", "seg")),
           "SCAN": tuple((f"scan_{f}", f) for f in ("count", "ab", "c", "h0", "dst"))}


def _field(word, op: str, name: str):
    lo, width = field_slices(op)[name]
    return word[lo:lo + width]


def mask_of(word, op: str, lanes: int = 1):
    """The vector-buffer banks of instruction word ``word`` read as ``op``: the ISA's
    :func:`~tilewright.compiler.codegen.vbuf_bank_mask` on its decoded fields (``lanes``: the
    vector unit's, for SCAN's y words)."""
    fields = {name: _field(word, op, name) for name in field_slices(op)}
    return vbuf_bank_mask(op, fields, lanes, Mux)[:VBUF_BANKS]


class Controller(wiring.Component):
    """Fetch/issue controller (see module docstring). ``scales``: decode ``SCALE`` and drive
    ``scale_a``/``scale_b``. ``indirect``: decode ``LOAD_VI`` and ``LOAD_IDX`` and hold the run's
    index register."""

    def __init__(self, *, scales: bool = False, lanes: int = 1, indirect: bool = False,
                 fetch_reg: bool = False, double_buffer: bool = False, vec_lanes: int = 1,
                 issue_reg: bool = False):
        for name, v in (("scales", scales), ("indirect", indirect), ("fetch_reg", fetch_reg),
                        ("double_buffer", double_buffer), ("issue_reg", issue_reg)):
            if not isinstance(v, bool):
                raise TypeError(f"{name} must be a bool, not {type(v).__name__}")
        if isinstance(vec_lanes, bool) or not isinstance(vec_lanes, int) or vec_lanes < 1:
            raise ValueError(f"vec_lanes must be a positive int, not {vec_lanes!r}")
        self._double_buffer, self._vec_lanes = double_buffer, vec_lanes
        if isinstance(lanes, bool) or not isinstance(lanes, int) \
                or not 1 <= lanes <= 1 << _LANE_BITS:
            raise ValueError(f"lanes must be an int from 1 to {1 << _LANE_BITS}, not {lanes!r}")
        self._scales, self._lanes, self._indirect = scales, lanes, indirect
        self._fetch_reg, self._issue_reg = fetch_reg, issue_reg
        extra = ({"scale_a": Out(_SCALE_BITS), "scale_b": Out(_SCALE_BITS * lanes)} if scales
                 else {})
        if indirect:
            extra.update(idx=In(IDX_BITS), dma_idx=Out(IDX_BITS), idx_wr_en=In(1),
                         idx_wr_data=In(IDX_BITS))
        super().__init__({**extra,
            "imem_wr_en": In(1), "imem_wr_addr": In(PC_BITS), "imem_wr_data": In(WORD_BITS),
            "start": In(1), "entry": In(PC_BITS),
            "busy": Out(1), "done": Out(1), "error": Out(1), "pc": Out(PC_BITS),
            "cycles": Out(32), "retired": Out(32),
            "gemm_start": Out(1), "gemm_m": Out(16), "gemm_k": Out(16), "gemm_n": Out(16),
            "gemm_a_half": Out(1), "gemm_b_half": Out(1), "gemm_c_half": Out(1),
            "gemm_accumulate": Out(1),
            "gemm_busy": In(1),
            "dma_start": Out(1), "dma_op": Out(3), "dma_buf": Out(1),
            "dma_count": Out(COUNT_BITS), "dma_addr": Out(ADDR_BITS),
            "dma_vaddr": Out(VBUF_ADDR_BITS), "dma_busy": In(1),
            "vec_start": Out(1), "vec_op": Out(4), "vec_count": Out(COUNT_BITS),
            "vec_a": Out(VBUF_ADDR_BITS), "vec_b": Out(VBUF_ADDR_BITS), "vec_b_inc": Out(1),
            "vec_dst": Out(VBUF_ADDR_BITS), "vec_seg": Out(field_slices("VECTOR")["seg"][1]),
            "vec_busy": In(1),
            "scan_start": Out(1), "scan_count": Out(COUNT_BITS), "scan_ab": Out(VBUF_ADDR_BITS),
            "scan_c": Out(VBUF_ADDR_BITS), "scan_h0": Out(VBUF_ADDR_BITS),
            "scan_dst": Out(VBUF_ADDR_BITS),
        })

    #: the command outputs of each unit: its start pulse first, then its fields
    _COMMANDS = {"gemm": ("gemm_start", "gemm_m", "gemm_k", "gemm_n", "gemm_a_half",
                          "gemm_b_half", "gemm_c_half", "gemm_accumulate"),
                 "dma": ("dma_start", "dma_op", "dma_buf", "dma_count", "dma_addr", "dma_vaddr"),
                 "vec": ("vec_start", "vec_op", "vec_count", "vec_a", "vec_b", "vec_b_inc",
                         "vec_dst", "vec_seg"),
                 "scan": ("scan_start", "scan_count", "scan_ab", "scan_c", "scan_h0",
                          "scan_dst")}

    def elaborate(self, platform):
        m = Module()
        # what the decoder computes for each command output; with issue_reg the outputs are
        # these through a register, and a command in the register counts as its unit busy
        outputs = [name for names in self._COMMANDS.values() for name in names]
        if self._issue_reg:
            cmd = {name: Signal.like(getattr(self, name), name=f"{name}_d") for name in outputs}
            m.d.sync += [getattr(self, name).eq(sig) for name, sig in cmd.items()]
            pending = {u: getattr(self, names[0]) for u, names in self._COMMANDS.items()}
            dma_busy = self.dma_busy | pending["dma"]
            gemm_busy = self.gemm_busy | pending["gemm"]
            vec_busy = self.vec_busy | pending["vec"] | pending["scan"]
        else:                     # the decoder drives the outputs (the logic of before)
            cmd = {name: getattr(self, name) for name in outputs}
            dma_busy, gemm_busy, vec_busy = self.dma_busy, self.gemm_busy, self.vec_busy
        classes = tuple(c for c in _CLASSES if self._scales or c != "scale")
        bits = WORD_BITS + (len(classes) if self._fetch_reg else 0)    # + the classes
        if self._fetch_reg and family_of(platform) == "ecp5":
            # the read through the RAM's output register, loaded every cycle (a word is out two
            # cycles after its read), into the prefetch buffer
            wr, (rd,) = ecp5_ram(m, "imem", bits, IMEM_WORDS, (True,), out_always=True)
        else:
            m.submodules.imem = imem = memory.Memory(shape=unsigned(bits),
                                                     depth=IMEM_WORDS, init=[],
                                                     attrs=RDWR_UNDEFINED if self._fetch_reg
                                                     else None)
            wr, rd = imem.write_port(), imem.read_port()
        if self._fetch_reg:       # the write passes a register (it decodes the word's classes)
            w_en, w_addr = Signal(name="imem_wr_en_q"), Signal(PC_BITS, name="imem_wr_addr_q")
            w_data = Signal(WORD_BITS, name="imem_wr_data_q")
            m.d.sync += [w_en.eq(self.imem_wr_en & ~self.busy), w_addr.eq(self.imem_wr_addr),
                         w_data.eq(self.imem_wr_data)]
            m.d.comb += [wr.en.eq(w_en), wr.addr.eq(w_addr)]
        else:
            m.d.comb += [wr.en.eq(self.imem_wr_en & ~self.busy), wr.addr.eq(self.imem_wr_addr),
                         wr.data.eq(self.imem_wr_data)]
        pc = Signal(PC_BITS)
        busy, done, error = Signal(), Signal(), Signal()
        cycles, retired = Signal(32), Signal(32)
        m.d.comb += [self.busy.eq(busy), self.done.eq(done), self.error.eq(error),
                     self.pc.eq(pc), self.cycles.eq(cycles), self.retired.eq(retired)]
        with m.If(busy):
            m.d.sync += cycles.eq(cycles + 1)

        if self._fetch_reg:       # the prefetch buffer (module docstring)
            pop = Signal()
            word, fetching, restart = self._prefetch(m, rd, bits, busy, pop, self.entry)
            # the instruction's classes, decoded as it is written, travel in the memory's
            # spare bits (a DP16KD word of 72 bits holds 64 + 8): the issue test starts at a
            # register, not at the opcode's decode (the ECP5 top's critical path)
            ins = word[:WORD_BITS]
            written = self._classes(w_data, self._is_op(w_data))
            m.d.comb += wr.data.eq(Cat(w_data,
                                       *(written[c] ^ _ZERO_CLASSES[c] for c in classes)))
            cls = {c: word[WORD_BITS + i] ^ _ZERO_CLASSES[c] for i, c in enumerate(classes)}
        else:
            ins = rd.data
        decoded = self._is_op(ins)
        is_op = {op: Signal(name=f"is_{op.lower()}") for op in decoded}
        m.d.comb += [is_op[op].eq(e) for op, e in decoded.items()]
        if not self._fetch_reg:
            cls = self._classes(ins, is_op)
        known = Signal()
        m.d.comb += known.eq(cls["known"])
        # decoded outputs (valid while the instruction is current; *_start qualifies them)
        m.d.comb += [cmd[out].eq(_field(ins, "GEMM", f)) for out, f in _FIELDS["GEMM"]]
        for op in _DMA_OPS:       # the three DMA ops share their field layout
            assert field_slices(op) == field_slices("LOAD_A"), op
        assert field_slices("STORE_V") == field_slices("LOAD_V")
        is_vdma = cls["vdma"]
        vdma_ops = dict(_VDMA_OPS)
        if self._indirect:            # LOAD_VI: LOAD_V's fields and readiness, its own DMA op
            assert field_slices("LOAD_VI") == field_slices("LOAD_V")
            vdma_ops["LOAD_VI"] = OP_LOAD_VI
        count = Mux(is_vdma, _field(ins, "LOAD_V", "count"), _field(ins, "LOAD_A", "count"))
        addr = Mux(is_vdma, _field(ins, "LOAD_V", "addr"), _field(ins, "LOAD_A", "addr"))
        is_ldidx = is_op["LOAD_IDX"] if self._indirect else None
        if self._indirect:            # LOAD_IDX: one index word from its addr
            count = Mux(is_ldidx, 1, count)
            addr = Mux(is_ldidx, _field(ins, "LOAD_IDX", "addr"), addr)
            vdma_ops["LOAD_IDX"] = OP_LOAD_IDX
        m.d.comb += [cmd["dma_buf"].eq(_field(ins, "LOAD_A", "buf")),
                     cmd["dma_count"].eq(count), cmd["dma_addr"].eq(addr),
                     cmd["dma_vaddr"].eq(_field(ins, "LOAD_V", "vaddr")),
                     cmd["dma_op"].eq(0)]
        for op, code in {**_DMA_OPS, **vdma_ops}.items():
            with m.If(is_op[op]):
                m.d.comb += cmd["dma_op"].eq(code)
        for op in ("VECTOR", "SCAN"):
            m.d.comb += [cmd[out].eq(_field(ins, op, f)) for out, f in _FIELDS[op]]
        is_dma = cls["dma"]
        sync_ok = ((~_field(ins, "SYNC", "dma")[0] | ~dma_busy)
                   & (~_field(ins, "SYNC", "gemm")[0] | ~gemm_busy)
                   & (~_field(ins, "SYNC", "vec")[0] | ~vec_busy))
        ready = Signal()
        both_idle = ~dma_busy & ~vec_busy
        if self._double_buffer:       # the bank rule (module docstring)
            vdma_ok, vec_ok, dma_banks, vec_banks, mine_dma, mine_vec = self._bank_rule(
                m, ins, is_op, dma_busy, vec_busy)
            vbuf_ready = (is_vdma & vdma_ok) | ((is_op["VECTOR"] | is_op["SCAN"]) & vec_ok)
        else:                         # LOAD_IDX waits for the DMA only (class dma)
            vbuf_ready = cls["vec"] & both_idle
        ready_any = ((cls["dma"] & ~dma_busy) | (cls["gemm"] & ~gemm_busy)
                     | vbuf_ready | (cls["sync"] & sync_ok)
                     | (cls["end"] & both_idle & ~gemm_busy))
        if self._scales:     # SCALE waits for the DMA: a STORE in flight keeps its scales
            ready_any = ready_any | (cls["scale"] & ~dma_busy)
        m.d.comb += ready.eq(ready_any)

        # states: idle (~busy), fetch (busy & fetch), exec (busy & ~fetch); an if-chain, since
        # Amaranth's FSM emits case statements without a default that Verilator's lint flags
        if not self._fetch_reg:   # one fetch cycle; the memory reads pc (pc + 1 when issuing)
            fetching = Signal()
            m.d.comb += rd.addr.eq(pc)
        with m.If(~busy):
            with m.If(self.start):
                m.d.sync += [pc.eq(self.entry), busy.eq(1), done.eq(0), error.eq(0),
                             cycles.eq(0), retired.eq(0)]
                if self._fetch_reg:
                    m.d.comb += restart.eq(1)
                else:
                    m.d.sync += fetching.eq(1)
        with m.Elif(fetching):
            if not self._fetch_reg:
                m.d.sync += fetching.eq(0)
        with m.Elif(~known):
            m.d.sync += [busy.eq(0), done.eq(1), error.eq(1)]
        with m.Elif(ready):
            if self._fetch_reg:
                m.d.comb += pop.eq(1)
            else:
                m.d.comb += rd.addr.eq(pc + 1)
            # through the issue register a zero-count transfer starts nothing (the DMA relies
            # on it: rtl/dma.py); without it the DMA ignores such a start
            dma_go = is_dma | is_vdma
            if self._issue_reg:
                dma_go = dma_go & (count != 0)
            m.d.comb += [cmd["gemm_start"].eq(is_op["GEMM"]),
                         cmd["dma_start"].eq(dma_go),
                         cmd["vec_start"].eq(is_op["VECTOR"]),
                         cmd["scan_start"].eq(is_op["SCAN"])]
            m.d.sync += [pc.eq(pc + 1), retired.eq(retired + 1)]
            if self._double_buffer:   # the issuing instruction's banks, kept while it runs
                with m.If(is_dma | is_vdma):
                    m.d.sync += dma_banks.eq(Mux(is_vdma, mine_dma, 0))
                with m.If(is_op["VECTOR"] | is_op["SCAN"]):
                    m.d.sync += vec_banks.eq(mine_vec)
            with m.If(is_op["END"]):
                m.d.sync += [busy.eq(0), done.eq(1), pc.eq(pc)]
        if self._scales:
            self._scale_registers(m, ins, busy & ~fetching & known & ready, is_op)
        if self._indirect:   # the run's index register: sampled with start, written by LOAD_IDX
            idx = Signal(IDX_BITS, name="idx_q")
            m.d.comb += self.dma_idx.eq(idx)
            with m.If(~busy & self.start):
                m.d.sync += idx.eq(self.idx)
            with m.Elif(self.idx_wr_en):
                m.d.sync += idx.eq(self.idx_wr_data)
        return m

    @staticmethod
    def _prefetch(m: Module, rd, bits: int, busy, pop, entry):
        """The instruction memory's read-ahead into a buffer of :data:`PREFETCH_WORDS` registers
        (``pipeline.fetch``; module docstring). The memory reads the next word whenever the
        buffer will have room for it — a decision from registers only, so the issue test never
        reaches the memory's read enable — and the issue test reads the oldest word, from a
        register. A read's word leaves the memory two cycles after it (on ECP5 through the
        block RAM's output register, elsewhere through a register after the read) and is in
        the buffer from the cycle after: four words keep one issue per cycle. Returns (the
        oldest word, its not-yet-valid flag, the restart strobe that empties the buffer and
        reads from ``entry`` on, driven at ``start``)."""
        if getattr(rd, "registered", False):
            out = rd.data
        else:
            out = Signal(bits, name="imem_out_q")
            m.d.sync += out.eq(rd.data)
        slots = [Signal(bits, name=f"prefetch{i}") for i in range(PREFETCH_WORDS)]
        head = Signal(range(PREFETCH_WORDS), name="prefetch_head")
        tail = Signal(range(PREFETCH_WORDS), name="prefetch_tail")
        held = Signal(range(PREFETCH_WORDS + 1), name="prefetch_held")
        # the reads of the last two cycles: bit 1's word is on `out` now
        reads = Signal(2, name="prefetch_reads")
        fpc, restart = Signal(PC_BITS, name="fetch_pc"), Signal()
        room = held + reads[0] + reads[1] < PREFETCH_WORDS
        m.d.comb += [rd.addr.eq(fpc), rd.en.eq(busy & room)]

        def step(ptr):
            return Mux(ptr == PREFETCH_WORDS - 1, 0, ptr + 1)
        m.d.sync += [reads.eq(Cat(rd.en, reads[0])), held.eq(held + reads[1] - pop)]
        with m.If(rd.en):
            m.d.sync += fpc.eq(fpc + 1)
        with m.If(reads[1]):
            m.d.sync += tail.eq(step(tail))
            for i, slot in enumerate(slots):
                with m.If(tail == i):
                    m.d.sync += slot.eq(out)
        with m.If(pop):
            m.d.sync += head.eq(step(head))
        with m.If(restart):       # after the lines above: a new run's buffer starts empty
            m.d.sync += [held.eq(0), head.eq(0), tail.eq(0), reads.eq(0), fpc.eq(entry)]
        word = Signal(bits, name="ins_q")
        m.d.comb += word.eq(slots[0])
        for i in range(1, PREFETCH_WORDS):
            with m.If(head == i):
                m.d.comb += word.eq(slots[i])
        return word, held == 0, restart

    def _is_op(self, word) -> dict:
        """``{op: word's opcode is op}`` for the ops this controller decodes."""
        opcode = word[:OPCODE_BITS]
        return {op: opcode == code for op, (code, _) in ISA.items()
                if (self._scales or op not in ("SCALE", "SCALE_COL"))
                and (self._indirect or op not in INDEX_OPS)}

    def _classes(self, word, is_op: dict) -> dict:
        """The issue classes of an instruction (:data:`_CLASSES`, the timing contract's
        conditions; :data:`_CLASS_OPS` lists each class's ops): ``known`` (an opcode this
        controller decodes, a SCALE_COL lane it has), then whether it is a DMA transfer waiting
        for the DMA (``dma``), waits for the GEMM core (``gemm``), is a vector-buffer transfer
        (``vdma``), waits for the DMA and the vector engine (``vec``), is SYNC or END, or waits
        for the DMA as a scale (``scale``; with ``scales`` only)."""
        any_op = sum(is_op.values()) != 0
        if self._scales and self._lanes < 1 << _LANE_BITS:   # a lane the array does not have
            lane_ok = _field(word, "SCALE_COL", "lane") < self._lanes
            any_op = any_op & ~(is_op["SCALE_COL"] & ~lane_ok)
        out = {"known": any_op}
        for cls, ops in _CLASS_OPS.items():
            terms = [is_op[op] for op in ops if op in is_op]
            out[cls] = functools.reduce(operator.or_, terms) if terms else Const(0)
        return out

    def _bank_rule(self, m: Module, ins, is_op, dma_busy, vec_busy):
        """(vector-buffer DMA ready, VECTOR/SCAN ready, the DMA's and the engine's bank
        registers, the current instruction's banks read as a transfer and as VECTOR/SCAN) of
        the double-buffered rule (module docstring)."""
        dma_banks = Signal(VBUF_BANKS, name="dma_banks_q")
        vec_banks = Signal(VBUF_BANKS, name="vec_banks_q")
        mine_dma = Signal(VBUF_BANKS, name="vdma_banks")
        mine_vec = Signal(VBUF_BANKS, name="vec_banks")
        m.d.comb += [mine_dma.eq(mask_of(ins, "LOAD_V")),
                     mine_vec.eq(Mux(is_op["SCAN"], mask_of(ins, "SCAN", self._vec_lanes),
                                     mask_of(ins, "VECTOR")))]
        vdma_ok = ~dma_busy & (~vec_busy | ((vec_banks & mine_dma) == 0))
        vec_ok = ~vec_busy & (~dma_busy | ((dma_banks & mine_vec) == 0))
        return vdma_ok, vec_ok, dma_banks, vec_banks, mine_dma, mine_vec

    def _scale_registers(self, m: Module, ins, issue, is_op) -> None:
        """``scale_a``/``scale_b`` lanes: 1.0 from ``start``; an issuing ``SCALE`` sets A or
        every B lane, ``SCALE_COL`` one B lane."""
        reg_a = Signal(_SCALE_BITS, name="scale_a_q", init=_ONE)
        regs_b = [Signal(_SCALE_BITS, name=f"scale_b{j}_q", init=_ONE)
                  for j in range(self._lanes)]
        m.d.comb += [self.scale_a.eq(reg_a), self.scale_b.eq(Cat(*regs_b))]
        value = _field(ins, "SCALE", "value")
        with m.If(~self.busy & self.start):
            m.d.sync += [r.eq(_ONE) for r in (reg_a, *regs_b)]
        with m.Elif(issue & is_op["SCALE"]):
            with m.If(_field(ins, "SCALE", "operand") == 0):
                m.d.sync += reg_a.eq(value)
            with m.Else():
                m.d.sync += [r.eq(value) for r in regs_b]
        with m.Elif(issue & is_op["SCALE_COL"]):
            lane = _field(ins, "SCALE_COL", "lane")
            for j, r in enumerate(regs_b):
                with m.If(lane == j):
                    m.d.sync += r.eq(_field(ins, "SCALE_COL", "value"))
