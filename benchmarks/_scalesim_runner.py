"""Helper run INSIDE SCALE-Sim's own venv by benchmarks/vs_scalesim.py (numpy 1.26 / pandas 2.2).

    <scalesim venv>/bin/python benchmarks/_scalesim_runner.py ROWS COLS DATAFLOW M K N

Writes a SCALE-Sim 3.0.0 config (CALC interface bandwidth: no memory stalls) and a one-layer GEMM
topology to a temporary folder, runs it, and prints one JSON line: the COMPUTE_REPORT's total
cycles and stall cycles, and the wall seconds of ``run_scale`` alone.
"""

import json
import os
import shutil
import sys
import tempfile
import time

CFG = """[general]
run_name = tw_bench

[architecture_presets]
ArrayHeight : {rows}
ArrayWidth : {cols}
IfmapSramSzkB : 6144
FilterSramSzkB : 6144
OfmapSramSzkB : 2048
IfmapOffset : 0
FilterOffset : 10000000
OfmapOffset : 20000000
Bandwidth : 10
Dataflow : {df}
MemoryBanks : 1
ReadRequestBuffer : 32
WriteRequestBuffer : 32

[layout]
IfmapCustomLayout : False
IfmapSRAMBankBandwidth : 10
IfmapSRAMBankNum : 10
IfmapSRAMBankPort : 2
FilterCustomLayout : False
FilterSRAMBankBandwidth : 10
FilterSRAMBankNum : 10
FilterSRAMBankPort : 2

[sparsity]
SparsitySupport : false
SparseRep : ellpack_block
OptimizedMapping : false
BlockSize : 8
RandomNumberGeneratorSeed : 40

[run_presets]
InterfaceBandwidth : CALC
UseRamulatorTrace : False
"""


def main() -> None:
    rows, cols, df, m, k, n = sys.argv[1:7]
    d = tempfile.mkdtemp(prefix="tw_scalesim_")
    cfg = os.path.join(d, "scale.cfg")
    topo = os.path.join(d, "gemm.csv")
    with open(cfg, "w") as f:
        f.write(CFG.format(rows=rows, cols=cols, df=df))
    with open(topo, "w") as f:
        f.write("Layer, M, N, K,\n")
        f.write(f"g, {m}, {n}, {k},\n")
    layout = os.path.join(d, "layout.csv")   # custom layouts are off: a header-only file
    with open(layout, "w") as f:
        f.write("Layer name,\n")
    from scalesim.scale_sim import scalesim
    import contextlib
    import io
    s = scalesim(save_disk_space=True, verbose=False, config=cfg, topology=topo, layout=layout,
                 input_type_gemm=True)
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        s.run_scale(top_path=d)
    wall = time.perf_counter() - t0
    rep = os.path.join(d, "tw_bench", "COMPUTE_REPORT.csv")
    with open(rep) as f:
        lines = [x.strip() for x in f if x.strip()]
    head = [h.strip() for h in lines[0].split(",")]
    vals = [v.strip() for v in lines[1].split(",")]
    row = dict(zip(head, vals))
    shutil.rmtree(d, ignore_errors=True)     # the config, topology and SCALE-Sim's reports
    print(json.dumps({"total_cycles": int(float(row["Total Cycles"])),
                      "stall_cycles": int(float(row["Stall Cycles"])), "wall_s": wall,
                      "report": row}))


if __name__ == "__main__":
    main()
