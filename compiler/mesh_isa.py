"""The RTL mesh's instruction set: one instruction word per tile and phase, its fields and encoding.

The compiler's mesh code generator (:mod:`~.mesh_codegen`) encodes with :func:`encode_instruction`;
the RTL (:mod:`tilewright.rtl.mesh_tile`, :mod:`tilewright.rtl.mesh_router`,
:mod:`tilewright.rtl.mesh`) derives its decoder from :func:`instr_fields` and the constants here.
What each field makes a tile do (inject, eject, chain, MAC) is documented in
:mod:`tilewright.rtl.mesh_tile`; the router's select codes in :mod:`tilewright.rtl.mesh_router`.

Fields, LSB first (``a`` = bits of an SRAM word address, counts and block sizes ``a + 1``):

* ``route_<e>`` (:data:`ROUTE_BITS` bits) for each route id (colour) ``e < routes``: the
  router outputs a flit of colour ``e`` leaves by, bit ``i`` for output :data:`OUTPUTS` ``[i]``
  (mesh sides n/e/s/w, ejection lanes 0/1); 0: the colour is not routed here;
* per injection lane k < :data:`N_LANES`: ``inj<k>_base`` (a), ``inj<k>_count``,
  ``inj<k>_color`` (:func:`color_bits`): the colour of the flits the lane injects;
* per ejection lane k: ``ej<k>_base`` (a), ``ej<k>_count``, ``ej<k>_add`` (1), ``chain<k>`` (1);
* ``mac_a``, ``mac_b``, ``mac_c`` (a: word addresses), ``mac_mt``, ``mac_nt``, ``mac_kw`` (block
  rows, columns and K words).

:func:`mesh_params` gives the tile parameters (lanes, SRAM words, latencies) the RTL mesh builds
from ``ArchSpec.mesh`` and rejects what it does not implement.
"""

from __future__ import annotations

from tilewright.arch import ArchSpec
from tilewright.formats import bits_of

__all__ = ["SIDES", "STEP", "OPPOSITE", "OUTPUTS", "INPUTS", "ROUTE_BITS", "N_LANES",
           "LANE_BITS", "WORD_BITS", "MAX_RTL_TILES", "MAX_RTL_ROUTES", "DEFAULT_ROUTES", "addr_bits",
           "buffer_depth", "color_bits", "instr_fields", "encode_instruction", "mesh_params"]

#: mesh sides in port order; input select code of side d is ``SIDES.index(d) + 1``
SIDES = ("n", "e", "s", "w")
#: (row, col) step of a hop leaving by each side
STEP = {"n": (-1, 0), "s": (1, 0), "e": (0, 1), "w": (0, -1)}
#: the side a hop arrives by, per side it left by
OPPOSITE = {"n": "s", "s": "n", "e": "w", "w": "e"}
#: injection lanes and ejection lanes per tile
N_LANES = 2
#: router outputs in arbitration order: the four mesh sides, then the tile's ejection lanes;
#: bit i of a ``route_<e>`` entry is output ``OUTPUTS[i]``
OUTPUTS = (*SIDES, *(f"ej{k}" for k in range(N_LANES)))
#: router inputs in round-robin order: the four mesh sides, then the tile's injection lanes
INPUTS = (*SIDES, *(f"inj{k}" for k in range(N_LANES)))
#: bits of one route-table entry
ROUTE_BITS = len(OUTPUTS)
#: route-table entries when no ArchSpec says (``mesh.max_routes_per_core`` of the mesh4x4 preset)
DEFAULT_ROUTES = 8
#: bits of one flit lane (an int8 operand) and of one accumulator word (int32), from the
#: formats registry
LANE_BITS = bits_of("int8")
WORD_BITS = bits_of("int32")
#: the RTL mesh is for small meshes (its Verilog and Verilator build grow with the tile count)
MAX_RTL_TILES = 64
#: route-table entries the RTL router builds at most (each is a field of the phase instruction)
MAX_RTL_ROUTES = 64


def addr_bits(sram_words: int) -> int:
    """Bits of an SRAM word address of a tile with ``sram_words`` words (at least 1)."""
    return max(1, (sram_words - 1).bit_length())


def buffer_depth(hop_cycles: int) -> int:
    """Flits of each router input FIFO: the credit round trip of a ``hop_cycles`` link
    (``hop_cycles`` to the neighbour, one cycle to pop, one for the credit register), so one
    uncontended stream moves a flit every cycle."""
    return hop_cycles + 2


def color_bits(routes: int) -> int:
    """Bits of a flit's colour (route id) for a router with ``routes`` route-table entries."""
    return max(1, (routes - 1).bit_length())


def instr_fields(addr_bits: int, routes: int = DEFAULT_ROUTES) -> list[tuple[str, int]]:
    """The phase-instruction fields, LSB first, as (name, width in bits). ``addr_bits``: bits
    of an SRAM word address; counts and block sizes get one bit more. ``routes``: route-table
    entries per router (``mesh.max_routes_per_core``)."""
    a, c = addr_bits, addr_bits + 1
    f: list[tuple[str, int]] = [(f"route_{e}", ROUTE_BITS) for e in range(routes)]
    for k in range(N_LANES):
        f += [(f"inj{k}_base", a), (f"inj{k}_count", c), (f"inj{k}_color", color_bits(routes))]
    for k in range(N_LANES):
        f += [(f"ej{k}_base", a), (f"ej{k}_count", c), (f"ej{k}_add", 1), (f"chain{k}", 1)]
    f += [("mac_a", a), ("mac_b", a), ("mac_c", a), ("mac_mt", c), ("mac_nt", c), ("mac_kw", c)]
    return f


def encode_instruction(addr_bits: int, routes: int = DEFAULT_ROUTES, **values: int) -> int:
    """Pack field values (missing fields = 0) into one instruction word (an int)."""
    word, off = 0, 0
    fields = instr_fields(addr_bits, routes)
    names = {n for n, _ in fields}
    for name in values:
        if name not in names:
            raise ValueError(f"instruction field {name!r}: not one of {', '.join(sorted(names))}")
    for name, width in fields:
        v = int(values.get(name, 0))
        if not 0 <= v < (1 << width):
            raise ValueError(f"instruction field {name} = {v}: must fit {width} bits")
        word |= v << off
        off += width
    return word


def mesh_params(arch: ArchSpec, imem_depth: int = 32) -> dict:
    """The tile parameters the RTL mesh derives from ``arch.mesh``; raises ValueError naming
    the field when the mesh section asks for something this RTL does not implement."""
    ms = arch.mesh
    if ms is None:
        raise ValueError(f"{arch.name}: the ArchSpec has no mesh section")
    if ms.core_macs_per_cycle != ms.link_bytes_per_cycle:
        raise ValueError(f"{arch.name}: mesh.core_macs_per_cycle = {ms.core_macs_per_cycle} must "
                         f"equal mesh.link_bytes_per_cycle = {ms.link_bytes_per_cycle} in the RTL "
                         "mesh (one flit of int8 A times one of B per cycle)")
    if ms.link_bytes_per_cycle * LANE_BITS < WORD_BITS:
        raise ValueError(f"{arch.name}: mesh.link_bytes_per_cycle = {ms.link_bytes_per_cycle}: "
                         "the RTL mesh needs >= 4 (a flit carries one int32)")
    for name in ("hop_latency_cycles", "routing_stage_cycles"):
        v = getattr(ms, name)
        if v != int(v) or v < 1:
            raise ValueError(f"{arch.name}: mesh.{name} = {v:g}: the RTL mesh implements whole "
                             "numbers >= 1 (registers per hop / per eject)")
    if ms.defective_cores or ms.defective_links:
        raise ValueError(f"{arch.name}: the RTL mesh has no defective cores or links; "
                         "remove mesh.defective_cores / defective_links")
    if ms.max_routes_per_core > MAX_RTL_ROUTES:
        raise ValueError(f"{arch.name}: mesh.max_routes_per_core = {ms.max_routes_per_core}: the "
                         f"RTL router's route table holds 1..{MAX_RTL_ROUTES} route ids")
    words = int(ms.core_sram_kib * 1024) // ms.link_bytes_per_cycle
    if words < 1:
        raise ValueError(f"{arch.name}: mesh.core_sram_kib = {ms.core_sram_kib:g} holds no word")
    return {"rows": ms.rows, "cols": ms.cols, "lanes": ms.link_bytes_per_cycle,
            "sram_words": words, "imem_depth": imem_depth, "routes": ms.max_routes_per_core,
            "hop_cycles": int(ms.hop_latency_cycles),
            "depth": buffer_depth(int(ms.hop_latency_cycles)),
            "eject_cycles": int(ms.routing_stage_cycles)}
