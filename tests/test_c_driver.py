"""The register map for software, end to end: `tilewright rtl --top axi-accel` writes SystemRDL,
a C header, HTML and IP-XACT from the register table; a C driver written against the header alone
(examples/c/axi_accel_selftest.c) drives the Verilated top through its AXI4-Lite port, and runs
GEMMs with DMA through the memory the host shim serves on the AXI4 port.

References, independent of the register map's own code: the ArchSpec (rows, cols, dataflow, beat
bytes), the accelerator cycle model (CYCLES), the instruction count (RETIRED), the SystemRDL
compiler's own parse of the written .rdl and the IP-XACT schema's element names.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from tests.test_axi_accel import ARCH

from tilewright.compiler.codegen import IMEM_WORDS, Instr, IsaProgram, Segment, assemble
from tilewright.dataflow_sim.accel_timing import predict_segment
from tilewright.rtl.axi_accel_top import IMEM_BASE, REGISTERS, write_axi_accel_top

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "c"


@pytest.fixture(scope="module")
def rtl_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("axi_accel")
    manifest = write_axi_accel_top(ARCH, out)
    return out, manifest


def test_register_map_files_hold_every_register(rtl_dir):
    out, manifest = rtl_dir
    files = manifest["register_map"]
    for kind in ("systemrdl", "c_header", "ipxact", "html"):
        assert (out / files[kind]).is_file(), kind
    header = (out / files["c_header"]).read_text()
    for r in REGISTERS:
        for f in r.field_list():
            mask = re.search(rf"#define TW_AXI_ACCEL_TOP__{r.name}__{f.name.upper()}_bm (0x[0-9a-f]+)",
                             header)
            assert mask and int(mask.group(1), 16) == f.mask, (r.name, f.name)
    # the header's register block puts each register at its offset, IMEM at the window
    assert f"static_assert(sizeof(tw_axi_accel_top_t) == {IMEM_BASE + 8 * IMEM_WORDS:#x}" \
        in header
    ns = {"ipxact": "http://www.accellera.org/XMLSchema/IPXACT/1685-2014"}
    root = ET.parse(out / files["ipxact"]).getroot()
    assert root.find("ipxact:name", ns).text == "tw_axi_accel_top"
    regs = {r.find("ipxact:name", ns).text:
            int(r.find("ipxact:addressOffset", ns).text.removeprefix("'h"), 16)
            for r in root.iter(f"{{{ns['ipxact']}}}register")}
    assert {r.name: r.offset for r in REGISTERS}.items() <= regs.items()
    assert regs["IMEM"] == IMEM_BASE
    assert json.loads((out / "manifest.json").read_text())["register_map"] == files


def _program(m: int, k: int, n: int) -> list[Instr]:
    return [Instr("GEMM", dict(m=m, k=k, n=n, a_buf=0, b_buf=0, c_buf=0, acc=0)),
            Instr("SYNC", dict(dma=0, gemm=1, vec=0)), Instr("END", {})]


@pytest.mark.verilator
def test_c_driver_through_the_header_runs_a_program_on_the_verilated_top(rtl_dir, tmp_path):
    from tilewright.cosim.c_host import build_c_driver, run_c_driver
    out, _ = rtl_dir
    exe = build_c_driver(out, EXAMPLES / "axi_accel_selftest.c", tmp_path,
                         bus_header_dir=EXAMPLES)
    for m, k, n in ((4, 3, 5), (16, 4, 12)):
        instrs = _program(m, k, n)
        words = assemble(instrs)
        res = run_c_driver(exe, words)
        assert res.returncode == 0, res.stderr + res.stdout
        cycles, retired = map(int, re.fullmatch(r"CYCLES (\d+) RETIRED (\d+)\n",
                                                res.stdout).groups())
        isa = IsaProgram(ARCH.content_hash(), tuple(words),
                         (Segment("t", m, k, n, 0, len(words) - 1, ()),), 4, 0)
        assert cycles == predict_segment(isa, isa.segments[0], ARCH).cycles
        assert retired == len(instrs)
    # a Program with DMA: GEMMs whose operands the driver writes into the memory behind the
    # AXI4 port and whose C it reads back; C against numpy, CYCLES against the cycle model (the
    # shim's memory answers like the AxiRam: latency 3 cycles = ARCH's 6 ns at 500 MHz)
    from tilewright.compiler.codegen import codegen, memory_latency_cycles
    from tilewright.cosim.c_host import image_directives, parse_memory, read_directives
    from tilewright.cosim.suites import gemm_suite
    assert memory_latency_cycles(ARCH) == 3
    prog, inputs = gemm_suite(ARCH, [(7, 9, 6, "ragged"), (40, 8, 30, "tiles")], seed=4)
    isa = codegen(prog, ARCH)
    w = isa.beat_bytes
    for task in prog.gemms():
        seg = isa.segment(task.name)
        lines = image_directives(isa.image(ARCH, seg, inputs[task.a], inputs[task.b]), w)
        lines.append(f"RUN {seg.entry}")
        wanted = []
        isa.c_result(ARCH, seg, lambda a, n: wanted.append((a, n)) or [0] * n)
        for a, n in wanted:
            lines += read_directives(a, n, w)
        res = run_c_driver(exe, list(isa.words), lines)
        assert res.returncode == 0, res.stderr + res.stdout
        mem = parse_memory(res.stdout, w)
        c = isa.c_result(ARCH, seg, lambda a, n: [mem[a + i] for i in range(n)])
        want = (inputs[task.a].astype(np.int64) @ inputs[task.b].astype(np.int64)).astype(np.int32)
        assert np.array_equal(c, want), task.name
        cycles, retired = map(int, re.search(r"CYCLES (\d+) RETIRED (\d+)", res.stdout).groups())
        pred = predict_segment(isa, seg, ARCH)
        assert (cycles, retired) == (pred.cycles, pred.instructions), task.name
    # a directive the driver does not know: one line, exit 1
    bad = run_c_driver(exe, assemble([Instr("END", {})]), ["POKE 0 1"])
    assert bad.returncode == 1 and "FAIL directive POKE" in bad.stderr
