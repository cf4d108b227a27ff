"""Evaluate one design point: every workload's cycles, bytes and MACs, then energy and area.

Runs in worker processes (local pool or Dask), so it takes and returns plain JSON-able data.
LLM workloads are costed by :func:`tilewright.dataflow_sim.token_cost.llm_step_cost` — the one
cost path ``compile`` and the cluster model use too: one layer compiled to an IR graph once per
process and workload, lowered and costed per ArchSpec, times the layers; ``layers: all`` adds
the embedding gather and the LM head. The whole model of a config with several layer kinds
(Jamba) or of a Mamba-2 config is costed by what ``compile`` calls for it,
:func:`tilewright.dataflow_sim.compile_flow.kinds_step_cost` (each layer kind once). Plain GEMMs are costed by the mapper's best
mapping (:func:`tilewright.compiler.gemm_mapper.map_gemm`).

Mesh workloads (``mesh_gemv``/``mesh_gemm``) run :mod:`tilewright.dataflow_sim.mesh` on the
ArchSpec's ``mesh`` section (:func:`mesh_cost`); cluster workloads run a SimPy training step or
serving run (:func:`cluster_cost`), whose energy is the cluster energy model's
(:mod:`tilewright.dataflow_sim.cluster.energy`: chips busy and idle, off-chip bytes, link bytes).

Metrics (see :data:`tilewright.app.sweep.spec.METRICS`) aggregate the workloads as a weighted sum of
time and energy; ``throughput_tops`` = 2·MACs / latency; ``perf_per_w`` = TOPS / W;
``perf_per_mm2`` = TOPS / mm²; ``tokens_per_j`` = LLM tokens / energy of the LLM workloads (for a
cluster workload: tokens trained per step or generated in the run / its joules), ``j_per_token``
its inverse; ``pj_per_mac`` = energy / MACs · 1e12. Each workload's own (unweighted) figures are
reported too, as ``<tag>:<metric>`` (:data:`~tilewright.app.sweep.spec.PER_WORKLOAD_METRICS`,
:func:`per_workload_metrics`).
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

from tilewright.app.sweep.resource_model import fpga_metrics
from tilewright.app.sweep.spec import (PER_WORKLOAD_METRICS, SweepError, produced_static_metrics,
                                       workload_tag, workload_uses_arch)
from tilewright.arch import ArchSpec, load_arch
from tilewright.compiler.gemm_mapper import GemmOp, map_gemm
from tilewright.compiler.lower_llm import ELEM_BYTES, lower_graph
from tilewright.dataflow_sim.energy_area import area_mm2, energy_breakdown, load_tech
from tilewright.dataflow_sim.mesh import mesh_gemm, mesh_gemv
from tilewright.dataflow_sim.report import SRAM_TOTALS, program_report
from tilewright.dataflow_sim.token_cost import layer_graph, llm_step_cost

__all__ = ["evaluate_point", "static_metrics", "workload_cost", "workload_report",
           "is_user_module", "user_module_compiled",
           "mesh_cost", "cluster_cost", "per_workload_metrics", "TEST_DELAY_ENV"]

TEST_DELAY_ENV = "TILEWRIGHT_SWEEP_TEST_DELAY_S"
"""testing hook: seconds each evaluation sleeps (used by the kill-and-resume test)"""


def _graph(model: str, seq: int, batch: int, phase: str):
    """One layer's graph after the ``llm`` flow (cached per process: :func:`layer_graph`)."""
    return layer_graph(model, seq, batch, phase)


def workload_format(arch: ArchSpec, w: dict[str, Any]) -> str:
    """The operand format a workload runs in on ``arch``: the design's
    ``tensor_engine.input_format`` (a sweep refuses a workload ``format`` that differs)."""
    fmt = w.get("format") or arch.tensor_engine.input_format
    if fmt != arch.tensor_engine.input_format:
        raise SweepError(f"workload format {fmt!r} disagrees with the design's "
                         f"tensor_engine.input_format {arch.tensor_engine.input_format!r}")
    return fmt


def mesh_cost(arch: ArchSpec, w: dict[str, Any]) -> dict[str, float]:
    """A ``mesh_gemv: [K, N]`` or ``mesh_gemm: [M, K, N]`` workload on ``arch.mesh``: cycles
    (mesh model, clock ``arch.clock_mhz``), useful MACs, and ``byte_hops`` = flits carried over
    every directed link x ``link_bytes_per_cycle`` (bytes x hops, last flits counted whole) for
    the mesh term of the energy model. Operands live in the cores' SRAM: no off-chip bytes."""
    eb = ELEM_BYTES[workload_format(arch, w)]
    algo = w.get("algo") or "mesh"
    if w.get("mesh_gemv"):
        k, n = w["mesh_gemv"]
        rep = mesh_gemv(arch, int(k), int(n), algo=algo, elem_bytes=eb)
    else:
        m, k, n = w["mesh_gemm"]
        rep = mesh_gemm(arch, int(m), int(k), int(n), algo=algo, elem_bytes=eb)
    flits = float(sum(float(a.sum()) for a in rep.link_load_flits.values()))
    return {"cycles": float(rep.cycles), "macs": float(rep.useful_macs), "vector_ops": 0.0,
            "dram_bytes": 0.0, "tokens": 0.0,
            "byte_hops": flits * arch.mesh.link_bytes_per_cycle,  # type: ignore[union-attr]
            "cores_used": float(rep.cores_used)}


def cluster_cost(arch: ArchSpec, w: dict[str, Any], tech: str | None = None) -> dict[str, float]:
    """A cluster workload (``cluster``: preset, path or full mapping; ``model``; ``mode``;
    ``plan``, whose ``dp: auto`` is chips / (tp·pp·sp)): ``latency_s`` = training step time or
    serving makespan (s), ``tokens`` trained per step or generated in the run, ``chips``,
    ``cluster_area_mm2`` (chips x chip area for ArchSpec chips, with ``tech``; else NaN), for
    serving the p99 TTFT/TPOT (s), and ``energy_j`` with its terms (``energy_compute_j``,
    ``energy_idle_j``, ``energy_dram_j``, ``energy_network_j``; the cluster energy model,
    ArchSpec chips on the ``tech`` table) and the ``macs``, ``vector_ops`` and ``dram_bytes`` the
    whole cluster executed. ``cycles`` is NaN (chips run on their own clocks). With ``chip: sweep`` the
    cluster's chip is ``arch``. Raises ``ClusterSpecError``/``PlanError`` for a cluster or plan
    that cannot run (stored as the point's error by :func:`evaluate_point`)."""
    from tilewright.dataflow_sim.cluster import (  # noqa: PLC0415  (lazy: pulls in simpy, torch)
        ClusterSpec, ServePlan, TrainPlan, load_cluster, poisson_requests, simulate_serving,
        simulate_training)
    src = w["cluster"]
    if isinstance(src, dict):
        data = dict(src)
    else:
        data = load_cluster(src).model_dump(mode="json", exclude_none=True)
    if w.get("chip") == "sweep":
        chip = dict(data["chip"])
        point = arch.model_dump(mode="json", exclude_none=True)
        chip.pop("vector_ops_per_cycle", None)     # follow the design point's own vector unit
        if arch.offchip.capacity_gib is not None:
            chip.pop("hbm_gib", None)              # the design point states its own capacity
        else:                                      # else keep the cluster chip's capacity
            base = chip.get("arch")
            if isinstance(base, str):                # a preset name or file
                base = load_arch(base).model_dump(mode="json", exclude_none=True)
            base_cap = ((base or {}).get("offchip") or {}).get("capacity_gib")
            if base_cap is not None:
                point.setdefault("offchip", {})["capacity_gib"] = base_cap
        chip["arch"] = point
        data["chip"] = chip
    spec = ClusterSpec.from_dict(data, source=f"cluster {data.get('name', '')}")
    plan = dict(w.get("plan") or {})
    nan = math.nan
    out = {"cycles": nan, "chips": float(spec.n_chips), "cluster_area_mm2": nan}
    if tech is not None and spec.arch() is not None:
        out["cluster_area_mm2"] = spec.n_chips * area_mm2(spec.arch(), load_tech(tech))
    if (w.get("mode") or "train") == "train":
        if plan.get("dp") == "auto":
            from tilewright.dataflow_sim.cluster import \
                auto_dp  # noqa: PLC0415  (lazy: pulls in simpy, torch)
            plan["dp"] = auto_dp(spec, int(plan.get("tp", 1)), int(plan.get("pp", 1)),
                                 int(plan.get("sp", 1)))
        res = simulate_training(spec, w["model"], TrainPlan(**plan),
                                cost_source=w.get("cost_source"), tech=tech)
        m = res.metrics
        out.update(latency_s=float(m["step_s"]), tokens=float(m["tokens_per_s"] * m["step_s"]),
                   utilization=float(m["gemm_utilization"]))
    else:
        def lengths(v: Any) -> Any:
            return tuple(v) if isinstance(v, (list, tuple)) else int(v)
        reqs = poisson_requests(int(w.get("requests") or 64), float(w.get("rate") or 10.0),
                                lengths(w.get("prompt_tokens") or 512),
                                lengths(w.get("output_tokens") or 128),
                                seed=int(w.get("seed") or 0))
        res = simulate_serving(spec, w["model"], ServePlan(**plan), reqs,
                               seed=int(w.get("seed") or 0), cost_source=w.get("cost_source"),
                               tech=tech)
        m = res.metrics
        out.update(latency_s=float(m["makespan_s"]),
                   tokens=float(m["throughput_tokens_per_s"] * m["makespan_s"]),
                   ttft_p99_s=float(m["ttft_p99_s"]), tpot_p99_s=float(m["tpot_p99_s"]),
                   utilization=float(m["utilization"]))
    out.update({k: float(m[k]) for k in _CLUSTER_ENERGY_KEYS})
    return out


_CLUSTER_ENERGY_KEYS = ("energy_j", "energy_compute_j", "energy_idle_j", "energy_dram_j",
                        "energy_network_j", "macs", "vector_ops", "dram_bytes")


def workload_cost(arch: ArchSpec, w: dict[str, Any], tech: str | None = None) -> dict[str, float]:
    """cycles, macs, vector_ops, dram_bytes (and tokens) of one workload on ``arch``; mesh
    workloads add ``byte_hops``, cluster workloads give ``latency_s`` and ``energy_j`` directly
    (see :func:`mesh_cost`, :func:`cluster_cost`)."""
    if w.get("cluster"):
        return cluster_cost(arch, w, tech)
    if w.get("mesh_gemv") or w.get("mesh_gemm"):
        return mesh_cost(arch, w)
    if w.get("gemm"):
        m, k, n = w["gemm"]
        res = map_gemm(GemmOp("gemm", int(m), int(k), int(n), batch=int(w.get("batch", 1)),
                              elem_bytes=ELEM_BYTES[workload_format(arch, w)]), arch)
        c = res.cost
        return {"cycles": float(c.cycles), "macs": float(c.macs), "vector_ops": 0.0,
                "dram_bytes": float(c.dram_bytes), "tokens": 0.0,
                "scratchpad_bytes": float(c.scratchpad_bytes),
                "accumulator_bytes": float(c.accumulator_bytes),
                "sram_dram_bytes": float(c.dram_bytes), "sram_macs": float(c.macs)}
    fmt = workload_format(arch, w)
    if is_user_module(w["model"]):         # file.py:factory / .onnx: whole, as `compile` runs it
        t = user_module_compiled(arch, w["model"], fmt).totals()
        return {"cycles": float(t["total_cycles"]), "macs": float(t["macs"]),
                "vector_ops": float(t["vector_ops"]), "dram_bytes": float(t["bytes"]),
                "tokens": 0.0}
    layers = "all" if w.get("layers") == "all" else int(w.get("layers", 1))
    from tilewright.dataflow_sim.compile_flow import (  # noqa: PLC0415  (lazy: pulls in pandas)
        kinds_step_cost, needs_kinds_cost)
    if layers == "all" and needs_kinds_cost(w["model"]):   # Jamba (layer kinds), Mamba-2
        kinds = kinds_step_cost(arch, w["model"], phase=w["phase"], seq=int(w["seq"]),
                                batch=int(w["batch"]), fmt=fmt, tech=tech)   # as `compile`
        return {k: float(kinds[k]) for k in ("cycles", "macs", "vector_ops", "dram_bytes",
                                             "tokens")}
    step = llm_step_cost(arch, w["model"], phase=w["phase"], seq=int(w["seq"]),
                         batch=int(w["batch"]), fmt=fmt, layers=layers, tech=tech)
    return {"cycles": float(step.cycles), "macs": float(step.macs),
            "vector_ops": float(step.vector_ops), "dram_bytes": float(step.dram_bytes),
            "tokens": float(step.tokens), **{k: float(v) for k, v in step.sram.items()}}


def is_user_module(model: str) -> bool:
    """``model`` names a user module (``path/file.py:factory`` or ``.onnx``)."""
    from tilewright.models.resolve import model_form  # noqa: PLC0415  (lazy: pulls in torch)
    return model_form(model) in ("factory", "onnx")


_USER_MODULES: dict[str, Any] = {}
"""per process: user-module text -> :class:`~tilewright.models.resolve.ResolvedModel` (the
factory is called / the ONNX file converted once per worker, not once per point)"""


def user_module_compiled(arch: ArchSpec, model: str, fmt: str):
    """A user module compiled whole for ``arch`` in ``fmt`` by what ``compile`` calls for it
    (:func:`~tilewright.dataflow_sim.compile_flow.compile_module`, on its example inputs)."""
    from tilewright.dataflow_sim.compile_flow import \
        compile_module  # noqa: PLC0415  (lazy: pulls in pandas)
    from tilewright.models.resolve import resolve_model  # noqa: PLC0415  (lazy: pulls in torch)
    if model not in _USER_MODULES:
        _USER_MODULES[model] = resolve_model(model)
    r = _USER_MODULES[model]
    return compile_module(r.module, r.example_inputs, arch, fmt=fmt, name=model)


def workload_report(arch: ArchSpec, w: dict[str, Any]):
    """The per-op Report (pandas, :func:`~tilewright.dataflow_sim.report.program_report`) of an
    LLM workload on ``arch`` (one layer; a user module whole)."""
    if is_user_module(w["model"]):
        return user_module_compiled(arch, w["model"], workload_format(arch, w)).report
    g = _graph(w["model"], int(w["seq"]), int(w["batch"]), w["phase"])
    return program_report(lower_graph(g, arch, fmt=workload_format(arch, w), name=w["model"]),
                          arch)


def static_metrics(arch: ArchSpec, tech: str, uses_arch: bool = True) -> dict[str, float]:
    """Metrics known from the ArchSpec alone: area_mm2, sram_kib, pes and the predicted FPGA
    resources of the GEMM core (``fpga_*_ice40``, ``fpga_*_ecp5``,
    :func:`~tilewright.app.sweep.resource_model.fpga_metrics`) — only those of the parts the
    workloads use (:func:`~tilewright.app.sweep.spec.produced_static_metrics`): none when no
    workload runs on the ArchSpec, the mesh alone for a mesh design (no FPGA figures)."""
    have = produced_static_metrics(uses_arch, arch.mesh is not None)
    if not have:
        return {}
    if arch.mesh is not None:               # the mesh alone (the ArchSpec refuses a host core)
        sram = arch.mesh.cores * arch.mesh.core_sram_kib
        pes = arch.mesh.cores * arch.mesh.core_macs_per_cycle
    else:
        sram = arch.memory.scratchpad_kib + arch.memory.accumulator_kib
        pes = arch.tensor_engine.macs_per_cycle    # rows * cols * depth (any engine kind)
    out = {"area_mm2": area_mm2(arch, load_tech(tech)), "sram_kib": float(sram),
           "pes": float(pes)}
    if "fpga_luts_ice40" in have:
        out.update(**fpga_metrics(arch, "ice40"), **fpga_metrics(arch, "ecp5"))
    return out


def _ratio(a: float, b: float) -> float:
    return a / b if b else math.nan


def per_workload_metrics(row: dict[str, float], pes: float | None) -> dict[str, float]:
    """:data:`~tilewright.app.sweep.spec.PER_WORKLOAD_METRICS` of one workload's cost row
    (``latency_s``, ``energy_j``, ``cycles``, ``macs``, ``dram_bytes``, ``tokens``): tokens/s,
    tokens/J and J/token (NaN for a workload without tokens), pJ/MAC = J / MACs · 1e12 (NaN
    without MACs), utilization = MACs / (cycles · PEs) (a cluster run's own, else NaN without
    PEs or cycles)."""
    tokens = row["tokens"] or math.nan
    e, macs = row["energy_j"], row["macs"]
    util = row["utilization"] if "utilization" in row else \
        _ratio(macs, row["cycles"] * pes) if pes and not math.isnan(row["cycles"]) else math.nan
    out = {"latency_s": row["latency_s"], "energy_j": e, "cycles": row["cycles"], "macs": macs,
           "dram_bytes": row["dram_bytes"], "tokens_per_s": _ratio(tokens, row["latency_s"]),
           "tokens_per_j": _ratio(tokens, e), "j_per_token": _ratio(e, tokens),
           "pj_per_mac": _ratio(e * 1e12, macs), "utilization": util}
    assert tuple(out) == PER_WORKLOAD_METRICS
    return out


def evaluate_point(arch_json: dict[str, Any], workloads: list[dict[str, Any]], tech: str,
                   static_limits: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Evaluate one ArchSpec (as JSON) on the workloads. Returns ``{"status": "ok"|"skipped"|
    "error", "metrics": {...}, "per_workload": [...], "error": str|None, "wall_s": float,
    "pid": int}``. ``static_limits`` (``[{metric, min, max}]`` on static metrics) skip the
    workloads of a point that already violates them (status ``skipped``)."""
    t0 = time.perf_counter()
    out: dict[str, Any] = {"status": "ok", "metrics": {}, "per_workload": [], "error": None,
                           "pid": os.getpid()}
    delay = float(os.environ.get(TEST_DELAY_ENV, "0") or 0)
    if delay:
        time.sleep(delay)
    try:
        arch = ArchSpec.model_validate(arch_json)
        metrics = static_metrics(arch, tech, any(workload_uses_arch(w) for w in workloads))
        out["metrics"] = metrics
        for c in static_limits or []:
            v = metrics[c["metric"]]
            if (c.get("min") is not None and v < c["min"]) or \
                    (c.get("max") is not None and v > c["max"]):
                out["status"] = "skipped"
                out["wall_s"] = time.perf_counter() - t0
                return out
        tk = load_tech(tech)
        tot = {"cycles": 0.0, "macs": 0.0, "vector_ops": 0.0, "dram_bytes": 0.0, "tokens": 0.0,
               "latency_s": 0.0, "energy_j": 0.0, "llm_latency_s": 0.0, "llm_energy_j": 0.0}
        extra: dict[str, float] = {}     # chips, cluster_area_mm2, ttft/tpot: worst workload
        for w in workloads:
            c = workload_cost(arch, w, tech)
            wt = float(w.get("weight", 1.0))
            lat = c["latency_s"] if "latency_s" in c else c["cycles"] / (arch.clock_mhz * 1e6)
            e = {"energy_j": c["energy_j"]} if "energy_j" in c else energy_breakdown(
                arch, tk, macs=c["macs"], vector_ops=c["vector_ops"], dram_bytes=c["dram_bytes"],
                byte_hops=c.get("byte_hops", 0.0), latency_s=lat,
                **{k: c[k] for k in SRAM_TOTALS if k in c})
            out["per_workload"].append({**c, "latency_s": lat, **e})
            for key in ("chips", "cluster_area_mm2", "ttft_p99_s", "tpot_p99_s"):
                if key in c:
                    extra[key] = max(extra.get(key, -math.inf), c[key])
            for key in ("cycles", "macs", "vector_ops", "dram_bytes", "tokens"):
                tot[key] += wt * c[key]
            tot["latency_s"] += wt * lat
            tot["energy_j"] += wt * e["energy_j"]
            if c["tokens"]:
                tot["llm_latency_s"] += wt * lat
                tot["llm_energy_j"] += wt * e["energy_j"]
        lat = tot["latency_s"]
        tops = 2 * tot["macs"] / lat / 1e12 if lat > 0 else math.nan
        power = tot["energy_j"] / lat if lat > 0 else math.nan
        metrics.update({
            "latency_s": lat, "throughput_tops": tops,
            "tokens_per_s": tot["tokens"] / tot["llm_latency_s"] if tot["llm_latency_s"] else math.nan,
            "tokens_per_j": tot["tokens"] / tot["llm_energy_j"] if tot["llm_energy_j"] else math.nan,
            "j_per_token": _ratio(tot["llm_energy_j"], tot["tokens"]),
            "pj_per_mac": _ratio(tot["energy_j"] * 1e12, tot["macs"]),
            "energy_j": tot["energy_j"], "power_w": power,
            "perf_per_w": tops / power if power and power > 0 else math.nan,
            **({"perf_per_mm2": tops / metrics["area_mm2"]} if "area_mm2" in metrics else {}),
            "utilization": (tot["macs"] / (tot["cycles"] * metrics["pes"])
                            if tot["cycles"] and "pes" in metrics else 0.0),
            "cycles": tot["cycles"], "dram_bytes": tot["dram_bytes"], "macs": tot["macs"],
            **extra})
        if len(workloads) == 1 and "utilization" in out["per_workload"][0]:
            metrics["utilization"] = out["per_workload"][0]["utilization"]   # cluster
        for i, (w, row) in enumerate(zip(workloads, out["per_workload"])):
            tag = workload_tag(w, i)
            metrics.update({f"{tag}:{k}": v
                            for k, v in per_workload_metrics(row, metrics.get("pes")).items()})
    except Exception as exc:  # noqa: BLE001 - a failing point is stored with its error, not fatal
        out["status"] = "error"
        out["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    out["wall_s"] = time.perf_counter() - t0
    return out
