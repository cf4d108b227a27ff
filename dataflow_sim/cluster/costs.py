"""Per-chip cost of one op: GEMMs from the cycle model (ArchSpec chips) or a roofline (GPU
presets); every non-GEMM op from an explicit roofline. No op is ever free.

Conventions (seconds everywhere):

* **GEMM on an ArchSpec chip** — ``gemm_cycles_array(m, k, n, rows, cols, dataflow).cycles /
  clock``: the tensor engine's own cycle count (``tilewright`` convention); off-chip traffic of the
  GEMM is the cycle model's business, not added here.
* **GEMM on a GPU preset** — ``max(2·m·k·n / tensor_flops, element_bytes·(m·k + k·n + m·n) /
  hbm_bytes_per_s)``: each GEMM reads its operands and writes its result once.
* **Non-GEMM op (norm, softmax, rotary, activation, residual, routing, KV write, gather)** —
  ``max(flops / vector_flops_per_s, bytes / hbm_bytes_per_s)``. For ArchSpec chips the vector
  throughput is ``vector_unit.lanes · clock`` (the tensor engine's column count without a vector
  unit, as the compiler's Report assumes), the bandwidth ``offchip.bandwidth_gbps`` and the
  capacity ``offchip.capacity_gib`` (:meth:`.cluster_spec.ClusterSpec.chip_capacity_gib`). An op with neither FLOPs nor
  bytes is an error.

GPU presets: achieved efficiency (not 100 % of the datasheet)
--------------------------------------------------------------
A GPU preset (:data:`.cluster_spec.GPU_PRESETS`) is costed with what its kernels achieve:

* **GEMM** (one launch of ``count`` batched M×K×N GEMMs): the output is cut into CTA tiles
  ``TM×TN`` (``cta_tile``); ``tiles = ⌈M/TM⌉·⌈N/TN⌉``; when one GEMM's tiles underfill the SMs,
  K is split (split-K, ``split = clip(⌊SMs/tiles⌋, 1, ⌊K/256⌋)``, as cuBLAS/CUTLASS do for
  skinny GEMMs); ``waves = ⌈count·tiles·split / SMs⌉``; compute time
  ``waves · 2·TM·TN·⌈K/split⌉ / (tensor_flops·gemm_efficiency / SMs)`` — tile and wave
  quantization over the SMs (:func:`wave_efficiency` gives the useful share). Time is
  ``max(compute, e·(MK + KN + MN) / (hbm·hbm_efficiency)) + kernel_launch_s``.
* **Attention** is fused (FlashAttention-style, op kind ``attention``): FLOPs
  ``4·hd·pairs`` per head with ``pairs = q·(c − q) + q(q+1)/2`` under the causal mask (the upper
  triangle is skipped: about half of ``q·c`` when ``q = c``); HBM traffic is Q, K, V and O only
  (no ``q×c`` score matrix); ``max(FLOPs / (tensor_flops·attention_efficiency), bytes / bw) +
  kernel_launch_s``. Backward: 2.5× the forward FLOPs (5 GEMMs against 2, the recompute of the
  scores included — FlashAttention-2, Dao 2023, §3.1), 2× the bytes.
* **Non-GEMM ops**: ``max(flops / vector_flops, bytes / (hbm·hbm_efficiency))``, plus
  ``kernel_launch_s`` per op row of an op table (:meth:`ChipModel.op_seconds`).
* **Per-iteration overhead** (serving: scheduler, sampling, host work) ``iteration_overhead_s``.

Constants (per preset; C = cited, D = derived, F = fitted by hand on the calibration rows of
``configs/validation/cluster_points.yaml``, U = an assumption not confirmed by a source):

=====================  =========  =========  ====  ==========================================
constant               h100-sxm   a100-80gb  kind  source / calibration rows
=====================  =========  =========  ====  ==========================================
sms                    132        108        C     NVIDIA H100 (Hopper) and A100 (Ampere)
                                                   architecture white papers
cta_tile               128×256    128×128    U     CUTLASS default BF16 tile shapes (SM90
                                                   128×256×64 warp-specialized, SM80 128×128)
gemm_efficiency        0.90       0.60       F     fitted on the calibration train rows
                                                   (``python benchmarks/validation.py --fit``).
                                                   A100: 3 torchtitan FSDP rows, grid 0.55-0.80,
                                                   median |error| 2.2 % at 0.60 (0.575: 3.6 %,
                                                   0.65: 7.6 %). H100: the Llama 3
                                                   405B 8,192-GPU row, grid 0.8/0.9/1.0 gives
                                                   12.9/4.6/3.1 %; the optimum sits at the
                                                   physical bound (a sign the assumed full
                                                   recompute of that row overstates the work), so
                                                   0.90 is kept. This is the *in-training* fraction: it
                                                   absorbs what the model leaves out (eager-mode
                                                   elementwise kernels, NCCL kernels sharing the
                                                   SMs, allocator and host gaps); an isolated
                                                   large cuBLAS GEMM reaches more
attention_efficiency   0.50       0.65       C/U   cited ranges, value chosen inside them (not
                                                   fitted): A100 FlashAttention-2 fwd+bwd reaches
                                                   up to 72 % of peak (Dao 2023, arXiv:2307.08691);
                                                   H100 FA2 ~35 %, FA3 ~75 % (Shah et al. 2024,
                                                   arXiv:2407.08608)
hbm_efficiency         0.90       0.88       U     large-copy bandwidth is ~0.9 of the datasheet
                                                   figure (not confirmed by a primary source)
kernel_launch_s        4 µs       4 µs       U     typical CUDA launch + tail; not confirmed
iteration_overhead_s   2 ms       2 ms       U     scheduler + sampling per serving iteration; no
                                                   serving calibration row yet (not confirmed)
=====================  =========  =========  ====  ==========================================

ArchSpec chips keep the cycle model (no efficiency factors, no launch cost).

FP8 GEMMs (``gemm_format = "fp8"`` of a plan, :func:`with_gemm_format`): a GPU preset's GEMMs
run at its dense FP8 tensor peak (H100 SXM 1,979 TFLOP/s, NVIDIA H100 datasheet; C) times
``fp8_gemm_efficiency`` in the same wave model, reading 1-byte operands and writing the result
at the chip's element size (BF16). H100: 1550/1979 = 0.78 (C: DeepGEMM's best FP8 GEMM, "up to
1550 TFLOPS on H800", github.com/deepseek-ai/DeepGEMM README, 2025-04-18; H800 has H100's SMs
and clocks; the best shape's figure applied to every shape, an upper bound). Attention, non-GEMM ops and MFU's peak stay BF16. A preset
without FP8 tensor cores (A100) and ArchSpec chips (set the tensor engine's ``input_format``)
refuse it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from tilewright.arch import ArchSpec
from tilewright.formats import FORMATS
from tilewright.compiler.engine_timing import tensor_engine_gemm_cycles

from .cluster_spec import GPU_PRESETS, ArchChip, ClusterSpec, GpuPreset, PlanError

__all__ = ["ChipModel", "chip_model", "with_gemm_format", "GEMM_FORMATS", "ZeroCostOp", "wave_efficiency", "gpu_gemm_waves",
           "causal_pairs", "FA_BACKWARD_FLOPS", "SPLIT_K_MIN"]

#: FlashAttention backward FLOPs over forward FLOPs: 5 GEMMs (recompute S, dP, dV, dQ, dK) over 2
#: (Dao 2023, FlashAttention-2, §3.1)
FA_BACKWARD_FLOPS = 2.5
#: split-K never cuts K below this many elements per CTA (one pipelined mainloop of 4×64)
SPLIT_K_MIN = 256


def gpu_gemm_waves(p: GpuPreset, m, k, n, count=1) -> tuple[np.ndarray, np.ndarray]:
    """(waves, K elements per CTA) of ``count`` batched M×K×N GEMMs on preset ``p``: output
    tiles ``⌈M/TM⌉·⌈N/TN⌉``; split-K ``clip(⌊SMs/tiles⌋, 1, ⌊K/256⌋)`` when the tiles underfill
    the SMs; ``waves = ⌈count·tiles·split / SMs⌉``. Arrays broadcast; dimensions ≥ 1."""
    tm, tn = p.cta_tile
    m, k, n, count = (np.asarray(x, dtype=np.int64) for x in (m, k, n, count))
    tiles = -(-m // tm) * -(-n // tn)
    split = np.clip(np.minimum(p.sms // tiles, k // SPLIT_K_MIN), 1, None)
    waves = -(-(count * tiles * split) // p.sms)
    return waves, -(-k // split)


def wave_efficiency(p: GpuPreset, m, k, n, count=1) -> np.ndarray:
    """Useful share of the tensor cores' issued work for ``count`` M×K×N GEMMs on preset ``p``
    (tile and wave quantization): ``count·M·K·N / (waves·SMs·TM·TN·k_cta)``, in (0, 1]."""
    waves, k_cta = gpu_gemm_waves(p, m, k, n, count)
    tm, tn = p.cta_tile
    useful = np.asarray(count, np.float64) * m * k * n
    return useful / (waves * p.sms * tm * tn * k_cta)


def causal_pairs(q, c) -> np.ndarray:
    """(query, key) pairs a causal mask keeps for ``q`` new queries at the end of a ``c``-key
    context (c ≥ q): ``q·(c − q) + q·(q + 1)/2``."""
    q, c = np.asarray(q, np.float64), np.asarray(c, np.float64)
    return q * (c - q) + q * (q + 1) / 2

#: bytes per element of each format, from the formats registry
_FORMAT_BYTES = {name: max(1, f.bits // 8) for name, f in FORMATS.items()}


class ZeroCostOp(ValueError):
    """An op reached the cost model with no FLOPs and no bytes (it would be costed as free)."""


@dataclass(frozen=True)
class ChipModel:
    """What the cluster model needs to know about one chip."""

    name: str
    hbm_bytes: float            # capacity, bytes
    hbm_bytes_per_s: float      # off-chip bandwidth, bytes/s
    vector_flops_per_s: float   # non-GEMM throughput, ops/s
    element_bytes: int          # bytes per activation/weight element
    peak_gemm_flops_per_s: float  # 2·MACs/s of the tensor engine (for utilization)
    arch: ArchSpec | None = None  # set: GEMMs from the cycle model; None: GEMM roofline
    gpu: GpuPreset | None = None  # set: achieved-efficiency model (module docstring)
    gemm_format: str = "bf16"     # GPU presets: "fp8" = GEMMs at the FP8 peak, 1-byte operands

    @property
    def gemm_peak_flops(self) -> float:
        """Peak FLOP/s of this chip's GEMMs in :attr:`gemm_format`: FP8 scales the (possibly
        power-capped) BF16 peak by the preset's FP8/BF16 peak ratio (2 on H100)."""
        if self.gemm_format == "fp8" and self.gpu is not None:
            return self.peak_gemm_flops_per_s * self.gpu.fp8_tensor_flops / self.gpu.tensor_flops
        return self.peak_gemm_flops_per_s

    @property
    def gemm_operand_bytes(self) -> float:
        """Bytes per GEMM input element (FP8: 1; else the element size)."""
        return 1.0 if self.gemm_format == "fp8" else float(self.element_bytes)

    @property
    def fused_attention(self) -> bool:
        """Attention as one fused kernel (GPU presets) rather than GEMMs + softmax."""
        return self.gpu is not None

    @property
    def launch_s(self) -> float:
        """Fixed seconds per kernel (0 for ArchSpec chips and plain rooflines)."""
        return self.gpu.kernel_launch_s if self.gpu is not None else 0.0

    @property
    def iteration_overhead_s(self) -> float:
        """Fixed seconds per serving iteration (scheduler, sampling; 0 without a GPU preset)."""
        return self.gpu.iteration_overhead_s if self.gpu is not None else 0.0

    @property
    def hbm_achievable(self) -> float:
        """Achievable off-chip bandwidth, bytes/s."""
        return self.hbm_bytes_per_s * (self.gpu.hbm_efficiency if self.gpu is not None else 1.0)

    def _gpu_gemm(self, m, k, n, count) -> np.ndarray:
        p = self.gpu
        assert p is not None
        waves, k_cta = gpu_gemm_waves(p, m, k, n, count)
        tm, tn = p.cta_tile
        eff = p.fp8_gemm_efficiency if self.gemm_format == "fp8" else p.gemm_efficiency
        per_sm = self.gemm_peak_flops * eff / p.sms
        compute = waves * 2.0 * tm * tn * k_cta / per_sm
        m, k, n, count = (np.asarray(x, np.float64) for x in (m, k, n, count))
        mem = count * (self.gemm_operand_bytes * (m * k + k * n) + self.element_bytes * m * n) \
            / self.hbm_achievable
        return np.maximum(compute, mem) + p.kernel_launch_s

    def attention_seconds(self, flops, nbytes) -> np.ndarray:
        """Seconds of fused attention kernels with ``flops`` FLOPs and ``nbytes`` HBM bytes
        (GPU presets; each a kernel launch)."""
        if self.gpu is None:
            raise ValueError(f"{self.name}: fused attention is costed for GPU presets only")
        flops, nbytes = np.asarray(flops, np.float64), np.asarray(nbytes, np.float64)
        return np.maximum(flops / (self.peak_gemm_flops_per_s * self.gpu.attention_efficiency),
                          nbytes / self.hbm_achievable) + self.gpu.kernel_launch_s

    def gemm_seconds(self, m, k, n, count=1, positive: bool = False) -> np.ndarray:
        """Seconds of ``count`` independent M×K×N GEMMs (numpy-broadcast over arrays); a GEMM
        with a zero dimension takes 0 s. ``positive=True`` promises every dimension is ≥ 1."""
        if positive and self.gpu is not None:
            return self._gpu_gemm(m, k, n, count)
        if positive and self.arch is None:
            m, k, n = (np.asarray(x, dtype=np.float64) for x in (m, k, n))
            return np.maximum(2.0 * m * k * n / self.peak_gemm_flops_per_s,
                              self.element_bytes * (m * k + k * n + m * n)
                              / self.hbm_bytes_per_s) * count
        m, k, n, count = (np.asarray(x, dtype=np.int64) for x in (m, k, n, count))
        if self.arch is not None:
            te = self.arch.tensor_engine
            cycles, _ = tensor_engine_gemm_cycles(te, np.maximum(m, 1), np.maximum(k, 1),
                                                  np.maximum(n, 1))
            t = cycles / (self.arch.clock_mhz * 1e6)
        elif self.gpu is not None:
            pos = (m > 0) & (k > 0) & (n > 0)
            t = self._gpu_gemm(np.maximum(m, 1), np.maximum(k, 1), np.maximum(n, 1),
                               np.maximum(count, 1))
            return np.where(pos, t, 0.0)
        else:
            flops = 2.0 * m * k * n
            nbytes = self.element_bytes * (m * k + k * n + m * n).astype(np.float64)
            t = np.maximum(flops / self.peak_gemm_flops_per_s, nbytes / self.hbm_bytes_per_s)
        return np.where((m > 0) & (k > 0) & (n > 0), t * count, 0.0)

    def vector_seconds(self, flops, nbytes) -> np.ndarray:
        """Roofline seconds of non-GEMM ops with ``flops`` ops and ``nbytes`` off-chip bytes, at
        the achievable bandwidth; no launch cost (callers may cost per token: :meth:`op_seconds`
        adds :attr:`launch_s` per op row)."""
        if isinstance(flops, (int, float)) and isinstance(nbytes, (int, float)):
            if flops <= 0 and nbytes <= 0:
                raise ZeroCostOp("a non-GEMM op has neither FLOPs nor bytes; it cannot be "
                                 "costed (never cost an op as zero)")
            return max(flops / self.vector_flops_per_s, nbytes / self.hbm_achievable)
        flops, nbytes = np.asarray(flops, np.float64), np.asarray(nbytes, np.float64)
        if np.any((flops <= 0) & (nbytes <= 0)):
            raise ZeroCostOp("a non-GEMM op has neither FLOPs nor bytes; it cannot be costed "
                             "(never cost an op as zero)")
        return np.maximum(flops / self.vector_flops_per_s, nbytes / self.hbm_achievable)

    def op_seconds(self, ops: pd.DataFrame) -> np.ndarray:
        """Seconds of each row of an op table (``kind`` gemm|vector|attention; comm rows give 0
        here and are timed by the network). Each non-comm row is one kernel: its seconds
        include :attr:`launch_s` (the ``overhead`` component)."""
        kind = ops["kind"].to_numpy()
        out = np.zeros(len(ops))
        g = kind == "gemm"
        if g.any():
            out[g] = self.gemm_seconds(ops["m"].to_numpy()[g], ops["k"].to_numpy()[g],
                                       ops["n"].to_numpy()[g], ops["count"].to_numpy()[g])
        v = kind == "vector"
        if v.any():
            out[v] = self.vector_seconds(ops["flops"].to_numpy()[v],
                                         ops["bytes"].to_numpy()[v]) + self.launch_s
        a = kind == "attention"
        if a.any():
            out[a] = self.attention_seconds(ops["flops"].to_numpy()[a], ops["bytes"].to_numpy()[a])
        unknown = set(kind) - {"gemm", "vector", "attention", "comm"}
        if unknown:
            raise ValueError(f"op kinds {sorted(unknown)} have no cost model")
        return out


#: GEMM formats a plan may ask for
GEMM_FORMATS = ("bf16", "fp8")


def with_gemm_format(chip: ChipModel, fmt: str) -> ChipModel:
    """``chip`` with its GEMMs in format ``fmt`` (module docstring); ``bf16`` returns it
    unchanged. Raises :class:`.cluster_spec.PlanError` for a chip without FP8 tensor cores."""
    if fmt == "bf16":
        return chip
    if fmt not in GEMM_FORMATS:
        raise PlanError(f"gemm_format = {fmt!r}: accepted {', '.join(GEMM_FORMATS)}")
    if chip.gpu is None:
        raise PlanError(f"gemm_format = fp8: {chip.name} is an ArchSpec chip; its GEMM format "
                        "is its tensor engine's input_format (set it in the ArchSpec)")
    if chip.gpu.fp8_tensor_flops <= 0:
        raise PlanError(f"gemm_format = fp8: {chip.name} has no FP8 tensor cores (accepted: "
                        "h100-sxm, or gemm_format bf16)")
    return replace(chip, gemm_format="fp8")


def chip_model(spec: ClusterSpec) -> ChipModel:
    """The :class:`ChipModel` of the cluster's chip."""
    chip = spec.chip
    if isinstance(chip, ArchChip):
        arch = spec.arch()
        assert arch is not None
        te = arch.tensor_engine
        hz = arch.clock_mhz * 1e6
        with warnings.catch_warnings():     # already warned when the file was loaded
            warnings.simplefilter("ignore", FutureWarning)
            lanes = spec.chip_vector_lanes()
            cap = spec.chip_capacity_gib()
        return ChipModel(name=arch.name, hbm_bytes=cap * 2**30,
                         hbm_bytes_per_s=arch.offchip.bandwidth_gbps * 1e9,
                         vector_flops_per_s=lanes * hz,
                         element_bytes=_FORMAT_BYTES[te.input_format],
                         peak_gemm_flops_per_s=2.0 * te.macs_per_cycle * hz, arch=arch)
    p = GPU_PRESETS[chip.preset]
    return ChipModel(name=chip.preset, hbm_bytes=p.hbm_gib * 2**30,
                     hbm_bytes_per_s=p.hbm_bytes_per_s, vector_flops_per_s=p.vector_flops,
                     element_bytes=p.element_bytes, peak_gemm_flops_per_s=p.tensor_flops, gpu=p)
