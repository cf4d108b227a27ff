"""``tilewright demo``: the whole first vertical slice, end to end, with every cross-check.

compile (torch.export -> int8 Program) -> functional model -> torch integer reference
-> Verilog (Amaranth) -> Verilator build -> RTL run (cocotb) -> cycle model; then a summary.
Returns False (the CLI exits 1) if any cross-check fails.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from rich.console import Console
from rich.table import Table

from tilewright.arch import ArchSpec, ArchSpecError, default_arch
from tilewright.dataflow_sim.functional import run_program

__all__ = ["run_demo", "DemoResult", "FLOAT_ERROR_BOUND_LSB"]

#: int8 output vs float torch, in output LSBs: the 6-sigma rounding-noise bound the compiler's
#: tests derive for mlp-tiny/mlp-small (tests/test_compiler_mlp.py)
FLOAT_ERROR_BOUND_LSB = 8.0


@dataclass
class DemoResult:
    ok: bool
    checks: list[tuple[str, bool, str]]
    stage_seconds: dict[str, float]
    gemm_rows: list[dict]


def _torch_int_reference(program, x_int8: np.ndarray) -> np.ndarray:
    """The compiled layers' quantized parameters run by torch's own int64 arithmetic."""
    import torch  # noqa: PLC0415  (lazy: torch is heavy)

    from tilewright.models.quantized_reference import (  # noqa: PLC0415  (lazy: pulls in torch)
        QuantLinear, run_int8_layers)
    c = program.constants
    layers = [QuantLinear(weight=torch.from_numpy(np.ascontiguousarray(c[f["weight"]].T)),
                          bias=torch.from_numpy(c[f["bias"]]),
                          multiplier=torch.from_numpy(c[f["multiplier"]]),
                          shift=torch.from_numpy(c[f["shift"]]), relu=f["relu"])
              for f in program.meta["layers"]]
    return run_int8_layers(torch.from_numpy(x_int8), layers).numpy()


def run_demo(model: str = "mlp-tiny", arch: ArchSpec | None = None, seed: int = 0,
             console: Console | None = None, driver: str = "cocotb") -> bool:
    """Run the demo and print its summary; return True when every cross-check passes.

    ``driver``: ``"cocotb"`` (Python bench) or ``"fast"`` (C++ Verilator harness) for the RTL run.
    """
    return demo_result(model, arch, seed, console, driver).ok


def demo_result(model: str = "mlp-tiny", arch: ArchSpec | None = None, seed: int = 0,
                console: Console | None = None, driver: str = "cocotb") -> DemoResult:
    from tilewright.compiler import compile_model  # noqa: PLC0415  (lazy: pulls in torch)
    from tilewright.cosim.build import build as build_top  # noqa: PLC0415  (lazy: pulls in amaranth)
    from tilewright.cosim.sim import run  # noqa: PLC0415  (lazy: pulls in amaranth)
    from tilewright.dataflow_sim.cycle import gemm_report  # noqa: PLC0415  (lazy: pulls in pandas)
    from tilewright.models.configs import build  # noqa: PLC0415  (lazy: pulls in torch)

    con = console or Console()
    arch = arch or default_arch()
    te = arch.tensor_engine
    if te.kind != "systolic":
        raise ArchSpecError(f"{arch.name}: tensor_engine.kind = {te.kind!r}: tilewright demo runs "
                            f"the systolic GEMM core; accepted: 'systolic' (the tile-MAC kinds "
                            f"generate their engine with `tilewright rtl`)")
    if te.input_format != "int8" or te.weight_format != "int8":
        raise ArchSpecError(f"{arch.name}: tensor_engine.input_format/weight_format = "
                            f"{te.input_format}/{te.weight_format}: tilewright demo runs the int8 "
                            f"MLP path; accepted: int8 (`tilewright sim --rtl` runs bf16 designs)")
    con.print(f"[bold]tilewright demo[/]: {model} on {arch.name} ({te.rows}x{te.cols} "
              f"{te.dataflow.upper()}, {te.input_format}x{te.weight_format}->"
              f"{te.accumulator_format}, {arch.clock_mhz:g} MHz)")
    times: dict[str, float] = {}
    checks: list[tuple[str, bool, str]] = []

    def stage(name):
        class _S:
            def __enter__(self_inner):
                self_inner.t0 = time.perf_counter()
                con.print(f"  [cyan]▸[/] {name} ...")
            def __exit__(self_inner, *exc):
                times[name] = time.perf_counter() - self_inner.t0
        return _S()

    with stage("compile (torch.export -> Program)"):
        module, x = build(model, seed=seed)
        program = compile_model(module, x, arch)
        scale = program.meta["input_scale"]
        x_int8 = np.clip(np.round(x.numpy() / scale), -128, 127).astype(np.int8)
    out = program.outputs[0]
    with stage("functional model"):
        func = run_program(program, {"x": x_int8})
    with stage("torch integer reference"):
        ref = _torch_int_reference(program, x_int8)
        y_float = module(x).detach().numpy()
    same = np.array_equal(func[out], ref)
    checks.append(("functional == torch integer reference", same,
                   f"max |diff| {int(np.abs(func[out].astype(int) - ref.astype(int)).max())}"))
    out_scale = program.meta["output_scale"]
    err_lsb = float(np.abs(func[out].astype(np.float64) * out_scale - y_float).max() / out_scale)
    checks.append((f"int8 vs float torch ≤ {FLOAT_ERROR_BOUND_LSB:g} LSB",
                   err_lsb <= FLOAT_ERROR_BOUND_LSB,
                   f"max |error| {err_lsb:.2f} LSB (1 LSB = {out_scale:.4g})"))

    build_msgs: list[str] = []
    with stage("Verilog + Verilator build"):
        with con.status("building the RTL simulator (Amaranth -> Verilog -> Verilator -> g++)") as st:
            def log(msg: str) -> None:
                build_msgs.append(msg)
                st.update(msg)
            built = build_top("core", arch, driver=driver, log=log)
    if built.cached:
        con.print("    (reused the cached Verilator build)")
    else:
        con.print(f"    Verilog {built.generate_seconds:.1f} s, Verilator build "
                  f"{built.build_seconds:.1f} s")
    how = "C++ fast driver" if driver == "fast" else "cocotb"
    with stage(f"RTL simulation (Verilator + {how})"):
        rtl = run("core", program, arch, driver=driver, inputs={"x": x_int8})
    gemm_same = all(np.array_equal(rtl.outputs[g.out], func[g.out]) for g in program.gemms())
    checks.append(("RTL GEMM outputs == functional (bit-exact)", gemm_same,
                   f"{len(program.gemms())} GEMMs, int32"))
    checks.append(("RTL program output == functional", np.array_equal(rtl.outputs[out], func[out]),
                   f"{out} int8{list(func[out].shape)}"))
    with stage("cycle model"):
        report = gemm_report(program, arch)
    rows = []
    for (_, r), rec in zip(report.iterrows(), rtl.records):
        rows.append({"op": r["op"], "shape": f"{r['m']}x{r['k']}x{r['n']}", "rtl": rec["cycles"],
                     "model": int(r["cycles"]), "util": float(r["utilization"])})
    paired = len(rtl.records) == len(report)      # a missing record must not pass by zip
    cyc_ok = paired and all(x["rtl"] == x["model"] for x in rows)
    total_rtl = sum(x["rtl"] for x in rows)
    total_model = sum(x["model"] for x in rows)
    checks.append(("RTL cycles == cycle model (every GEMM)", cyc_ok,
                   f"total {total_rtl} vs {total_model} cycles"
                   + ("" if paired else f"; {len(rtl.records)} RTL records for "
                                         f"{len(report)} GEMMs")))

    gt = Table(title="GEMMs: RTL vs cycle model (convention: cycles `busy` is high)")
    for c in ("op", "M x K x N", "RTL cycles", "model cycles", "utilization"):
        gt.add_column(c, justify="right")
    for x in rows:
        gt.add_row(x["op"], x["shape"], str(x["rtl"]), str(x["model"]), f"{x['util']:.1%}")
    macs = sum(g.macs for g in program.gemms())
    gt.add_row("total", f"{macs} MACs", str(total_rtl), str(total_model),
               f"{macs / (total_model * te.macs_per_cycle):.1%}")
    con.print(gt)
    ct = Table(title="cross-checks")
    for c in ("check", "result", "detail"):
        ct.add_column(c)
    for name, ok, detail in checks:
        ct.add_row(name, "[green]PASS[/]" if ok else "[red]FAIL[/]", detail)
    con.print(ct)
    tt = Table(title="wall time per stage")
    tt.add_column("stage")
    tt.add_column("seconds", justify="right")
    for name, s in times.items():
        tt.add_row(name, f"{s:.2f}")
    tt.add_row("total", f"{sum(times.values()):.2f}")
    con.print(tt)
    ok = all(c[1] for c in checks)
    con.print("[bold green]all cross-checks passed[/]" if ok else "[bold red]a cross-check FAILED[/]")
    return DemoResult(ok, checks, times, rows)
