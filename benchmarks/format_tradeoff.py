"""The number-format trade-off, measured: one table comparing the int8, bf16, fp8-e4m3, fp8-e5m2,
MXINT8 and MXFP8 weight-stationary GEMM cores of the same shape.

    nice -n 19 python benchmarks/format_tradeoff.py                  # 32x4, synthesis + P&R
    nice -n 19 python benchmarks/format_tradeoff.py --fast           # synthesis only, no P&R
    python benchmarks/format_tradeoff.py --fast --shape 2x2 --formats int8,fp8-e4m3 \\
        --targets ice40 --no-error                                   # the test's run

The shape is ``--shape ROWSxCOLS`` (default 32x4: MX blocks run 32 elements along K and the MX
core's array has exactly one block of rows, so 32 is the fewest rows every format can build;
4 columns as the ``ws32x4-mx*`` presets). Each format's design is the same ArchSpec —
``ROWSxCOLS`` WS, ``memory`` 4 KiB scratchpad + 4 KiB accumulator (small enough for iCE40 block
RAM), clock ``--freq`` MHz — built for that format by
:func:`tilewright.compiler.operand_formats.arch_for_format` (int8 accumulates in int32, every other
format in fp32). Columns:

* **Yosys / nextpnr** (per target, ``ice40`` and ``ecp5``): the GEMM core the format's generator
  writes (int8 ``GemmCore``, bf16 ``Bf16GemmCore``, fp8 ``Fp8GemmCore``, MX ``MxGemmCore``:
  buffers, array, sequencer) behind the FPGA flow's pin harness, through
  :func:`tilewright.app.eda.fpga_pnr.run_family` (the code of ``tilewright fpga``): LUT, FF, DSP
  and BRAM counts of the smallest part that holds it (synthesis: Yosys' LUT4 cells, as
  ``tilewright rtl --synth`` counts them — ECP5 carry cells ``CCU2C`` are not in it; the cache
  keeps every cell type), and with place-and-route nextpnr's figures and Fmax (MHz, seed 1). A design no part of a family holds is a row "does not fit" with what it needs
  (the counts of Yosys' run for the family's largest part) — a result, not an error.
* **model**: the energy/area model (:mod:`tilewright.dataflow_sim.energy_area`, ``--tech`` node)
  for the same ArchSpec: core area (mm²), pJ per MAC of the MAC itself, and pJ per MAC with the
  steady-state SRAM traffic of a WS array (``energy_breakdown(macs=1)``, at the clock's supply).
* **error** (rel L2 vs torch fp32): one layer of ``tiny-llama``, ``tiny-moe`` and ``tiny-mamba``
  (seq 8, seed 0: the layers ``tilewright sim`` runs) compiled in the format and run on the
  functional model (:func:`tilewright.dataflow_sim.functional.run_program`, the format's exact
  arithmetic) against the same torch module's float forward pass; and a 64x256x64 GEMM
  (a ~ N(0,1), b ~ N(0,1/K), seed 0) quantized per tensor (MX per block) and multiplied by
  :func:`tilewright.dataflow_sim.numerics.gemm` with ``k_block`` = rows against torch's fp32
  ``a @ b``.

``--no-share`` synthesizes **every** format of the table without Yosys' ``share`` pass
(:func:`tilewright.app.eda.fpga_pnr.flow_target`; ``tilewright fpga --no-share``), so the rows
stay comparable: on the float 32x4 cores ``share`` checks ~77,000 pairs of variable shifters
with one SAT problem each (hours here; none of the 2,292 pairs it got through on fp8-e4m3
merged); on the int8 and MXINT8 32x4 cores the
counts with and without it are compared in docs/formats.md.

    nice -n 19 python benchmarks/format_tradeoff.py --fast --no-share --synth-timeout 21600

(the float 32x4 rows: with ``share`` skipped, ABC9's LUT mapping of the bf16 core ran past the
default one-hour Yosys limit here).

Every (format, target, flow) result is cached as JSON under ``--cache`` (default
``$TILEWRIGHT_CACHE/format_tradeoff`` or ``~/.cache/tilewright/format_tradeoff``) keyed by the
Verilog's sha256, so a rerun reuses finished runs; runs go one at a time. ``--json FILE`` also
writes every row as JSON.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from tilewright.app.eda.fpga_pnr import DoesNotFitPart, check_memory_fits, run_family
from tilewright.arch import ArchSpec
from tilewright.compiler.operand_formats import arch_for_format
from tilewright.cosim.bf16_jobs import Bf16Params
from tilewright.dataflow_sim.energy_area import area_breakdown, energy_breakdown, load_tech
from tilewright.errors import UserError
from tilewright.formats import FORMATS, quantize
from tilewright.rtl.emit import write_verilog
from tilewright.rtl.systolic_bf16 import BF16_TOP_NAME, Bf16GemmCore, generate_bf16_verilog
from tilewright.rtl.verilog import top_name, write_arch_rtl

#: the formats compared, in table order
FORMAT_ROWS = ("int8", "bf16", "fp8-e4m3", "fp8-e5m2", "mxint8", "mxfp8")
#: the FPGA families of the table
TARGETS = ("ice40", "ecp5")
#: the tiny models of the error columns (one layer each, as ``tilewright sim`` builds it)
MODELS = ("tiny-llama", "tiny-moe", "tiny-mamba")
#: the GEMM of the error column (M, K, N)
GEMM_MKN = (64, 256, 64)
#: the memory of every design (KiB): small enough for iCE40 block RAM
SCRATCHPAD_KIB, ACCUMULATOR_KIB = 4, 4


def design_arch(fmt: str, rows: int, cols: int, clock_mhz: float) -> ArchSpec:
    """The ``rows`` x ``cols`` WS design built for ``fmt`` (module doc)."""
    base = ArchSpec.from_dict({
        "name": f"ws{rows}x{cols}", "clock_mhz": clock_mhz,
        "tensor_engine": {"kind": "systolic", "rows": rows, "cols": cols, "dataflow": "ws",
                          "input_format": "int8", "weight_format": "int8",
                          "accumulator_format": "int32"},
        "memory": {"scratchpad_kib": SCRATCHPAD_KIB, "accumulator_kib": ACCUMULATOR_KIB},
        "offchip": {"bandwidth_gbps": 16.0, "latency_ns": 100.0}},
        source=f"format_tradeoff {rows}x{cols}")
    arch = arch_for_format(base, fmt)
    return ArchSpec.from_dict({**arch.model_dump(mode="json", exclude_none=True),
                               "name": f"ws{rows}x{cols}-{fmt}"}, source=f"format_tradeoff {fmt}")


def write_core(arch: ArchSpec, out_dir: Path) -> tuple[Path, str]:
    """Write the GEMM core of ``arch``'s format into ``out_dir``; return (Verilog file, top).
    int8, fp8 and MX: what ``tilewright rtl`` writes; bf16: the bf16 core of
    :meth:`Bf16Params.for_arch` (the co-simulation's)."""
    if arch.tensor_engine.input_format == "bf16":
        a, b, c = Bf16Params.for_arch(arch).buffer_depths
        te = arch.tensor_engine
        core = Bf16GemmCore(rows=te.rows, cols=te.cols, a_depth=a, b_depth=b, acc_depth=c)
        write_verilog(out_dir, BF16_TOP_NAME, generate_bf16_verilog(core))
        top = BF16_TOP_NAME
    else:
        top = write_arch_rtl(arch, out_dir)["top"]
        assert top == top_name(arch)
    return out_dir / f"{top}.v", top


_NEED = re.compile(r"needs luts (\d+), ffs (\d+), dsps (\d+), brams (\d+)")


def fpga_figures(arch: ArchSpec, family: str, pnr: bool, freq_mhz: float,
                 cache: Path, share: bool = True,
                 synth_timeout_s: float = 3600.0) -> dict[str, Any]:
    """LUT/FF/DSP/BRAM (and with ``pnr`` Fmax) of ``arch``'s core on ``family``, cached;
    ``share=False``: synthesized without Yosys' ``share`` pass (a separate cache entry);
    ``synth_timeout_s``: wall seconds one Yosys run may take."""
    with tempfile.TemporaryDirectory(prefix="fmt-core-") as d:
        vfile, top = write_core(arch, Path(d))
        digest = hashlib.sha256(vfile.read_bytes()).hexdigest()[:16]
        flow = f"{'pnr' if pnr else 'synth'}{'' if share else '-noshare'}"
        key = cache / f"{arch.name}_{family}_{flow}_{freq_mhz:g}_{digest}.json"
        if key.is_file():
            return json.loads(key.read_text())
        t0 = time.perf_counter()
        try:
            check_memory_fits((arch.memory.scratchpad_bytes + arch.memory.accumulator_bytes) * 8,
                              family, f"the buffers of {arch.name}")
            f = run_family(Path(d), vfile, top, family, freq_mhz, pnr=pnr, share=share,
                           synth_timeout_s=synth_timeout_s)
            out = {"fits": True, "part": f["part"], "luts": f["synthesis"]["luts"],
                   "ffs": f["synthesis"]["ffs"], "dsps": f["synthesis"]["dsps"],
                   "brams": f["synthesis"]["brams"], "fmax_mhz": f.get("fmax_mhz"),
                   "yosys": f["synthesis"]["yosys_version"],
                   "cells_by_type": f["synthesis"]["cells_by_type"]}
            if pnr:     # after place-and-route: what nextpnr placed, and its critical path
                out.update({k: f[k] for k in ("luts", "ffs", "dsps", "brams")})
                out["critical_path"] = f.get("pnr", {}).get("critical_path")
        except DoesNotFitPart as exc:
            m = _NEED.search(str(exc))
            out = {"fits": False, "reason": str(exc), "fmax_mhz": None,
                   **(dict(zip(("luts", "ffs", "dsps", "brams"), map(int, m.groups())))
                      if m else {})}
        out.update({"top": top, "share": share, "verilog_sha256": digest, "seconds": round(time.perf_counter()
                                                                           - t0, 1)})
    cache.mkdir(parents=True, exist_ok=True)
    key.write_text(json.dumps(out, indent=1) + "\n")
    return out


def model_figures(arch: ArchSpec, tech_name: str) -> dict[str, float]:
    """The energy/area model's figures for ``arch`` on ``tech_name``: PE-array and core area
    (mm²), and the energy of one MAC (pJ) — the MAC alone and with the WS array's steady-state
    SRAM traffic — at the supply ``arch.clock_mhz`` needs (``voltage_v``, V)."""
    tech = load_tech(tech_name)
    area = area_breakdown(arch, tech)
    e = energy_breakdown(arch, tech, macs=1.0)
    return {"pe_array_mm2": area["pe_array_um2"] / 1e6, "area_mm2": area["area_mm2"],
            "mac_pj": e["mac_pj"], "mac_sram_pj": e["mac_pj"] + e["sram_pj"],
            "voltage_v": e["voltage_v"], "node_nm": tech.node_nm}


def gemm_rel_l2(fmt: str, k_block: int, mkn: tuple[int, int, int] = GEMM_MKN,
                seed: int = 0) -> float:
    """Relative L2 error of ``fmt``'s exact GEMM against torch fp32 ``a @ b`` (module doc)."""
    import torch  # noqa: PLC0415  (heavy)

    from tilewright.dataflow_sim.numerics import gemm  # noqa: PLC0415

    m, k, n = mkn
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    ref = (torch.from_numpy(a) @ torch.from_numpy(b)).double().numpy()
    gran = "tensor" if FORMATS[fmt].scaling == "fp32" else None
    out = gemm(quantize(a, fmt, axis=1, granularity=gran), quantize(b, fmt, axis=0,
                                                                    granularity=gran),
               fmt, k_block=k_block).astype(np.float64)
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def model_rel_l2(model: str, arch: ArchSpec, seq: int = 8, seed: int = 0) -> float:
    """Relative L2 error of one layer of ``model`` run in ``arch``'s format on the functional
    model, against the same torch module's float forward pass (module doc)."""
    import torch  # noqa: PLC0415  (heavy)

    from tilewright.app.flows.sim_rtl import sim_module  # noqa: PLC0415
    from tilewright.dataflow_sim.compile_flow import compile_module  # noqa: PLC0415
    from tilewright.dataflow_sim.functional import run_program  # noqa: PLC0415

    module, example = sim_module(model, seed=seed, seq=seq)
    compiled = compile_module(module, example, arch, fmt=arch.tensor_engine.input_format,
                              name=model, execute=False)
    env = run_program(compiled.program, {n: x.detach().numpy() for n, x
                                         in zip(compiled.program.inputs, example)})
    with torch.no_grad():
        ref = module(*example)
    ref = ref if isinstance(ref, (tuple, list)) else (ref,)
    num = den = 0.0
    for r, name in zip(ref, compiled.program.outputs):
        r = r.detach().double().numpy()
        num += float(((env[name].astype(np.float64) - r) ** 2).sum())
        den += float((r ** 2).sum())
    return (num / den) ** 0.5


def _cell(f: dict[str, Any] | None, key: str) -> str:
    if f is None:
        return "—"
    v = f.get(key)
    if v is None:
        return "—"
    text = f"{v:.1f}" if isinstance(v, float) else f"{v:,}"
    return text if f["fits"] else f"({text})"


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="32x4", help="ROWSxCOLS of every design (default 32x4)")
    ap.add_argument("--formats", default=",".join(FORMAT_ROWS))
    ap.add_argument("--targets", default=",".join(TARGETS),
                    help="FPGA families, comma-separated, or 'none' (model and error columns)")
    ap.add_argument("--fast", action="store_true", help="synthesis only, no place-and-route")
    ap.add_argument("--no-share", action="store_true",
                    help="synthesize every format without Yosys' share pass (module doc)")
    ap.add_argument("--synth-timeout", type=float, default=3600.0,
                    help="wall seconds one Yosys run may take (default 3600; the float 32x4 "
                         "cores' ABC9 mapping needs more here)")
    ap.add_argument("--freq", type=float, default=100.0, help="clock target of P&R (MHz)")
    ap.add_argument("--tech", default="45nm", help="technology table of the model columns")
    ap.add_argument("--no-error", action="store_true", help="leave out the error columns")
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get(
        "TILEWRIGHT_CACHE", Path.home() / ".cache" / "tilewright")) / "format_tradeoff")
    ap.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    args = ap.parse_args(argv)
    targets = [] if args.targets in ("", "none") else args.targets.split(",")
    fmts = args.formats.split(",")
    shape = re.fullmatch(r"(\d+)x(\d+)", args.shape.lower())
    bad = ([f"--formats: {f!r} is not compared; accepted: {', '.join(FORMAT_ROWS)}"
            for f in fmts if f not in FORMAT_ROWS]
           + [f"--targets: {t!r}; accepted: {', '.join(TARGETS)} or none"
              for t in targets if t not in TARGETS]
           + ([] if shape else [f"--shape {args.shape!r}: accepted ROWSxCOLS, e.g. 32x4"]))
    if bad:
        print(bad[0], file=sys.stderr)
        raise SystemExit(2)
    rows, cols = int(shape[1]), int(shape[2])
    try:                    # every design first: a shape a format cannot build is refused
        archs = {fmt: design_arch(fmt, rows, cols, args.freq) for fmt in fmts}
    except UserError as exc:
        print(f"--shape {args.shape}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    head = ["format"]
    for t in targets:
        head += [f"{t} part", f"{t} LUTs", f"{t} FFs", f"{t} DSPs", f"{t} BRAMs"]
        if not args.fast:
            head += [f"{t} Fmax MHz", f"{t} critical path"]
    head += [f"PE array mm² ({args.tech})", "core mm²", "pJ/MAC", "pJ/MAC +SRAM"]
    if not args.no_error:
        head += [f"{m} err" for m in MODELS] + ["GEMM err"]
    print(f"{rows}x{cols} WS GEMM cores, {SCRATCHPAD_KIB} KiB scratchpad + {ACCUMULATOR_KIB} KiB "
          f"accumulator; "
          + ("no FPGA columns" if not targets else "synthesis only" if args.fast
             else f"P&R at {args.freq:g} MHz")
          + ("; Yosys without share (every format)" if targets and args.no_share else "")
          + f"; model at {args.tech}; (n) = needed, does not fit any part of the family")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    out = []
    for fmt in fmts:
        arch = archs[fmt]
        rec: dict[str, Any] = {"format": fmt, "arch": arch.name}
        cells = [fmt]
        for t in targets:
            f = fpga_figures(arch, t, not args.fast, args.freq, args.cache,
                             share=not args.no_share,
                             synth_timeout_s=args.synth_timeout)
            rec[t] = f
            cells += [f.get("part", "does not fit") if f["fits"] else "does not fit",
                      *(_cell(f, k) for k in ("luts", "ffs", "dsps", "brams"))]
            if not args.fast:
                cp = f.get("critical_path")
                cells += [_cell(f, "fmax_mhz"), f"{cp['from']} -> {cp['to']} "
                          f"({cp['logic_levels']} levels)" if cp else "—"]
        mf = model_figures(arch, args.tech)
        rec["model"] = mf
        cells += [f"{mf['pe_array_mm2']:.3f}", f"{mf['area_mm2']:.3f}", f"{mf['mac_pj']:.3f}",
                  f"{mf['mac_sram_pj']:.3f}"]
        if not args.no_error:
            errs = {m: model_rel_l2(m, arch) for m in MODELS}
            errs["gemm"] = gemm_rel_l2(fmt, rows)
            rec["rel_l2"] = errs
            cells += [f"{errs[m]:.2%}" for m in (*MODELS, "gemm")]
        out.append(rec)
        print("| " + " | ".join(cells) + " |", flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
