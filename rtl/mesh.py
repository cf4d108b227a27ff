"""Mesh: an R x C grid of :class:`~tilewright.rtl.mesh_tile.MeshTile` from ``ArchSpec.mesh``,
with host load/unload ports, per-tile phase-instruction memories and a global phase barrier.

Parameters come from the ArchSpec's mesh section: rows x cols tiles, ``core_sram_kib`` KiB of
SRAM per tile (words of one flit), flits of ``link_bytes_per_cycle`` bytes, MAC engine of
``core_macs_per_cycle`` int8 MACs per cycle (must equal ``link_bytes_per_cycle``: one word of
A times one word of B per cycle), ``hop_latency_cycles`` link registers per hop (alpha) and
``routing_stage_cycles`` eject registers (beta); both must be whole numbers >= 1.
Defective cores/links are not modelled in the RTL (the generator rejects them).

Ports (all ``sync``; tile index ``t = row * cols + col``)
    ``ld_tile``, ``ld_addr``, ``ld_data``, ``ld_we``: write one SRAM word of tile ``ld_tile``.
    ``im_we``, ``im_addr``, ``im_data``: write phase instruction ``im_addr`` of tile ``ld_tile``.
    ``rd_tile``, ``rd_addr`` -> ``rd_data``: read one SRAM word (combinational).
    ``n_phases``: phases to run, sampled with ``start``.
    ``start``: sampled high while ``busy`` is low (and ``n_phases > 0``) begins phase 0.
    ``busy``: high from the cycle after ``start`` until the last cycle of the last phase.
    ``cycles``: cycles ``busy`` was high in the last run (32-bit counter).
    ``phase``: the current phase index.
    ``ej_seen``: observation port, bit ``t * 2 + k``: tile t's router delivers a flit on
    ejection lane k this cycle (the benches record every flit's arrival cycle from it).

Timing contract: phase p's first cycle is the cycle after phase p-1's last cycle (the barrier
costs nothing); a phase lasts until every tile is ``finishing`` (see :mod:`mesh_tile`). So a
message of W flits over h hops costs ``alpha*h + beta + W`` cycles and a MAC block
``mt*nt*kw`` cycles — the mesh model's rules (:mod:`tilewright.dataflow_sim.mesh.model`).
Messages that share a link are arbitrated by the routers at run time (round-robin per output,
credit flow control, :mod:`~tilewright.rtl.mesh_router`); the mesh model's cycle-by-cycle
:mod:`tilewright.dataflow_sim.mesh.flit_sim` predicts every flit's arrival.
A streaming chain-reduction through ``s`` cores costs ``alpha*h + beta*s + W`` (each core on
the chain adds its word to every passing flit in its eject stage, :mod:`mesh_tile`).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from amaranth import Module, Signal
from amaranth.back import verilog
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from tilewright.arch import ArchSpec
from tilewright.compiler import mesh_isa
from tilewright.compiler.mesh_isa import LANE_BITS, N_LANES, OPPOSITE, STEP, mesh_params
from tilewright.rtl.emit import write_verilog
from tilewright.rtl.mesh_tile import MeshTile

__all__ = ["Mesh", "MESH_GENERATOR_VERSION", "MESH_TOP_NAME", "mesh_params",
           "generate_mesh_verilog", "write_mesh_rtl"]

#: bump when the generated mesh's behaviour or ports change; it ends in a hash of the ISA module
#: (the instruction layout lives in the compiler, outside the build cache's rtl/mesh*.py key)
MESH_GENERATOR_VERSION = "0.3.0-arb-isa" + hashlib.sha256(
    Path(mesh_isa.__file__).read_bytes()).hexdigest()[:8]


class Mesh(wiring.Component):
    """The R x C RTL mesh for ``arch`` (see module docstring)."""

    def __init__(self, arch: ArchSpec, *, imem_depth: int = 32):
        p = mesh_params(arch, imem_depth)
        self._p = p
        self._rows, self._cols = p["rows"], p["cols"]
        self._tiles = [[MeshTile(lanes=p["lanes"], sram_words=p["sram_words"],
                                 imem_depth=imem_depth, hop_cycles=p["hop_cycles"],
                                 eject_cycles=p["eject_cycles"], routes=p["routes"],
                                 depth=p["depth"])
                        for _ in range(self._cols)]
                       for _ in range(self._rows)]
        t0 = self._tiles[0][0]
        tbits = max(1, (self._rows * self._cols - 1).bit_length())
        fb = p["lanes"] * LANE_BITS
        super().__init__({
            "ld_tile": In(tbits), "ld_addr": In(t0.addr_bits), "ld_data": In(fb), "ld_we": In(1),
            "im_we": In(1), "im_addr": In(t0.phase_bits), "im_data": In(t0.instr_bits),
            "rd_tile": In(tbits), "rd_addr": In(t0.addr_bits), "rd_data": Out(fb),
            "n_phases": In(t0.phase_bits + 1), "start": In(1), "busy": Out(1),
            "cycles": Out(32), "phase": Out(t0.phase_bits + 1),
            "ej_seen": Out(self._rows * self._cols * N_LANES)})

    @property
    def params(self) -> dict:
        return dict(self._p)

    def elaborate(self, platform):
        m = Module()
        R, C = self._rows, self._cols
        fin = []
        busy = Signal()
        advance = Signal()
        begin = Signal()
        n_ph = Signal.like(self.n_phases)
        m.d.comb += [self.busy.eq(busy), begin.eq(self.start & ~busy & (self.n_phases != 0))]
        for r in range(R):
            for c in range(C):
                t = self._tiles[r][c]
                idx = r * C + c
                m.submodules[f"tile_{r}_{c}"] = t
                m.d.comb += [t.active.eq(busy), t.clear.eq(advance | begin),
                             t.phase.eq(self.phase),
                             t.ld_we.eq(self.ld_we & (self.ld_tile == idx)),
                             t.ld_addr.eq(self.ld_addr), t.ld_data.eq(self.ld_data),
                             t.im_we.eq(self.im_we & (self.ld_tile == idx)),
                             t.im_addr.eq(self.im_addr), t.im_data.eq(self.im_data),
                             t.rd_addr.eq(self.rd_addr)]
                with m.If(self.rd_tile == idx):
                    m.d.comb += self.rd_data.eq(t.rd_data)
                fin.append(t.finishing)
                m.d.comb += [self.ej_seen[idx * N_LANES + k].eq(getattr(t, f"ej{k}_seen"))
                             for k in range(N_LANES)]
                for d, (dr, dc) in STEP.items():
                    rr, cc = r + dr, c + dc
                    if 0 <= rr < R and 0 <= cc < C:
                        nb = self._tiles[rr][cc]
                        o = OPPOSITE[d]     # what nb sends towards us leaves on its side o
                        m.d.comb += [getattr(t, f"i_{d}_{w}").eq(getattr(nb, f"o_{o}_{w}"))
                                     for w in ("valid", "data", "color")]
                        # credits for our input d go back to nb's output o
                        m.d.comb += getattr(nb, f"o_{o}_credit").eq(getattr(t, f"i_{d}_credit"))
        allfin = fin[0]
        for f in fin[1:]:
            allfin = allfin & f
        m.d.comb += advance.eq(busy & allfin)
        with m.If(begin):
            m.d.sync += [busy.eq(1), self.phase.eq(0), self.cycles.eq(0), n_ph.eq(self.n_phases)]
        with m.Elif(busy):
            m.d.sync += self.cycles.eq(self.cycles + 1)
            with m.If(advance):
                m.d.sync += self.phase.eq(self.phase + 1)
                with m.If(self.phase + 1 == n_ph):
                    m.d.sync += busy.eq(0)
        return m


#: name of the generated top-level Verilog module of the mesh
MESH_TOP_NAME = "tw_mesh"


def generate_mesh_verilog(arch: ArchSpec, *, imem_depth: int = 32) -> tuple[str, Mesh]:
    """Elaborate the mesh for ``arch`` and return (Verilog text, component)."""
    top = Mesh(arch, imem_depth=imem_depth)
    return _compact_zero_init(verilog.convert(top, name=MESH_TOP_NAME, emit_src=False)), top


_INIT_BLOCK = re.compile(r"  reg \[(\d+):0\] (\w+) \[(\d+):0\];\n  initial begin\n"
                         r"((?:    \2\[\d+\] = \d+'[dh]0+;\n)+)  end\n")


def _compact_zero_init(text: str) -> str:
    """Rewrite Amaranth's all-zero memory initialisers (one statement per word: 4096 lines per
    tile SRAM, most of the Verilog and of Verilator's compile time) as one ``for`` loop each.
    Same initial state; memories with any non-zero initial word are left untouched."""
    def repl(mt: re.Match) -> str:
        width, name, last, body = mt.group(1), mt.group(2), int(mt.group(3)), mt.group(4)
        if body.count("\n") != last + 1:
            return mt.group(0)
        i = f"{name}__init_index"
        return (f"  reg [{width}:0] {name} [{last}:0];\n"
                f"  initial begin : {name}__zero_init\n    integer {i};\n"
                f"    for ({i} = 0; {i} <= {last}; {i} = {i} + 1) {name}[{i}] = 0;\n  end\n")
    return _INIT_BLOCK.sub(repl, text)


def write_mesh_rtl(arch: ArchSpec, out_dir, *, imem_depth: int = 32) -> dict:
    """Write ``tw_mesh.v`` and ``manifest.json`` to ``out_dir`` (atomically); return the
    manifest (top, generator version, arch hash, tile parameters, file hash)."""
    text, top = generate_mesh_verilog(arch, imem_depth=imem_depth)
    return write_verilog(out_dir, MESH_TOP_NAME, text, {
        "top": MESH_TOP_NAME, "generator": "tilewright.rtl.mesh.Mesh",
        "generator_version": MESH_GENERATOR_VERSION, "arch_hash": arch.content_hash(),
        "params": top.params})
