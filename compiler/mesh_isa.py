"""The RTL mesh's instruction set: one instruction word per tile and phase, its fields and encoding.

The compiler's mesh code generator (:mod:`~.mesh_codegen`) encodes with :func:`encode_instruction`;
the RTL (:mod:`tilewright.rtl.mesh_tile`, :mod:`tilewright.rtl.mesh_router`,
:mod:`tilewright.rtl.mesh`) derives its decoder from :func:`instr_fields` and the constants here.
What each field makes a tile do (inject, eject, chain, MAC) is documented in
:mod:`tilewright.rtl.mesh_tile`; the router's select codes in :mod:`tilewright.rtl.mesh_router`.

Fields, LSB first (``a`` = bits of an SRAM word address, counts and block sizes ``a + 1``):

* ``o_mask_<d>`` (:data:`N_SOURCES` bits) for d in :data:`SIDES`: sources enabled on output d,
  bit ``code - 1`` for select code ``code`` (1..4 input n/e/s/w, :data:`SEL_INJ` + k injection
  lane k);
* per injection lane k < :data:`N_LANES`: ``inj<k>_base`` (a), ``inj<k>_count``,
  ``inj<k>_delay`` (cycles);
* per ejection lane k: ``ej<k>_sel`` (:data:`EJ_SEL_BITS`: 0 none, 1..4 input n/e/s/w),
  ``ej<k>_base`` (a), ``ej<k>_count``, ``ej<k>_add`` (1), ``chain<k>`` (1);
* ``mac_a``, ``mac_b``, ``mac_c`` (a: word addresses), ``mac_mt``, ``mac_nt``, ``mac_kw`` (block
  rows, columns and K words).

:func:`mesh_params` gives the tile parameters (lanes, SRAM words, latencies) the RTL mesh builds
from ``ArchSpec.mesh`` and rejects what it does not implement.
"""

from __future__ import annotations

from tilewright.arch import ArchSpec
from tilewright.formats import bits_of

__all__ = ["SIDES", "STEP", "OPPOSITE", "SEL_NONE", "SEL_INJ", "N_SOURCES", "N_LANES",
           "EJ_SEL_BITS", "LANE_BITS", "WORD_BITS", "MAX_RTL_TILES", "addr_bits", "instr_fields",
           "encode_instruction", "mesh_params"]

#: mesh sides in port order; input select code of side d is ``SIDES.index(d) + 1``
SIDES = ("n", "e", "s", "w")
#: (row, col) step of a hop leaving by each side
STEP = {"n": (-1, 0), "s": (1, 0), "e": (0, 1), "w": (0, -1)}
#: the side a hop arrives by, per side it left by
OPPOSITE = {"n": "s", "s": "n", "e": "w", "w": "e"}
#: select codes: no source, and injection lane k is ``SEL_INJ + k``
SEL_NONE = 0
SEL_INJ = 5
#: sources an output can enable (4 mesh inputs + 2 injection lanes): bits of ``o_mask_<d>``
N_SOURCES = 6
#: injection lanes and ejection lanes per tile
N_LANES = 2
#: bits of an ejection lane's input select (``ej<k>_sel``)
EJ_SEL_BITS = 3
#: bits of one flit lane (an int8 operand) and of one accumulator word (int32), from the
#: formats registry
LANE_BITS = bits_of("int8")
WORD_BITS = bits_of("int32")
#: the RTL mesh is for small meshes (its Verilog and Verilator build grow with the tile count)
MAX_RTL_TILES = 64


def addr_bits(sram_words: int) -> int:
    """Bits of an SRAM word address of a tile with ``sram_words`` words (at least 1)."""
    return max(1, (sram_words - 1).bit_length())


def instr_fields(addr_bits: int) -> list[tuple[str, int]]:
    """The phase-instruction fields, LSB first, as (name, width in bits). ``addr_bits``: bits
    of an SRAM word address; counts and block sizes get one bit more."""
    a, c = addr_bits, addr_bits + 1
    f: list[tuple[str, int]] = [(f"o_mask_{d}", N_SOURCES) for d in SIDES]
    for k in range(N_LANES):
        f += [(f"inj{k}_base", a), (f"inj{k}_count", c), (f"inj{k}_delay", c)]
    for k in range(N_LANES):
        f += [(f"ej{k}_sel", EJ_SEL_BITS), (f"ej{k}_base", a), (f"ej{k}_count", c),
              (f"ej{k}_add", 1), (f"chain{k}", 1)]
    f += [("mac_a", a), ("mac_b", a), ("mac_c", a), ("mac_mt", c), ("mac_nt", c), ("mac_kw", c)]
    return f


def encode_instruction(addr_bits: int, **values: int) -> int:
    """Pack field values (missing fields = 0) into one instruction word (an int)."""
    word, off = 0, 0
    fields = instr_fields(addr_bits)
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
    words = int(ms.core_sram_kib * 1024) // ms.link_bytes_per_cycle
    if words < 1:
        raise ValueError(f"{arch.name}: mesh.core_sram_kib = {ms.core_sram_kib:g} holds no word")
    return {"rows": ms.rows, "cols": ms.cols, "lanes": ms.link_bytes_per_cycle,
            "sram_words": words, "imem_depth": imem_depth,
            "hop_cycles": int(ms.hop_latency_cycles),
            "eject_cycles": int(ms.routing_stage_cycles)}
