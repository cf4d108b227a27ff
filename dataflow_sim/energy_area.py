"""Energy and area of a design point from per-component technology tables, scaled by ArchSpec.

Technology tables live in ``configs/tech/<name>.yaml`` (presets ``16nm``, ``28nm``, ``45nm``,
``7nm``); their ``sources`` block lists the publications, and every number's comment says
whether it was *confirmed* against a retrieved copy of its source, is *derived* (with the
rule), is an *assumption*, or is *unconfirmed*. A MAC entry may be derived at load time instead of
written out: ``mac_pj.<fmt>: {between: [a, b]}`` is :func:`between_nodes` of tables ``a`` and
``b`` at this table's node (the 16 and 28 nm int8 MAC, between the published 45 and 7 nm
figures). Units: pJ for energy, µm² for area (results also in mm² and J).

**Area** (µm²) of one core::

    pe_array = count * rows * cols * depth * (mult_um2 + add_um2)[format] * pe_overhead
               (= tensor_engine.macs_per_cycle multipliers over all ``tensor_engine.count``
               engines, each with one adder: a systolic PE's adder, or one node of a tile-MAC
               engine's adder tree plus its accumulator; the engines share the SRAM below)
               + count * cols * column[format]
               (the scale unit and accumulator adder at each array column's end that the
               format's RTL builds beyond the int8 core, whose int32 accumulator adders are
               inside the calibrated ``pe_overhead``: e.g. MX's power-of-two block scale and fp32
               adder, fp8's per-tensor output-scale multiplier; 0 for a format without an entry)
    sram     = (scratchpad_kib + accumulator_kib) * 8192 * sram_bitcell / sram_array_efficiency
               + extra_banks * bank_periphery
    vector   = lanes * vector_lane                (lanes = vector_unit.lanes, else cols)
    fixed    = fixed                              (controller, DMA, IO)

Local storage in each PE (``tensor_engine.pe_storage``, :func:`pe_storage_cells_um2`; P = the
PEs, ``macs_per_cycle``) adds ``P * register_bytes * 8 * reg_um2_per_bit`` to ``pe_array`` (logic
cells: the compute layout factor and the logic leakage density) and ``P * sram_bytes * 8 *
sram_bitcell / sram_array_efficiency`` to ``sram`` (the SRAM layout factor and leakage per bit).
A register bit is Aladdin's 40 nm register (``REG_2ns_area`` 5.981 µm² per bit, harvard-acc/
ALADDIN common/power_func.h; its ``Register`` class, common/Registers.h, sizes a register file
as bytes x 8 x that area) scaled like the table's int32 adder: ``reg_um2_per_bit = 5.981433 /
179.443 * area_um2.pe.int8.add`` (Aladdin's ``ADD_2ns_area``; 45 nm 7.570 µm², (45/40)^2 x
5.981 — derived).

These are *cell* areas (``<block>_cells_um2``, total ``area_cells_mm2``): the cells of the
tables' library (Aladdin's 40 nm cells scaled, configs/tech/45nm.yaml; ``pe_overhead`` calibrated
on Yosys cell counts) with no placement density, wiring or what the library leaves out — what a
synthesis cell area or a Yosys netlist is compared with. A die holds more. The laid-out area
(``<block>_um2``, total ``area_mm2``) applies **layout factors fitted on TPU v1 (calibration);
placement density, wiring and what the cell library leaves out** (:func:`layout_fit`, the
tables' ``area_um2.layout: tpu_v1``), node-independent ratios, at every node::

    pe_array, vector = k_compute * cells          sram = k_sram * cells
    fixed, phy       = cells                      (as modelled: not carried from TPU v1)
    uncore           = k_uncore * (pe_array + vector + sram)   (laid out)
    area             = pe_array + sram + vector + fixed + phy + uncore

with TPU v1's published floor plan (:data:`TPU_V1_FLOORPLAN`: die D <= 331 mm2, data buffers
37 %, compute 30 %) over its cell area at 28 nm (configs/validation/tpu_v1.yaml)::

    k_sram    = 0.37 D / sram_cells
    k_compute = 0.30 D / (pe_array_cells + vector_cells)
    k_uncore  = (D - 0.67 D - phy_cells - fixed_cells) / (0.67 D)

``uncore`` is the rest of a die beyond the modelled PHY and ``fixed`` block (TPU v1's I/O pads,
control, the floor plan's unshaded 21 %), taken as the same share of the buffers and compute as
on TPU v1 (an assumption), so TPU v1's area is its published die exactly. A table may give its
own factors instead (``layout: {sram: 1, compute: 1, uncore: 0}`` is the cell area).

SRAM banking (``memory.scratchpad_banks`` B_s, ``memory.accumulator_banks`` B_a): each of the
scratchpad's two buffers (A, B) is B_s banks of ``scratchpad_kib / 2 / B_s`` KiB, the accumulator
B_a banks of ``accumulator_kib / B_a`` KiB. ``extra_banks = 2 * (B_s - 1) + (B_a - 1)``; every
bank beyond the first of an array repeats the periphery (decoders, sense amplifiers, IO) of a
macro of ``sram_bank_periphery_kib`` KiB: ``bank_periphery = sram_bank_periphery_kib * 8192 *
sram_bitcell * (1 / sram_array_efficiency - 1)`` — the array-efficiency split of the table applied
to one small macro (a derivation, not a published figure; bank-select wiring is not modelled).

With a ``mesh`` section the design is the mesh alone (the ArchSpec refuses the single-core
sections a mesh does not read): ``mesh.cores`` small cores, each with ``core_macs_per_cycle`` PEs
of ``tensor_engine``'s format and ``core_sram_kib`` of SRAM (plus its share of ``fixed``/64 for its
router): ``mesh_cores = cores * (core_macs_per_cycle * pe + core_sram_kib * sram_kib + fixed/64)``
(PEs only: a mesh core's column term is not counted);
the single-core terms (``pe_array``, ``sram``, ``vector``, ``fixed``) are 0, and an SRAM access
reads one core's ``core_sram_kib``. Laid out, a mesh core's PEs and SRAM take the layout factors
and the ``uncore`` share as above (:func:`mesh_core_um2`: laid-out area / cores, the hop pitch's
square).

**Energy** (pJ) of a workload from its totals — MACs, vector element operations and off-chip
bytes (a Report's ``macs``, ``vector_ops`` and ``bytes`` columns) and optional mesh traffic
(bytes x hops). All terms are linear in the totals, so a per-op Report and its totals give the
same energy. With R = rows, C = cols, e = operand bytes (format bits / 8):

* MAC: ``macs * ((mult + add)[format] + pe_storage) + psums * column_pj[format]`` with ``psums =
  macs * count * C / macs_per_cycle`` (one psum leaves each column per array beat, e.g. one per
  R MACs of a WS column: its scale and accumulator add; 0 for a format without a ``column_pj``
  entry) and ``pe_storage`` the PE's local-storage accesses per MAC
  (:func:`pe_storage_pj_per_mac`, 0 without ``tensor_engine.pe_storage``): the accesses the
  dataflow makes to its stationary word (ws: one weight read; is: one input read; os: one psum
  read and one write; :class:`~tilewright.arch.PeStorageSpec`), or the counts stated in
  ``pe_storage.accesses_per_mac`` (register and SRAM reads and writes; an SRAM write charged as
  a read), each of ``word_bits`` bits at
  ``word_bits * reg_pj_per_bit`` in the register file or ``word_bits / 64 *`` the table's 64-bit
  SRAM read at ``sram_bytes`` (the log-log curve below, extrapolated along its smallest
  segment: the tables' curves start at 8 KB). ``reg_pj_per_bit`` is Aladdin's 40 nm register
  energy per bit per access (``REG_2ns_dynamic_energy`` 9.011 fJ; ``Register``'s read and write
  energy are bytes x 8 x that) scaled like the table's int32 add: ``9.011432e-3 / 8.575164e-2 *
  mac_pj.int8.add`` (Aladdin's ``ADD_2ns_dynamic_energy``; 45 nm 10.51 fJ — derived);
* scratchpad and accumulator traffic of the tensor engine's tasks: the mapper's per-op
  ``scratchpad_bytes`` and ``accumulator_bytes`` (a Report's columns, summed by
  :func:`~tilewright.dataflow_sim.report.sram_totals`), so SRAM energy follows the engine's
  actual reuse for the tile shapes it runs — a WS array re-reading activations once per column
  fold, an OS array both operands once per output tile, an outer product or cube one A and one
  B tile per beat, an adder tree two operands per MAC — including the operands' DMA writes into
  the scratchpad and the results' way out (:func:`energy_breakdown`'s SRAM arguments). MACs
  given without those bytes (a bare MAC count) are charged the steady-state bytes per MAC of
  the engine's kind, :func:`~tilewright.compiler.engine_timing.sram_bytes_per_mac` (WS and
  IS ``e/C`` and ``8/R``; OS ``e/C + e/R``; outer product and cube ``e/Tn + e/Tm``; adder tree
  ``2e``);
* SRAM fill/drain of the other tasks: every off-chip byte not already in the engine's bytes is
  written to or read from the scratchpad once;
* vector: ``vector_ops * vector_op_pj`` plus 8 scratchpad bytes per element operation (one fp32
  read, one fp32 write);
* off-chip: ``bytes * dram_pj_per_byte``;
* mesh: ``byte_hops * (hop_pj_per_byte_mm * pitch_mm + router_pj_per_byte)`` with the hop pitch
  the side of one mesh core's laid-out area (:func:`mesh_core_um2`).

SRAM energy per byte is the table's 64-bit read energy at the capacity of the *bank* an access
reads, interpolated log-log between the listed capacities (extrapolated along the end segments),
divided by 8: a scratchpad access reads a bank of ``scratchpad_kib / 2 / B_s`` KiB, an accumulator
access one of ``accumulator_kib / B_a`` KiB, so smaller banks are cheaper per access.

**Voltage and frequency** (table section ``vf``). The table's pJ figures hold at the nominal
supply ``v_nom``. The clock a supply V reaches follows the alpha-power law (Sakurai & Newton,
IEEE JSSC 25(2), 1990): ``f(V) = f_nom * ((V - v_t) / (v_nom - v_t))**alpha * v_nom / V`` MHz,
for ``v_min <= V <= v_max``. A design runs at the lowest supply that reaches its ``clock_mhz``
(``operating_voltage``: V = v_min for any clock <= f(v_min)); a clock above f(v_max) is refused
(:class:`TechError`, one line). Dynamic energy (the ``mac``, ``sram``, ``vector`` and ``mesh``
terms) scales by ``(V / v_nom)**2``; off-chip DRAM energy (the DRAM device's own supply) does not.

**Area of the off-chip PHY**: ``phy = bandwidth_gbps * offchip_phy[interface].um2_per_gbps``
(``offchip.interface``, default the table's ``default_offchip``; 0 for a mesh design, whose
operands stay on the wafer).

**Static power** (W) while the chip is powered (``static_power``), at supply V::

    leakage    = ((area_cells - sram_kib * sram_um2_per_kib - phy) * logic_mw_per_mm2 * 1e-3
                  + sram_bits * sram_pw_per_bit * 1e-12) * V / v_nom
    phy        = bandwidth_gbps * offchip_phy[interface].mw_per_gbps * 1e-3
    background = offchip.background_w (0 when unset)

(leakage current held at its nominal value, so leakage power is linear in V: an assumption that
leaves out DIBL; ``sram_kib`` and ``sram_bits`` include the PEs' local SRAM, ``P *
pe_storage.sram_bytes``, their register files are logic cells). ``leakage`` is the cells' own leakage (the tables' densities rest on Aladdin's
40 nm cell library, configs/tech/45nm.yaml), per mm2 of *cell* area (wiring and white space
leak little); what a powered chip burns beyond it — board,
I/O, PLL, clock tree, DRAM background — is the chip's ``offchip.background_w``, not a density.
A workload of ``latency_s`` seconds adds ``static_power * latency_s``
(``energy_breakdown(..., latency_s=...)``, term ``static_pj``).
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tilewright.arch import PRESET_DIR, ArchSpec, load_arch
from tilewright.compiler.engine_timing import sram_bytes_per_mac
from tilewright.compiler.layout import ab_buffer_bytes
from tilewright.errors import UserError
from tilewright.formats import FORMATS, bits_of
from tilewright.validation import (find_user_file, load_user_yaml, validate_mapping,
                                   validation_error_line)

__all__ = ["TechSpec", "TechError", "load_tech", "TECH_DIR", "area_breakdown", "area_mm2",
           "AREA_BLOCKS", "LayoutFactors", "layout_fit", "TPU_V1_FLOORPLAN", "CALIBRATION_CHIP",
           "load_validation_chip", "mesh_core_um2", "energy_breakdown", "between_nodes",
           "sram_pj_per_byte", "sram_bank_kib", "operand_bytes", "operating_voltage", "dynamic_scale", "static_power", "offchip_phy",
           "ALADDIN_40NM_2NS", "register_pj_per_bit", "register_um2_per_bit",
           "pe_storage_cells_um2", "pe_storage_accesses", "pe_storage_pj_per_mac", "PeAccesses"]

TECH_DIR = PRESET_DIR / "tech"
VALIDATION_DIR = PRESET_DIR / "validation"

AREA_BLOCKS = ("pe_array", "sram", "vector", "fixed", "mesh", "phy", "uncore")
"""the blocks of :func:`area_breakdown`: each laid out as ``<block>_um2`` (summing to
``area_mm2``) and as cells ``<block>_cells_um2`` (summing to ``area_cells_mm2``; ``uncore`` has
no cells)"""

CALIBRATION_CHIP = {"name": "tpu_v1", "tech": "28nm"}
"""the chip the layout factors are fitted on (configs/validation/<name>.yaml) and its node; every
other published chip is held out (benchmarks/accelerator_validation.py)"""

TPU_V1_FLOORPLAN = {"die_mm2": 662.0 / 2, "buffers": 0.37, "compute": 0.30, "io": 0.10,
                    "control": 0.02}
"""TPU v1's published die (Jouppi et al., "In-Datacenter Performance Analysis of a Tensor
Processing Unit", ISCA 2017, arXiv:1704.04760, confirmed in a retrieved copy): die area mm2
"<= half the Haswell die size" (Haswell 662 mm2, Table 2), and the die by class, Figure 2
caption: data buffers 37 %, compute 30 %, I/O 10 %, control 2 % (the remaining 21 % not shaded).
Shares are fractions of the die. :func:`layout_fit` reads them."""


class TechError(UserError, ValueError):
    """A malformed or unknown technology table; ``str(err)`` is one line."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _MacPair(_Frozen):
    mult: float = Field(..., ge=0, description="multiplier: pJ (energy) or µm² (area)")
    add: float = Field(..., ge=0, description="accumulator adder: pJ (energy) or µm² (area)")

    @property
    def total(self) -> float:
        return self.mult + self.add


class _ColumnPair(_Frozen):
    scale: float = Field(..., ge=0, description="scale unit at a column's end: pJ per psum "
                                                "(energy) or µm² (area)")
    add: float = Field(..., ge=0, description="accumulator adder at a column's end: pJ per psum "
                                              "(energy) or µm² (area)")

    @property
    def total(self) -> float:
        return self.scale + self.add


class _SramPoint(_Frozen):
    kib: float = Field(..., gt=0, description="array capacity in KiB")
    pj: float = Field(..., gt=0, description="energy of one 64-bit read in pJ")


class LayoutFactors(NamedTuple):
    """Laid-out area / cell area of a design's blocks (module doc): dimensionless."""

    sram: float
    compute: float
    uncore: float


class _Layout(_Frozen):
    sram: float = Field(..., ge=1, description="laid-out / cell area of the SRAM macros")
    compute: float = Field(..., ge=1, description="laid-out / cell area of the PEs and vector "
                                                  "lanes")
    uncore: float = Field(..., ge=0, description="rest of the die / laid-out PEs + vector + SRAM")


class _Area(_Frozen):
    pe: dict[str, _MacPair] = Field(..., description="µm² per PE's multiplier and adder, by format")
    column: dict[str, _ColumnPair] = Field(
        default_factory=dict, description="µm² of the scale unit and accumulator adder at each "
                                          "array column's end, by format (module doc; a format "
                                          "without an entry has none beyond the PEs)")
    pe_overhead: float = Field(..., ge=1, description="factor for registers/muxes/control per PE")
    vector_lane: float = Field(..., ge=0, description="µm² per vector lane")
    sram_bitcell: float = Field(..., gt=0, description="µm² per SRAM bit cell")
    sram_array_efficiency: float = Field(..., gt=0, le=1, description="bit cells / macro area")
    sram_bank_periphery_kib: float = Field(
        ..., ge=0, description="each SRAM bank beyond the first adds the periphery of a macro of "
                               "this many KiB (module doc)")
    fixed: float = Field(..., ge=0, description="µm² per core independent of the parameters")
    layout: Literal["tpu_v1"] | _Layout = Field(
        "tpu_v1", description="layout factors on the cell areas above: 'tpu_v1' = fitted on TPU "
                              "v1 (calibration; layout_fit), or explicit {sram, compute, uncore}")


class _VF(_Frozen):
    """Alpha-power-law voltage-frequency curve (module doc)."""

    v_nom: float = Field(..., gt=0, description="V: nominal supply, where the pJ figures hold")
    f_nom_mhz: float = Field(..., gt=0, description="MHz reached at v_nom")
    v_t: float = Field(..., ge=0, description="V: threshold voltage of the law")
    alpha: float = Field(..., ge=1, le=2, description="velocity-saturation exponent")
    v_min: float = Field(..., gt=0, description="V: lowest supply the design may run at")
    v_max: float = Field(..., gt=0, description="V: highest supply the design may run at")

    @model_validator(mode="after")
    def _ordered(self) -> "_VF":
        order = "v_t < v_min <= v_nom <= v_max"       # the message names the first field out
        for name, ok, low in (("v_min", self.v_t < self.v_min, "v_t"),
                              ("v_nom", self.v_min <= self.v_nom, "v_min"),
                              ("v_max", self.v_nom <= self.v_max, "v_nom")):
            if not ok:
                raise ValueError(f"{name} = {getattr(self, name)} V is out of order with {low} = "
                                 f"{getattr(self, low)} V: the curve needs {order}")
        return self

    def f_mhz(self, v: float) -> float:
        """MHz reached at supply ``v`` (V)."""
        return (self.f_nom_mhz * ((v - self.v_t) / (self.v_nom - self.v_t)) ** self.alpha
                * self.v_nom / v)


class _Leakage(_Frozen):
    """The cells' own leakage (not a chip's idle power: board, I/O and PLL are the ArchSpec's
    ``offchip.background_w``)."""

    logic_mw_per_mm2: float = Field(..., ge=0, description="mW of cell leakage per mm² of logic "
                                                           "at v_nom")
    sram_pw_per_bit: float = Field(..., ge=0, description="pW of cell leakage per SRAM bit at "
                                                          "v_nom")


class _Phy(_Frozen):
    um2_per_gbps: float = Field(..., ge=0, description="µm² of PHY per GB/s of bandwidth")
    mw_per_gbps: float = Field(..., ge=0, description="mW of PHY power per GB/s of bandwidth")


class TechSpec(_Frozen):
    """One technology node's energy (pJ), area (µm²), voltage-frequency, leakage and off-chip
    PHY table."""

    name: str
    node_nm: float = Field(..., gt=0)
    sources: dict[str, str] = Field(
        default_factory=dict, description="citation key -> publication and where it was checked")
    mac_pj: dict[str, _MacPair] = Field(..., description="pJ per MAC by operand format")
    column_pj: dict[str, _ColumnPair] = Field(
        default_factory=dict, description="pJ per psum leaving an array column (its scale and "
                                          "accumulator add), by format (module doc)")
    vector_op_pj: float = Field(..., ge=0, description="pJ per vector element operation")
    sram_pj_per_64b: list[_SramPoint] = Field(..., min_length=1,
                                              description="pJ per 64-bit read by capacity")
    dram_pj_per_byte: float = Field(..., ge=0)
    hop_pj_per_byte_mm: float = Field(..., ge=0)
    router_pj_per_byte: float = Field(..., ge=0)
    area_um2: _Area
    vf: _VF
    leakage: _Leakage
    offchip_phy: dict[str, _Phy] = Field(..., min_length=1,
                                         description="PHY per memory interface (module doc)")
    default_offchip: str = Field(..., description="interface of an ArchSpec that names none")

    @model_validator(mode="after")
    def _default_offchip_listed(self) -> "TechSpec":
        if self.default_offchip not in self.offchip_phy:
            raise ValueError(f"default_offchip = {self.default_offchip!r} is not a key of "
                             f"offchip_phy {sorted(self.offchip_phy)}")
        return self

    @property
    def sram_um2_per_kib(self) -> float:
        a = self.area_um2
        return 8192 * a.sram_bitcell / a.sram_array_efficiency

    @property
    def sram_bank_periphery_um2(self) -> float:
        """µm² each SRAM bank beyond the first of an array adds (module doc)."""
        a = self.area_um2
        return a.sram_bank_periphery_kib * 8192 * a.sram_bitcell * (1 / a.sram_array_efficiency - 1)

    def layout_factors(self) -> LayoutFactors:
        """The factors this table's cell areas take (``area_um2.layout``; module doc)."""
        lay = self.area_um2.layout
        if lay == "tpu_v1":
            return layout_fit()
        return LayoutFactors(lay.sram, lay.compute, lay.uncore)

    def pe_um2(self, fmt: str) -> float:
        """µm² of one PE's cells (format's multiplier + adder, x ``pe_overhead``)."""
        return self._lookup(self.area_um2.pe, fmt, "area_um2.pe").total * self.area_um2.pe_overhead

    def mac_pj_of(self, fmt: str) -> float:
        return self._lookup(self.mac_pj, fmt, "mac_pj").total

    def column_um2(self, fmt: str) -> float:
        """µm² at one array column's end in ``fmt`` (0 without an ``area_um2.column`` entry)."""
        c = self.area_um2.column.get(fmt)
        return c.total if c is not None else 0.0

    def column_pj_of(self, fmt: str) -> float:
        """pJ per psum leaving one array column in ``fmt`` (0 without a ``column_pj`` entry)."""
        c = self.column_pj.get(fmt)
        return c.total if c is not None else 0.0

    def _lookup(self, table: dict[str, _MacPair], fmt: str, where: str) -> _MacPair:
        if fmt not in table:
            raise TechError(f"tech {self.name}: {where} has no entry for format {fmt!r} "
                            f"(has {sorted(table)})")
        return table[fmt]


def between_nodes(node_nm: float, lo_nm: float, lo: float, hi_nm: float, hi: float) -> float:
    """A figure at ``node_nm`` interpolated log-log in feature size between published figures
    ``lo`` at ``lo_nm`` and ``hi`` at ``hi_nm`` (any unit, e.g. pJ; nodes in nm)::

        x = ln(lo_nm / node_nm) / ln(lo_nm / hi_nm),   e = lo * (hi / lo) ** x

    — a straight line through both points in (ln node, ln figure): x = 0 at ``lo_nm``, 1 at
    ``hi_nm``. The one place of the rule behind a table's ``{between: [a, b]}`` entries
    (:func:`load_tech`)."""
    x = math.log(lo_nm / node_nm) / math.log(lo_nm / hi_nm)
    return lo * (hi / lo) ** x


_RESOLVING: set[str] = set()
"""tables whose ``between`` entries are being resolved (a reference cycle is refused)"""


def _resolve_between(data: dict, path: Path) -> dict:
    """``data`` (the table at ``path``) with each ``mac_pj.<fmt>: {between: [a, b]}`` replaced by
    the pair of :func:`between_nodes` of tables ``a`` and ``b``'s ``mac_pj.<fmt>`` (mult and add
    apart) at this table's ``node_nm``. ``a`` and ``b``: preset names or YAML paths (relative to
    the table's folder if a file is there); the node must lie strictly between theirs."""
    macs = data.get("mac_pj")
    if not isinstance(macs, dict) or not any(
            isinstance(v, dict) and "between" in v for v in macs.values()):
        return data
    node = data.get("node_nm")
    out = dict(macs)
    for fmt, v in macs.items():
        if not (isinstance(v, dict) and "between" in v):
            continue
        at = f"{path}: mac_pj.{fmt}.between"
        ends = v["between"]
        if (set(v) != {"between"} or not isinstance(ends, list) or len(ends) != 2
                or not all(isinstance(e, str) for e in ends)):
            raise TechError(f"{at} must be the only key, a list of two tech tables "
                            f"(e.g. [45nm, 7nm]); got {v!r}")
        if isinstance(node, bool) or not isinstance(node, (int, float)) or node <= 0:
            raise TechError(f"{at} needs a positive node_nm in the table; got {node!r}")
        lo, hi = (load_tech(path.parent / e if (path.parent / e).is_file() else e)
                  for e in ends)
        if not min(lo.node_nm, hi.node_nm) < node < max(lo.node_nm, hi.node_nm):
            raise TechError(f"{at}: node_nm {node:g} is not strictly between {ends[0]} "
                            f"({lo.node_nm:g} nm) and {ends[1]} ({hi.node_nm:g} nm)")
        a, b = (t._lookup(t.mac_pj, fmt, "mac_pj") for t in (lo, hi))
        out[fmt] = {k: between_nodes(node, lo.node_nm, getattr(a, k), hi.node_nm, getattr(b, k))
                    for k in ("mult", "add")}
    return {**data, "mac_pj": out}


def load_tech(name_or_path: str | Path) -> TechSpec:
    """A technology table by preset name (``16nm``, ``28nm``, ``45nm``, ``7nm``) or YAML path.
    An entry ``mac_pj.<fmt>: {between: [a, b]}`` is derived from tables ``a`` and ``b`` by
    :func:`between_nodes` at load time (the 16 and 28 nm tables' int8 MAC)."""
    return _load_tech(str(name_or_path))


@lru_cache(maxsize=16)
def _load_tech(key: str) -> TechSpec:
    p = find_user_file(key, TECH_DIR, TechError, what="tech preset")
    data = load_user_yaml(p, TechError, what="tech YAML")
    if not isinstance(data, dict):
        validate_mapping(TechSpec, data, str(p), TechError, what="tech field")
    here = str(Path(p).resolve())
    if here in _RESOLVING:
        raise TechError(f"{p}: mac_pj between-references form a cycle through this table")
    _RESOLVING.add(here)
    try:
        data = _resolve_between(data, Path(p))
    finally:
        _RESOLVING.discard(here)
    try:
        return TechSpec.model_validate(data)
    except ValidationError as exc:
        raise TechError(validation_error_line(exc, str(p), root=TechSpec,
                                              what="a tech field")) from None


def operand_bytes(arch: ArchSpec) -> float:
    """Bytes per A/B operand element of the tensor engine's input format."""
    return FORMATS[arch.tensor_engine.input_format].bits / 8


def sram_pj_per_byte(tech: TechSpec, kib: float) -> float:
    """pJ per byte read from an SRAM array of ``kib`` KiB (log-log interpolation of the table)."""
    pts = sorted(tech.sram_pj_per_64b, key=lambda p: p.kib)
    if len(pts) == 1:
        return pts[0].pj / 8
    x = np.log([p.kib for p in pts])
    y = np.log([p.pj for p in pts])
    lx = math.log(max(kib, 1e-3))
    i = int(np.clip(np.searchsorted(x, lx) - 1, 0, len(x) - 2))
    slope = (y[i + 1] - y[i]) / (x[i + 1] - x[i])
    return float(math.exp(y[i] + slope * (lx - x[i])) / 8)


def sram_bank_kib(arch: ArchSpec) -> tuple[float, float]:
    """KiB of one scratchpad bank and one accumulator bank: the array one access reads (on a
    mesh design, one core's SRAM for both)."""
    if arch.mesh is not None:
        return (arch.mesh.core_sram_kib, arch.mesh.core_sram_kib)
    mem = arch.memory
    return (ab_buffer_bytes(arch) / 1024 / mem.scratchpad_banks,
            mem.accumulator_kib / mem.accumulator_banks)


ALADDIN_40NM_2NS = {"reg_pj_per_bit": 9.011432e-3, "reg_um2_per_bit": 5.981433,
                    "add32_pj": 8.575164e-2, "add32_um2": 179.443}
"""Aladdin's commercial 40 nm library at a 2 ns clock (Shao et al., ISCA 2014; harvard-acc/ALADDIN
common/power_func.h, confirmed: ``REG_2ns_dynamic_energy`` 9.011432e-03, ``REG_2ns_area``
5.981433 per bit; ``ADD_2ns_dynamic_energy`` 8.575164e-02, ``ADD_2ns_area`` 1.794430e+02 for
the 32-bit integer adder; energies pJ (mW x ns), areas µm²). common/Registers.h charges a
register's read and its write each ``bytes * 8 *`` the per-bit energy and sizes it ``bytes * 8 *``
the per-bit area. Independent of every validation chip."""


def register_pj_per_bit(tech: TechSpec) -> float:
    """pJ per register bit per access (read or write) at ``tech``'s nominal supply: Aladdin's
    register : 32-bit adder energy ratio (9.011 / 85.75 fJ = 0.1051) times the table's int32
    accumulator add (``mac_pj.int8.add``: 65 nm 0.1578, 45 nm 0.1, 28 nm 0.07357, 16 nm
    0.05122, 7 nm 0.03 pJ) — scaled like the adder the table carries (derived)."""
    a = ALADDIN_40NM_2NS
    return a["reg_pj_per_bit"] / a["add32_pj"] * tech._lookup(tech.mac_pj, "int8", "mac_pj").add


def register_um2_per_bit(tech: TechSpec) -> float:
    """µm² of cells per register bit: Aladdin's register : 32-bit adder area ratio (5.981 /
    179.4 = 0.03333) times the table's int32 adder area (``area_um2.pe.int8.add``; 45 nm 227.1
    -> 7.570 µm², Aladdin's 5.981 x (45/40)^2) — derived."""
    a = ALADDIN_40NM_2NS
    return (a["reg_um2_per_bit"] / a["add32_um2"]
            * tech._lookup(tech.area_um2.pe, "int8", "area_um2.pe").add)


def pe_storage_cells_um2(arch: ArchSpec, tech: TechSpec) -> tuple[float, float]:
    """µm² of cells of every PE's local storage (``tensor_engine.pe_storage``), (registers,
    SRAM): PEs x bytes x 8 x the register bit's area, and x the SRAM bit's macro area
    (``sram_bitcell / sram_array_efficiency``); (0, 0) without the section (module doc)."""
    te = arch.tensor_engine
    st = te.pe_storage
    if st is None:
        return 0.0, 0.0
    bits = te.macs_per_cycle * 8
    return (bits * st.register_bytes * register_um2_per_bit(tech),
            bits * st.sram_bytes * tech.sram_um2_per_kib / 8192)


class PeAccesses(NamedTuple):
    """Local-storage accesses of one PE per MAC (counts) and the bits each moves."""

    register_reads: float
    register_writes: float
    sram_reads: float
    sram_writes: float
    bits: int


def pe_storage_accesses(arch: ArchSpec) -> PeAccesses:
    """Accesses per MAC of the PEs' local storage (:class:`~tilewright.arch.PeStorageSpec`):
    ``pe_storage.accesses_per_mac`` when stated (each of ``word_bits``), else the array's
    dataflow rule — ws one read of the weight word, is one read of the input word, os a read
    and a write of the partial-sum word, in the SRAM when ``sram_bytes`` > 0, else in the
    register file; ``word_bits`` when stated, else that word's format bits. All 0 without the
    section."""
    te = arch.tensor_engine
    st = te.pe_storage
    if st is None:
        return PeAccesses(0.0, 0.0, 0.0, 0.0, 0)
    if st.accesses_per_mac is not None:
        a = st.accesses_per_mac
        return PeAccesses(a.register_reads, a.register_writes, a.sram_reads, a.sram_writes,
                          st.word_bits)
    (reads, writes), fmt = {"ws": ((1.0, 0.0), te.weight_format),
                            "is": ((1.0, 0.0), te.input_format),
                            "os": ((1.0, 1.0), te.accumulator_format)}[te.dataflow]
    bits = st.word_bits if st.word_bits is not None else bits_of(fmt)
    if st.sram_bytes:
        return PeAccesses(0.0, 0.0, reads, writes, bits)
    return PeAccesses(reads, writes, 0.0, 0.0, bits)


def pe_storage_pj_per_mac(arch: ArchSpec, tech: TechSpec) -> float:
    """pJ per MAC of the PEs' local-storage accesses at the table's nominal supply (module doc):
    ``(register_reads + register_writes) * bits * reg_pj_per_bit + (sram_reads + sram_writes)
    * bits / 8 * sram_pj_per_byte(sram_bytes / 1024)`` (:func:`pe_storage_accesses`; an SRAM
    write at the read energy); 0 without ``tensor_engine.pe_storage``."""
    a = pe_storage_accesses(arch)
    pj = 0.0
    if a.register_reads + a.register_writes:
        pj += (a.register_reads + a.register_writes) * a.bits * register_pj_per_bit(tech)
    if a.sram_reads + a.sram_writes:
        pj += ((a.sram_reads + a.sram_writes) * a.bits / 8
               * sram_pj_per_byte(tech, arch.tensor_engine.pe_storage.sram_bytes / 1024))
    return pj


def _lanes(arch: ArchSpec) -> int:
    return arch.vector_unit.lanes if arch.vector_unit is not None else arch.tensor_engine.cols


def _cell_blocks(arch: ArchSpec, tech: TechSpec) -> dict[str, float]:
    """µm² of each block's cells (module doc), keyed by the :data:`AREA_BLOCKS` names; ``mesh``
    is split into its cores' PEs, SRAM and router share (``mesh_pe``, ``mesh_sram``,
    ``mesh_fixed``)."""
    te, a, mem = arch.tensor_engine, tech.area_um2, arch.memory
    pe = tech.pe_um2(te.input_format)
    if arch.mesh is not None:       # the mesh alone: no single-core terms (module doc)
        m = arch.mesh
        return {**dict.fromkeys(("pe_array", "sram", "vector", "fixed", "phy"), 0.0),
                "mesh_pe": m.cores * m.core_macs_per_cycle * pe,
                "mesh_sram": m.cores * m.core_sram_kib * tech.sram_um2_per_kib,
                "mesh_fixed": m.cores * a.fixed / 64}
    extra_banks = 2 * (mem.scratchpad_banks - 1) + (mem.accumulator_banks - 1)
    regs, spads = pe_storage_cells_um2(arch, tech)
    return {
        "pe_array": te.macs_per_cycle * pe + te.count * te.cols * tech.column_um2(te.input_format)
        + regs,
        "sram": (mem.scratchpad_kib + mem.accumulator_kib) * tech.sram_um2_per_kib
        + extra_banks * tech.sram_bank_periphery_um2 + spads,
        "vector": _lanes(arch) * a.vector_lane,
        "fixed": a.fixed,
        "phy": arch.offchip.bandwidth_gbps * offchip_phy(arch, tech).um2_per_gbps,
        "mesh_pe": 0.0, "mesh_sram": 0.0, "mesh_fixed": 0.0}


def area_breakdown(arch: ArchSpec, tech: TechSpec) -> dict[str, float]:
    """Area of each block of :data:`AREA_BLOCKS` in µm², laid out (``<block>_um2``, with the
    table's layout factors: fitted on TPU v1 (calibration); placement density, wiring and what
    the cell library leaves out) and as cells (``<block>_cells_um2``: the cell library's area,
    what Yosys and synthesis cell areas compare with), and the totals in mm², ``area_mm2``
    (laid out) and ``area_cells_mm2``; see the module doc for the formulas."""
    c, k = _cell_blocks(arch, tech), tech.layout_factors()
    mesh_cells = c["mesh_pe"] + c["mesh_sram"] + c["mesh_fixed"]
    out = {"pe_array_um2": k.compute * c["pe_array"], "sram_um2": k.sram * c["sram"],
           "vector_um2": k.compute * c["vector"], "fixed_um2": c["fixed"],
           "mesh_um2": k.compute * c["mesh_pe"] + k.sram * c["mesh_sram"] + c["mesh_fixed"],
           "phy_um2": c["phy"]}
    out["uncore_um2"] = k.uncore * (out["pe_array_um2"] + out["sram_um2"] + out["vector_um2"]
                                    + out["mesh_um2"] - c["mesh_fixed"])
    cells = {"pe_array": c["pe_array"], "sram": c["sram"], "vector": c["vector"],
             "fixed": c["fixed"], "mesh": mesh_cells, "phy": c["phy"], "uncore": 0.0}
    out.update({f"{b}_cells_um2": cells[b] for b in AREA_BLOCKS})
    out["area_mm2"] = sum(out[f"{b}_um2"] for b in AREA_BLOCKS) / 1e6
    out["area_cells_mm2"] = sum(cells.values()) / 1e6
    if arch.mesh is None:           # parts of pe_array and sram (not blocks of their own)
        out["pe_registers_cells_um2"], out["pe_sram_cells_um2"] = pe_storage_cells_um2(arch, tech)
    return out


def area_mm2(arch: ArchSpec, tech: TechSpec) -> float:
    """Total laid-out area in mm² (:func:`area_breakdown`'s ``area_mm2``)."""
    return area_breakdown(arch, tech)["area_mm2"]


def mesh_core_um2(arch: ArchSpec, tech: TechSpec) -> float:
    """µm² of one mesh core laid out (its share of ``uncore`` included): the square of the hop
    pitch. Needs a ``mesh`` section."""
    return area_mm2(arch, tech) * 1e6 / arch.mesh.cores


def load_validation_chip(name: str) -> ArchSpec:
    """A published chip's ArchSpec from configs/validation/<name>.yaml, as its YAML states it."""
    return load_arch(VALIDATION_DIR / f"{name}.yaml")


@lru_cache(maxsize=1)
def layout_fit() -> LayoutFactors:
    """Layout factors fitted on TPU v1 (calibration); placement density, wiring and what the
    cell library leaves out: TPU v1's published floor plan (:data:`TPU_V1_FLOORPLAN`) over its
    cell area in the model (:data:`CALIBRATION_CHIP`, module doc)::

        k_sram = 0.37 D / sram_cells,  k_compute = 0.30 D / (pe_array_cells + vector_cells),
        k_uncore = (D - 0.67 D - phy_cells - fixed_cells) / (0.67 D)

    Reads TPU v1's ArchSpec and the 28 nm table only; no other chip sets a factor."""
    fp = TPU_V1_FLOORPLAN
    c = _cell_blocks(load_validation_chip(CALIBRATION_CHIP["name"]),
                     load_tech(CALIBRATION_CHIP["tech"]))
    die = fp["die_mm2"] * 1e6
    core = (fp["buffers"] + fp["compute"]) * die
    return LayoutFactors(sram=fp["buffers"] * die / c["sram"],
                         compute=fp["compute"] * die / (c["pe_array"] + c["vector"]),
                         uncore=(die - core - c["phy"] - c["fixed"]) / core)


def energy_breakdown(arch: ArchSpec, tech: TechSpec, *, macs: float, vector_ops: float = 0.0,
                     dram_bytes: float = 0.0, byte_hops: float = 0.0,
                     latency_s: float | None = None, scratchpad_bytes: float = 0.0,
                     accumulator_bytes: float = 0.0, sram_dram_bytes: float = 0.0,
                     sram_macs: float = 0.0) -> dict[str, float]:
    """Energy components in pJ (``mac``, ``sram``, ``vector``, ``dram``, ``mesh``, and with
    ``latency_s`` (s) the static power over that time, ``static``) and the total in J
    (``energy_j``) of a workload with these totals, at the supply the clock needs (module doc);
    ``voltage_v`` is that supply.

    SRAM traffic of the engine's tasks, from the mapper (a Report's
    :func:`~tilewright.dataflow_sim.report.sram_totals`): ``sram_macs`` of the ``macs`` and
    ``sram_dram_bytes`` of the ``dram_bytes`` belong to tasks whose scratchpad and accumulator
    bytes are ``scratchpad_bytes`` and ``accumulator_bytes`` (operand reads with the engine's
    reuse, partial sums, DMA in and out); those are charged per byte at the bank's energy. The
    other MACs (a bare MAC count: peak power, the cluster's op table) are charged at the
    steady-state rate :func:`~tilewright.compiler.engine_timing.sram_bytes_per_mac`, the other
    off-chip bytes once through the scratchpad. All defaults 0: every MAC at that rate."""
    te = arch.tensor_engine
    e = operand_bytes(arch)
    sp_kib, acc_kib = sram_bank_kib(arch)
    sp = sram_pj_per_byte(tech, sp_kib)
    acc = sram_pj_per_byte(tech, acc_kib)
    if not (0 <= sram_macs <= macs * (1 + 1e-12) and 0 <= sram_dram_bytes
            <= dram_bytes * (1 + 1e-12) and scratchpad_bytes >= 0 and accumulator_bytes >= 0):
        raise TechError(f"energy_breakdown: sram_macs = {sram_macs:g} and sram_dram_bytes = "
                        f"{sram_dram_bytes:g} must be parts of macs = {macs:g} and dram_bytes = "
                        f"{dram_bytes:g}; SRAM bytes >= 0")
    operand_b, psum_b = sram_bytes_per_mac(te, e)      # per engine kind (its docstring)
    sram = ((macs - sram_macs) * (operand_b * sp + psum_b * acc)
            + scratchpad_bytes * sp + accumulator_bytes * acc
            + (dram_bytes - sram_dram_bytes) * sp + vector_ops * 8.0 * sp)
    psums = macs * te.count * te.cols / te.macs_per_cycle    # one per column per array beat
    out = {"mac_pj": macs * (tech.mac_pj_of(te.input_format) + pe_storage_pj_per_mac(arch, tech))
           + psums * tech.column_pj_of(te.input_format), "sram_pj": sram,
           "vector_pj": vector_ops * tech.vector_op_pj,
           "dram_pj": dram_bytes * tech.dram_pj_per_byte, "mesh_pj": 0.0}
    if byte_hops:
        if arch.mesh is None:
            raise TechError("byte_hops given but the ArchSpec has no mesh section")
        pitch_mm = math.sqrt(mesh_core_um2(arch, tech)) / 1e3
        out["mesh_pj"] = byte_hops * (tech.hop_pj_per_byte_mm * pitch_mm + tech.router_pj_per_byte)
    return _at_operating_point(arch, tech, out, latency_s)


def _at_operating_point(arch: ArchSpec, tech: TechSpec, out: dict[str, float],
                        latency_s: float | None) -> dict[str, float]:
    """Scale the on-chip dynamic terms to the operating supply, add static energy over
    ``latency_s`` and the total (module doc)."""
    v = operating_voltage(arch, tech)
    s = dynamic_scale(tech, v)
    for k in ("mac_pj", "sram_pj", "vector_pj", "mesh_pj"):
        out[k] *= s
    if latency_s is not None:
        if not latency_s >= 0:
            raise TechError(f"latency_s = {latency_s}: must be >= 0 seconds")
        out["static_pj"] = static_power(arch, tech)["static_w"] * latency_s * 1e12
    out["energy_j"] = sum(val for k, val in out.items() if k.endswith("_pj")) * 1e-12
    out["voltage_v"] = v
    return out


def offchip_phy(arch: ArchSpec, tech: TechSpec) -> _Phy:
    """The PHY entry of the ArchSpec's off-chip interface (``offchip.interface``, default the
    table's ``default_offchip``); an interface the table lacks is refused in one line."""
    name = arch.offchip.interface or tech.default_offchip
    if name not in tech.offchip_phy:
        raise TechError(f"offchip.interface = {name!r}: tech {tech.name} has a PHY for "
                        f"{sorted(tech.offchip_phy)}")
    return tech.offchip_phy[name]


def operating_voltage(arch: ArchSpec, tech: TechSpec) -> float:
    """Lowest supply (V) on the table's V-f curve that reaches ``arch.clock_mhz`` (module doc);
    a clock beyond the curve's top is refused with one line."""
    vf, f = tech.vf, arch.clock_mhz
    if f <= vf.f_mhz(vf.v_min):
        return vf.v_min
    f_top = vf.f_mhz(vf.v_max)
    if f > f_top:
        raise TechError(f"clock_mhz = {f:g}: beyond the {tech.name} voltage-frequency curve, "
                        f"which reaches {f_top:.0f} MHz at its highest supply v_max = "
                        f"{vf.v_max} V (accepted: clock_mhz <= {f_top:.0f})")
    lo, hi = vf.v_min, vf.v_max       # f(V) increases on [v_min, v_max]: bisect to 1e-12 V
    while hi - lo > 1e-12:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if vf.f_mhz(mid) < f else (lo, mid)
    return hi


def dynamic_scale(tech: TechSpec, v: float) -> float:
    """Factor on the table's dynamic energies at supply ``v`` (V): ``(v / v_nom)**2``."""
    return (v / tech.vf.v_nom) ** 2


def static_power(arch: ArchSpec, tech: TechSpec) -> dict[str, float]:
    """Static power in W at the operating supply: ``leakage_w`` (logic and SRAM), ``phy_w``,
    ``background_w`` and their sum ``static_w`` (module doc)."""
    ar = area_breakdown(arch, tech)
    if arch.mesh is not None:
        m = arch.mesh
        sram_kib = m.cores * m.core_sram_kib
    else:
        st = arch.tensor_engine.pe_storage
        sram_kib = (arch.memory.scratchpad_kib + arch.memory.accumulator_kib
                    + (arch.tensor_engine.macs_per_cycle * st.sram_bytes / 1024 if st else 0.0))
    sram_mm2 = sram_kib * tech.sram_um2_per_kib / 1e6   # the macros; extra-bank periphery: logic
    logic_mm2 = ar["area_cells_mm2"] - sram_mm2 - ar["phy_cells_um2"] / 1e6   # cells leak
    lk = tech.leakage
    v = operating_voltage(arch, tech)
    leak = (logic_mm2 * lk.logic_mw_per_mm2 * 1e-3
            + sram_kib * 8192 * lk.sram_pw_per_bit * 1e-12) * v / tech.vf.v_nom
    phy = (0.0 if arch.mesh is not None
           else arch.offchip.bandwidth_gbps * offchip_phy(arch, tech).mw_per_gbps * 1e-3)
    bg = arch.offchip.background_w or 0.0
    return {"leakage_w": leak, "phy_w": phy, "background_w": bg, "static_w": leak + phy + bg,
            "voltage_v": v}
