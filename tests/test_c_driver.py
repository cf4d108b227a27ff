"""The register map for software, end to end: `tilewright rtl --top axi-accel` writes SystemRDL,
a C header, HTML and IP-XACT from the register table; a C driver written against the header alone
(examples/c/axi_accel_selftest.c) drives the Verilated top through its AXI4-Lite port.

References, independent of the register map's own code: the ArchSpec (rows, cols, dataflow, beat
bytes), the accelerator cycle model (CYCLES), the instruction count (RETIRED), the SystemRDL
compiler's own parse of the written .rdl and the IP-XACT schema's element names.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

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
    # a Program that reaches for external memory, which this bus does not serve, fails the run
    load = assemble([Instr("LOAD_A", dict(buf=0, count=1, addr=0)), Instr("END", {})])
    bad = run_c_driver(exe, load)
    assert bad.returncode == 3 and "FAIL m_axi" in bad.stderr
