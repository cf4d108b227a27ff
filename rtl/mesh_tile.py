"""MeshTile: one core of the RTL mesh — SRAM, int8 MAC engine, router and a phase sequencer.

Each tile holds one SRAM of ``core_sram_kib`` KiB as words of one flit (``link_bytes_per_cycle``
bytes: ``L`` int8 lanes, element 0 in the LSBs, or one int32), an instruction memory with one
:func:`~tilewright.compiler.mesh_isa.instr_fields` word per phase (the ISA lives in
the compiler; this tile decodes it), and a :class:`~tilewright.rtl.mesh_router.MeshRouter`.
In every phase it runs, concurrently:

* **inject** lanes 0 and 1: send ``inj<k>_count`` consecutive SRAM words from ``inj<k>_base``
  with colour ``inj<k>_color``, one per cycle from the phase's first cycle while the router's
  injection FIFO has room (``inj<k>_ready``: the router arbitrates at run time, see
  :mod:`~tilewright.rtl.mesh_router`; routes: ``route_<e>``);
* **eject** lanes 0 and 1: write (``ej<k>_add`` = 0) or add (int32 wrap, = 1) each flit that
  the router delivers on the lane into consecutive words from ``ej<k>_base``; ``ej<k>_count``
  flits expected (two adding lanes reaching one word in the same cycle add both flits);
* **chain** (``chain<k>`` = 1, a streaming chain-reduction stage): eject lane k does not write;
  each flit it takes, plus the tile's word it would have added to, leaves on injection lane k
  in the same cycle (so a stage costs the ``eject_cycles`` of its router: the model's ``beta``
  per stage);
* **MAC**: ``C[i, j] += sum_k A[i, k] * B[k, j]`` for an ``mt x (kw*L) x nt`` block,
  ``L`` MACs per cycle (one A word of L k-consecutive int8 of row i, one B word of L
  k-consecutive int8 of column j), ``mt * nt * kw`` cycles. Words: A row-major
  (``mac_a + i*kw + kc``), B column-major (``mac_b + j*kw + kc``), C int32 row-major
  (``mac_c + i*nt + j``). ``mac_mt = 0``: no compute.

Timing contract: in its phase's cycle ``t`` (from 0) the tile offers its lane's next word (a
combinational SRAM read; uncontended: word ``t``), the MAC does step ``t``; an
ejected flit is written (or, chained, re-injected) in the cycle it leaves the router's eject
pipeline. ``finishing`` is high in the cycle in which all of the
tile's work for the phase completes (or has completed); the mesh advances every tile to the next
phase at the end of a cycle in which every tile is finishing (a zero-cost barrier), and
``clear`` resets the tile's counters and the router's registers at that edge.
"""

from __future__ import annotations

from amaranth import Cat, Module, Signal, unsigned
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from tilewright.compiler.mesh_isa import (DEFAULT_ROUTES, LANE_BITS, N_LANES, SIDES, WORD_BITS,
                                          addr_bits, color_bits, instr_fields)
from tilewright.rtl.mesh_router import MeshRouter

__all__ = ["MeshTile"]


class MeshTile(wiring.Component):
    """One mesh core (see module docstring). ``sram_words`` words of ``lanes`` int8 (flit),
    ``imem_depth`` phases, router latencies ``hop_cycles`` / ``eject_cycles``, ``routes``
    route-table entries, router input FIFOs of ``depth`` flits (default: the credit round trip)."""

    def __init__(self, *, lanes: int, sram_words: int, imem_depth: int, hop_cycles: int = 1,
                 eject_cycles: int = 1, routes: int = DEFAULT_ROUTES, depth: int | None = None):
        for name, v in (("lanes", lanes), ("sram_words", sram_words), ("imem_depth", imem_depth)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"MeshTile {name} = {v!r}: must be an integer >= 1")
        if lanes * LANE_BITS < WORD_BITS:
            raise ValueError(f"MeshTile lanes = {lanes}: a flit must hold an int32 (lanes >= 4)")
        self._lanes, self._words, self._depth = lanes, sram_words, imem_depth
        self._hop, self._eject, self._routes = hop_cycles, eject_cycles, routes
        self._fifo_depth = depth
        self._abits = addr_bits(sram_words)
        self._pbits = max(1, (imem_depth - 1).bit_length())
        self._layout = data.StructLayout(dict(instr_fields(self._abits, routes)))
        cb = color_bits(routes)
        fb = lanes * LANE_BITS
        sig = {"active": In(1), "clear": In(1), "phase": In(self._pbits), "finishing": Out(1),
               "ld_we": In(1), "ld_addr": In(self._abits), "ld_data": In(fb),
               "rd_addr": In(self._abits), "rd_data": Out(fb),
               "im_we": In(1), "im_addr": In(self._pbits), "im_data": In(self._layout.size)}
        for d in SIDES:
            sig |= {f"i_{d}_valid": In(1), f"i_{d}_data": In(fb), f"i_{d}_color": In(cb),
                    f"i_{d}_credit": Out(1), f"o_{d}_valid": Out(1), f"o_{d}_data": Out(fb),
                    f"o_{d}_color": Out(cb), f"o_{d}_credit": In(1)}
        for k in range(N_LANES):       # observation: the router delivers a flit on lane k
            sig |= {f"ej{k}_seen": Out(1)}
        super().__init__(sig)

    @property
    def addr_bits(self) -> int:
        return self._abits

    @property
    def phase_bits(self) -> int:
        return self._pbits

    @property
    def instr_bits(self) -> int:
        return self._layout.size

    def elaborate(self, platform):
        m = Module()
        L, fb, a_bits = self._lanes, self._lanes * LANE_BITS, self._abits
        m.submodules.router = rt = MeshRouter(flit_bits=fb, hop_cycles=self._hop,
                                              eject_cycles=self._eject, routes=self._routes,
                                              depth=self._fifo_depth)
        m.submodules.sram = sram = memory.Memory(shape=unsigned(fb), depth=self._words, init=[])
        m.submodules.imem = imem = memory.Memory(shape=unsigned(self._layout.size),
                                                 depth=self._depth, init=[])
        im_w = imem.write_port()
        im_r = imem.read_port(domain="comb")
        m.d.comb += [im_w.en.eq(self.im_we), im_w.addr.eq(self.im_addr),
                     im_w.data.eq(self.im_data), im_r.addr.eq(self.phase)]
        ins = data.View(self._layout, im_r.data)
        clear, active = self.clear, self.active

        # host ports
        host_w = sram.write_port()
        host_r = sram.read_port(domain="comb")
        m.d.comb += [host_w.en.eq(self.ld_we), host_w.addr.eq(self.ld_addr),
                     host_w.data.eq(self.ld_data), host_r.addr.eq(self.rd_addr),
                     self.rd_data.eq(host_r.data)]

        # router wiring
        m.d.comb += [rt.clear.eq(clear),
                     rt.route.eq(Cat(*(getattr(ins, f"route_{e}") for e in range(self._routes))))]
        for d in SIDES:
            m.d.comb += [getattr(rt, f"i_{d}_{w}").eq(getattr(self, f"i_{d}_{w}"))
                         for w in ("valid", "data", "color")]
            m.d.comb += [getattr(self, f"o_{d}_{w}").eq(getattr(rt, f"o_{d}_{w}"))
                         for w in ("valid", "data", "color")]
            m.d.comb += [getattr(self, f"i_{d}_credit").eq(getattr(rt, f"i_{d}_credit")),
                         getattr(rt, f"o_{d}_credit").eq(getattr(self, f"o_{d}_credit"))]
        for k in range(N_LANES):
            m.d.comb += [getattr(rt, f"chain{k}").eq(getattr(ins, f"chain{k}")),
                         getattr(rt, f"inj{k}_color").eq(getattr(ins, f"inj{k}_color")),
                         getattr(self, f"ej{k}_seen").eq(active & getattr(rt, f"ej{k}_valid"))]
        fin = []
        # inject lanes
        inj = []
        for k in range(N_LANES):
            cnt = Signal(a_bits + 1, name=f"inj{k}_cnt")
            total = getattr(ins, f"inj{k}_count")
            rp = sram.read_port(domain="comb")
            go = Signal(name=f"inj{k}_go")
            m.d.comb += [go.eq(active & (cnt < total) & ~getattr(ins, f"chain{k}")
                               & getattr(rt, f"inj{k}_ready")),
                         rp.addr.eq(getattr(ins, f"inj{k}_base") + cnt)]
            inj.append((go, rp))
            with m.If(clear):
                m.d.sync += cnt.eq(0)
            with m.Elif(go):
                m.d.sync += cnt.eq(cnt + 1)
            fin.append((cnt >= total) | (go & (cnt + 1 == total)))
        # eject lanes; two adding lanes that hit one word in one cycle (two halves of a
        # K-tree group arriving in lockstep) merge into lane 0's write: old + flit0 + flit1
        lanes = []
        for k in range(N_LANES):
            cnt = Signal(a_bits + 1, name=f"ej{k}_cnt")
            total = getattr(ins, f"ej{k}_count")
            rp = sram.read_port(domain="comb")
            wp = sram.write_port()
            v, dat = getattr(rt, f"ej{k}_valid"), getattr(rt, f"ej{k}_data")
            fire = Signal(name=f"ej{k}_fire")
            m.d.comb += [fire.eq(active & v & (cnt < total)),
                         rp.addr.eq(getattr(ins, f"ej{k}_base") + cnt), wp.addr.eq(rp.addr)]
            with m.If(clear):
                m.d.sync += cnt.eq(0)
            with m.Elif(fire):
                m.d.sync += cnt.eq(cnt + 1)
            fin.append((cnt >= total) | (fire & (cnt + 1 == total)))
            lanes.append((fire, getattr(ins, f"ej{k}_add"), rp, wp, dat, cnt))
        (f0, add0, rp0, wp0, d0, _), (f1, add1, rp1, wp1, d1, _) = lanes
        merge = Signal()
        m.d.comb += [merge.eq(f0 & f1 & add0 & add1 & (rp0.addr == rp1.addr)),
                     wp0.en.eq(f0 & ~ins.chain0), wp1.en.eq(f1 & ~merge & ~ins.chain1)]
        # injection lane k sends its SRAM words, or (chain<k>) lane k's ejected flit plus the
        # tile's own word, in the cycle it is ejected (a streaming chain-reduction stage)
        for k, ((go, rp), (fire, _, erp, _, dat, _)) in enumerate(zip(inj, lanes)):
            with m.If(getattr(ins, f"chain{k}")):
                m.d.comb += [getattr(rt, f"inj{k}_valid").eq(fire),
                             getattr(rt, f"inj{k}_data").eq((erp.data + dat)[:WORD_BITS])]
            with m.Else():
                m.d.comb += [getattr(rt, f"inj{k}_valid").eq(go),
                             getattr(rt, f"inj{k}_data").eq(rp.data)]
        for fire, add, rp, wp, dat, _ in lanes:
            with m.If(add):
                m.d.comb += wp.data.eq((rp.data + dat)[:WORD_BITS])
            with m.Else():
                m.d.comb += wp.data.eq(dat)
        with m.If(merge):
            m.d.comb += wp0.data.eq((rp0.data + d0 + d1)[:WORD_BITS])
        # MAC engine: i over mt, j over nt, kc over kw; one A word x one B word per cycle
        i = Signal(a_bits + 1)
        j = Signal(a_bits + 1)
        kc = Signal(a_bits + 1)
        a_off = Signal(a_bits)      # i * kw
        b_off = Signal(a_bits)      # j * kw
        c_off = Signal(a_bits)      # i * nt + j
        mt, nt, kw = ins.mac_mt, ins.mac_nt, ins.mac_kw
        ra, rb, rc = (sram.read_port(domain="comb") for _ in range(3))
        wc = sram.write_port()
        busy = Signal()
        last_k, last_j = kc + 1 == kw, j + 1 == nt
        m.d.comb += [busy.eq(active & (i < mt)),
                     ra.addr.eq(ins.mac_a + a_off + kc), rb.addr.eq(ins.mac_b + b_off + kc),
                     rc.addr.eq(ins.mac_c + c_off), wc.addr.eq(rc.addr), wc.en.eq(busy)]
        B = LANE_BITS
        dot = sum(ra.data[B * q:B * q + B].as_signed() * rb.data[B * q:B * q + B].as_signed()
                  for q in range(L))
        m.d.comb += wc.data.eq((rc.data[:WORD_BITS].as_signed() + dot)[:WORD_BITS])
        with m.If(clear):
            m.d.sync += [i.eq(0), j.eq(0), kc.eq(0), a_off.eq(0), b_off.eq(0), c_off.eq(0)]
        with m.Elif(busy):
            with m.If(~last_k):
                m.d.sync += kc.eq(kc + 1)
            with m.Else():
                m.d.sync += [kc.eq(0), c_off.eq(c_off + 1)]
                with m.If(~last_j):
                    m.d.sync += [j.eq(j + 1), b_off.eq(b_off + kw)]
                with m.Else():
                    m.d.sync += [j.eq(0), b_off.eq(0), i.eq(i + 1), a_off.eq(a_off + kw)]
        fin.append((i >= mt) | (busy & last_k & last_j & (i + 1 == mt)))
        allfin = fin[0]
        for f in fin[1:]:
            allfin = allfin & f
        m.d.comb += self.finishing.eq(allfin)
        return m
