"""The per-process cache of compiled layer kinds (``dataflow_sim/compile_flow.py``:
``kind_totals``, used by ``kinds_step_cost``): a sweep of a Jamba-like config.json (three layer
kinds: mamba-mlp, mamba-moe, attn-mlp) over design points, whole model (``layers: all``), each
point costed by the sweep's own ``workload_cost`` in this process.

    python benchmarks/kind_cache.py [--seq 64] [--phase prefill]

Columns: ``before`` = the cache emptied before every point (each kind exported and compiled at
every point, as before the cache); ``after`` = the cache kept (each kind exported once, lowered
per design; a repeated design is a lookup). The two runs' figures are compared point by point
(they must be equal). Wall and CPU seconds of this process; benchmarks print, never assert
timings (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from tilewright.app.sweep.evaluate import workload_cost
from tilewright.arch import load_arch
from tilewright.dataflow_sim.compile_flow import clear_kind_cache

#: a small Jamba-like config (4 layers: attention every 4th from layer 2, experts every 2nd from 1)
JAMBA = {"architectures": ["JambaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 4,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
         "max_position_embeddings": 256, "hidden_act": "silu", "rms_norm_eps": 1e-5,
         "intermediate_size": 96, "num_experts": 4, "num_experts_per_tok": 2,
         "attn_layer_period": 4, "attn_layer_offset": 2, "expert_layer_period": 2,
         "expert_layer_offset": 1, "mamba_d_state": 8, "mamba_d_conv": 4, "mamba_expand": 2,
         "mamba_dt_rank": 8, "rope_theta": None}

#: design points: (rows, cols, dataflow); the last two repeat earlier designs (a resumed or
#: repeated point, or the same design under another workload weight)
POINTS = [(8, 8, "ws"), (16, 16, "ws"), (32, 32, "ws"), (16, 16, "os"), (64, 64, "ws"),
          (8, 8, "ws"), (16, 16, "ws")]


def _run(arch_base, path: str, seq: int, phase: str, cached: bool) -> tuple[list, float, float]:
    clear_kind_cache()
    w = {"model": path, "seq": seq, "batch": 1, "phase": phase, "layers": "all"}
    out = []
    t0, c0 = time.perf_counter(), time.process_time()
    for rows, cols, df in POINTS:
        if not cached:
            clear_kind_cache()
        te = arch_base.tensor_engine.model_copy(update={"rows": rows, "cols": cols,
                                                        "dataflow": df})
        out.append(workload_cost(arch_base.model_copy(update={"tensor_engine": te}), w))
    return out, time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--phase", default="prefill")
    args = ap.parse_args()
    base = load_arch("ws16x16")
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "config.json")
        Path(path).write_text(json.dumps(JAMBA))
        workload_cost(base, {"model": path, "seq": 8, "batch": 1, "phase": args.phase,
                             "layers": "all"})          # warm-up: imports, config read
        before, bw, bc = _run(base, path, args.seq, args.phase, cached=False)
        after, aw, ac = _run(base, path, args.seq, args.phase, cached=True)
    same = before == after
    n = len(POINTS)
    print(f"Jamba-like config.json (3 layer kinds), whole model, {args.phase} seq {args.seq}, "
          f"{n} design points ({len(set(POINTS))} distinct), one process")
    print(f"{'':<28}{'wall s':>9}{'CPU s':>9}{'wall s/point':>14}")
    print(f"{'before (no kind cache)':<28}{bw:>9.2f}{bc:>9.2f}{bw / n:>14.3f}")
    print(f"{'after (kind cache)':<28}{aw:>9.2f}{ac:>9.2f}{aw / n:>14.3f}")
    print(f"{'speed-up':<28}{bw / aw:>9.2f}x{bc / ac:>8.2f}x")
    print(f"figures equal point by point: {same}")


if __name__ == "__main__":
    main()
