"""cocotb 2.x bench: runs vector kernels on the Verilated accelerator top's vector engine.

Loaded *inside the simulator process* by cocotb. It reads a job folder (``$TILEWRIGHT_JOB``):
``arch.yaml``, ``kernels.json`` (batches of
:class:`~tilewright.compiler.vector_codegen.VectorKernel`, each batch's code fits the instruction
memory) and ``operands.npz`` (``<kernel>_<i>``: raw Q8.8 operand ``i``). For each batch it compiles
the kernels with :func:`~tilewright.compiler.vector_codegen.codegen_vector` and loads the code
through the control port; for each kernel it writes its operands into the external-memory model
(:class:`~tilewright.cocotb_tests.accel_bench.ExtMemory`: the ArchSpec's latency, one beat per cycle),
starts the controller at the kernel's entry, waits for ``done`` and reads the result back. It
writes ``outputs.npz`` (``<kernel>``: raw result; a scan's final state as
``<kernel>__state``) and ``cycles.json`` (per kernel: cycles by the
top's counter, asserted equal to the simulated time from ``start`` to ``busy`` low; instructions
retired; read and write beats).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import cocotb
import numpy as np
from cocotb.clock import Clock

from tilewright.arch import ArchSpec
from tilewright.compiler.codegen import memory_latency_cycles
from tilewright.compiler.vector_codegen import VectorKernel, codegen_vector
from tilewright.cosim.vector_accel_run import STATE_SUFFIX
from tilewright.cocotb_tests.accel_bench import CLOCK_PERIOD_NS, AccelDriver, ExtMemory
from tilewright.dataflow_sim.accel_timing import predict_segment


@cocotb.test()
async def run_kernels(dut):
    """Run every kernel of the job folder on the vector engine."""
    job = Path(os.environ["TILEWRIGHT_JOB"])
    arch = ArchSpec.from_yaml((job / "arch.yaml").read_text(), source=str(job / "arch.yaml"))
    batches = [[VectorKernel(k["name"], k["kind"], k["op"], tuple(k["shape"])) for k in batch]
               for batch in json.loads((job / "kernels.json").read_text())]
    with np.load(job / "operands.npz") as npz:
        operands = {k: npz[k] for k in npz.files}
    cocotb.start_soon(Clock(dut.clk, CLOCK_PERIOD_NS, unit="ns").start())
    drv = AccelDriver(dut)
    await drv.reset()
    mem = ExtMemory(dut, memory_latency_cycles(arch))
    cocotb.start_soon(mem.serve())
    outputs, records = {}, []
    for batch in batches:
        isa = codegen_vector(arch, batch)
        await drv.load_program(isa.words)
        for k in batch:
            await _run_kernel(drv, mem, arch, isa, k, operands, outputs, records)
    np.savez(job / "outputs.npz", **outputs)
    (job / "cycles.json").write_text(json.dumps(records, indent=1))


async def _run_kernel(drv, mem, arch, isa, k, operands, outputs, records) -> None:
    """Write one kernel's operands, run its segment, read its result and counts."""
    seg = isa.segment(k.name)
    mem.words.update(seg.image(arch, *[operands[f"{k.name}_{i}"]
                                       for i in range(k.operands)]))
    r0, w0 = mem.reads, mem.writes
    watchdog = 4 * predict_segment(isa, seg, arch).cycles + 10_000
    rec = await drv.run(seg.entry, watchdog)
    assert rec["error"] == 0, f"kernel {k.name}: controller error at pc {rec['pc']}"
    rec.update(task=k.name, read_beats=mem.reads - r0, write_beats=mem.writes - w0)
    res = seg.result(arch, mem.read)
    if k.kind == "scan":                         # (y, final state)
        outputs[k.name], outputs[k.name + STATE_SUFFIX] = res
    else:
        outputs[k.name] = res
    records.append(rec)
