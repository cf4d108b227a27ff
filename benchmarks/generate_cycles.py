"""Cycles per token of `tilewright generate` across ArchSpecs (the cycle model's whole-model
steps), with the wall time of each run; ``--rtl`` adds tiny-llama's steps on the Verilated
accelerator top (C++ fast driver, GEMMs and vector ops; RTL cycles against the accelerator
model) on the anchor design.

    python benchmarks/generate_cycles.py [--models tiny-llama,...] [--archs ws8x8v,...] [--rtl]

Prints one table; ratios are decode cycles per token against the first ArchSpec (the anchor) in
the same run. Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import time

from tilewright.app.cli.tables import Column, print_table
from tilewright.app.flows.generate import generate
from tilewright.arch import load_arch

PROMPT = [1, 2, 3, 4]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="tiny-llama,tiny-moe,tiny-mamba")
    ap.add_argument("--archs", default="ws8x8v,ws16x16,os16x16")
    ap.add_argument("--tokens", type=int, default=4)
    ap.add_argument("--rtl", action="store_true", help="also tiny-llama --rtl --fast --vector "
                    "on the first ArchSpec")
    args = ap.parse_args()
    archs = args.archs.split(",")
    rows, anchor = [], {}
    for model in args.models.split(","):
        for name in archs:
            t0 = time.perf_counter()
            res = generate(model, load_arch(name), PROMPT, args.tokens)
            wall = time.perf_counter() - t0
            s = res.summary()
            per_tok = s["decode_cycles_per_token"]
            anchor.setdefault(model, per_tok)
            rows.append((model, name, s["prefill_cycles"], per_tok, per_tok / anchor[model],
                         s["decode_tokens_per_s"], s["array_busy_share"],
                         s["vector_busy_share"] + s["scan_busy_share"], s["dma_busy_share"],
                         "yes" if res.tokens == res.torch_tokens else "diverges",
                         "PASS" if res.ok else "FAIL", wall))
    pct = "{:.0%}"
    print_table(f"generate: {len(PROMPT)} prompt + {args.tokens} generated tokens, cycle model "
                f"(ratio: decode cycles/token vs {archs[0]})",
                [Column("model"), Column("ArchSpec"), Column("prefill cycles", True),
                 Column("decode cycles/token", True, "{:,.0f}"), Column("ratio", True, "{:.2f}"),
                 Column("tokens/s", True, "{:,.0f}"), Column("array", True, pct),
                 Column("vector+scan", True, pct), Column("DMA", True, pct),
                 Column("= torch tokens"), Column("checks"), Column("wall s", True, "{:.1f}")],
                rows)
    if args.rtl:
        t0 = time.perf_counter()
        res = generate("tiny-llama", load_arch(archs[0]), PROMPT, args.tokens, rtl=True,
                       driver="fast", vector=True)
        wall = time.perf_counter() - t0
        rtl = sum(s.rtl["rtl_cycles"] + s.rtl["vector_rtl_cycles"] for s in res.steps)
        model = sum(s.rtl["model_cycles"] + s.rtl["vector_model_cycles"] for s in res.steps)
        print_table(f"tiny-llama on the {archs[0]} accelerator top (C++ fast driver)",
                    ["quantity", Column("value", True)],
                    [("RTL cycles (GEMMs + vector kernels)", rtl),
                     ("accelerator model cycles", model),
                     ("checks", "PASS" if res.ok else "FAIL"),
                     ("wall s (incl. compile, functional, build if not cached)", round(wall, 1)),
                     ("of which RTL s", round(res.seconds.get("rtl", 0.0), 1))])


if __name__ == "__main__":
    main()
