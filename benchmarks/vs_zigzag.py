"""tilewright's mapper vs ZigZag (zigzag-dse) on GEMMs of a transformer layer, 32x32 TPU-like array.

    python benchmarks/vs_zigzag.py

ZigZag runs in its own venv (default ``/tmp/zigzag_venv``, or ``$ZIGZAG_PYTHON``)::

    python3 -m venv /tmp/zigzag_venv && /tmp/zigzag_venv/bin/pip install zigzag-dse six

through ``benchmarks/_zigzag_runner.py`` (its bundled ``tpu_like`` accelerator: 32x32 int8 MACs,
2 MB SRAM, DRAM port 64 bit/cycle; LOMA search, lpf_limit 6, optimising latency). tilewright's
side: :func:`tilewright.compiler.gemm_mapper.map_gemm` on a comparable ArchSpec — 32x32 WS int8, 2 MiB
scratchpad, 8 B/cycle off-chip (8 GB/s at 1 GHz), zero DRAM latency, int8 results. Printed per
GEMM: best latency in cycles of each tool, mappings evaluated per second of each and the ratio.
The two cost models differ (ZigZag: per-level memory port stalls of its hierarchy; tilewright: the
double-buffered DMA pipeline of its core), so latencies agree only roughly; ZigZag costs only the
matmuls, while tilewright's Report also costs every vector op of the layer (softmax, norms,
elementwise) — the last line shows that share for one Llama-3-8B layer. Benchmarks print; they
never assert.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tilewright.arch import ArchSpec, MemorySpec, OffChipSpec, TensorEngineSpec
from tilewright.compiler.gemm_mapper import GemmOp, map_gemm

HERE = Path(__file__).resolve().parent
# Llama-3-8B layer GEMMs at 512 tokens (q/o, k/v, gate/up, down), a decode GEMV, a small GEMM
SUITE = [(512, 4096, 4096), (512, 4096, 1024), (512, 4096, 14336), (512, 14336, 4096),
         (1, 4096, 4096), (128, 256, 256)]


def _python() -> Path | None:
    p = Path(os.environ.get("ZIGZAG_PYTHON", "/tmp/zigzag_venv/bin/python"))
    if not p.exists():
        return None
    return p if subprocess.run([str(p), "-c", "import zigzag"], capture_output=True
                               ).returncode == 0 else None


def tpu_like_arch() -> ArchSpec:
    """The ArchSpec comparable to ZigZag's bundled ``tpu_like`` accelerator (module docstring)."""
    return ArchSpec(name="tpu-like-32x32", clock_mhz=1000.0,
                    tensor_engine=TensorEngineSpec(rows=32, cols=32, dataflow="ws"),
                    memory=MemorySpec(scratchpad_kib=2048, accumulator_kib=256),
                    offchip=OffChipSpec(bandwidth_gbps=8.0, latency_ns=0.0))


def main() -> None:
    arch = tpu_like_arch()
    py = _python()
    if py is None:
        print("ZigZag venv not found: skipping ZigZag. Set it up with\n  python3 -m venv "
              "/tmp/zigzag_venv && /tmp/zigzag_venv/bin/pip install zigzag-dse six\n"
              "tilewright's numbers alone:")
    print(f"{'M x K x N':>18} {'ZigZag cycles':>14} {'tilewright':>12} {'tw/zz':>6} "
          f"{'ZZ maps/s':>10} {'TW maps/s':>11} {'ratio':>8}")
    for m, k, n in SUITE:
        r = map_gemm(GemmOp("g", m, k, n, elem_bytes=1, out_bytes=1), arch)
        zz_c = zz_rate = None
        if py is not None:
            out = subprocess.run([str(py), str(HERE / "_zigzag_runner.py"), str(m), str(k),
                                  str(n)], capture_output=True, text=True, timeout=1800,
                                 cwd=os.environ.get("TMPDIR", "/tmp"))
            if out.returncode == 0:
                z = json.loads(out.stdout.strip().splitlines()[-1])
                zz_c, zz_rate = z["latency_cycles"], z["mappings"] / z["wall_s"]
            else:
                print(f"  ZigZag failed on {m}x{k}x{n}: {out.stderr.strip().splitlines()[-1:]}")
        tw_rate = r.mappings_per_second
        print(f"{f'{m}x{k}x{n}':>18} {zz_c if zz_c is not None else '-':>14} "
              f"{r.cost.cycles:>12,.0f} "
              f"{(r.cost.cycles / zz_c) if zz_c else float('nan'):>6.3f} "
              f"{zz_rate if zz_rate else float('nan'):>10.0f} {tw_rate:>11,.0f} "
              f"{(tw_rate / zz_rate) if zz_rate else float('nan'):>7,.0f}x", flush=True)
    try:
        from tilewright.app.sweep.evaluate import workload_report
        df = workload_report(arch, {"model": "llama3-8b", "seq": 512, "batch": 1,
                                    "phase": "prefill", "format": "int8"})
        vec = df.loc[df["macs"] == 0, "time_cycles"].sum() / df["time_cycles"].sum()
        print(f"llama3-8b layer (prefill 512, int8) on this ArchSpec: ops with no MACs (norms, "
              f"elementwise, RoPE, data movement; softmax sits inside the attention op) are {vec:.1%} of the layer's "
              f"time in tilewright's Report; ZigZag would cost them as zero")
    except Exception as exc:  # noqa: BLE001 - an optional last line
        print(f"(per-op share skipped: {exc})")


if __name__ == "__main__":
    main()
