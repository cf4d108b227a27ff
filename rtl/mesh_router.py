"""MeshRouter: a 6-in / 6-out mesh router that arbitrates at run time (round-robin per output,
credit flow control, input buffers, colour-routed flits).

Inputs, in round-robin order (:data:`~tilewright.compiler.mesh_isa.INPUTS`): the four mesh sides
n, e, s, w and the tile's injection lanes 0, 1. Outputs (:data:`~tilewright.compiler.mesh_isa.OUTPUTS`):
the four mesh sides and the tile's ejection lanes 0, 1.

**Routing.** Every flit carries a colour (route id, ``color_bits(routes)`` side-band bits next to
its data, like a wafer-scale fabric's wavelet colour). A per-phase route table (``route``: one
:data:`~tilewright.compiler.mesh_isa.ROUTE_BITS`-bit entry per colour, bit ``i`` = output
``OUTPUTS[i]``) says which outputs a flit of that colour leaves by — several bits: the flit forks
(multicast); several inputs whose colours name one output: they converge and are arbitrated.
The software fills the tables with dimension-order XY routes
(:func:`tilewright.compiler.mesh_codegen.xy_path`: along the row first, then the column), so a
flit turns from X to Y at most once and never from Y back to X.

**Arbitration.** Each output grants, per cycle, one of the inputs whose head flit still needs it,
round-robin: the input after the one it granted last goes first (pointer reset to input 0 at the
phase barrier). A granted flit enters the output's ``hop_cycles`` (mesh side) or ``eject_cycles``
(ejection lane) registers. A multicast head flit leaves each of its outputs as that output grants
it (the outputs already served are remembered) and is popped once every output it names has
served it. An entry of 0 (a colour not routed here) drops the flit.

**Flow control.** Each input has a ``depth``-flit FIFO with bypass (a flit that arrives to an
empty FIFO can be granted in the same cycle). A mesh output holds one credit per free slot of the
neighbour's input FIFO (``depth`` at the barrier), spends one per flit sent, and gets one back
when the neighbour pops a flit from that input (``i_<d>_credit``, one register later); it only
bids with a credit. The default depth (:func:`~tilewright.compiler.mesh_isa.buffer_depth`, ``hop_cycles + 2``) covers the credit round trip, so one
uncontended stream moves a flit per cycle. Injection lane k is ready (``inj<k>_ready``) while its
FIFO has a free slot. An ejection lane always accepts (the tile writes each flit to SRAM), except
a chained lane (``chain<k>``: the tile re-injects each flit it takes on injection lane k in the
same cycle), which holds credits for injection lane k's FIFO the same way.

**Deadlock freedom.** A flit waits only for an output of its own router, and buffers wait on one
another only along the links of XY routes: an X-travelling flit (e/w input or injection) may wait
on an e/w/n/s output, a Y-travelling one (n/s input) only on an n/s output or an ejection lane.
Ordering the mesh channels (injection, then e/w channels by column in their direction, then n/s
channels by row in their direction, then ejection) every wait is on a strictly later channel, so
the channel-dependency graph has no cycle (Dally & Seitz's condition), and every chain of waits
ends at an ejection lane, which always drains (a chained lane drains into an injection lane whose
flits travel on in the same column direction — the K-tree chains run along one column). The
round-robin pointer passes every requesting input within six grants, so no input starves.
Routes that turn from Y back to X would close the cycle; the software never builds them.

Ports (all ``sync``; a flit is ``valid`` + ``data`` (``flit_bits``) + ``color``)
    ``i_<d>_valid/data/color``, ``i_<d>_credit`` (out): flits from the neighbour on side d, and
    the credit returned to it.
    ``o_<d>_valid/data/color``, ``o_<d>_credit`` (in): flits towards side d, and its credits.
    ``inj<k>_valid/data/color``, ``inj<k>_ready`` (out): flits the tile injects (pushed when
    valid and ready).
    ``ej<k>_valid/data``: flits delivered to the tile; ``chain<k>``: lane k is a chain stage.
    ``route`` (``routes * ROUTE_BITS``): the route table, entry e in bits ``[6e, 6e + 6)``.
    ``clear``: the phase barrier: empty every FIFO and pipeline, reset credits and pointers.

Timing contract (uncontended): a flit injected in cycle t leaves on ``o_<d>`` at cycle
t + hop_cycles, so a flit crossing h links reaches the destination router's input at
t + hop_cycles * h and its ejection lane at t + hop_cycles * h + eject_cycles (``alpha * hops +
beta`` of the mesh model). Under contention the cycle-by-cycle rule above decides; the mesh
model's :mod:`tilewright.dataflow_sim.mesh.flit_sim` implements the same rule.
"""

from __future__ import annotations

from amaranth import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from tilewright.compiler.mesh_isa import (DEFAULT_ROUTES, INPUTS, N_LANES, OUTPUTS, ROUTE_BITS,
                                          SIDES, buffer_depth, color_bits)

__all__ = ["MeshRouter", "SIDES", "INPUTS", "OUTPUTS"]


class MeshRouter(wiring.Component):
    """Run-time arbitrating mesh router (see module docstring for ports, rules and timing)."""

    def __init__(self, *, flit_bits: int, hop_cycles: int = 1, eject_cycles: int = 1,
                 routes: int = DEFAULT_ROUTES, depth: int | None = None):
        depth = buffer_depth(hop_cycles) if depth is None else depth
        for name, v, lo in (("flit_bits", flit_bits, 1), ("hop_cycles", hop_cycles, 1),
                            ("eject_cycles", eject_cycles, 1), ("routes", routes, 1),
                            ("depth", depth, 1)):
            if not isinstance(v, int) or v < lo:
                raise ValueError(f"MeshRouter {name} = {v!r}: must be an integer >= {lo}")
        self._flit_bits, self._hop, self._eject = flit_bits, hop_cycles, eject_cycles
        self._routes, self._depth, self._cb = routes, depth, color_bits(routes)
        cb = self._cb
        sig = {"clear": In(1), "route": In(routes * ROUTE_BITS)}
        for d in SIDES:
            sig |= {f"i_{d}_valid": In(1), f"i_{d}_data": In(flit_bits), f"i_{d}_color": In(cb),
                    f"i_{d}_credit": Out(1),
                    f"o_{d}_valid": Out(1), f"o_{d}_data": Out(flit_bits),
                    f"o_{d}_color": Out(cb), f"o_{d}_credit": In(1)}
        for k in range(N_LANES):
            sig |= {f"inj{k}_valid": In(1), f"inj{k}_data": In(flit_bits),
                    f"inj{k}_color": In(cb), f"inj{k}_ready": Out(1),
                    f"ej{k}_valid": Out(1), f"ej{k}_data": Out(flit_bits), f"chain{k}": In(1)}
        super().__init__(sig)

    @property
    def flit_bits(self) -> int:
        return self._flit_bits

    @property
    def hop_cycles(self) -> int:
        return self._hop

    @property
    def eject_cycles(self) -> int:
        return self._eject

    @property
    def depth(self) -> int:
        return self._depth

    def elaborate(self, platform):
        m = Module()
        fb, cb, D = self._flit_bits, self._cb, self._depth
        n_in, n_out = len(INPUTS), len(OUTPUTS)
        clear = self.clear
        # the route table, padded to every colour value (an unused colour routes nowhere)
        table = Array([self.route[ROUTE_BITS * e:ROUTE_BITS * (e + 1)] if e < self._routes
                       else Const(0, ROUTE_BITS) for e in range(1 << cb)])
        heads, reqs = [], []
        fifo_state = []
        for i, name in enumerate(INPUTS):
            if name in SIDES:
                v, dat, col = (getattr(self, f"i_{name}_{w}") for w in ("valid", "data", "color"))
            else:
                v, dat, col = (getattr(self, f"{name}_{w}") for w in ("valid", "data", "color"))
            mem = [Signal(fb + cb, name=f"{name}_buf{j}") for j in range(D)]
            rp = Signal(range(D), name=f"{name}_rp")
            wp = Signal(range(D), name=f"{name}_wp")
            cnt = Signal(range(D + 1), name=f"{name}_cnt")
            hv = Signal(name=f"{name}_hv")
            hd = Signal(fb + cb, name=f"{name}_head")
            done = Signal(n_out, name=f"{name}_done")
            req = Signal(n_out, name=f"{name}_req")
            stored = Cat(dat, col)          # explicit muxes: no partial case over rp (lint)
            for j in range(D):
                stored = Mux(rp == j, mem[j], stored)
            m.d.comb += [hv.eq((cnt != 0) | v), hd.eq(Mux(cnt != 0, stored, Cat(dat, col))),
                         req.eq(Mux(hv, table[hd[fb:]] & ~done, 0))]
            heads.append((hv, hd))
            reqs.append(req)
            fifo_state.append((v, dat, col, mem, rp, wp, cnt, done))
        # per output: ready, round-robin grant, pipeline
        grants = []           # per output: one-hot over inputs
        out_credit_regs = {}
        chain_cr = {}
        for o, oname in enumerate(OUTPUTS):
            if oname in SIDES:
                cr = Signal(range(D + 1), init=D, name=f"o_{oname}_credits")
                out_credit_regs[oname] = cr
                ready = cr != 0
            else:
                k = int(oname[2:])
                cr = Signal(range(D + 1), init=D, name=f"{oname}_chain_credits")
                chain_cr[k] = cr
                ready = ~getattr(self, f"chain{k}") | (cr != 0)
            want = Cat(*(r[o] for r in reqs))
            ptr = Signal(range(n_in), name=f"{oname}_rr")
            g = Signal(n_in, name=f"{oname}_grant")
            gidx = Signal(range(n_in), name=f"{oname}_gidx")
            with m.Switch(ptr):
                for p in range(n_in):
                    with (m.Case(p) if p < n_in - 1 else m.Default()):
                        order = [(p + j) % n_in for j in range(n_in)]
                        gv, gi = Const(0, n_in), Const(0, range(n_in))
                        for j in reversed(order):
                            gv = Mux(want[j], 1 << j, gv)
                            gi = Mux(want[j], j, gi)
                        m.d.comb += [g.eq(Mux(ready, gv, 0)), gidx.eq(gi)]
            with m.If(clear):
                m.d.sync += ptr.eq(0)
            with m.Elif(g.any()):
                m.d.sync += ptr.eq(Mux(gidx == n_in - 1, 0, gidx + 1))
            grants.append(g)
            # the granted head flit into the output's registers
            sel = Signal(fb + cb, name=f"{oname}_sel")
            m.d.comb += sel.eq(_or([Mux(g[i], heads[i][1], 0) for i in range(n_in)]))
            stages = self._hop if oname in SIDES else self._eject
            pv, pd = g.any(), sel
            for s in range(stages):
                rv = Signal(name=f"{oname}_v{s}")
                rd = Signal(fb + cb, name=f"{oname}_d{s}")
                m.d.sync += [rv.eq(pv & ~clear), rd.eq(pd)]
                pv, pd = rv, rd
            if oname in SIDES:
                m.d.comb += [getattr(self, f"o_{oname}_valid").eq(pv),
                             getattr(self, f"o_{oname}_data").eq(pd[:fb]),
                             getattr(self, f"o_{oname}_color").eq(pd[fb:])]
            else:
                m.d.comb += [getattr(self, f"{oname}_valid").eq(pv),
                             getattr(self, f"{oname}_data").eq(pd[:fb])]
        # per input: served outputs, pop, FIFO update, credit return
        pops = []
        for i, name in enumerate(INPUTS):
            v, dat, col, mem, rp, wp, cnt, done = fifo_state[i]
            hv = heads[i][0]
            served = Signal(n_out, name=f"{name}_served")
            pop = Signal(name=f"{name}_pop")
            m.d.comb += [served.eq(Cat(*(g[i] for g in grants))),
                         pop.eq(hv & ((reqs[i] & ~served) == 0))]
            pops.append(pop)
            stored_pop = pop & (cnt != 0)
            push = Signal(name=f"{name}_push")
            m.d.comb += push.eq(v & ~(pop & (cnt == 0)))
            with m.If(clear):
                m.d.sync += [rp.eq(0), wp.eq(0), cnt.eq(0), done.eq(0)]
            with m.Else():
                for j in range(D):
                    with m.If(push & (wp == j)):
                        m.d.sync += mem[j].eq(Cat(dat, col))
                with m.If(push):
                    m.d.sync += wp.eq(Mux(wp == D - 1, 0, wp + 1))
                with m.If(stored_pop):
                    m.d.sync += rp.eq(Mux(rp == D - 1, 0, rp + 1))
                m.d.sync += [cnt.eq(cnt + push - stored_pop),
                             done.eq(Mux(pop, 0, done | served))]
            if name in SIDES:
                m.d.sync += getattr(self, f"i_{name}_credit").eq(pop & ~clear)
            else:
                m.d.comb += getattr(self, f"{name}_ready").eq(cnt != D)
        # credit counters
        for o, oname in enumerate(OUTPUTS):
            spent = grants[o].any()
            if oname in SIDES:
                cr = out_credit_regs[oname]
                back = getattr(self, f"o_{oname}_credit")
            else:
                k = int(oname[2:])
                cr = chain_cr[k]
                chain = getattr(self, f"chain{k}")
                back = chain & pops[INPUTS.index(f"inj{k}")]
                spent = spent & chain
            with m.If(clear):
                m.d.sync += cr.eq(D)
            with m.Else():
                m.d.sync += cr.eq(cr + back - spent)
        return m


def _or(values):
    out = values[0]
    for v in values[1:]:
        out = out | v
    return out
