"""AccelTop: the programmable accelerator — controller + DMA + double-buffered GEMM core + vector
engine (vector buffer and vector unit, :mod:`tilewright.rtl.vector_engine`; only when the ArchSpec
has a ``vector_unit``).

Blocks: :class:`~tilewright.rtl.controller.Controller` (instruction memory, fetch/issue of the
ISA in :mod:`tilewright.compiler.codegen`), :class:`~tilewright.rtl.dma.Dma` (the one external
memory port) and :class:`~tilewright.rtl.gemm_core.GemmCore` (``tensor_engine.kind``
``systolic``; :class:`~tilewright.rtl.tile_core.TileCore` for the tile-MAC kinds
``adder_tree``/``outer_product``/``cube``, same ports) with ``halves=True``: the A, B and
accumulator SRAMs are each used as two halves, so the DMA fills one half (and drains the other
accumulator half) while the core computes on the other; a GEMM with ``acc=1`` adds to its
accumulator half (how the compiler splits a K that does not fit).

Ports (``sync`` domain)
    Control/status (the controller's): ``imem_wr_en/addr/data`` (load the program while idle),
    ``start``, ``entry``, ``busy``, ``done``, ``error``, ``pc``, ``cycles``, ``retired``.
    External memory (the DMA's): ``mem_req_valid/ready/write/addr/len``,
    ``mem_rd_valid/ready/data``, ``mem_wr_valid/ready/data`` (W = ``beat_bytes(arch)`` bytes per
    beat). Debug: ``gemm_busy``, ``dma_busy``, ``vec_busy``. With a vector unit: ``idx`` (in,
    :data:`~tilewright.compiler.codegen.IDX_BITS` bits), the run's index register that
    ``LOAD_VI`` reads (sampled with ``start``; e.g. the token id of an embedding lookup), which
    ``LOAD_IDX`` overwrites with an index word read from external memory.

Timing contract (predicted exactly by :mod:`tilewright.dataflow_sim.accel_timing`)
    With the memory always ready, answering a read ``L = memory_latency_cycles(arch)`` cycles
    after its request cycle at one beat per cycle, and ``start`` sampled in cycle ``s``:

    * cycle ``s+1`` fetches the entry instruction; instruction ``i`` issues in cycle
      ``c_i = max(c_{i-1} + 1, ready_i)`` with ``c_{-1} = s + 1``;
    * ``ready_i`` is the first cycle the units it needs are idle (LOAD/STORE: DMA; GEMM: core;
      SYNC: the selected units; LOAD_V/LOAD_VI/STORE_V/VECTOR/SCAN: DMA and vector engine — with
      ``vector_unit.double_buffer`` the other unit only when the banks of its running
      instruction and this one's intersect, the ISA's bank rule; END: all
      three; LOAD_IDX (vector tops only): the DMA;
      SCALE/SCALE_COL (fp8 top only): the DMA; they keep no unit busy.
      A unit issued in cycle ``c`` for ``D`` busy cycles is idle again from ``c + D + 1``
      (with ``tensor_engine.pipeline.issue``, the command through the controller's issue
      register: busy ``c + 2 .. c + D + 1``, idle from ``c + D + 2``);
    * GEMM ``D`` = the core's closed form (:mod:`tilewright.compiler.core_timing`; the
      ``busy`` contract of :mod:`tilewright.rtl.gemm_core`; tile-MAC kinds:
      :func:`~tilewright.compiler.engine_timing.tile_core_busy_cycles`, the contract of
      :mod:`tilewright.rtl.tile_core`); LOAD ``D = L + count * r``; STORE
      ``D = 1 + count * r`` (``r`` beats per on-chip word; see :mod:`tilewright.rtl.dma`);
      ``acc`` does not change a GEMM's cycles; a DMA ``count`` of 0 takes ``D = 0``; LOAD_V (and
      LOAD_VI) and
      STORE_V as LOAD and STORE with ``r`` beats per vector word; LOAD_IDX ``D = L + ri``
      (``ri`` = :func:`~tilewright.compiler.codegen.index_beats`; the index register holds the
      word it read from ``c + D + 1``, the first cycle the DMA is idle again); VECTOR
      ``D = count + VECTOR_OVERHEAD``, SCAN ``D = count + SCAN_OVERHEAD``
      (:mod:`tilewright.rtl.vector_engine`);
    * ``cycles`` (= cycles ``busy`` is high) ``= c_END - s``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from amaranth import Module
from amaranth.back import verilog
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from tilewright.arch import ArchSpec
from tilewright.compiler.codegen import IMEM_WORDS, VBUF_BANKS, VBUF_WORDS, beat_bytes
from tilewright.rtl.axi_lite import manifest_ports
from tilewright.rtl.controller import Controller
from tilewright.rtl.dma import Dma
from tilewright.rtl.emit import write_verilog
from tilewright.rtl.gemm_core import GemmCore
from tilewright.rtl.mx_core import MX_FORMATS, mx_core_for_arch
from tilewright.rtl.systolic_fp8 import FP8_FORMATS, Fp8GemmCore, fp8_core_for_arch
from tilewright.rtl.tile_core import TileCore
from tilewright.rtl.vector_engine import VectorEngine

__all__ = ["AccelTop", "ACCEL_TOP_NAME", "ACCEL_GENERATOR_VERSION", "write_accel_rtl",
           "write_accel_top"]

ACCEL_TOP_NAME = "tw_accel"
#: bump when the top's behaviour or ports change (0.3.0: the fp8 top decodes SCALE and applies
#: the scales; the other tops' Verilog is unchanged, but VERSION tells software which ISA it has;
#: 0.4.0: tops with a vector unit decode LOAD_VI and have the ``idx`` input; tops without one are
#: unchanged; 0.5.0: tops with a vector unit decode LOAD_IDX, the index register loaded from
#: external memory; tops without one are unchanged)
ACCEL_GENERATOR_VERSION = "0.5.0"

_HOST = ("imem_wr_en", "imem_wr_addr", "imem_wr_data", "start", "entry")
_STATUS = ("busy", "done", "error", "pc", "cycles", "retired")
_MEM_IN = ("mem_req_ready", "mem_rd_valid", "mem_rd_data", "mem_wr_ready")
_MEM_OUT = ("mem_req_valid", "mem_req_write", "mem_req_addr", "mem_req_len", "mem_rd_ready",
            "mem_wr_valid", "mem_wr_data")


class AccelTop(wiring.Component):
    """The accelerator top for one ArchSpec (see module docstring)."""

    def __init__(self, arch: ArchSpec):
        if not isinstance(arch, ArchSpec):
            raise TypeError(f"AccelTop takes an ArchSpec, not {type(arch).__name__}")
        self._arch = arch
        # the GEMM core by tensor_engine.kind: systolic array, or a tile-MAC engine (same ports)
        # (fp8 operands: the fp8 WS core, tilewright.rtl.systolic_fp8; MX operands: the MX core,
        # tilewright.rtl.mx_core, its scale lanes in the A/B words; same ports)
        if arch.tensor_engine.input_format in FP8_FORMATS:
            self._core = fp8_core_for_arch(arch, halves=True)
        elif arch.tensor_engine.input_format in MX_FORMATS:
            self._core = mx_core_for_arch(arch, halves=True)
        else:
            self._core = (GemmCore if arch.tensor_engine.systolic else TileCore)(arch, halves=True)
        # indirect loads (LOAD_VI, the idx input) fill the vector buffer: tops with a vector unit
        self._indirect = arch.vector_unit is not None
        self._dma = Dma(arch=arch, indirect=self._indirect)
        # the fp8 core applies the run's scales (SCALE: A, B; SCALE_COL: B per output lane) at
        # its accumulator read port
        self._scaled = isinstance(self._core, Fp8GemmCore)
        self._ctrl = Controller(scales=self._scaled,
                                lanes=arch.tensor_engine.cols if self._scaled else 1,
                                indirect=self._indirect,
                                fetch_reg=arch.tensor_engine.pipeline.fetch,
                                issue_reg=arch.tensor_engine.pipeline.issue,
                                **({"double_buffer": True, "vec_lanes": arch.vector_unit.lanes}
                                   if self._banked(arch) else {}))
        self._vec = VectorEngine(arch) if arch.vector_unit is not None else None
        sig: dict[str, Any] = {}
        for name in _HOST:
            sig[name] = In(self._ctrl.signature.members[name].shape)
        for name in _STATUS:
            sig[name] = Out(self._ctrl.signature.members[name].shape)
        for name in _MEM_IN:
            sig[name] = In(self._dma.signature.members[name].shape)
        for name in _MEM_OUT:
            sig[name] = Out(self._dma.signature.members[name].shape)
        if self._indirect:
            sig["idx"] = In(self._ctrl.signature.members["idx"].shape)
        sig["gemm_busy"], sig["dma_busy"], sig["vec_busy"] = Out(1), Out(1), Out(1)
        super().__init__(sig)

    @staticmethod
    def _banked(arch: ArchSpec) -> bool:
        """The vector buffer is two banks (ArchSpec ``vector_unit.double_buffer``)."""
        return arch.vector_unit is not None and bool(arch.vector_unit.double_buffer)

    @property
    def arch(self) -> ArchSpec:
        return self._arch

    def elaborate(self, platform):
        m = Module()
        core, dma, ctrl, vec = self._core, self._dma, self._ctrl, self._vec
        m.submodules.core, m.submodules.dma, m.submodules.ctrl = core, dma, ctrl
        for name in _HOST:
            m.d.comb += getattr(ctrl, name).eq(getattr(self, name))
        for name in _STATUS:
            m.d.comb += getattr(self, name).eq(getattr(ctrl, name))
        for name in _MEM_IN:
            m.d.comb += getattr(dma, name).eq(getattr(self, name))
        for name in _MEM_OUT:
            m.d.comb += getattr(self, name).eq(getattr(dma, name))
        m.d.comb += [
            core.start.eq(ctrl.gemm_start), core.m.eq(ctrl.gemm_m), core.k.eq(ctrl.gemm_k),
            core.n.eq(ctrl.gemm_n), core.a_half.eq(ctrl.gemm_a_half),
            core.b_half.eq(ctrl.gemm_b_half), core.acc_half.eq(ctrl.gemm_c_half),
            core.accumulate.eq(ctrl.gemm_accumulate),
            ctrl.gemm_busy.eq(core.busy), self.gemm_busy.eq(core.busy),
            dma.start.eq(ctrl.dma_start), dma.op.eq(ctrl.dma_op), dma.buf.eq(ctrl.dma_buf),
            dma.count.eq(ctrl.dma_count), dma.addr.eq(ctrl.dma_addr),
            ctrl.dma_busy.eq(dma.busy), self.dma_busy.eq(dma.busy),
            core.a_wr_en.eq(dma.a_wr_en), core.a_wr_addr.eq(dma.a_wr_addr),
            core.a_wr_data.eq(dma.a_wr_data),
            core.b_wr_en.eq(dma.b_wr_en), core.b_wr_addr.eq(dma.b_wr_addr),
            core.b_wr_data.eq(dma.b_wr_data),
            core.acc_rd_addr.eq(dma.acc_rd_addr), dma.acc_rd_data.eq(core.acc_rd_data),
            dma.vaddr.eq(ctrl.dma_vaddr),
        ]
        if self._arch.tensor_engine.pipeline.host_read:   # the DMA's skid buffer takes the
            m.d.comb += core.acc_rd_en.eq(1)                 # words: the read runs free
        if self._indirect:
            m.d.comb += [ctrl.idx.eq(self.idx), dma.idx.eq(ctrl.dma_idx),
                         ctrl.idx_wr_en.eq(dma.idx_wr_en), ctrl.idx_wr_data.eq(dma.idx_wr_data)]
        if self._scaled:
            m.d.comb += [core.scale_a.eq(ctrl.scale_a), core.scale_b.eq(ctrl.scale_b)]
        if vec is not None:    # an ArchSpec without a vector unit: vec_busy stays low
            m.submodules.vec = vec
            m.d.comb += [
                vec.dma_wr_en.eq(dma.v_wr_en), vec.dma_wr_addr.eq(dma.v_wr_addr),
                vec.dma_wr_data.eq(dma.v_wr_data), vec.dma_rd_addr.eq(dma.v_rd_addr),
                dma.v_rd_data.eq(vec.dma_rd_data),
                vec.start.eq(ctrl.vec_start), vec.op.eq(ctrl.vec_op),
                vec.count.eq(ctrl.vec_count), vec.a.eq(ctrl.vec_a), vec.b.eq(ctrl.vec_b),
                vec.b_inc.eq(ctrl.vec_b_inc), vec.dst.eq(ctrl.vec_dst), vec.seg.eq(ctrl.vec_seg),
                *[getattr(vec, f"scan_{f}").eq(getattr(ctrl, f"scan_{f}"))
                  for f in ("start", "count", "ab", "c", "h0", "dst")],
                ctrl.vec_busy.eq(vec.busy), self.vec_busy.eq(vec.busy)]
        return m


def write_accel_rtl(arch: ArchSpec, out_dir: str | Path, platform=None) -> Path:
    """Write ``<ACCEL_TOP_NAME>.v`` for ``arch`` to ``out_dir`` (elaborated for ``platform``,
    e.g. :class:`~tilewright.rtl.fpga_primitives.FpgaFamily`); return its path."""

    text = verilog.convert(AccelTop(arch), name=ACCEL_TOP_NAME, emit_src=False,
                           platform=platform)
    return write_verilog(out_dir, ACCEL_TOP_NAME, text)


def write_accel_top(arch: ArchSpec, out_dir: str | Path) -> dict[str, Any]:
    """``tilewright rtl --top accel``: write ``<ACCEL_TOP_NAME>.v`` and ``manifest.json`` (ports,
    the ISA's instruction-memory and vector-buffer sizes) to ``out_dir``; return the manifest."""


    t0 = time.perf_counter()
    top = AccelTop(arch)
    text = verilog.convert(top, name=ACCEL_TOP_NAME, emit_src=False)
    ports = manifest_ports(top)
    vu = arch.vector_unit
    return write_verilog(out_dir, ACCEL_TOP_NAME, text, {
        "top": ACCEL_TOP_NAME,
        "kind": arch.tensor_engine.kind,
        "generator": "tilewright.rtl.accel_top.AccelTop",
        "generator_version": ACCEL_GENERATOR_VERSION,
        "arch": arch.model_dump(mode="json"),
        "arch_hash": arch.content_hash(),
        "ports": ports,
        "imem_words": IMEM_WORDS,
        "memory_beat_bytes": beat_bytes(arch),
        "vector_engine": ({"lanes": vu.lanes, "buffer_words": VBUF_WORDS,
                           **({"banks": VBUF_BANKS} if AccelTop._banked(arch) else {})}
                          if vu is not None else None),
        "generation_seconds": round(time.perf_counter() - t0, 3),
    })
