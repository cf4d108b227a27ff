"""ClusterSpec: the validated description of a multi-chip system (chips, node fabric, network).

A cluster is ``nodes`` nodes of ``chips_per_node`` identical chips. A chip is either an
:class:`~tilewright.arch.ArchSpec` design point (GEMM time from the cycle model) or a GPU-like
roofline preset from public datasheets (:data:`GPU_PRESETS`). Chips in a node talk over the
``intra_node`` fabric; nodes talk over the ``inter_node`` network, replicated ``planes`` times
(multi-plane / multi-rail: chip i of a node sends on its own rail's planes; routing in
:mod:`.topology`).

Units: bandwidths in GB/s (1e9 bytes/s) *per direction per link*, latencies in µs, capacities in
GiB (2**30 bytes). Invalid input raises :class:`ClusterSpecError`, one line naming the field, the
value given and what is accepted — the same style as :class:`~tilewright.arch.ArchSpecError`::

    configs/clusters/bad.yaml: inter_node.link_gbps = -1: must be a number above 0
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field

from tilewright import configs as _configs
from tilewright.arch import ArchSpec, ArchSpecError, load_arch
from tilewright.errors import UserError
from tilewright.validation import find_user_file, parse_yaml, read_user_text, validate_mapping

__all__ = ["ClusterSpec", "ClusterSpecError", "PlanError", "GpuChip", "ArchChip", "IntraNode",
           "InterNode", "Pools", "GpuPreset", "GPU_PRESETS", "load_cluster", "CLUSTER_PRESET_DIR"]

CLUSTER_PRESET_DIR = Path(_configs.__file__).parent / "clusters"


class ClusterSpecError(UserError, ValueError):
    """A malformed cluster file or an impossible plan; ``str(err)`` is one line naming the field
    (or plan), the value given and what is accepted."""


class PlanError(ClusterSpecError):
    """A parallelism plan that cannot run on the cluster (does not divide, does not fit)."""


#: the fastest link a cluster file may describe (GB/s): 1e12 GB/s still models an ideal link
#: (studies of a free network use 1e9); far above that the simulated times lose their precision
MAX_LINK_GBPS = 1e12
#: the slowest link traversal a cluster file may describe (µs): one second per hop
MAX_LATENCY_US = 1e6


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=False)


class GpuPreset(BaseModel):
    """Roofline figures of a GPU from its public datasheet (dense, no sparsity)."""

    model_config = ConfigDict(frozen=True)
    tensor_flops: float     # FLOP/s, dense BF16 tensor-core peak
    fp8_tensor_flops: float = 0.0   # FLOP/s, dense FP8 tensor-core peak (0: no FP8 tensor cores)
    vector_flops: float     # FLOP/s, FP32 non-tensor (CUDA-core) peak: norms, softmax, elementwise
    hbm_bytes_per_s: float  # bytes/s
    hbm_gib: float          # GiB of HBM
    element_bytes: int = 2  # BF16 activations/weights
    tdp_w: float = 0.0      # W, maximum thermal design power of the board (GPU + HBM)
    idle_w: float = 0.0     # W, the board powered and idle (an assumption, see GPU_PRESETS)
    source: str = ""
    # achieved-efficiency model (:mod:`.costs`; the constants table with each one's provenance
    # is in that module's docstring)
    sms: int = 0                        # streaming multiprocessors (GEMM wave quantization)
    cta_tile: tuple[int, int] = (128, 128)   # GEMM output tile (rows, cols) of one CTA
    gemm_efficiency: float = 1.0        # in-training achieved fraction of tensor_flops (fitted)
    fp8_gemm_efficiency: float = 1.0    # achieved fraction of fp8_tensor_flops (cited, .costs)
    attention_efficiency: float = 1.0   # fused (FlashAttention) achieved fraction of tensor_flops
    hbm_efficiency: float = 1.0         # achievable fraction of hbm_bytes_per_s
    kernel_launch_s: float = 0.0        # s, fixed cost of one kernel (launch + tail)
    iteration_overhead_s: float = 0.0   # s, serving: scheduler + sampling per iteration


# NVIDIA H100 Tensor Core GPU datasheet (SXM5 column): BF16 989 TFLOP/s dense (1,979 with
# sparsity), FP8 1,979 TFLOP/s dense (3,958 with sparsity), FP32 67 TFLOP/s, 80 GB HBM3 at
# 3.35 TB/s, NVLink 900 GB/s (both directions).
# https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet
# (FP8 matrix 1978.9 TFLOP/s dense, 3957.8 sparse, also in
# https://glennklockwood.com/garden/processors/h100). A100 (Ampere) has no FP8 tensor cores.
# NVIDIA A100 datasheet (80GB SXM column): BF16 312 TFLOP/s dense, FP32 19.5 TFLOP/s,
# 80 GB HBM2e at 2,039 GB/s, NVLink 600 GB/s (both directions).
# https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf
# Board power (the cluster energy model, .energy): tdp_w confirmed - H100 SXM "Max thermal design
# power (TDP) up to 700W (configurable)", the datasheet's wording found quoted in
# https://gpu.blog/gpus/nvidia-h100-sxm ("Up to 700W (configurable)") and
# https://hawkvelt.id.au/post/2024-08-04-nvidia-h100 (SXM5 "TDP: Up to 700W"); A100 80GB SXM
# "400 W maximum" in https://glennklockwood.com/garden/processors/A100 (citing the datasheet
# above) and https://www.thundercompute.com/blog/nvidia-a100-specs-full-guide ("SXM ... 400W").
# idle_w is an assumption: 0.2 x tdp_w (no datasheet gives idle power). Cross-checks (not used):
# arXiv:2605.23918 measures a 26-50 W step between bare idle and idle with a CUDA context on
# H100/A100; an A100 SXM white paper reports 146.66 W at 0 % utilization
# (https://news.chathome.org/news/gpu-telemetry-anomaly-146w-idle-draw-on-a100-white-paper-AW5mREYZ).
GPU_PRESETS: dict[str, GpuPreset] = {
    "h100-sxm": GpuPreset(tensor_flops=989e12, fp8_tensor_flops=1979e12, vector_flops=67e12, hbm_bytes_per_s=3.35e12,
                          hbm_gib=80e9 / 2**30, tdp_w=700.0, idle_w=0.2 * 700.0,
                          source="NVIDIA H100 datasheet, SXM5", sms=132, cta_tile=(128, 256),
                          gemm_efficiency=0.90, attention_efficiency=0.50, hbm_efficiency=0.90,
                          fp8_gemm_efficiency=1550e12 / 1979e12,
                          kernel_launch_s=4e-6, iteration_overhead_s=2.0e-3),
    "a100-sxm-80gb": GpuPreset(tensor_flops=312e12, vector_flops=19.5e12,
                               hbm_bytes_per_s=2.039e12, hbm_gib=80e9 / 2**30,
                               tdp_w=400.0, idle_w=0.2 * 400.0,
                               source="NVIDIA A100 datasheet, 80GB SXM", sms=108,
                               cta_tile=(128, 128), gemm_efficiency=0.60,
                               attention_efficiency=0.65, hbm_efficiency=0.88,
                               kernel_launch_s=4e-6, iteration_overhead_s=2.0e-3),
}


class GpuChip(_Frozen):
    """A GPU-like chip costed by a roofline on its datasheet figures."""

    kind: Literal["gpu"]
    preset: Literal["h100-sxm", "a100-sxm-80gb"] = Field(
        ..., description="datasheet preset (see GPU_PRESETS for the figures and sources)")


class ArchChip(_Frozen):
    """A chip built from an ArchSpec. Every fact about the chip lives in the ArchSpec: off-chip
    capacity in ``offchip.capacity_gib``, vector throughput in ``vector_unit.lanes`` (elements
    per cycle; the tensor engine's column count when there is no vector unit, the compiler
    Report's convention). ``hbm_gib`` and ``vector_ops_per_cycle`` are the deprecated places of
    those facts: still read (with a FutureWarning) when the ArchSpec leaves them unset, an error
    when they contradict it."""

    kind: Literal["arch"]
    arch: Union[str, dict[str, Any]] = Field(
        ..., description="ArchSpec preset name, YAML path, or an inline ArchSpec mapping")
    hbm_gib: Optional[float] = Field(
        None, gt=0, description="DEPRECATED: off-chip capacity in GiB; use the ArchSpec's "
                                "offchip.capacity_gib")
    vector_ops_per_cycle: Optional[int] = Field(
        None, ge=1, description="DEPRECATED: vector ops/cycle; use the ArchSpec's "
                                "vector_unit.lanes")


Chip = Annotated[Union[GpuChip, ArchChip], Field(discriminator="kind")]


class IntraNode(_Frozen):
    """The fabric between the chips of one node."""

    topology: Literal["none", "switch", "ring", "torus", "fully_connected"] = Field(
        "none", description="'switch': one link per chip up to a non-blocking switch and one "
                            "down (NVLink/NVSwitch style); 'ring'/'torus': neighbour links, "
                            "shortest-direction dimension-order routing; 'fully_connected': a "
                            "direct link between every ordered pair of chips")
    link_gbps: float = Field(1.0, gt=0, le=MAX_LINK_GBPS,
                             description="GB/s per link per direction")
    latency_us: float = Field(0.0, ge=0, le=MAX_LATENCY_US, description="µs per link traversal")
    dims: Optional[list[int]] = Field(None, description="torus dimensions (product = chips_per_node)")


class InterNode(_Frozen):
    """The network between nodes; ``planes`` identical copies (rails), chip i of a node on rail
    i (routing: :mod:`.topology`)."""

    topology: Literal["none", "switch", "fat_tree", "ring", "torus", "fully_connected"] = Field(
        "none", description="'switch': each node's NIC link to one non-blocking switch; "
                            "'fat_tree': two levels, nodes_per_leaf nodes per leaf switch, "
                            "`spines` spine switches, one uplink per leaf per spine; "
                            "'ring'/'torus'/'fully_connected': direct node-to-node links")
    link_gbps: float = Field(1.0, gt=0, le=MAX_LINK_GBPS,
                             description="GB/s per link per direction, per plane")
    latency_us: float = Field(0.0, ge=0, le=MAX_LATENCY_US, description="µs per link traversal")
    planes: int = Field(1, ge=1, le=64, description="parallel network planes (rails)")
    dims: Optional[list[int]] = Field(None, description="torus dimensions (product = nodes)")
    nodes_per_leaf: int = Field(1, ge=1, description="fat_tree: nodes under one leaf switch")
    spines: int = Field(1, ge=1, description="fat_tree: spine switches")
    uplink_gbps: Optional[float] = Field(
        None, gt=0, le=MAX_LINK_GBPS,
        description="fat_tree: GB/s of each leaf-spine link; default link_gbps")


class Pools(_Frozen):
    """Serving pools for prefill/decode disaggregation (Splitwise): chips [0, prefill_chips) form
    the prefill pool, the rest the decode pool."""

    prefill_chips: int = Field(..., ge=1, description="chips in the prefill pool")


class ClusterSpec(_Frozen):
    """A multi-chip system. Frozen; load with :func:`load_cluster`."""

    name: str = Field("unnamed", min_length=1)
    chip: Chip
    nodes: int = Field(1, ge=1, le=1_000_000, description="node count")
    chips_per_node: int = Field(1, ge=1, le=4096, description="chips in one node")
    intra_node: IntraNode = IntraNode()
    inter_node: InterNode = InterNode()
    pools: Optional[Pools] = None

    @property
    def n_chips(self) -> int:
        return self.nodes * self.chips_per_node

    def node_of(self, chip: int) -> int:
        return chip // self.chips_per_node

    def arch(self, source: str | None = None) -> ArchSpec | None:
        """The chip's ArchSpec (None for GPU presets)."""
        if not isinstance(self.chip, ArchChip):
            return None
        if isinstance(self.chip.arch, dict):
            return ArchSpec.from_dict(self.chip.arch, source=f"{source or self.name}: chip.arch")
        return load_arch(self.chip.arch)

    def chip_capacity_gib(self, source: str | None = None) -> float:
        """Off-chip capacity (GiB) of an ArchSpec chip: ``offchip.capacity_gib``, or the
        deprecated ``chip.hbm_gib`` (FutureWarning); a clear error if neither or they differ."""
        arch, chip, src = self.arch(source), self.chip, source or self.name
        assert arch is not None and isinstance(chip, ArchChip)
        cap = arch.offchip.capacity_gib
        if chip.hbm_gib is not None:
            if cap is not None and cap != chip.hbm_gib:
                raise ClusterSpecError(
                    f"{src}: chip.hbm_gib = {chip.hbm_gib} contradicts the ArchSpec's "
                    f"offchip.capacity_gib = {cap}; drop the deprecated chip.hbm_gib")
            warnings.warn(f"{src}: chip.hbm_gib is deprecated; set the ArchSpec's "
                          "offchip.capacity_gib (GiB) instead", FutureWarning, stacklevel=3)
            return chip.hbm_gib
        if cap is None:
            raise ClusterSpecError(f"{src}: chip.arch.offchip.capacity_gib = (missing): a cluster "
                                   "chip needs its off-chip capacity in GiB")
        return cap

    def chip_vector_lanes(self, source: str | None = None) -> int:
        """Vector elementwise ops per cycle of an ArchSpec chip: ``vector_unit.lanes`` (the
        tensor engine's columns without a vector unit, as the compiler's Report assumes), or
        the deprecated ``chip.vector_ops_per_cycle`` when there is no vector unit
        (FutureWarning); a clear error if it contradicts the vector unit."""
        arch, chip, src = self.arch(source), self.chip, source or self.name
        assert arch is not None and isinstance(chip, ArchChip)
        lanes = arch.vector_unit.lanes if arch.vector_unit is not None else None
        old = chip.vector_ops_per_cycle
        if old is not None:
            if lanes is not None and old != lanes:
                raise ClusterSpecError(
                    f"{src}: chip.vector_ops_per_cycle = {old} contradicts the ArchSpec's "
                    f"vector_unit.lanes = {lanes}; drop the deprecated chip.vector_ops_per_cycle")
            warnings.warn(f"{src}: chip.vector_ops_per_cycle is deprecated; set the ArchSpec's "
                          "vector_unit.lanes instead", FutureWarning, stacklevel=3)
            return old
        return lanes if lanes is not None else arch.tensor_engine.cols

    # ---- construction ---------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Any, source: str = "cluster") -> "ClusterSpec":
        """Validate a mapping; raise :class:`ClusterSpecError` with a one-line message."""
        spec = validate_mapping(cls, data, source, ClusterSpecError, what="cluster field",
                                union_fields=("chip",))
        spec._check(source)
        return spec

    @classmethod
    def from_yaml(cls, text: str, source: str = "cluster") -> "ClusterSpec":
        return cls.from_dict(parse_yaml(text, source, ClusterSpecError), source)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json", exclude_none=True), sort_keys=False)

    def _check(self, src: str) -> None:
        """Cross-field checks pydantic cannot express, each a one-line error."""
        def bad(field: str, value: Any, accepted: str) -> ClusterSpecError:
            return ClusterSpecError(f"{src}: {field} = {value!r}: {accepted}")

        try:
            self.arch(src)
        except ArchSpecError as exc:
            raise ClusterSpecError(str(exc)) from None
        if isinstance(self.chip, ArchChip):
            self.chip_capacity_gib(src)
            self.chip_vector_lanes(src)
        intra, inter = self.intra_node, self.inter_node
        if self.chips_per_node > 1 and intra.topology == "none":
            raise bad("intra_node.topology", "none",
                      f"chips_per_node = {self.chips_per_node} needs a fabric: one of switch, "
                      "ring, torus, fully_connected")
        if self.nodes > 1 and inter.topology == "none":
            raise bad("inter_node.topology", "none",
                      f"nodes = {self.nodes} needs a network: one of switch, fat_tree, ring, "
                      "torus, fully_connected")
        for name, fab, count in (("intra_node", intra, self.chips_per_node),
                                 ("inter_node", inter, self.nodes)):
            if fab.topology == "torus":
                if not fab.dims or any(d < 1 for d in fab.dims) or math.prod(fab.dims) != count:
                    raise bad(f"{name}.dims", fab.dims,
                              f"torus dims must be positive integers whose product is {count}")
            elif fab.dims is not None:
                raise bad(f"{name}.dims", fab.dims, "only a torus takes dims")
        if inter.topology != "fat_tree":     # fat-tree fields set on another network: refused
            for fld in ("nodes_per_leaf", "spines", "uplink_gbps"):
                value = getattr(inter, fld)
                if value != InterNode.model_fields[fld].default:
                    raise bad(f"inter_node.{fld}", value,
                              f"only a fat_tree takes it (inter_node.topology is "
                              f"{inter.topology!r}); accepted: inter_node.topology: fat_tree, "
                              f"or leave {fld} out")
        if inter.topology == "fat_tree" and self.nodes % inter.nodes_per_leaf:
            raise bad("inter_node.nodes_per_leaf", inter.nodes_per_leaf,
                      f"must divide nodes = {self.nodes}")
        if self.pools is not None and not 1 <= self.pools.prefill_chips < self.n_chips:
            raise bad("pools.prefill_chips", self.pools.prefill_chips,
                      f"must be from 1 to {self.n_chips - 1} (the rest form the decode pool)")


def load_cluster(path: str | Path) -> ClusterSpec:
    """Load a ClusterSpec from a YAML file or a preset name (``configs/clusters/NAME.yaml``)."""
    p = find_user_file(path, CLUSTER_PRESET_DIR, ClusterSpecError, what="cluster preset")
    return ClusterSpec.from_yaml(read_user_text(p, ClusterSpecError, what="cluster YAML"),
                                 source=str(path))
