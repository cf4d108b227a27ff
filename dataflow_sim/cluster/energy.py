"""Energy of a cluster run (a training step or a serving run), in joules, from what the
simulation executed: the chips' busy time and work, and the bytes every link carried.

Terms (each in the run's metrics; ``energy_j`` is their sum):

* ``energy_compute_j`` — **ArchSpec chip**: dynamic energy of the executed MACs, vector element
  operations and their SRAM traffic (the compiler Reports' scratchpad and accumulator bytes when
  the work came from them, :data:`WORK_FIELDS`; the ``mac``, ``sram`` and ``vector`` terms of
  :func:`tilewright.dataflow_sim.energy_area.energy_breakdown` on the run's totals, with the
  technology table ``tech``, default :data:`DEFAULT_TECH`). **GPU preset**: chip-busy seconds x
  the board's ``tdp_w`` (:data:`~.cluster_spec.GPU_PRESETS`): a chip runs at its maximum board
  power while it computes.
* ``energy_idle_j`` — **GPU**: (chips x window − chip-busy seconds) x ``idle_w`` (waiting for
  inputs, for collectives, or for requests). **ArchSpec**: chips x window x the chip's static
  power (:func:`~tilewright.dataflow_sim.energy_area.static_power`: leakage at the supply its
  clock needs, off-chip PHY, board background) — static power burns busy or not, so it is
  charged for the whole window here and never in ``energy_compute_j``. The dynamic terms are at
  that supply too (``(V / v_nom)**2``, the table's voltage-frequency curve).
* ``energy_dram_j`` — **ArchSpec**: off-chip bytes x the table's ``dram_pj_per_byte``. **GPU**: 0
  — HBM power is part of the board power already charged above.
* ``energy_network_j`` = ``energy_intra_node_j`` + ``energy_inter_node_j``: the bytes each
  directed link of the topology carried x the pJ/byte of its class in
  ``configs/energy/network.yaml`` (intra-node link; NIC <-> switch; switch <-> switch; node <->
  node direct), whose entries are marked confirmed / derived / assumption with sources.

"Busy" is the compute a chip ran: for training the ranks' ``compute_s`` (exposed communication,
bubbles and waiting count as idle); for serving the iterations (a replica's chips are busy for a
whole iteration, in-iteration collectives included; with pipeline stages, each stage's chips
for their stage's share). The window is the step (training) or the serving makespan (first
arrival to last finish).

Work counts: training takes the MACs, vector ops and off-chip bytes of the same rows that set
the time — the compiler's forward and backward Reports (``cost_source="compiler"``) or the op
table (``"table"``: MACs = GEMM FLOPs / 2); recompute is counted again. Serving with the
compiler cost source on a dense model without EP counts each iteration's work from the same
compiled Reports (bucketed and interpolated alike) that time it — the cost path of
:func:`tilewright.dataflow_sim.token_cost.llm_step_cost`; otherwise (table source, MoE, EP) from
the op table's per-token and per-sequence formulas (:func:`serve_iteration_work`).
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from tilewright import configs as _configs
from tilewright.dataflow_sim.energy_area import energy_breakdown, load_tech, static_power
from tilewright.dataflow_sim.report import SRAM_TOTALS, sram_totals
from tilewright.validation import load_user_yaml, validate_mapping

from .cluster_spec import GPU_PRESETS, ClusterSpec, ClusterSpecError
from .costs import ChipModel
from .topology import Topology
from .workload import Dims, token_gemms, token_vectors

__all__ = ["NetworkEnergy", "load_network_energy", "NETWORK_ENERGY_FILE", "DEFAULT_TECH",
           "WORK_FIELDS", "ops_work", "report_work", "serve_iteration_work", "serve_work",
           "link_class",
           "network_energy", "cluster_energy", "add_traffic", "POWER_CAP_EXPONENT",
           "capped_clock_ratio", "power_capped_chip"]

NETWORK_ENERGY_FILE = Path(_configs.__file__).parent / "energy" / "network.yaml"
DEFAULT_TECH = "7nm"
"""technology table of ArchSpec chips when a run names none"""
WORK_FIELDS = ("macs", "vector_ops", "dram_bytes", *SRAM_TOTALS)
"""order of a work vector (numpy array of 7): MACs, vector ops, off-chip bytes and the
compiler Reports' SRAM traffic of the engine's tasks
(:data:`~tilewright.dataflow_sim.report.SRAM_TOTALS`; 0 for op-table work, whose MACs are
charged the engine's steady-state SRAM bytes per MAC by
:func:`~tilewright.dataflow_sim.energy_area.energy_breakdown`)"""
_N_WORK = len(WORK_FIELDS)


def _padded(w3: np.ndarray) -> np.ndarray:
    """An op-table (MACs, vector ops, bytes) work vector with no SRAM bytes known."""
    return np.concatenate((w3, np.zeros(_N_WORK - 3)))


class NetworkEnergy(BaseModel):
    """pJ per byte a directed link of each class carries (``configs/energy/network.yaml``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    sources: dict[str, str] = Field(default_factory=dict)
    intra_node_link_pj_per_byte: float = Field(..., ge=0)
    nic_link_pj_per_byte: float = Field(..., ge=0)
    switch_link_pj_per_byte: float = Field(..., ge=0)
    direct_link_pj_per_byte: float = Field(..., ge=0)

    def pj_per_byte(self, cls: str) -> float:
        return float(getattr(self, f"{cls}_pj_per_byte"))


@lru_cache(maxsize=4)
def load_network_energy(path: str | None = None) -> NetworkEnergy:
    """The network energy table (default :data:`NETWORK_ENERGY_FILE`)."""
    p = Path(path or NETWORK_ENERGY_FILE)
    return validate_mapping(NetworkEnergy, load_user_yaml(p, ClusterSpecError, what="energy YAML"),
                            str(p), ClusterSpecError, what="network energy field")


_CLASS = {"up": "intra_node_link", "down": "intra_node_link", "chip": "intra_node_link",
          "nic_up": "nic_link", "nic_down": "nic_link", "leaf_up": "switch_link",
          "spine_down": "switch_link", "node": "direct_link"}


def link_class(topology: Topology) -> list[str]:
    """Energy class of every link of ``topology`` (by the link's name, :mod:`.topology`)."""
    return [_CLASS[name.split("/")[0]] for name in topology.names]


def add_traffic(acc: dict[int, float], rates: Mapping[int, float], nbytes: float) -> None:
    """``acc[link] += rates[link] · nbytes`` (rates: bytes per byte, CollectiveTimer.traffic)."""
    for link, r in rates.items():
        acc[link] = acc.get(link, 0.0) + r * nbytes


def network_energy(topology: Topology, link_bytes: Mapping[int, float],
                   table: NetworkEnergy | None = None) -> dict[str, float]:
    """Joules of the bytes each link carried, split intra-node / inter-node, and the bytes."""
    table = table or load_network_energy()
    cls = link_class(topology)
    out = {"energy_intra_node_j": 0.0, "energy_inter_node_j": 0.0,
           "intra_node_link_bytes": 0.0, "inter_node_link_bytes": 0.0}
    for link, b in link_bytes.items():
        side = "intra_node" if cls[link] == "intra_node_link" else "inter_node"
        out[f"energy_{side}_j"] += b * table.pj_per_byte(cls[link]) * 1e-12
        out[f"{side}_link_bytes"] += b
    return out


def ops_work(ops: pd.DataFrame) -> np.ndarray:
    """(MACs, vector ops, off-chip bytes) of op-table rows (:mod:`.workload` columns):
    MACs = GEMM FLOPs / 2, vector ops = non-GEMM FLOPs; communication rows carry none."""
    g, v = ops["kind"] == "gemm", ops["kind"] == "vector"
    return _padded(np.array([float(ops.loc[g, "flops"].sum()) / 2,
                             float(ops.loc[v, "flops"].sum()),
                             float(ops.loc[g | v, "bytes"].sum())]))


def report_work(report: pd.DataFrame) -> np.ndarray:
    """Work vector (:data:`WORK_FIELDS`) of a compiler Report: its MACs, vector ops and
    off-chip bytes summed, and :func:`~tilewright.dataflow_sim.report.sram_totals`."""
    if report is None or not len(report):
        return np.zeros(_N_WORK)
    sram = sram_totals(report)
    return np.array([float(report[c].sum()) for c in ("macs", "vector_ops", "bytes")]
                    + [float(sram[k]) for k in SRAM_TOTALS])


def serve_iteration_work(dm: Dims, e: int, tp: int, ep: int, n_layers: int, q: np.ndarray,
                         c: np.ndarray, n_logits: int) -> np.ndarray:
    """(MACs, vector ops, off-chip bytes) of one serving iteration on all chips of a replica
    (``tp·ep`` chips per layer; pipeline stages split the layers, not the work): per layer the
    token GEMMs and non-GEMM ops of :func:`.workload.token_gemms`/:func:`.workload.token_vectors`
    for all ``T = Σq`` tokens (weights read once per EP rank), the attention of each sequence
    (scores and values GEMMs, ``q·c`` per query head each, and the softmax), the routed
    experts' ``T·top_k`` rows (every expert's weights read once); the embedding gather and the LM
    head's ``n_logits`` rows once per TP rank. Bytes follow the op table (inputs read, outputs
    written once). The batch enters only through the sums :func:`serve_work` takes."""
    q, c = np.asarray(q, np.float64), np.asarray(c, np.float64)
    return serve_work(dm, e, tp, ep, n_layers, iterations=1, tokens=float(q.sum()),
                      qc=float(q @ c), ctx=float(c.sum()), logits=float(n_logits),
                      logit_iterations=1 if n_logits else 0)


def serve_work(dm: Dims, e: int, tp: int, ep: int, n_layers: int, *, iterations: float,
               tokens: float, qc: float, ctx: float, logits: float,
               logit_iterations: float) -> np.ndarray:
    """(MACs, vector ops, off-chip bytes) of ``iterations`` serving iterations together
    (:func:`serve_iteration_work` of each, summed): the work is affine in each iteration's
    new tokens ``T = Σq``, ``Σ q·c``, ``Σ c`` and LM-head rows, with a per-iteration constant
    (weights read once per iteration; the LM head's once per iteration that has logits), so the
    run's total needs only those sums over iterations (``tokens``, ``qc``, ``ctx``, ``logits``)
    and the counts ``iterations`` and ``logit_iterations``."""
    T = tokens
    w = np.zeros(3)
    for _, k, n in token_gemms(dm):
        w += (T * k * n, 0.0, e * (T * k + iterations * ep * k * n + T * n))
    for _, f, b in token_vectors(dm, e):
        w += (0.0, T * f, T * b)
    if not dm.ssm:
        hk = dm.hd + (dm.hd_v or dm.hd)         # key + value widths (MLA: r + dr and r)
        qh, ch = T * hk, ctx * hk
        w += (dm.g * dm.kv * hk * qc, 5.0 * dm.h * qc,
              e * (dm.g * dm.kv * qh + dm.kv * ch + 2 * dm.h * qc) + 2 * dm.h * qc * e)
    if dm.moe:
        rows = T * dm.top_k
        w += (3.0 * rows * dm.d * dm.f_exp, 5.0 * rows * dm.f_exp,
              e * (rows * (2 * dm.d + 6 * dm.f_exp)
                   + iterations * dm.n_experts * 3 * dm.d * dm.f_exp))
    w *= n_layers
    w += (0.0, T * dm.d, 2 * T * dm.d * e + 4 * T)                       # embedding gather
    if logit_iterations:
        n = logits
        w += (n * dm.d * dm.vocab, 4 * n * dm.d + 5 * n * dm.vocab,
              e * (2 * n * dm.d + n * dm.d + logit_iterations * dm.d * dm.vocab + n * dm.vocab
                   + 2 * n * dm.vocab))
    return _padded(w * tp)


def cluster_energy(spec: ClusterSpec, chip: ChipModel, *, busy_chip_s: float, window_s: float,
                   work: np.ndarray, link_bytes: Mapping[int, float], topology: Topology,
                   tech: str | None = None,
                   capped_busy: tuple[tuple[float, float], ...] = ()) -> dict[str, Any]:
    """The energy terms of a run (module docstring): joules and the inputs they rest on.
    ``capped_busy``: (chip-seconds, board W) pairs of power-capped pools — GPU chip-seconds
    among ``busy_chip_s`` that draw the cap instead of the TDP (:func:`capped_clock_ratio`)."""
    w = dict(zip(WORK_FIELDS, (float(x) for x in work)))
    macs, vops, dram = w["macs"], w["vector_ops"], w["dram_bytes"]
    out: dict[str, Any] = {"macs": macs, "vector_ops": vops, "dram_bytes": dram,
                           "busy_chip_s": float(busy_chip_s)}
    if chip.arch is not None:
        tech = tech or DEFAULT_TECH
        tk = load_tech(tech)
        eb = energy_breakdown(chip.arch, tk, macs=macs, vector_ops=vops, dram_bytes=dram,
                              **{k: w[k] for k in SRAM_TOTALS})
        static_w = static_power(chip.arch, tk)["static_w"]
        out.update(energy_compute_j=(eb["mac_pj"] + eb["sram_pj"] + eb["vector_pj"]) * 1e-12,
                   energy_idle_j=spec.n_chips * window_s * static_w,
                   energy_dram_j=eb["dram_pj"] * 1e-12, energy_tech=tech,
                   static_w_per_chip=static_w, voltage_v=eb["voltage_v"])
    else:
        p = GPU_PRESETS[spec.chip.preset]   # type: ignore[union-attr]
        idle_s = max(spec.n_chips * window_s - busy_chip_s, 0.0)
        capped_s = sum(s for s, _ in capped_busy)
        compute_j = (busy_chip_s - capped_s) * p.tdp_w + sum(s * w for s, w in capped_busy)
        out.update(energy_compute_j=compute_j, energy_idle_j=idle_s * p.idle_w,
                   energy_dram_j=0.0, energy_tech="gpu board power")
    out.update(network_energy(topology, link_bytes))
    out["energy_network_j"] = out["energy_intra_node_j"] + out["energy_inter_node_j"]
    out["energy_j"] = (out["energy_compute_j"] + out["energy_idle_j"] + out["energy_dram_j"]
                       + out["energy_network_j"])
    out["avg_power_w"] = out["energy_j"] / window_s if window_s > 0 else float("nan")
    return out


# ---- power caps (GPU presets) ------------------------------------------------------------------
#: exponent of the board-power model under a cap: P(f) = idle + (tdp − idle)·(f/f_max)**3.
#: Dynamic CMOS power is C·V²·f and under DVFS V scales about linearly with f, so the dynamic part
#: goes as f³ (the textbook DVFS relation, e.g. Hennessy & Patterson, "Computer Architecture",
#: 6th ed., §1.5). Not fitted to a measured H100 cap curve: marked as a stated model.
POWER_CAP_EXPONENT = 3.0


def capped_clock_ratio(tdp_w: float, idle_w: float, cap_w: float,
                       what: str = "power cap") -> float:
    """SM clock under a board power cap, as a fraction of the uncapped clock (dimensionless):
    ``((cap − idle)/(tdp − idle)) ** (1/3)`` (:data:`POWER_CAP_EXPONENT`), 1 at the TDP.

    Stated model: the cap lowers the SM (graphics) clock until the board draws ``cap_w`` at full
    load; tensor and vector throughput scale with that clock; the HBM runs on its own clock, so
    memory bandwidth is unchanged — a memory-bound decode step barely slows under a cap, a
    compute-bound prefill slows by the ratio (the asymmetry Splitwise, Patel et al., ISCA 2024,
    §III "power", exploits for decode machines). Raises :class:`ClusterSpecError` for a cap ≤ 0,
    above the TDP, or at or below the idle power (no clock left for work)."""
    if not (0 < cap_w <= tdp_w):
        raise ClusterSpecError(f"{what} = {cap_w} W: must be > 0 W and at most the board's "
                               f"TDP = {tdp_w:g} W")
    if cap_w <= idle_w:
        raise ClusterSpecError(f"{what} = {cap_w} W: must be above the board's idle power "
                               f"{idle_w:g} W (GPU_PRESETS idle_w), or no clock is left for work")
    return ((cap_w - idle_w) / (tdp_w - idle_w)) ** (1.0 / POWER_CAP_EXPONENT)


def power_capped_chip(spec: ClusterSpec, chip: ChipModel, cap_w: float,
                      what: str = "power cap") -> tuple[ChipModel, float]:
    """(the chip with tensor and vector throughput scaled by :func:`capped_clock_ratio`, the
    ratio). GPU presets only: an ArchSpec chip's clock and power come from its ArchSpec and tech
    table, so a cap on it is refused rather than ignored."""
    preset = getattr(spec.chip, "preset", None)
    if chip.arch is not None or preset is None:
        raise ClusterSpecError(f"{what}: cluster {spec.name} has an ArchSpec chip; power caps "
                               "are modelled for GPU presets only (set the ArchSpec's clock)")
    p = GPU_PRESETS[preset]
    r = capped_clock_ratio(p.tdp_w, p.idle_w, cap_w, what)
    return dataclasses.replace(chip, peak_gemm_flops_per_s=chip.peak_gemm_flops_per_s * r,
                               vector_flops_per_s=chip.vector_flops_per_s * r), r
