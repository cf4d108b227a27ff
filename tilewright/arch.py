"""ArchSpec: the single, validated description of one accelerator design point.

Every layer (compiler mapping, RTL generators, cycle model, functional model) reads the same
frozen :class:`ArchSpec`; a hardware parameter never lives in two places. Specs load from and save
to YAML. Every field carries its unit in its name or description.

Invalid input raises :class:`ArchSpecError` whose message is one line naming the field, the value
given and what is accepted, e.g.::

    configs/bad.yaml: tensor_engine.rows = 0: must be an integer from 1 to 512
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_serializer, model_validator

from tilewright import configs as _configs
from tilewright.errors import UserError
from tilewright.formats import FORMATS
from tilewright.validation import find_user_file, parse_yaml, read_user_text, validate_mapping

__all__ = ["ArchSpec", "ArchSpecError", "ENGINE_KINDS", "TensorEngineSpec", "PipelineSpec",
           "PeStorageSpec", "PeAccessesSpec", "MemorySpec",
           "OffChipSpec", "MeshSpec",
           "VectorUnitSpec",
           "load_arch", "default_arch", "PRESET_DIR", "MAX_ARRAY_DIM", "RTL_MAX_ARRAY_DIM",
           "MAX_ENGINE_COUNT", "SYSTOLIC_DATAFLOWS"]

PRESET_DIR = Path(_configs.__file__).parent  # the repository's configs/ folder, packaged
#: largest tensor-engine dimension (rows, cols or depth: PEs / elements per PE column, count) the
#: analytical levels accept (cycle model, mapper, Report, energy/area, sweeps, cluster chips);
#: not the largest GEMM (see tilewright.compiler.layout.MAX_GEMM_DIM)
MAX_ARRAY_DIM = 512
#: largest dimension the RTL generators build (rtl/systolic.py, rtl/cube.py): `tilewright rtl`,
#: `sim --rtl` and `fpga` refuse larger engines (app/cli/rtl_limits.py)
RTL_MAX_ARRAY_DIM = 64
#: most identical tensor engines per chip (``tensor_engine.count``)
MAX_ENGINE_COUNT = 256
#: the systolic dataflows (SCALE-Sim's three): weight-, output- and input-stationary
SYSTOLIC_DATAFLOWS = ("ws", "os", "is")


class ArchSpecError(UserError, ValueError):
    """A malformed ArchSpec; ``str(err)`` is a single line naming field, value and what is accepted."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=False)


#: tensor-engine families (docs/design.md); every kind but ``systolic`` is a tile-MAC engine whose
#: GEMM timing is :mod:`tilewright.compiler.engine_timing`
ENGINE_KINDS = ("systolic", "adder_tree", "outer_product", "cube")


class PipelineSpec(_Frozen):
    """Optional pipeline registers of the int8 systolic WS core (timing closure on FPGAs).

    Each stage on adds exactly one cycle to every GEMM's ``busy`` time (once per GEMM, in the
    last fold's drain; the fold period is unchanged): :attr:`extra_cycles`, which the cycle
    model adds (:mod:`tilewright.compiler.core_timing`). Off (the default) builds the core as
    before; the section is left out of YAML and the content hash when every stage is off.
    """

    sram_read: bool = Field(False, description="a register after the A and B buffer reads, "
                            "before the array's input (+1 cycle per GEMM)")
    pe_operand: bool = Field(False, description="registers on each PE's two multiplier "
                             "operands (its activation and its selected weight), before the "
                             "multiply (+1 cycle per GEMM; on ECP5 the MULT18X18D's own input "
                             "registers)")
    pe_product: bool = Field(False, description="a register on each PE's product, before its "
                             "partial-sum adder (+1 cycle per GEMM; on ECP5 the MULT18X18D's "
                             "own output register)")
    acc_read: bool = Field(False, description="a register after the accumulator read of the "
                           "read-modify-write, before its adder (+1 cycle per GEMM; not on a "
                           "1x1 array)")
    acc_write: bool = Field(False, description="a register on the accumulator's write (data, "
                            "address, enable) after its adder (+1 cycle per GEMM; the fold "
                            "period 2R + C - 2 must be at least 1 + acc_read + acc_write; on "
                            "ECP5 with acc_read too, the accumulator reads through its block "
                            "RAMs' output registers)")
    fetch: bool = Field(False, description="the accelerator controller's instruction memory "
                        "reads ahead into a prefetch buffer of 4 registers, which the decode "
                        "reads (the memory's read enable from registers only): no GEMM cycle, "
                        "+2 cycles per accelerator run (three fetch cycles after start)")
    host_read: bool = Field(False, description="a register after the host's accumulator read "
                            "(on ECP5 the block RAMs' output registers): the core's "
                            "acc_rd_data two cycles after the address, advanced by a new "
                            "acc_rd_en port; no GEMM cycle, +1 cycle per STORE of the "
                            "accelerator's DMA (it reads word 0 before its request)")
    issue: bool = Field(False, description="a register on every command the accelerator "
                        "controller issues (the start pulse and the fields, to the DMA, the "
                        "GEMM core and the vector/scan engines): no GEMM cycle, +1 cycle per "
                        "DMA, GEMM, VECTOR and SCAN instruction (its unit busy from two cycles "
                        "after the issue)")
    #: the stages inside a GEMM, each +1 cycle of its ``busy`` time
    GEMM_STAGES: ClassVar[tuple[str, ...]] = ("sram_read", "pe_operand", "pe_product",
                                              "acc_read", "acc_write")

    @property
    def extra_cycles(self) -> int:
        """Cycles the stages add to one GEMM (cycles): one per GEMM stage that is on."""
        return sum(int(getattr(self, stage)) for stage in self.GEMM_STAGES)

    @property
    def host_read_latency(self) -> int:
        """Cycles from the core's accumulator read address to its data (cycles): 1, or 2 with
        ``host_read`` (``acc_rd_en`` high)."""
        return 1 + int(self.host_read)

    @property
    def fetch_cycles(self) -> int:
        """Cycles the accelerator's controller fetches after ``start`` before its first issue
        (cycles): 1, or 3 with ``fetch`` (its first word read in the first, out of the RAM's
        output register in the second, in the prefetch buffer in the third)."""
        return 1 + 2 * int(self.fetch)

    @property
    def issue_cycles(self) -> int:
        """Cycles from an instruction's issue to its unit's command (cycles): 0, or 1 with
        ``issue``."""
        return int(self.issue)

    @property
    def any_on(self) -> bool:
        """True when any stage is on."""
        return any(getattr(self, stage) for stage in type(self).model_fields)

    @model_serializer(mode="wrap")
    def _omit_operand_off(self, handler: Any) -> dict[str, Any]:
        """Leave ``pe_operand``, ``acc_write``, ``fetch``, ``host_read`` and ``issue`` out of
        dumps when off, so designs written before they existed keep their YAML and content
        hash."""
        data = handler(self)
        for stage in ("pe_operand", "acc_write", "fetch", "host_read", "issue"):
            if not getattr(self, stage):
                data.pop(stage, None)
        return data


class PeAccessesSpec(_Frozen):
    """Local-storage accesses one PE makes per MAC, stated for a PE whose access pattern the
    systolic dataflow rule does not describe (e.g. Eyeriss' row-stationary PE: a filter read
    from its SRAM scratchpad, an ifmap read and a psum read and write in its registers). Counts
    per MAC (>= 0, fractions allowed: e.g. 0.5 for one access per two MACs); each access moves
    ``pe_storage.word_bits`` bits. An SRAM write is charged as a read of the same width (the
    tables give read energies only; as the ``os`` rule charges its psum write)."""

    register_reads: float = Field(0.0, ge=0, le=64, description="register-file reads per MAC")
    register_writes: float = Field(0.0, ge=0, le=64, description="register-file writes per MAC")
    sram_reads: float = Field(0.0, ge=0, le=64, description="PE SRAM reads per MAC")
    sram_writes: float = Field(0.0, ge=0, le=64, description="PE SRAM writes per MAC")

    @model_serializer(mode="wrap")
    def _omit_zero(self, handler: Any) -> dict[str, Any]:
        """Leave zero counts out of dumps."""
        return {k: v for k, v in handler(self).items() if v}


class PeStorageSpec(_Frozen):
    """Local storage inside every PE of a systolic array (bytes per PE): a register file of
    flip-flops and/or a small SRAM, such as a PE that keeps several stationary words and
    time-multiplexes them. Omitted (the default): a PE holds one stationary word in the
    pipeline registers its calibrated area already counts.

    Area, energy and leakage: :mod:`tilewright.dataflow_sim.energy_area` (module doc). Accesses
    per MAC follow from ``tensor_engine.dataflow`` — the storage holds the word the dataflow
    keeps stationary, which a PE re-reads for every MAC it does:

    * ``ws``: one read of the stationary weight word per MAC (the input and the partial sum pass
      through the PE's pipeline registers, as without local storage);
    * ``is``: one read of the stationary input word per MAC;
    * ``os``: one read and one write of the stationary partial-sum (accumulator) word per MAC.

    That word sits in the SRAM when ``sram_bytes`` > 0, else in the register file; the other
    part costs area and leakage only. ``accesses_per_mac`` (:class:`PeAccessesSpec`) replaces
    that rule with stated counts per part (it then needs ``word_bits``, the bits of every access;
    a part it reads or writes must have bytes); omitted, the rule above holds. The section is
    left out of YAML and the content hash when omitted, so designs without it keep their hashes.
    """

    register_bytes: int = Field(0, ge=0, le=65536, description="bytes of register file "
                                "(flip-flops) in each PE")
    sram_bytes: int = Field(0, ge=0, le=65536, description="bytes of SRAM in each PE")
    word_bits: int | None = Field(
        None, ge=1, le=1024, description="bits one storage access moves; omitted: the "
        "stationary word's format (weight_format for ws, input_format for is, "
        "accumulator_format for os)")
    accesses_per_mac: PeAccessesSpec | None = Field(
        None, description="stated accesses per MAC (PeAccessesSpec: register_reads, "
        "register_writes, sram_reads, sram_writes); omitted: the dataflow's rule")

    @model_validator(mode="after")
    def _holds_something(self) -> "PeStorageSpec":
        if self.register_bytes + self.sram_bytes == 0:
            raise ValueError("register_bytes = 0 and sram_bytes = 0: local storage needs at "
                             "least one byte per PE; accepted: a positive register_bytes or "
                             "sram_bytes, or no pe_storage section")
        acc = self.accesses_per_mac
        if acc is not None:
            if self.word_bits is None:
                raise ValueError("accesses_per_mac given without word_bits: stated accesses "
                                 "need the bits each one moves; accepted: word_bits >= 1")
            for part, n in (("register", acc.register_reads + acc.register_writes),
                            ("sram", acc.sram_reads + acc.sram_writes)):
                if n and not getattr(self, f"{part}_bytes"):
                    raise ValueError(f"accesses_per_mac has {part} accesses but {part}_bytes = "
                                     f"0; accepted: {part}_bytes > 0, or no {part} accesses")
        return self

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: Any) -> dict[str, Any]:
        """Leave zero parts and an unset ``word_bits`` out of dumps."""
        data = handler(self)
        for f in ("register_bytes", "sram_bytes"):
            if not getattr(self, f):
                data.pop(f, None)
        for f in ("word_bits", "accesses_per_mac"):
            if getattr(self, f) is None:
                data.pop(f, None)
        return data


class TensorEngineSpec(_Frozen):
    """The tensor engine: multiply-accumulate processing elements (PEs) of one family ``kind``.

    Dimensions, per kind (M x K by K x N GEMM; MAC/cycle = rows · cols · depth):

    =================  ==================  ===============  =================================
    kind               rows                cols             depth
    =================  ==================  ===============  =================================
    ``systolic``       K (ws, is) / M (os)  N (ws, os) / M (is)  1 (must be 1)
    ``adder_tree``     1 (must be 1)       1 (must be 1)    K elements reduced per cycle
    ``outer_product``  M                   N                1 (must be 1)
    ``cube``           M                   N                K
    =================  ==================  ===============  =================================

    For the three tile-MAC kinds (``adder_tree``, ``outer_product``, ``cube``) the engine computes a
    ``rows x cols`` block of partial sums over ``depth`` reduction elements per cycle
    ((Tm, Tk, Tn) = (rows, depth, cols) of :mod:`tilewright.compiler.engine_timing`); ``rows`` and
    ``cols`` default to 1 for them. ``dataflow`` describes a systolic array only: it is required
    for ``systolic`` and, for the other kinds, ignored and not stored (so a sweep can change
    ``kind`` from a systolic base without also clearing it).

    ``count`` identical engines share the chip's memories (scratchpad, accumulator, off-chip
    bandwidth): a GEMM's independent output tiles are split over them
    (:mod:`tilewright.compiler.core_timing`), and :attr:`macs_per_cycle` is the chip's peak,
    ``count * rows * cols * depth``. The analytical levels accept dimensions up to
    :data:`MAX_ARRAY_DIM`; the RTL generators build up to :data:`RTL_MAX_ARRAY_DIM`, one engine,
    dataflows ``ws``/``os`` only.
    """

    kind: Literal["systolic", "adder_tree", "outer_product", "cube"] = Field(
        "systolic", description="engine family: 'systolic' (2-D array, ws/os/is), 'adder_tree' "
        "(multiplier-adder tree, 1 x depth x 1), 'outer_product' (rows x 1 x cols), 'cube' "
        "(rows x depth x cols MACs per cycle)")
    rows: int = Field(..., ge=1, le=MAX_ARRAY_DIM, description="PE rows (count). systolic WS and "
                      "IS: reduction dim K; systolic OS, outer_product, cube: M; adder_tree: 1")
    cols: int = Field(..., ge=1, le=MAX_ARRAY_DIM, description="PE columns (count); N for every "
                      "kind but systolic IS (M) and adder_tree (1)")
    depth: int = Field(1, ge=1, le=MAX_ARRAY_DIM, description="reduction (K) elements per PE column and "
                       "cycle (count): adder_tree and cube; 1 for systolic and outer_product "
                       "(omitted from YAML and the content hash when 1)")
    count: int = Field(1, ge=1, le=MAX_ENGINE_COUNT, description="identical tensor engines per "
                       "chip (count), sharing the scratchpad, accumulator and off-chip "
                       "bandwidth; a GEMM's output tiles are split over them (omitted from YAML "
                       "and the content hash when 1)")
    dataflow: Literal["ws", "os", "is"] | None = Field(
        None, description="systolic only (required there): 'ws' weight-stationary (B tile held "
                          "in PEs, A rows streamed), 'os' output-stationary (C tile accumulates "
                          "in PEs, K streamed), 'is' input-stationary (A tile held in PEs, B "
                          "columns streamed: SCALE-Sim's IS); ignored and not stored for other "
                          "kinds")
    input_format: str = Field(
        "int8", description="activation (A) element format: a name in tilewright.formats.FORMATS")
    weight_format: str = Field(
        "int8", description="weight (B) element format: a name in tilewright.formats.FORMATS")
    accumulator_format: Literal["int32", "fp32"] = Field(
        "int32", description="accumulator format: int32 (wraps modulo 2**32; int8 and int16 "
                             "operands only) or fp32 (every other format)")
    pipeline: PipelineSpec = Field(
        PipelineSpec(), description="pipeline registers of the int8 systolic WS core "
        "(PipelineSpec; each adds one cycle per GEMM; omitted from YAML and the content hash when "
        "all off)")
    pe_storage: PeStorageSpec | None = Field(
        None, description="local storage in each PE of a systolic array (PeStorageSpec: "
        "register_bytes, sram_bytes, word_bits; accesses per MAC from the dataflow, or stated "
        "in accesses_per_mac); omitted from YAML and the content hash when unset")

    @model_validator(mode="before")
    @classmethod
    def _kind_defaults(cls, data: Any) -> Any:
        """Tile-MAC kinds: ``rows``/``cols`` default to 1 and ``dataflow`` is dropped."""
        if isinstance(data, dict) and data.get("kind", "systolic") in ENGINE_KINDS[1:]:
            data = {**data}
            data.setdefault("rows", 1)
            data.setdefault("cols", 1)
            data.pop("dataflow", None)
        return data

    @model_validator(mode="after")
    def _kind_dimensions(self) -> "TensorEngineSpec":
        if self.kind == "systolic":
            if self.dataflow is None:
                raise ValueError("dataflow = (missing): required for kind 'systolic'; accepted: "
                                 "'ws', 'os' or 'is'")
            if self.depth != 1:
                raise ValueError(f"depth = {self.depth}: must be 1 for kind 'systolic' (its "
                                 f"reduction dimension is rows for ws); depth > 1 is for kinds "
                                 f"'adder_tree' and 'cube'")
        elif self.kind == "adder_tree":
            for field in ("rows", "cols"):
                if getattr(self, field) != 1:
                    raise ValueError(f"{field} = {getattr(self, field)}: must be 1 for kind "
                                     f"'adder_tree' (1 x depth x 1); use kind 'cube' for more")
        elif self.kind == "outer_product" and self.depth != 1:
            raise ValueError(f"depth = {self.depth}: must be 1 for kind 'outer_product' "
                             f"(rows x 1 x cols); use kind 'cube' for depth > 1")
        return self

    @model_validator(mode="after")
    def _pipeline_is_built(self) -> "TensorEngineSpec":
        """Pipeline stages exist for the int8 systolic WS core only: refused elsewhere rather
        than ignored."""
        if self.pipeline.any_on and not (
                self.kind == "systolic" and self.dataflow == "ws"
                and self.input_format == "int8"):
            on = [f for f in type(self.pipeline).model_fields if getattr(self.pipeline, f)]
            raise ValueError(
                f"pipeline.{on[0]} = true: pipeline stages are built for kind 'systolic', "
                f"dataflow 'ws', int8 only, not {self.kind!r}"
                f"{'' if self.dataflow is None else ', ' + repr(self.dataflow)}, "
                f"{self.input_format}; accepted there: false")
        need = 1 + int(self.pipeline.acc_read) + int(self.pipeline.acc_write)
        period = 2 * self.rows + self.cols - 2
        if need > 1 and period < need:
            stage = "acc_write" if self.pipeline.acc_write else "acc_read"
            raise ValueError(f"pipeline.{stage} = true: needs a fold period of at least {need} "
                             f"cycles (the accumulator read-modify-write's read-to-write "
                             f"distance), which a {self.rows}x{self.cols} array does not have "
                             f"(2R + C - 2 = {period}); accepted there: false")
        return self

    @model_validator(mode="after")
    def _pe_storage_is_systolic(self) -> "TensorEngineSpec":
        """Local storage per PE is defined for the systolic dataflows (its accesses per MAC
        follow from ``dataflow``): refused on the other kinds rather than ignored."""
        if self.pe_storage is not None and self.kind != "systolic":
            raise ValueError(f"pe_storage given for kind {self.kind!r}: its accesses per MAC "
                             f"follow from a systolic dataflow (ws, is, os); accepted: kind "
                             f"'systolic', or no pe_storage section")
        return self

    @property
    def pipeline_cycles(self) -> int:
        """Cycles the pipeline stages add to every GEMM (cycles; 0 without them)."""
        return self.pipeline.extra_cycles

    @model_validator(mode="after")
    def _formats_agree(self) -> "TensorEngineSpec":
        for field in ("input_format", "weight_format"):
            value = getattr(self, field)
            if value not in FORMATS:
                raise ValueError(f"{field} = {value!r}: must be one of {sorted(FORMATS)}")
        if self.input_format != self.weight_format:
            raise ValueError(f"input_format = {self.input_format!r} and weight_format = "
                             f"{self.weight_format!r}: must be the same format")
        wants = FORMATS[self.input_format].default_acc   # int32 for int8/int16, fp32 else
        if self.accumulator_format != wants:
            raise ValueError(f"accumulator_format = {self.accumulator_format!r}: must be "
                             f"{wants!r} for {self.input_format} operands")
        block = FORMATS[self.input_format].block_size
        red_field = "rows" if self.kind == "systolic" else "depth"
        if block and self.kind != "outer_product" and getattr(self, red_field) % block:
            raise ValueError(f"{red_field} = {getattr(self, red_field)}: must be a multiple of "
                             f"{block} for the {self.input_format} block format (one shared "
                             f"scale per {block}-element block of the reduction dimension)")
        return self

    @model_serializer(mode="wrap")
    def _omit_unit_depth(self, handler: Any) -> dict[str, Any]:
        """Leave ``depth`` and ``count`` out of dumps when 1, so specs without them keep their
        YAML and :meth:`ArchSpec.content_hash`."""
        data = handler(self)
        for field in ("depth", "count"):
            if data.get(field) == 1:
                del data[field]
        if not self.pipeline.any_on:
            data.pop("pipeline", None)
        if self.pe_storage is None:
            data.pop("pe_storage", None)
        return data

    @property
    def systolic(self) -> bool:
        """True for the systolic array (the GEMM core, its RTL and its timing contract)."""
        return self.kind == "systolic"

    @property
    def tile_shape(self) -> tuple[int, int, int]:
        """(Tm, Tk, Tn): M, K and N elements one cycle covers on a tile-MAC kind
        (rows, depth, cols). Raises ValueError for ``systolic`` (whose shape depends on the
        dataflow; see :mod:`tilewright.compiler.core_timing`)."""
        if self.systolic:
            raise ValueError("tensor_engine.kind = 'systolic': tile_shape is defined for the "
                             "tile-MAC kinds adder_tree, outer_product, cube")
        return self.rows, self.depth, self.cols

    @property
    def engine_params(self) -> dict[str, int]:
        """The parameters of :mod:`tilewright.compiler.engine_timing` / ``tilewright.rtl.
        engine_top`` for a tile-MAC kind (``{"n": depth}``, ``{"rows", "cols"}``, ``{"tm",
        "tk", "tn"}``)."""
        tm, tk, tn = self.tile_shape
        if self.kind == "adder_tree":
            return {"n": tk}
        if self.kind == "outer_product":
            return {"rows": tm, "cols": tn}
        return {"tm": tm, "tk": tk, "tn": tn}

    @property
    def engine_macs_per_cycle(self) -> int:
        """Peak multiply-accumulates per clock cycle of ONE engine (MAC/cycle): rows · cols ·
        depth."""
        return self.rows * self.cols * self.depth

    @property
    def macs_per_cycle(self) -> int:
        """Peak multiply-accumulates per clock cycle of all ``count`` engines (MAC/cycle):
        count · rows · cols · depth."""
        return self.count * self.engine_macs_per_cycle

    def describe(self) -> str:
        """Short text, e.g. ``8x8 ws``, ``cube 4x4x4 (MxKxN)`` or ``8 x 128x128 ws``."""
        if self.systolic:
            text = f"{self.rows}x{self.cols} {self.dataflow}"
        else:
            tm, tk, tn = self.tile_shape
            text = f"{self.kind} {tm}x{tk}x{tn} (MxKxN)"
        return f"{self.count} x {text}" if self.count > 1 else text


_BANK_FIELDS = ("scratchpad_banks", "accumulator_banks")
#: Largest bank count of each banked SRAM (a power of two). The accumulator goes to 256 so a
#: design such as TPU v1 (256 accumulator RAMs, one per matrix-unit column: Jouppi et al., ISCA
#: 2017, section 2) is described as built.
MAX_BANKS = {"scratchpad_banks": 64, "accumulator_banks": 256}


class MemorySpec(_Frozen):
    """On-chip memories of the GEMM core."""

    scratchpad_kib: int = Field(
        64, ge=1, le=262144,
        description="input scratchpad capacity in KiB (1 KiB = 1024 bytes), split equally between "
                    "the A buffer and the B buffer")
    accumulator_kib: int = Field(
        64, ge=1, le=65536, description="accumulator SRAM capacity in KiB, holding int32 results")
    read_latency_cycles: Literal[1] = Field(
        1, description="SRAM read latency in cycles (synchronous read ports)")
    scratchpad_banks: int = Field(
        1, description="equal banks each scratchpad buffer (A and B) is split into (count, a power "
                        "of two from 1 to 64); a bank of scratchpad_kib / 2 / banks KiB is what "
                        "one access reads. The RTL splits the buffers into these banks, "
                        "interleaved on the low address bits")
    accumulator_banks: int = Field(
        1, description="equal banks the accumulator SRAM is split into (count, a power of two from "
                        "1 to 256); in the RTL interleaved on the low address bits")
    bank_width_bytes: int | None = Field(
        None, ge=1, le=65536,
        description="bytes one scratchpad bank delivers per cycle (its read port width). Each "
                    "scratchpad buffer (A, B) then delivers scratchpad_banks * bank_width_bytes "
                    "bytes per cycle, which limits the tensor engine's operand rate; omitted: "
                    "one layout word per buffer per cycle, what the RTL's ports deliver (never a "
                    "limit)")

    @model_validator(mode="after")
    def _banks_are_powers_of_two(self) -> "MemorySpec":
        for field in _BANK_FIELDS:
            n, top = getattr(self, field), MAX_BANKS[field]
            if not (1 <= n <= top and n & (n - 1) == 0):
                allowed = [str(1 << i) for i in range(top.bit_length())]
                raise ValueError(f"{field} = {n!r}: must be a power of two from 1 to {top} "
                                 f"({', '.join(allowed[:-1])} or {allowed[-1]})")
        return self

    @model_serializer(mode="wrap")
    def _omit_single_bank(self, handler: Any) -> dict[str, Any]:
        """Leave ``*_banks`` out of dumps when 1, so specs without banks keep their YAML and
        :meth:`ArchSpec.content_hash`."""
        data = handler(self)
        for field in _BANK_FIELDS:
            if data.get(field) == 1:
                del data[field]
        if data.get("bank_width_bytes", 0) is None:
            del data["bank_width_bytes"]
        return data

    @property
    def scratchpad_bytes(self) -> int:
        return self.scratchpad_kib * 1024

    @property
    def accumulator_bytes(self) -> int:
        return self.accumulator_kib * 1024

    @property
    def scratchpad_bytes_per_cycle(self) -> int | None:
        """Bytes per cycle each scratchpad buffer (A, B) delivers: ``scratchpad_banks *
        bank_width_bytes``; None when ``bank_width_bytes`` is omitted (no limit)."""
        if self.bank_width_bytes is None:
            return None
        return self.scratchpad_banks * self.bank_width_bytes


class VectorUnitSpec(_Frozen):
    """The vector unit beside the tensor engine (elementwise ops, reductions, non-linear functions)."""

    lanes: int = Field(16, ge=1, le=4096, description="elements processed per cycle (count)")
    transcendental_passes: int = Field(
        4, ge=1, le=64, description="cycles per lane-vector for exp/rsqrt/silu/sigmoid/softplus "
                                    "(passes of the function approximation)")
    double_buffer: bool | None = Field(
        None, description="accelerator top: split the vector buffer into two banks (the word "
        "address's top bit), each with its own ports, so the DMA fills or drains one bank while "
        "the vector engine computes on the other and the vector kernels ping-pong between them "
        "(compiler/codegen.py states the wait rule); None or false = one shared buffer (omitted "
        "from YAML and the content hash when unset)")


class OffChipSpec(_Frozen):
    """Off-chip memory (DRAM/HBM) as seen by the accelerator."""

    bandwidth_gbps: float = Field(16.0, gt=0, le=1e6,
                                  description="sustained bandwidth in GB/s (1e9 B/s)")
    latency_ns: float = Field(100.0, ge=0, le=1e9, description="access latency in ns")
    capacity_gib: float | None = Field(
        None, gt=0, le=1e6,
        description="capacity in GiB (2**30 B); None = not stated (optional: omitted "
        "from YAML and the content hash when unset)")
    interface: str | None = Field(
        None, min_length=1, max_length=32,
        description="memory interface whose PHY the chip carries, a key of the technology "
        "table's offchip_phy (e.g. ddr4, hbm2); None = the table's default_offchip. Sets the "
        "PHY's area and power per GB/s of bandwidth_gbps (dataflow_sim/energy_area.py)")
    background_w: float | None = Field(
        None, ge=0, le=1e5,
        description="board / DRAM background power in W (refresh, regulators) charged for every "
        "second the chip is powered; None = not modelled (0)")


class MeshSpec(_Frozen):
    """A 2-D mesh of small cores with nearest-neighbour links (wafer-scale designs).

    Latency model ("PLMR", WaferLLM, OSDI 2025): a message of B bytes over h hops through s
    routing stages arrives after ``hop_latency_cycles * h + routing_stage_cycles * s`` cycles plus
    ``ceil(B / link_bytes_per_cycle)`` cycles of serialization on each shared link.
    """

    rows: int = Field(..., ge=1, le=4096, description="core rows of the mesh (count)")
    cols: int = Field(..., ge=1, le=4096, description="core columns of the mesh (count)")
    core_sram_kib: float = Field(48.0, gt=0, le=1048576, description="SRAM per core in KiB")
    core_macs_per_cycle: int = Field(
        4, ge=1, le=65536, description="multiply-accumulates one core completes per cycle")
    link_bytes_per_cycle: int = Field(
        4, ge=1, le=4096, description="bytes per cycle per link per direction (WSE-2: one 32-bit "
                                      "word)")
    hop_latency_cycles: float = Field(1.0, ge=0, le=1e6, description="alpha: cycles per hop")
    routing_stage_cycles: float = Field(
        0.0, ge=0, le=1e6,
        description="beta: cycles per routing stage (software forwarding on a core)")
    max_routes_per_core: int = Field(
        24, ge=1, le=4096, description="route ids (colors) a core's router can hold")
    defective_cores: tuple[tuple[int, int], ...] = Field(
        (), description="(row, col) of dead cores")
    defective_links: tuple[tuple[tuple[int, int], tuple[int, int]], ...] = Field(
        (), description="dead links as ((row, col), (row, col)) of adjacent cores")
    # ---- inter-wafer link (multi-wafer plans, `mesh-layer --wafers`) ----
    wafer_link_gbytes_per_s: float | None = Field(
        None, gt=0, le=1e6, description="bandwidth of the link from one wafer to the next in "
        "GB/s (1e9 bytes/s), one direction; absent: no link, a single-wafer system")
    wafer_link_latency_us: float | None = Field(
        None, ge=0, le=1e6, description="latency of the link from one wafer to the next in "
        "microseconds (first byte out to first byte in)")

    # ---- redundancy and random defects (one block; costed in dataflow_sim/mesh/grid.py) ----
    spare_rows: int = Field(
        0, ge=0, le=4095, description="physical rows held as spares: the logical grid has rows - "
        "spare_rows rows; a row with more dead cores than spare_cols is replaced by a spare row "
        "(count; with spare_cols > 0 the hardware repairs defects, see docs/mesh_defects.md)")
    spare_cols: int = Field(
        0, ge=0, le=4095, description="spare cores at the end of every physical row: each dead "
        "core shifts the rest of its row one column onto a spare, so the logical grid has cols - "
        "spare_cols columns (count; Cerebras-style redundancy, see docs/mesh_defects.md)")
    defect_rate: float = Field(
        0.0, ge=0, lt=1, description="fraction of physical cores dead: round(defect_rate * rows * "
        "cols) cores drawn uniformly without replacement (seed defect_seed), added to "
        "defective_cores; accepted: 0 <= defect_rate < 1")
    defect_seed: int = Field(0, ge=0, le=2**32 - 1, description="seed of the defect_rate draw")
    _listed_cores: tuple = PrivateAttr(())     # defective_cores as given (before the draw)

    @model_validator(mode="after")
    def _spares_and_drawn_defects(self) -> "MeshSpec":
        """Spares leave at least one logical row/column; ``defect_rate`` cores are drawn and
        merged into ``defective_cores`` (dumps keep only the listed ones, so reloading a dump
        draws the same cores again)."""
        for field, whole in (("spare_rows", "rows"), ("spare_cols", "cols")):
            if getattr(self, field) >= getattr(self, whole):
                raise ValueError(f"{field} = {getattr(self, field)}: must be smaller than "
                                 f"{whole} = {getattr(self, whole)} (the logical grid keeps "
                                 f"{whole} - {field} >= 1); accepted: 0 .. "
                                 f"{getattr(self, whole) - 1}")
        if self.defect_seed and not self.defect_rate:
            raise ValueError(f"defect_seed = {self.defect_seed}: seeds the defect_rate draw but "
                             "defect_rate = 0; accepted: set defect_rate in (0, 1) or drop "
                             "defect_seed")
        listed = tuple(tuple(c) for c in self.defective_cores)
        self._listed_cores = listed
        if self.defect_rate > 0:
            drawn = _drawn_cores(self.rows, self.cols, self.defect_rate, self.defect_seed)
            merged = tuple(sorted(set(listed) | set(drawn)))
            object.__setattr__(self, "defective_cores", merged)
        return self

    @model_serializer(mode="wrap")
    def _omit_defaults_and_drawn(self, handler: Any) -> dict[str, Any]:
        """Leave the redundancy/defect-rate fields out of dumps when 0 (so specs without them
        keep their YAML and content hash) and the drawn cores out of ``defective_cores``."""
        data = handler(self)
        if isinstance(data, dict):
            for field in ("spare_rows", "spare_cols", "defect_rate", "defect_seed"):
                if not getattr(self, field):
                    data.pop(field, None)
            if self.defect_rate > 0 and "defective_cores" in data:
                listed = self._listed_cores
                data["defective_cores"] = [list(c) for c in listed] \
                    if isinstance(data["defective_cores"], list) else listed
        return data

    @property
    def cores(self) -> int:
        return self.rows * self.cols

    @property
    def repairs_defects(self) -> bool:
        """Whether the fabric has spares: defects are then hidden by the hardware remap (the
        program sees an intact logical grid) instead of the skip/route policies."""
        return self.spare_rows > 0 or self.spare_cols > 0

    @property
    def logical_shape(self) -> tuple[int, int]:
        """(rows, cols) of the logical grid the spares protect (before any shortfall)."""
        return self.rows - self.spare_rows, self.cols - self.spare_cols


@functools.lru_cache(maxsize=16)
def _drawn_cores(rows: int, cols: int, rate: float, seed: int) -> tuple[tuple[int, int], ...]:
    """``round(rate * rows * cols)`` distinct (row, col) drawn uniformly (numpy PCG64 ``seed``)."""
    n = round(rate * rows * cols)
    import numpy as np  # noqa: PLC0415  (lazy: start-up of the light commands)
    idx = np.random.default_rng(seed).choice(rows * cols, size=n, replace=False)
    return tuple((int(i) // cols, int(i) % cols) for i in np.sort(idx))


class ArchSpec(_Frozen):
    """One accelerator design point. Frozen; hashable by content (:meth:`content_hash`)."""

    name: str = Field("unnamed", min_length=1, description="human-readable name of the design")
    clock_mhz: float = Field(500.0, gt=0, le=10000, description="clock frequency in MHz")
    tensor_engine: TensorEngineSpec
    memory: MemorySpec = MemorySpec()
    offchip: OffChipSpec = OffChipSpec()
    vector_unit: VectorUnitSpec | None = Field(
        None, description="vector unit; when absent, costs assume lanes = tensor_engine.cols")
    mesh: MeshSpec | None = Field(
        None, description="optional wafer-scale mesh of cores; each core's engine is tensor_engine")

    @model_validator(mode="after")
    def _mesh_design_is_one_design(self) -> "ArchSpec":
        """A design with a ``mesh`` section is the mesh alone: ``tensor_engine`` is each core's
        engine (its format and MACs per cycle; ``mesh.core_macs_per_cycle`` must equal it), each
        core's SRAM is ``mesh.core_sram_kib`` and operands live on the wafer. The single-core
        sections no mesh command reads are refused rather than ignored (area and energy would
        otherwise count a core that nothing simulates)."""
        if self.mesh is None:
            return self
        te = self.tensor_engine
        if self.mesh.core_macs_per_cycle != te.macs_per_cycle:
            raise ValueError(
                f"mesh.core_macs_per_cycle = {self.mesh.core_macs_per_cycle} but tensor_engine "
                f"(each mesh core's engine, {te.rows}x{te.cols}x{te.depth}) does "
                f"{te.macs_per_cycle} MACs per cycle: they must be equal")
        unused = [name for name, default in (("memory", MemorySpec()), ("offchip", OffChipSpec()))
                  if getattr(self, name) != default]
        if self.vector_unit is not None:
            unused.append("vector_unit")
        if te.pe_storage is not None:
            unused.append("tensor_engine.pe_storage")
        if unused:
            raise ValueError(
                f"{', '.join(unused)}: not read by a mesh design (each core's SRAM is "
                f"mesh.core_sram_kib, operands stay on the wafer, no vector unit is modelled); "
                f"remove {'it' if len(unused) == 1 else 'them'}, or remove mesh: for a "
                f"single-core design")
        return self

    # ---- derived figures -----------------------------------------------------------------
    @property
    def peak_macs_per_s(self) -> float:
        """Peak MAC/s of the tensor engine."""
        return self.tensor_engine.macs_per_cycle * self.clock_mhz * 1e6

    def content_hash(self) -> str:
        """Hex SHA-256 (16 chars) of the canonical JSON form; keys build directories."""
        canon = json.dumps(self.model_dump(mode="json", exclude_none=True), sort_keys=True,
                           separators=(",", ":"))
        return hashlib.sha256(canon.encode()).hexdigest()[:16]

    # ---- YAML --------------------------------------------------------------------------------
    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json", exclude_none=True), sort_keys=False)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_yaml())

    @classmethod
    def from_dict(cls, data: Any, source: str = "ArchSpec") -> "ArchSpec":
        """Validate a plain mapping; raise :class:`ArchSpecError` with a one-line message."""
        return validate_mapping(cls, data, source, ArchSpecError,
                                what="ArchSpec field; see `tilewright arch --schema`")

    @classmethod
    def from_yaml(cls, text: str, source: str = "ArchSpec") -> "ArchSpec":
        return cls.from_dict(parse_yaml(text, source, ArchSpecError), source)

    def with_engine(self, **changes: Any) -> "ArchSpec":
        """A validated copy with tensor-engine fields replaced (e.g. ``rows=16``)."""
        data = self.model_dump(mode="json", exclude_none=True)
        data["tensor_engine"].update(changes)
        return ArchSpec.from_dict(data, source=self.name)


def load_arch(path: str | Path) -> ArchSpec:
    """Load an ArchSpec from a YAML file, or a preset name such as ``ws8x8``."""
    p = find_user_file(path, PRESET_DIR, ArchSpecError)
    return ArchSpec.from_yaml(read_user_text(p, ArchSpecError, what="ArchSpec YAML"),
                              source=str(path))


def default_arch() -> ArchSpec:
    """The embedded design `tilewright demo` uses: an 8x8 weight-stationary int8 array."""
    return ArchSpec(name="demo-ws8x8", clock_mhz=500.0,
                    tensor_engine=TensorEngineSpec(rows=8, cols=8, dataflow="ws"),
                    memory=MemorySpec(scratchpad_kib=64, accumulator_kib=64))
