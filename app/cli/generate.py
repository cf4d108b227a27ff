"""``tilewright generate``: greedy decoding of a whole small language model on an ArchSpec's
functional model, every step costed by the cycle model
(:func:`tilewright.app.flows.generate.generate`); print the tokens, the cycles and the checks.

Registered in :mod:`tilewright.app.cli.main`. Exit status 1 when a check fails; user errors (a
prompt id outside the vocabulary, ``--tokens 0``, a context beyond the model or the memory, a
model too big, ``--rtl`` on a design the RTL generators do not build) are one line and exit
status 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from tilewright.app.cli import JSON_HELP, print_json
from tilewright.app.cli.single_core import refuse_mesh
from tilewright.app.cli.tables import Column, print_table
from tilewright.arch import load_arch
from tilewright.rtl.limits import refuse_beyond_rtl

__all__ = ["generate_cmd"]

console = Console()


def generate_cmd(
    model: str = typer.Option(..., "--model", help="tiny-llama, tiny-moe, tiny-mamba or a small "
                              "Hugging Face config.json (or a folder holding one): the whole "
                              "model, seeded weights"),
    arch: str = typer.Option(..., "--arch", help="ArchSpec YAML file or preset name"),
    prompt_ids: str = typer.Option(..., "--prompt-ids", help="the prompt's token ids, "
                                   "comma-separated (e.g. 1,2,3)"),
    tokens: int = typer.Option(..., "--tokens", help="tokens to generate: the prefill gives "
                               "the first, each decode step one more"),
    seed: int = typer.Option(0, "--seed", help="seed of the weights"),
    rtl: bool = typer.Option(False, "--rtl", help="run every step's int8 GEMMs on the "
                             "Verilated accelerator top (ISA, DMA, external memory): bit-exact, "
                             "cycles == the accelerator cycle model; the other ops stay on the "
                             "host and are listed"),
    fast: bool = typer.Option(False, "--fast", help="with --rtl: the C++ fast driver"),
    vector: bool = typer.Option(False, "--vector", help="run the ops the vector engine "
                                "implements (exp, rsqrt, SiLU, softplus, softmax, add/sub/mul, "
                                "x**2, neg, sum/mean/max in Q8.8, copy (bit-exact), the per-tensor "
                                "int8 quantize before a "
                                "GEMM; the scan on the scan unit; the argmax of the "
                                "logits, the next token) in its arithmetic; with --rtl on the "
                                "accelerator top's vector engine (needs a vector_unit in the "
                                "ArchSpec)"),
    trace: Optional[Path] = typer.Option(None, "--trace", help="write a Perfetto/Chrome trace "
                                         "JSON to FILE: the cycle model's op-level timeline "
                                         "(tracks: instruction issue, DMA, array, vector, "
                                         "scan); with --rtl the accelerator's "
                                         "instruction-level timeline from the RTL and from "
                                         "the cycle model (two processes; checked equal)"),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Generate tokens greedily with a whole small model on the ArchSpec's functional model (its
    number format), KV cache / Mamba state carried between steps; cycles per step from the cycle
    model; tokens checked against torch fp32 greedy decoding."""
    from tilewright.app.flows.generate import (  # noqa: PLC0415  (lazy: pulls in torch)
        GenerateInputError, generate, parse_prompt_ids)
    if fast and not rtl:
        raise GenerateInputError("--fast selects the RTL driver; add --rtl")
    prompt = parse_prompt_ids(prompt_ids)
    spec = refuse_mesh(load_arch(arch), "generate", arch)
    if rtl:
        refuse_beyond_rtl(spec, "generate --rtl", arch)
    with console.status("compiling") as st:
        res = generate(model, spec, prompt, tokens, seed=seed, trace=trace, log=st.update,
                       rtl=rtl, driver="fast" if fast else "cocotb", vector=vector)
    if as_json:
        print_json(res.as_json())
        if not res.ok:
            raise typer.Exit(1)
        return
    s = res.summary()
    console.print(f"prompt {res.prompt} -> generated {res.tokens} (torch fp32: "
                  f"{res.torch_tokens})", markup=False, highlight=False)
    body = [(st_.phase, st_.tokens_in, st_.context, st_.token, st_.cycles,
             st_.cycles / res.clock_mhz, st_.busy["array"] / st_.cycles,
             st_.busy["vector"] / st_.cycles, st_.busy["scan"] / st_.cycles,
             st_.busy["dma"] / st_.cycles)
            + ((st_.rtl["gemms"], st_.rtl["rtl_cycles"], st_.rtl["model_cycles"]) if rtl else ())
            + ((st_.rtl["vector_kernels"], st_.rtl["vector_rtl_cycles"],
                st_.rtl["vector_model_cycles"]) if rtl and vector else ())
            for st_ in res.steps]
    pct = "{:.0%}"
    rtl_cols = [Column("RTL GEMMs", True), Column("RTL GEMM cycles", True),
                Column("accel model", True)] if rtl else []
    if rtl and vector:
        rtl_cols += [Column("RTL vector kernels", True), Column("RTL vector cycles", True),
                     Column("vector model", True)]
    print_table(f"{res.model} on {res.arch} ({res.clock_mhz:g} MHz): functional model, cycle "
                f"model per step", [Column("step"), Column("tokens in", True),
                                    Column("context", True), Column("token", True),
                                    Column("cycles", True), Column("µs", True, "{:.1f}"),
                                    Column("array", True, pct), Column("vector", True, pct),
                                    Column("scan", True, pct), Column("DMA", True, pct),
                                    *rtl_cols],
                body, console=console)
    if rtl:
        console.print("RTL: each step's GEMMs" + (" and vector kernels" if vector else "")
                      + " run one by one on the accelerator top (RTL cycles count those "
                      "kernels, DMA included, against the accelerator's cycle model; the "
                      "step's cycles are the cycle model's whole step, tasks as `compile` "
                      "costs them)", highlight=False)
    if vector:
        cyc = sorted({st_.rtl["argmax_rtl_cycles"] for st_ in res.steps}) if rtl else []
        console.print("next token: the vector engine's argmax over the logits (as int32 order "
                      "keys), " + (f"on the RTL: {', '.join(map(str, cyc))} cycles per step"
                                   if rtl else "on its instruction-level model"),
                      highlight=False)
    dec = s["decode_cycles_per_token"]
    console.print(f"prefill {s['prefill_cycles']:,} cycles for {s['prompt_tokens']} tokens; "
                  + (f"decode {dec:,.0f} cycles/token = {s['decode_tokens_per_s']:,.0f} "
                     f"tokens/s at {res.clock_mhz:g} MHz; " if dec else "")
                  + f"busy: array {s['array_busy_share']:.0%}, vector "
                  f"{s['vector_busy_share']:.0%}, scan {s['scan_busy_share']:.0%}, DMA "
                  f"{s['dma_busy_share']:.0%} of {s['total_cycles']:,} cycles", highlight=False)
    mem = res.memory
    cap = mem["capacity_bytes"]
    console.print(f"memory: weights {mem['weights_bytes']:,} B + states "
                  f"{mem['states_bytes']:,} B at context {mem['context']} "
                  + (f"of {cap:,} B (offchip.capacity_gib)" if cap is not None else
                     "(offchip.capacity_gib not set: not bounded)"), highlight=False)
    console.print("on the host: " + "; ".join(res.host_ops), highlight=False)
    print_table("checks", ["check", "result", "detail"],
                [(c, "PASS" if ok else "FAIL", d) for c, ok, d in res.checks], console=console)
    if res.trace is not None and rtl:
        b = {k: sum(st_.rtl["timeline_busy"][k] for st_ in res.steps)
             for k in ("cycles", "array", "vector", "scan", "dma")}
        console.print(f"RTL timeline: {sum(st_.rtl['timeline_runs'] for st_ in res.steps)} runs, "
                      f"{b['cycles']:,} cycles; busy: array {b['array'] / b['cycles']:.1%}, "
                      f"vector {b['vector'] / b['cycles']:.1%}, scan {b['scan'] / b['cycles']:.1%}, "
                      f"DMA {b['dma'] / b['cycles']:.1%} (from the RTL; processes \"RTL\" and "
                      f"\"cycle model\" in the trace)", highlight=False)
    if res.trace is not None:
        console.print(f"trace: {res.trace} (open in https://ui.perfetto.dev)")
    if not res.ok:
        console.print("[bold red]a check FAILED[/]")
        raise typer.Exit(1)
    console.print("[bold green]all checks passed[/]")
