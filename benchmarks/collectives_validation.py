"""Collective rows of the validation table: published nccl-tests bus bandwidth on A100/H100
nodes against tilewright's flow-level ring collectives (``predict_collective``).

Rows live in ``configs/validation/collective_points.yaml`` with their sources; ``set:
calibration`` rows fitted the two efficiency factors of
:mod:`tilewright.dataflow_sim.cluster.nccl_calibration`, ``held_out`` rows were never fitted on.
Prints one table and the held-out median / max |error|; asserts nothing.

Usage:  python benchmarks/collectives_validation.py
"""

from __future__ import annotations

import statistics

from rich.console import Console
from rich.table import Table

from tilewright.dataflow_sim.cluster.nccl_calibration import load_points, predict_collective


def main() -> None:
    table = Table(title="NCCL bus bandwidth: published vs predicted (GB/s)")
    for col in ("row", "set", "collective", "GPUs", "published", "predicted", "error",
                "source"):
        table.add_column(col, justify="right" if col in ("GPUs", "published", "predicted",
                                                         "error") else "left")
    held = []
    for r in load_points():
        pred = predict_collective(r)
        err = pred / r["measured_busbw_gbps"] - 1
        if r["set"] == "held_out":
            held.append(abs(err))
        table.add_row(r["id"], r["set"], r["collective"], str(8 * r.get("nodes", 1)),
                      f"{r['measured_busbw_gbps']:g}", f"{pred:.1f}", f"{err:+.1%}", r["source"])
    Console(width=220).print(table)
    if held:
        print(f"held-out rows: {len(held)}, median |error| {statistics.median(held):.1%}, "
              f"max |error| {max(held):.1%}")


if __name__ == "__main__":
    main()
