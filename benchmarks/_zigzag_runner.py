"""Helper run INSIDE ZigZag's own venv by benchmarks/vs_zigzag.py.

    <zigzag venv>/bin/python benchmarks/_zigzag_runner.py M K N [LPF_LIMIT]

Costs one M x K x N GEMM with ZigZag (zigzag-dse) on its bundled ``tpu_like`` accelerator (a
32 x 32 int8 MAC array, spatial mapping K x C = 32 x 32, from its ``tpu_like`` mapping) with the
LOMA temporal-mapping search optimising latency; prints one JSON line: best latency (cycles),
energy (pJ), temporal mappings evaluated and wall seconds.
"""

import contextlib
import io
import json
import logging
import os
import sys
import tempfile
import time

import zigzag
from zigzag.api import get_hardware_performance_zigzag


def main() -> None:
    m, k, n = (int(x) for x in sys.argv[1:4])
    lpf = int(sys.argv[4]) if len(sys.argv) > 4 else 6
    d = tempfile.mkdtemp(prefix="tw_zigzag_")
    wl = os.path.join(d, "gemm.yaml")
    with open(wl, "w") as f:
        f.write("- id: 0\n  name: gemm\n  operator_type: Gemm\n"
                "  equation: O[b][k]+=I[b][c]*W[c][k]\n  dimension_relations: []\n"
                f"  loop_dims: [B, C, K]\n  loop_sizes: [{m}, {k}, {n}]\n"
                "  operand_precision: {W: 8, I: 8, O: 16, O_final: 8}\n"
                "  operand_source: {I: 0}\n")
    root = os.path.dirname(zigzag.__file__)
    hw = os.path.join(root, "inputs", "hardware", "tpu_like.yaml")
    mp = os.path.join(root, "inputs", "mapping", "tpu_like.yaml")
    logging.disable(logging.CRITICAL)
    counted = {"n": 0}
    from zigzag.stages.evaluation import cost_model_evaluation as cme_mod
    orig = cme_mod.CostModelStage.run

    def counting_run(self):
        counted["n"] += 1
        yield from orig(self)

    cme_mod.CostModelStage.run = counting_run
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        energy, latency, cmes = get_hardware_performance_zigzag(
            wl, hw, mp, opt="latency", dump_folder=d, lpf_limit=lpf,
            loma_show_progress_bar=False)
    wall = time.perf_counter() - t0
    print(json.dumps({"latency_cycles": float(latency), "energy_pj": float(energy),
                      "mappings": counted["n"], "wall_s": wall}))


if __name__ == "__main__":
    main()
