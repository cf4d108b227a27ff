"""Cluster model: many chips and their network running LLM training and serving, in SimPy.

Public API::

    spec = load_cluster("h100-8x-nvlink")                       # or a YAML path
    res = simulate_training(spec, "llama3-8b", TrainPlan(tp=8, micro_batches=8))
    res.step_seconds, res.breakdown, res.metrics, res.trace.save("step.json")
    out = simulate_serving(spec, "llama3-8b", ServePlan(tp=1),
                           poisson_requests(1000, rate_per_s=20, prompt_tokens=512,
                                            output_tokens=(32, 256)))
    out.metrics["ttft_p99_s"], out.requests

Models: Llama-style and Mixtral-style decoders and Mamba (SSM) models (TP splits d_inner;
serving holds a fixed-size recurrent state per sequence instead of a KV cache).

Per-chip compute: ArchSpec chips take each sharded layer's, the embedding gather's and the LM
head's forward and backward time from the compiler's Reports (``cost_source="compiler"``,
:mod:`.compiled`, the default; serving also compiles each sequence's attention, bucketed by
context; MoE serving re-costs the compiled expert GEMMs at each iteration's routing loads);
``cost_source="table"`` keeps the op table + cycle model/roofline of :mod:`.workload`/
:mod:`.costs`. GPU presets use the roofline. An ArchSpec chip's capacity is its
``offchip.capacity_gib`` and its vector throughput its ``vector_unit.lanes``.

Training overlaps bucketed DP gradient all-reduces with the backward (``TrainPlan.grad_bucket_mb``)
and runs TP/SP/EP collectives on the same network as pipeline and gradient traffic
(``TrainPlan.inlayer_comm="network"``); serving supports pipeline stages (``ServePlan.pp``).

Energy (:mod:`.energy`): every training/serving result's metrics carry ``energy_j`` and its terms
(``energy_compute_j``, ``energy_idle_j``, ``energy_dram_j``, ``energy_network_j``) from the work,
busy time and link bytes the simulation executed: ArchSpec chips on a technology table
(``tech=``, default 7nm), GPU presets on their datasheet board power, links on the cited
per-byte table ``configs/energy/network.yaml``.

Errors for bad cluster files and impossible plans: :class:`ClusterSpecError` (one line; plans
raise its subclass :class:`PlanError`).
"""

from .cluster_spec import (CLUSTER_PRESET_DIR, GPU_PRESETS, ClusterSpec, ClusterSpecError,
                           PlanError, load_cluster)
from .compiled import (COST_SOURCES, compiled_attention, compiled_embedding, compiled_head,
                       compiled_layer)
from .collectives import CollectiveTimer, all_gather, all_reduce, all_to_all, reduce_scatter, send
from .costs import ChipModel, chip_model
from .network import Network
from .plan import ServePlan, TrainPlan, auto_dp
from .serve_slo import SLO, parse_pd
from .serving import (IterationCost, ServeResult, load_request_trace, poisson_requests,
                      search_pd_split, simulate_serving, timeline_summary)
from .topology import Topology
from .trace import Trace
from .training import TrainResult, schedule_order, simulate_training

__all__ = ["ClusterSpec", "ClusterSpecError", "PlanError", "load_cluster", "CLUSTER_PRESET_DIR",
           "GPU_PRESETS", "Topology", "Network", "CollectiveTimer", "all_reduce", "reduce_scatter",
           "all_gather", "all_to_all", "send", "ChipModel", "chip_model", "TrainPlan", "ServePlan", "auto_dp",
           "simulate_training", "TrainResult", "schedule_order", "simulate_serving", "ServeResult",
           "IterationCost", "poisson_requests", "load_request_trace", "Trace", "COST_SOURCES",
           "compiled_layer", "compiled_head", "compiled_embedding", "compiled_attention",
           "SLO", "parse_pd", "search_pd_split", "timeline_summary"]
