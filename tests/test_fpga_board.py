"""Boards for `tilewright fpga --board`: pins against each board's own documentation, the
harness's reset polarity, the UART bridge's link harness (the board's rx/tx straight to the
bridge, its divisor from the board's oscillator), and the one-line refusals (exit 2) — none of
these runs a tool except the one marked slow.

The pins come from amaranth-boards; the expected values below are the boards' published pin-outs
(iCEBreaker: the 1BitSquared iCEBreaker v1.0 schematic/README — 12 MHz clock on pin 35, FTDI
UART RX 6 / TX 9, user button 10; ULX3S: the ulx3s_v20.lpf constraint file of the ULX3S repository
— clk_25mhz G2, ftdi_txd M1 (the FPGA's RX), ftdi_rxd L4 (the FPGA's TX), PWR button D6;
OrangeCrab r0.2: its orangecrab.pcf/lpf — clk48 A9, usr_btn J17, Feather header 0 = N17, 1 = M18).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_cli import tw

from tilewright.app.eda.boards import BOARDS, board_pins, constraints, harness_pins
from tilewright.app.eda.fpga_pnr import (PIN_COUNT_PORTS, LinkError, harness_verilog,
                                         link_harness_verilog, part_named, top_ports, uart_link)

#: rx is the FPGA's serial input (the FTDI's TXD), tx its output
PUBLISHED = {
    "icebreaker": ({"clk": "35", "rst": "10", "rx": "6", "tx": "9"}, 12.0, "iCE40UP5K-SG48"),
    "ulx3s": ({"clk": "G2", "rst": "D6", "rx": "M1", "tx": "L4"}, 25.0, "LFE5U-85F-CABGA381"),
    "orangecrab": ({"clk": "A9", "rst": "J17", "rx": "N17", "tx": "M18"}, 48.0,
                   "LFE5U-25F-CSFBGA285"),
}

#: a 2x2 int8 array whose memory port is 4 bytes wide at the iCEBreaker's 12 MHz (0.048 GB/s =
#: 4 B x 12 MHz). Its UART bridge places and routes on the UP5K (3,015 of 5,280 logic cells, 30
#: of 30 block RAMs: docs/fpga.md; behind the AXI adapters it took 4,824 and did not place)
BOARD_ARCH_YAML = """name: int8_2x2_icebreaker
clock_mhz: 12
tensor_engine: {rows: 2, cols: 2, dataflow: ws, input_format: int8, weight_format: int8}
memory: {scratchpad_kib: 1, accumulator_kib: 1}
offchip: {bandwidth_gbps: 0.048}
"""


@pytest.fixture
def board_arch(tmp_path):
    path = tmp_path / "int8_2x2_icebreaker.yaml"
    path.write_text(BOARD_ARCH_YAML)
    return path


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_board_pins_are_the_published_ones(name):
    pins, mhz, part = PUBLISHED[name]
    bp = board_pins(BOARDS[name])
    assert {k: v[0] for k, v in bp.pins.items()} == pins
    assert bp.clock_mhz == mhz and BOARDS[name].part == part
    assert part_named(part).family == BOARDS[name].family
    for ports, names in ((None, {}), (PIN_COUNT_PORTS, {"rx": "sin", "tx": "sout"})):
        want = {names.get(k, k): v for k, v in pins.items()}
        assert harness_pins(bp, ports) == want
        fname, text = constraints(bp, ports)
        if BOARDS[name].family == "ice40":
            assert fname.endswith(".pcf")
            assert {tuple(ln.split()[1:]) for ln in text.splitlines()
                    if ln.startswith("set_io")} == set(want.items())
        else:
            assert fname.endswith(".lpf")
            for port, site in want.items():
                assert f'LOCATE COMP "{port}" SITE "{site}";' in text
            assert f'FREQUENCY PORT "clk" {mhz:g} MHZ;' in text


def test_active_low_button_is_inverted_in_the_harness_only_on_a_board():
    ports = [("input", "clk", 1), ("input", "rst", 1), ("input", "a", 3), ("output", "y", 2)]
    plain, n = harness_verilog("core", ports)
    board, m = harness_verilog("core", ports, rst_active_low=True)
    assert "~rst" not in plain and ".rst(rst)" in plain
    assert "wire rst_i = ~rst;" in board and ".rst(rst_i)" in board and n == m == 3 + 2 + 1


def test_link_harness_puts_the_board_uart_on_the_bridge_ports(board_arch):
    """The bridge top's own ports (from its generated Verilog) are clk, rst, rx, tx, irq; the
    link harness wires the board's pins 1:1 to rx/tx (no flip-flop, no adapter), and the PCF
    binds them to the iCEBreaker's FTDI pins of its published pin-out (RX 6, TX 9)."""
    from tilewright.arch import load_arch
    from tilewright.rtl.uart_bridge_top import UART_BRIDGE_TOP_NAME, generate_uart_bridge_verilog

    link = uart_link(load_arch(board_arch), 12.0, mem_words=2)
    text, _ = generate_uart_bridge_verilog(link)
    ports = top_ports(text, UART_BRIDGE_TOP_NAME)
    assert {(d, n, w) for d, n, w in ports} == {("input", "clk", 1), ("input", "rst", 1),
                                                ("input", "rx", 1), ("output", "tx", 1),
                                                ("output", "irq", 1)}
    bp = board_pins(BOARDS["icebreaker"])
    harness, ffs = link_harness_verilog(UART_BRIDGE_TOP_NAME, ports,
                                        rst_active_low=bp.reset_active_low)
    assert ffs == 0 and "module tw_fpga_harness(input clk, input rst, input rx, output tx);" \
        in harness
    assert ".rx(rx), .tx(tx)" in harness and ".rst(rst_i)" in harness and "sin" not in harness
    _, pcf = constraints(bp)
    assert "set_io rx 6" in pcf.splitlines() and "set_io tx 9" in pcf.splitlines()
    with pytest.raises(ValueError, match="has no input rx, output tx"):
        link_harness_verilog("core", [("input", "clk", 1), ("input", "rst", 1),
                                      ("output", "y", 2)])


@pytest.mark.parametrize("baud,divisor", [(115_200, 104), (921_600, 13), (3_000_000, 4)])
def test_bridge_divisor_from_the_oscillator(board_arch, baud, divisor):
    """round(12 MHz / baud) by hand: 104.17 -> 104, 13.02 -> 13, 4; the ArchSpec the bridge
    is built from runs at the given clock, whatever its YAML says."""
    from tilewright.arch import load_arch

    arch = load_arch(board_arch).model_copy(update={"clock_mhz": 50.0})
    link = uart_link(load_arch(board_arch), 12.0, baud)
    assert link.divisor == divisor and link.arch.clock_mhz == 12.0
    assert abs(link.line_baud - 12e6 / divisor) < 1e-6
    assert uart_link(arch, 12.0, baud).divisor == divisor
    with pytest.raises(LinkError, match="--baud: baud 2.5e\\+06 at 12 MHz: the nearest divisor 5"):
        uart_link(arch, 12.0, 2_500_000)                  # 12e6 / 5 = 2.4e6: 4 % off


def test_bridge_memory_default_on_the_up5k(board_arch):
    """UP5K: 30 blocks x 4 kbit = 122,880 bits; the 2 KiB buffers (16,384 bits) and the 1,024 x
    64-bit instruction memory (65,536) leave 40,960; half is 20,480 = 640 words of 32 bits ->
    512. Without a board part: 4,096."""
    from tilewright.arch import load_arch

    arch = load_arch(board_arch)
    assert uart_link(arch, 12.0, family="ice40", brams=30).mem_words == 512
    assert uart_link(arch, 12.0, family="ice40").mem_words == 4096
    assert uart_link(arch, 12.0, family="ecp5", brams=56).mem_words == 4096


@pytest.mark.parametrize("args,needle", [
    (["--target", "ice40", "--board", "icebreaker", "--baud", "2500000"],
     "--baud: baud 2.5e+06 at 12 MHz: the nearest divisor 5 gives 2.4e+06 baud"),
    (["--target", "ice40", "--board", "icebreaker", "--baud", "4000000"],
     "--baud: baud 4e+06 at 12 MHz is 3 clocks per bit; the UART needs at least 4"),
    (["--target", "ice40", "--board", "icebreaker", "--mem-words", "1000"],
     "--mem-words: mem_words must be a power of two >= 2, not 1000"),
    (["--target", "ice40", "--board", "icebreaker", "--mem-words", "4096"],
     "do not fit the icebreaker board's iCE40UP5K-SG48: brams 36 > 30"),
    (["--target", "ice40", "--top", "core", "--baud", "115200"],
     "--baud sets the UART bridge; it needs --top uart-accel"),
])
def test_bridge_refusals_one_line_exit_2(tmp_path, board_arch, args, needle):
    """Refused before anything is generated: the 12 MHz in the baud messages is the board's
    oscillator (the YAML says 12 too; the preset case below says 50); 4096 words x 4 B = 128 kbit
    + 16 kbit of buffers = 36 blocks of 4 kbit."""
    out = tmp_path / "out"
    proc = tw("fpga", "--arch", str(board_arch), *args, "-o", str(out))
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()


@pytest.mark.parametrize("args,needle", [
    (["--target", "ice40", "--board", "nope"], "--board 'nope' is unknown; accepted: icebreaker"),
    (["--target", "ice40", "--board", "ulx3s"], "--board ulx3s carries an ecp5 part"),
    (["--target", "xc7", "--bitstream"], "--bitstream: xc7 bitstreams are written by Vivado"),
    (["--target", "xc7", "--board", "ulx3s"], "--board: the boards are ice40 and ecp5 boards"),
    (["--target", "ice40", "--bitstream", "--no-pnr"], "--bitstream needs place-and-route"),
    (["--target", "ice40", "--board", "icebreaker", "--freq", "50"],
     "runs from the board's 12 MHz oscillator"),
    (["--target", "ice40", "--board", "icebreaker", "--top", "core", "--arch",
      "configs/ws8x8.yaml"], "do not fit the icebreaker board's iCE40UP5K-SG48: brams 256 > 30"),
    # the board's top is the UART bridge, built at the board's 12 MHz (the preset says 50):
    # 16 GB/s at 12 MHz is a 1,333-byte beat, rounded down to 1,024
    (["--target", "ice40", "--board", "icebreaker"],
     "--top uart-accel at 12 MHz: int8_2x2: offchip.bandwidth_gbps=16.0 at clock_mhz=12.0 "
     "gives 1024-byte beats"),
])
def test_board_and_bitstream_refusals_one_line_exit_2(tmp_path, args, needle):
    if "--arch" not in args:
        args = [*args, "--arch", "tests/qor_baselines/int8_2x2.yaml"]
    out = tmp_path / "out"
    proc = tw("fpga", *args, "-o", str(out))
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize("board,target,top", [
    ("icebreaker", "ice40", "core"),
    # the board default, the UART bridge: places and routes on the ULX3S and on the
    # iCEBreaker's UP5K in about 2 minutes each (docs/fpga.md)
    pytest.param("ulx3s", "ecp5", None, marks=pytest.mark.nightly),
    pytest.param("icebreaker", "ice40", None, marks=pytest.mark.nightly),
    pytest.param("orangecrab", "ecp5", "core", marks=pytest.mark.nightly),
    pytest.param("ulx3s", "ecp5", "core", marks=pytest.mark.nightly)])
def test_board_run_places_on_the_board_pins_and_packs(tmp_path, board_arch, board, target, top):
    """A real run on a board: nextpnr takes the board's constraint file (a pin it cannot place
    fails the run), the part is the board's, the clock target its oscillator, and the packed
    bitstream carries the family's sync word. --top core is the GEMM core in the pin-count
    harness (sin/sout on the board's serial pins); no --top is the UART bridge, its rx/tx on
    the board's serial pins."""
    import json

    arch = "tests/qor_baselines/int8_2x2.yaml"
    if top is None:                 # 4-byte memory words at the board's clock
        arch = str(tmp_path / "board.yaml")
        Path(arch).write_text(BOARD_ARCH_YAML if board == "icebreaker" else      # 0.048 / 12
                              BOARD_ARCH_YAML.replace("clock_mhz: 12", "clock_mhz: 25")
                              .replace("0.048", "0.1"))                        # 0.1 / 25
    proc = tw("fpga", "--arch", arch, "--target", target, "--board", board,
              *(["--top", top] if top else []), "--bitstream", "-o", str(tmp_path / "out"),
              timeout=1800)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    m = json.loads((tmp_path / "out" / "manifest.json").read_text())["fpga"]
    pins, mhz, part = PUBLISHED[board]
    if top is not None:
        pins = {PIN_COUNT_PORTS.get(k, k): v for k, v in pins.items()}
    assert m["part"] == part and m["target_mhz"] == mhz and m["board"]["pins"] == pins
    flag = "--pcf" if target == "ice40" else "--lpf"
    assert f"{flag} {m['board']['constraints']}" in m["pnr"]["command"]
    assert "allow-unconstrained" not in m["pnr"]["command"]
    data = (tmp_path / "out" / m["bitstream"]["path"]).read_bytes()
    sync = bytes.fromhex("7EAA997E" if target == "ice40" else "FFFFBDB3")
    assert sync in data[:4096] and m["bitstream"]["pins"] == "board"
    if top is None:
        assert m["harness_kind"] == "link" and m["harness_ffs"] == 0
        assert m["link"]["clock_mhz"] == mhz and m["link"]["mem_word_bytes"] == 4
        if board == "ulx3s":        # round(25e6 / 115,200) = round(217.01) = 217
            assert m["link"]["divisor"] == 217 and m["link"]["mem_words"] == 4096
        else:                       # round(12e6 / 115,200) = round(104.17) = 104; memory: half of
            # the 30 x 4,096 block-RAM bits the 2 KiB buffers (16,384) and the instruction
            # memory (1,024 x 64) leave = 20,480 bits = 640 words of 32 bits -> 512
            assert m["link"]["divisor"] == 104 and m["link"]["mem_words"] == 512
            assert m["timing_met"] and m["pnr"]["fmax_mhz"] >= 12


def test_a_design_the_placer_cannot_fit_is_a_user_error(tmp_path, monkeypatch):
    """nextpnr's "Unable to find legal placement" on a board (what the UART bridge met on the
    UP5K behind the AXI adapters: docs/fpga.md) is the design not fitting the board:
    DoesNotFitPart (one line, exit 2), naming the board and part; another nextpnr failure stays
    a PnrError. Synthesis and nextpnr are stand-ins here (their real messages are quoted)."""
    import tilewright.app.eda.fpga_pnr as pnr

    stat = {"cells": 10, "luts": 3525, "ffs": 1917, "dsps": 5, "brams": 30, "yosys_version": "x",
            "wall_seconds": 0.0, "cells_by_type": {}}
    monkeypatch.setattr(pnr, "check_nextpnr", lambda family: None)
    monkeypatch.setattr(pnr, "synthesize", lambda *a, **k: stat)
    vfile = tmp_path / "tw_uart_bridge_top.v"
    vfile.write_text("module tw_uart_bridge_top(clk, rst, rx, tx, irq);\n  input clk;\n"
                     "  input rst;\n  input rx;\n  output tx;\n  output irq;\nendmodule\n")
    bp = board_pins(BOARDS["icebreaker"])
    for text, err in (("ERROR: Unable to find legal placement for all cells, design is probably "
                       "at utilisation limit.", pnr.DoesNotFitPart),
                      ("ERROR: IO pin 'tx' constrained to pin '9', which does not exist",
                       pnr.PnrError)):
        def fail(*a, _text=text, **k):
            raise pnr.PnrError(f"nextpnr-ice40 failed on iCE40UP5K-SG48 (exit 125): {_text}")
        monkeypatch.setattr(pnr, "place_and_route", fail)
        with pytest.raises(err) as info:
            pnr.run_family(tmp_path, vfile, "tw_uart_bridge_top", "ice40", 12.0, board=bp)
        if err is pnr.DoesNotFitPart:
            msg = str(info.value)
            assert msg.startswith("tw_uart_bridge_top does not fit the icebreaker board's "
                                  "iCE40UP5K-SG48: nextpnr found no legal placement")
            assert "luts 3525" in msg and "\n" not in msg
