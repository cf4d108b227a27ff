"""MeshRouter: a 5-port (N, E, S, W, local) mesh router with per-phase static XY routes.

The router is configured once per phase (like a wafer-scale router's route ids / "colors"): each
of the four mesh outputs enables a set of sources (a 6-bit mask over the four mesh inputs and the
tile's two injection lanes) and each of the tile's two ejection lanes selects one mesh input. A
flit entering on an input can therefore go to any set of outputs at once (multicast along a line:
forward *and* eject). The routes are computed by software with dimension-order XY routing
(:func:`tilewright.compiler.mesh_codegen.xy_path` — X along the row first, then Y along the
column); the hardware just follows them.

Arbitration is static (compile-time), as in statically scheduled fabrics: when several flows of a
phase share a directed link, the output enables all their sources and merges them (OR of the
enabled sources' flits); the program builder (:mod:`tilewright.compiler.mesh_codegen`) delays the
flows' injections so that no two enabled sources carry a flit in the same cycle — the longest-
latency flow first, each later one as early as the links it uses are free. The router has no
buffers and no back-pressure, so a schedule that let two flits meet would corrupt them; the
builder checks every link cycle by cycle before it programs a phase.

Ports (all ``sync``; a flit is ``valid`` + ``data``, ``data`` is ``link_bytes_per_cycle * 8``
bits)
    ``i_<d>_valid/data`` for d in n, e, s, w: flits arriving from the neighbour on side d.
    ``o_<d>_valid/data``: flits leaving towards side d, after ``hop_cycles`` registers.
    ``inj<k>_valid/data`` (k = 0, 1): flits the tile injects this cycle (combinational in).
    ``ej<k>_valid/data``: flits delivered to the tile, ``eject_cycles`` registers after they
    reached this router's input.
    ``o_mask_<d>`` (6 bits): sources enabled on output d — bit ``code - 1`` for select code
    1..4 (input n/e/s/w) and 5/6 (injection 0/1); 0: the output is idle.
    ``ej_sel<k>`` (3 bits): source of ejection lane k — 0 none, 1..4 input n/e/s/w.
    ``clear``: drop every flit in the router's registers (the phase barrier).

Timing contract: a flit injected in cycle t leaves on ``o_<d>`` at cycle t + hop_cycles, so a
flit crossing h links reaches the destination router's input at t + hop_cycles * h and its
ejection lane at t + hop_cycles * h + eject_cycles (``alpha * hops + beta`` of the mesh model).
"""

from __future__ import annotations

from functools import reduce
from operator import or_

from amaranth import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from tilewright.compiler.mesh_isa import EJ_SEL_BITS, N_LANES, N_SOURCES, SEL_INJ, SEL_NONE, SIDES

__all__ = ["MeshRouter", "SIDES", "SEL_NONE", "SEL_INJ", "N_SOURCES"]

# the select codes and source counts are the mesh ISA's (tilewright.compiler.mesh_isa),
# re-exported here for the router's users


class MeshRouter(wiring.Component):
    """5-port static-route mesh router (see module docstring for ports and timing)."""

    def __init__(self, *, flit_bits: int, hop_cycles: int = 1, eject_cycles: int = 1):
        for name, v, lo in (("flit_bits", flit_bits, 1), ("hop_cycles", hop_cycles, 1),
                            ("eject_cycles", eject_cycles, 1)):
            if not isinstance(v, int) or v < lo:
                raise ValueError(f"MeshRouter {name} = {v!r}: must be an integer >= {lo}")
        self._flit_bits, self._hop, self._eject = flit_bits, hop_cycles, eject_cycles
        sig = {"clear": In(1)}
        for d in SIDES:
            sig |= {f"i_{d}_valid": In(1), f"i_{d}_data": In(flit_bits),
                    f"o_{d}_valid": Out(1), f"o_{d}_data": Out(flit_bits),
                    f"o_mask_{d}": In(N_SOURCES)}
        for k in range(N_LANES):
            sig |= {f"inj{k}_valid": In(1), f"inj{k}_data": In(flit_bits),
                    f"ej{k}_valid": Out(1), f"ej{k}_data": Out(flit_bits),
                    f"ej_sel{k}": In(EJ_SEL_BITS)}
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

    def _sources(self) -> list[tuple[Signal, Signal]]:
        """(valid, data) by select code 1..6."""
        srcs = [(getattr(self, f"i_{d}_valid"), getattr(self, f"i_{d}_data")) for d in SIDES]
        srcs += [(getattr(self, f"inj{k}_valid"), getattr(self, f"inj{k}_data"))
                 for k in range(N_LANES)]
        return srcs

    def _pipeline(self, m: Module, name: str, sel: Signal, srcs, stages: int, out_v, out_d,
                  mask: bool = False):
        """``stages`` registers after a select of ``srcs`` (codes 1..len) — or, ``mask``: the OR
        of the sources whose bit ``code - 1`` of ``sel`` is set; cleared by clear."""
        v_in = Signal(name=f"{name}_sel_valid")
        d_in = Signal(self._flit_bits, name=f"{name}_sel_data")
        if mask:
            vs = [sel[code] & sv for code, (sv, _) in enumerate(srcs)]
            m.d.comb += [v_in.eq(Cat(*vs).any()),
                         d_in.eq(_or([Mux(v, sd, 0) for v, (_, sd) in zip(vs, srcs)]))]
        else:
            with m.Switch(sel):
                for code, (sv, sd) in enumerate(srcs, start=1):
                    with m.Case(code):
                        m.d.comb += [v_in.eq(sv), d_in.eq(sd)]
                with m.Default():                 # code 0 (no source), unused codes: no flit
                    m.d.comb += [v_in.eq(0), d_in.eq(0)]
        prev_v, prev_d = v_in, d_in
        for s in range(stages):
            rv = Signal(name=f"{name}_v{s}")
            rd = Signal(unsigned(self._flit_bits), name=f"{name}_d{s}")
            m.d.sync += [rv.eq(prev_v & ~self.clear), rd.eq(prev_d)]
            prev_v, prev_d = rv, rd
        m.d.comb += [out_v.eq(prev_v), out_d.eq(prev_d)]

    def elaborate(self, platform):
        m = Module()
        srcs = self._sources()
        for d in SIDES:
            self._pipeline(m, f"out_{d}", getattr(self, f"o_mask_{d}"), srcs, self._hop,
                           getattr(self, f"o_{d}_valid"), getattr(self, f"o_{d}_data"), mask=True)
        for k in range(N_LANES):
            self._pipeline(m, f"ej{k}", getattr(self, f"ej_sel{k}"), srcs[:4], self._eject,
                           getattr(self, f"ej{k}_valid"), getattr(self, f"ej{k}_data"))
        return m


def _or(values):
    """OR of a list of Amaranth values."""
    return reduce(or_, values)
