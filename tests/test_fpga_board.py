"""Boards for `tilewright fpga --board`: pins against each board's own documentation, the
harness's reset polarity, and the one-line refusals (exit 2) — none of these runs a tool.

The pins come from amaranth-boards; the expected values below are the boards' published pin-outs
(iCEBreaker: the 1BitSquared iCEBreaker v1.0 schematic/README — 12 MHz clock on pin 35, FTDI
UART RX 6 / TX 9, user button 10; ULX3S: the ulx3s_v20.lpf constraint file of the ULX3S repository
— clk_25mhz G2, ftdi_txd M1 (the FPGA's RX), ftdi_rxd L4 (the FPGA's TX), PWR button D6;
OrangeCrab r0.2: its orangecrab.pcf/lpf — clk48 A9, usr_btn J17, Feather header 0 = N17, 1 = M18).
"""

from __future__ import annotations

import pytest

from tests.test_cli import tw

from tilewright.app.eda.boards import BOARDS, board_pins, constraints
from tilewright.app.eda.fpga_pnr import harness_verilog, part_named

PUBLISHED = {
    "icebreaker": ({"clk": "35", "rst": "10", "sin": "6", "sout": "9"}, 12.0, "iCE40UP5K-SG48"),
    "ulx3s": ({"clk": "G2", "rst": "D6", "sin": "M1", "sout": "L4"}, 25.0, "LFE5U-85F-CABGA381"),
    "orangecrab": ({"clk": "A9", "rst": "J17", "sin": "N17", "sout": "M18"}, 48.0,
                   "LFE5U-25F-CSFBGA285"),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_board_pins_are_the_published_ones(name):
    pins, mhz, part = PUBLISHED[name]
    bp = board_pins(BOARDS[name])
    assert {k: v[0] for k, v in bp.pins.items()} == pins
    assert bp.clock_mhz == mhz and BOARDS[name].part == part
    assert part_named(part).family == BOARDS[name].family
    fname, text = constraints(bp)
    if BOARDS[name].family == "ice40":
        assert fname.endswith(".pcf")
        assert {tuple(ln.split()[1:]) for ln in text.splitlines() if ln.startswith("set_io")} \
            == {(k, v) for k, v in pins.items()}
    else:
        assert fname.endswith(".lpf")
        for port, site in pins.items():
            assert f'LOCATE COMP "{port}" SITE "{site}";' in text
        assert f'FREQUENCY PORT "clk" {mhz:g} MHZ;' in text


def test_active_low_button_is_inverted_in_the_harness_only_on_a_board():
    ports = [("input", "clk", 1), ("input", "rst", 1), ("input", "a", 3), ("output", "y", 2)]
    plain, n = harness_verilog("core", ports)
    board, m = harness_verilog("core", ports, rst_active_low=True)
    assert "~rst" not in plain and ".rst(rst)" in plain
    assert "wire rst_i = ~rst;" in board and ".rst(rst_i)" in board and n == m == 3 + 2 + 1


@pytest.mark.parametrize("args,needle", [
    (["--target", "ice40", "--board", "nope"], "--board 'nope' is unknown; accepted: icebreaker"),
    (["--target", "ice40", "--board", "ulx3s"], "--board ulx3s carries an ecp5 part"),
    (["--target", "xc7", "--bitstream"], "--bitstream: xc7 bitstreams are written by Vivado"),
    (["--target", "xc7", "--board", "ulx3s"], "--board: the boards are ice40 and ecp5 boards"),
    (["--target", "ice40", "--bitstream", "--no-pnr"], "--bitstream needs place-and-route"),
    (["--target", "ice40", "--board", "icebreaker", "--freq", "50"],
     "runs from the board's 12 MHz oscillator"),
    (["--target", "ice40", "--board", "icebreaker", "--arch", "configs/ws8x8.yaml"],
     "do not fit the icebreaker board's iCE40UP5K-SG48: brams 256 > 30"),
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
@pytest.mark.parametrize("board,target", [
    ("icebreaker", "ice40"),
    pytest.param("orangecrab", "ecp5", marks=pytest.mark.nightly),
    pytest.param("ulx3s", "ecp5", marks=pytest.mark.nightly)])
def test_board_run_places_on_the_board_pins_and_packs(tmp_path, board, target):
    """A real run on a board: nextpnr takes the board's constraint file (a pin it cannot place
    fails the run), the part is the board's, the clock target its oscillator, and the packed
    bitstream carries the family's sync word."""
    import json

    proc = tw("fpga", "--arch", "tests/qor_baselines/int8_2x2.yaml", "--target", target,
              "--board", board, "--bitstream", "-o", str(tmp_path / "out"), timeout=1800)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    m = json.loads((tmp_path / "out" / "manifest.json").read_text())["fpga"]
    pins, mhz, part = PUBLISHED[board]
    assert m["part"] == part and m["target_mhz"] == mhz and m["board"]["pins"] == pins
    flag = "--pcf" if target == "ice40" else "--lpf"
    assert f"{flag} {m['board']['constraints']}" in m["pnr"]["command"]
    assert "allow-unconstrained" not in m["pnr"]["command"]
    data = (tmp_path / "out" / m["bitstream"]["path"]).read_bytes()
    sync = bytes.fromhex("7EAA997E" if target == "ice40" else "FFFFBDB3")
    assert sync in data[:4096] and m["bitstream"]["pins"] == "board"
