"""Published NCCL bus bandwidths against the flow-level collectives (validation rows).

:func:`predict_collective` answers one row of ``configs/validation/collective_points.yaml``: it
builds the row's nodes (8 GPUs on an NVSwitch, ``nics_per_node`` rails of ``nic_gbps`` each on a
non-blocking fat tree), runs the row's collective at flow level (:class:`~.collectives.FlowTimer`:
ring on NCCL-like channels) on ``size_bytes`` and returns the nccl-tests bus bandwidth in GB/s.

Link rates are datasheet line rates times one achieved-efficiency factor per link kind, each
fitted on exactly one ``set: calibration`` row (and never on a held-out row):

* :data:`NVLINK_EFFICIENCY` = 370 / 450 — an NCCL maintainer's figure for 8 × H100: effective
  NVLink bandwidth 370 GB/s against the 450 GB/s line rate ("~20 % protocol overhead",
  https://github.com/NVIDIA/nccl-tests/issues/212);
* :data:`NETWORK_EFFICIENCY` = 192 / 200 — NVIDIA's measured 192 GB/s all-reduce busbw on DGX
  A100 nodes with 8 × 200 Gb/s InfiniBand (https://github.com/NVIDIA/nccl/issues/812).

The training and serving simulations use line rates (efficiency 1); these factors are for
comparing with nccl-tests and are the lead's to adopt elsewhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tilewright import configs as _configs

from .cluster_spec import ClusterSpec
from .collectives import FlowTimer, bus_bandwidth
from .topology import Topology

__all__ = ["NVLINK_EFFICIENCY", "NETWORK_EFFICIENCY", "COLLECTIVE_POINTS", "load_points",
           "predict_collective"]

NVLINK_EFFICIENCY = 370.0 / 450.0     # fitted: row h100-nvlink-8-allreduce-ring
NETWORK_EFFICIENCY = 192.0 / 200.0    # fitted: row dgx-a100-8x200g-allreduce
COLLECTIVE_POINTS = Path(_configs.__file__).parent / "validation" / "collective_points.yaml"
GPUS_PER_NODE = 8


def load_points(path: str | Path = COLLECTIVE_POINTS) -> list[dict[str, Any]]:
    """The rows of the collective validation file."""
    return yaml.safe_load(Path(path).read_text())["rows"]


def _cluster(row: dict[str, Any], nvlink_eff: float, net_eff: float) -> ClusterSpec:
    nodes = int(row.get("nodes", 1))
    spec: dict[str, Any] = {
        "name": row["id"], "chip": {"kind": "gpu", "preset": row["gpu"]}, "nodes": nodes,
        "chips_per_node": GPUS_PER_NODE,
        "intra_node": {"topology": "switch", "link_gbps": row["nvlink_gbps"] * nvlink_eff,
                       "latency_us": 0.5}}
    if nodes > 1:
        spec["inter_node"] = {"topology": "fat_tree", "link_gbps": row["nic_gbps"] * net_eff,
                              "latency_us": 1.0, "planes": int(row["nics_per_node"]),
                              "nodes_per_leaf": nodes, "spines": 1}
    return ClusterSpec.from_dict(spec, source=f"collective row {row['id']}")


def predict_collective(row: dict[str, Any], *, nvlink_efficiency: float = NVLINK_EFFICIENCY,
                       network_efficiency: float = NETWORK_EFFICIENCY) -> float:
    """Predicted nccl-tests busbw (GB/s) of one row: its collective over all
    ``nodes · 8`` GPUs, ring algorithm, at flow level."""
    spec = _cluster(row, nvlink_efficiency, network_efficiency)
    n = spec.n_chips
    kind, size = row["collective"], float(row["size_bytes"])
    t = FlowTimer(Topology(spec)).seconds(kind, [list(range(n))], size, "ring")
    return bus_bandwidth(kind, n, size, t)[1] / 1e9
