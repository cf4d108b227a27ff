"""Evaluate one design point: every workload's cycles, bytes and MACs, then energy and area.

Runs in worker processes (local pool or Dask), so it takes and returns plain JSON-able data.
LLM workloads are compiled to an IR graph once per process and workload (torch.export and the
``llm`` pass flow do not depend on the ArchSpec) and lowered per ArchSpec
(:func:`tilewright.compiler.lower.lower_graph`: tiling by the mapper) and costed by
:func:`tilewright.dataflow_sim.report.program_report`. Plain GEMMs are costed by the mapper's best
mapping (:func:`tilewright.compiler.mapper.map_gemm`).

Metrics (see :data:`tilewright.sweep.spec.METRICS`) aggregate the workloads as a weighted sum of
time and energy; ``throughput_tops`` = 2·MACs / latency; ``perf_per_w`` = TOPS / W;
``perf_per_mm2`` = TOPS / mm².
"""

from __future__ import annotations

import math
import os
import time
from functools import lru_cache
from typing import Any

from tilewright.arch import ArchSpec

__all__ = ["evaluate_point", "static_metrics", "workload_cost", "workload_report",
           "TEST_DELAY_ENV"]

TEST_DELAY_ENV = "TILEWRIGHT_SWEEP_TEST_DELAY_S"
"""testing hook: seconds each evaluation sleeps (used by the kill-and-resume test)"""


@lru_cache(maxsize=8)
def _graph(model: str, seq: int, batch: int, phase: str):
    from tilewright.compiler.frontend import export_model, from_exported  # noqa: PLC0415
    from tilewright.compiler.passes import run_flow  # noqa: PLC0415
    from tilewright.models.llm_configs import build_llm  # noqa: PLC0415

    module, example = build_llm(model, seq=seq, batch=batch, phase=phase)
    graph = from_exported(export_model(module, example), name=model)
    run_flow(graph, "llm")
    return graph


def workload_cost(arch: ArchSpec, w: dict[str, Any]) -> dict[str, float]:
    """cycles, macs, vector_ops, dram_bytes (and tokens) of one workload on ``arch``."""
    if w.get("gemm"):
        from tilewright.compiler.lower import ELEM_BYTES  # noqa: PLC0415
        from tilewright.compiler.mapper import GemmOp, map_gemm  # noqa: PLC0415
        m, k, n = w["gemm"]
        res = map_gemm(GemmOp("gemm", int(m), int(k), int(n), batch=int(w.get("batch", 1)),
                              elem_bytes=ELEM_BYTES[w.get("format", "fp32")]), arch)
        c = res.cost
        return {"cycles": float(c.cycles), "macs": float(c.macs), "vector_ops": 0.0,
                "dram_bytes": float(c.dram_bytes), "tokens": 0.0}
    from tilewright.compiler.lower import lower_graph  # noqa: PLC0415
    from tilewright.dataflow_sim.report import program_report  # noqa: PLC0415
    from tilewright.models.llm_configs import get_config  # noqa: PLC0415

    g = _graph(w["model"], int(w["seq"]), int(w["batch"]), w["phase"])
    prog = lower_graph(g, arch, fmt=w.get("format", "fp32"), name=w["model"])
    df = program_report(prog, arch)
    layers = get_config(w["model"]).n_layers if w.get("layers") == "all" else int(w.get("layers", 1))
    tokens = int(w["batch"]) * (int(w["seq"]) if w["phase"] == "prefill" else 1)
    return {"cycles": float(df["time_cycles"].sum()) * layers,
            "macs": float(df["macs"].sum()) * layers,
            "vector_ops": float(df["vector_ops"].sum()) * layers,
            "dram_bytes": float(df["bytes"].sum()) * layers, "tokens": float(tokens)}


def workload_report(arch: ArchSpec, w: dict[str, Any]):
    """The per-op Report (pandas, :func:`~tilewright.dataflow_sim.report.program_report`) of an
    LLM workload on ``arch`` (one layer)."""
    from tilewright.compiler.lower import lower_graph  # noqa: PLC0415
    from tilewright.dataflow_sim.report import program_report  # noqa: PLC0415
    g = _graph(w["model"], int(w["seq"]), int(w["batch"]), w["phase"])
    return program_report(lower_graph(g, arch, fmt=w.get("format", "fp32"), name=w["model"]), arch)


def static_metrics(arch: ArchSpec, tech: str) -> dict[str, float]:
    """Metrics known from the ArchSpec alone: area_mm2, sram_kib, pes."""
    from tilewright.dataflow_sim.energy_area import area_mm2, load_tech  # noqa: PLC0415
    te = arch.tensor_engine
    sram = arch.memory.scratchpad_kib + arch.memory.accumulator_kib
    pes = te.rows * te.cols
    if arch.mesh is not None:
        sram += arch.mesh.cores * arch.mesh.core_sram_kib
        pes += arch.mesh.cores * arch.mesh.core_macs_per_cycle
    return {"area_mm2": area_mm2(arch, load_tech(tech)), "sram_kib": float(sram), "pes": float(pes)}


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
        from tilewright.dataflow_sim.energy_area import energy_breakdown, load_tech  # noqa: PLC0415
        arch = ArchSpec.model_validate(arch_json)
        metrics = static_metrics(arch, tech)
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
               "latency_s": 0.0, "energy_j": 0.0, "llm_latency_s": 0.0}
        for w in workloads:
            c = workload_cost(arch, w)
            wt = float(w.get("weight", 1.0))
            lat = c["cycles"] / (arch.clock_mhz * 1e6)
            e = energy_breakdown(arch, tk, macs=c["macs"], vector_ops=c["vector_ops"],
                                 dram_bytes=c["dram_bytes"])
            out["per_workload"].append({**c, "latency_s": lat, **e})
            for key in ("cycles", "macs", "vector_ops", "dram_bytes", "tokens"):
                tot[key] += wt * c[key]
            tot["latency_s"] += wt * lat
            tot["energy_j"] += wt * e["energy_j"]
            if c["tokens"]:
                tot["llm_latency_s"] += wt * lat
        lat = tot["latency_s"]
        tops = 2 * tot["macs"] / lat / 1e12 if lat > 0 else math.nan
        power = tot["energy_j"] / lat if lat > 0 else math.nan
        metrics.update({
            "latency_s": lat, "throughput_tops": tops,
            "tokens_per_s": tot["tokens"] / tot["llm_latency_s"] if tot["llm_latency_s"] else math.nan,
            "energy_j": tot["energy_j"], "power_w": power,
            "perf_per_w": tops / power if power and power > 0 else math.nan,
            "perf_per_mm2": tops / metrics["area_mm2"],
            "utilization": tot["macs"] / (tot["cycles"] * metrics["pes"]) if tot["cycles"] else 0.0,
            "cycles": tot["cycles"], "dram_bytes": tot["dram_bytes"], "macs": tot["macs"]})
    except Exception as exc:  # noqa: BLE001 - a failing point is stored with its error, not fatal
        out["status"] = "error"
        out["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    out["wall_s"] = time.perf_counter() - t0
    return out
