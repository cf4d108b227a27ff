"""FPGA boards: the part, the clock, the reset and the two serial pins of the board.

A board fixes what ``tilewright fpga`` otherwise chooses: the part (instead of the smallest that
fits), the clock (the board's oscillator, in MHz — no PLL is generated, so a ``--freq`` other than
the oscillator is refused), and four pins (:func:`board_pins`): ``clk`` on the oscillator, ``rst``
on a user button (inverted in the harness when the button is active-low), ``rx``/``tx`` on the
board's UART RX/TX (iCEBreaker, ULX3S: the FTDI UART) or, where the board has no UART (OrangeCrab),
on the Feather header's RX/TX pins. The harness (:mod:`tilewright.app.eda.fpga_pnr`) names its
ports: the UART bridge's link harness passes ``rx``/``tx`` straight to the bridge; the pin-count
harness of the other tops puts its ``sin``/``sout`` there (:func:`constraints`' ``ports``).

Every pin, I/O standard and clock frequency is read from the maintained board library
`amaranth-boards <https://github.com/amaranth-lang/amaranth-boards>`_ (the ``[fpga]`` extra), so
a pin number lives there and nowhere here. :func:`constraints` writes them as an iCE40 PCF or an
ECP5 LPF for nextpnr.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from tilewright.errors import UserError
from tilewright.extras import install_hint

__all__ = ["BOARDS", "Board", "BoardPins", "UnknownBoard", "board_pins", "constraints",
           "get_board", "harness_pins"]


class UnknownBoard(UserError, ValueError):
    """``--board`` names no known board, or a board of another family than ``--target``."""


@dataclass(frozen=True)
class Board:
    """One board: its name, the FPGA family and part (a :data:`~.fpga_pnr.PARTS` name), the
    amaranth-boards platform (``module:Class``) and where the harness's link pins go:
    ``link`` is ``("uart", 0)`` (a UART resource with ``rx``/``tx`` subsignals) or
    ``("connector", "io", 0, "0", "1")`` (a connector's RX and TX pins)."""

    name: str
    family: str
    part: str
    platform: str
    reset: tuple[str, int]
    link: tuple
    description: str


#: the boards ``tilewright fpga --board`` accepts
BOARDS: dict[str, Board] = {b.name: b for b in (
    Board("icebreaker", "ice40", "iCE40UP5K-SG48", "icebreaker:ICEBreakerPlatform",
          ("button", 0), ("uart", 0), "1BitSquared iCEBreaker (iCE40 UltraPlus 5K, 12 MHz)"),
    Board("ulx3s", "ecp5", "LFE5U-85F-CABGA381", "ulx3s:ULX3S_85F_Platform",
          ("button_pwr", 0), ("uart", 0), "Radiona ULX3S 85F (ECP5 LFE5U-85F, 25 MHz)"),
    Board("orangecrab", "ecp5", "LFE5U-25F-CSFBGA285", "orangecrab_r0_2:OrangeCrabR0_2_25FPlatform",
          ("button", 0), ("connector", "io", 0, "0", "1"),
          "Good Stuff Department OrangeCrab r0.2 25F (ECP5 LFE5U-25F, 48 MHz); link on the "
          "Feather header's RX (0) and TX (1) pins"),
)}


@dataclass(frozen=True)
class BoardPins:
    """The board's four pins: ``clk``, ``rst``, ``rx``, ``tx`` (the FPGA's serial input and output)
    -> (pin/site, attributes), the oscillator's frequency (MHz) and whether ``rst`` is active-low
    on the board."""

    board: Board
    pins: dict[str, tuple[str, dict[str, Any]]]
    clock_mhz: float
    reset_active_low: bool


def get_board(name: str, family: str | None = None) -> Board:
    """The board ``name``; :class:`UnknownBoard` (one line listing the boards) when unknown, or
    when ``family`` is given and the board carries another family's part."""
    board = BOARDS.get(name)
    if board is None:
        raise UnknownBoard(f"--board {name!r} is unknown; accepted: "
                           + ", ".join(f"{b.name} ({b.family})" for b in BOARDS.values()))
    if family is not None and board.family != family:
        raise UnknownBoard(f"--board {name} carries an {board.family} part ({board.part}); it "
                           f"cannot take --target {family} (use --target {board.family})")
    return board


def _platform(board: Board) -> Any:
    module, cls = board.platform.split(":")
    try:
        mod = importlib.import_module(f"amaranth_boards.{module}")
    except ImportError as exc:
        raise UserError(f"--board {board.name} reads its pins from amaranth-boards, which is not "
                        f"installed: {install_hint('amaranth_boards')}") from exc
    return getattr(mod, cls)()


def _pin(pins_obj: Any) -> tuple[str, bool]:
    """The one pin name of an amaranth ``Pins`` (single-bit) and whether it is inverted."""
    names = pins_obj.names
    if len(names) != 1:
        raise ValueError(f"expected one pin, got {names}")
    return names[0], bool(pins_obj.invert)


def _resource(platform: Any, name: str, number: int) -> Any:
    return platform.resources[(name, number)]


def board_pins(board: Board) -> BoardPins:
    """The ``clk``, ``rst``, ``rx``, ``tx`` pins of ``board`` (read from amaranth-boards), the
    oscillator frequency and the reset polarity."""
    plat = _platform(board)
    clk = _resource(plat, plat.default_clk, 0)
    clk_pin, _ = _pin(clk.ios[0])
    rst = _resource(plat, *board.reset)
    rst_pin, rst_inv = _pin(rst.ios[0])
    pins = {"clk": (clk_pin, dict(clk.attrs)), "rst": (rst_pin, dict(rst.attrs))}
    if board.link[0] == "uart":
        uart = _resource(plat, "uart", board.link[1])
        sub = {s.name: s for s in uart.ios}
        for signal in ("rx", "tx"):
            pin, _ = _pin(sub[signal].ios[0])
            pins[signal] = (pin, dict(uart.attrs))
    else:
        _, conn_name, conn_num, rx, tx = board.link
        mapping = plat.connectors[(conn_name, conn_num)].mapping
        attrs = dict(clk.attrs)             # the header is on the same bank voltage as the clock
        pins["rx"], pins["tx"] = (mapping[rx], attrs), (mapping[tx], attrs)
    return BoardPins(board, pins, clk.clock.frequency / 1e6, rst_inv)


def harness_pins(bp: BoardPins, ports: dict[str, str] | None = None) -> dict[str, str]:
    """Harness port -> the board's pin/site: ``ports`` renames the board's signals (``{"rx":
    "sin", "tx": "sout"}`` for the pin-count harness); a signal it does not name keeps its name."""
    ports = ports or {}
    return {ports.get(sig, sig): pin for sig, (pin, _) in bp.pins.items()}


def constraints(bp: BoardPins, ports: dict[str, str] | None = None) -> tuple[str, str]:
    """(file name, text) of the pin constraints for nextpnr: ``<board>.pcf`` (iCE40:
    ``set_io``) or ``<board>.lpf`` (ECP5: ``LOCATE``/``IOBUF``/``FREQUENCY``), with the board's
    signals renamed to the harness's ports by ``ports`` (:func:`harness_pins`)."""
    ports = ports or {}
    name = bp.board.name
    if bp.board.family == "ice40":
        lines = [f"# {bp.board.description}: pins from amaranth-boards"]
        lines += [f"set_io {ports.get(sig, sig)} {pin}" for sig, (pin, _) in bp.pins.items()]
        return f"{name}.pcf", "\n".join(lines) + "\n"
    lines = [f"# {bp.board.description}: pins from amaranth-boards"]
    for sig, (site, attrs) in bp.pins.items():
        port = ports.get(sig, sig)
        lines.append(f'LOCATE COMP "{port}" SITE "{site}";')
        kv = " ".join(f"{k}={v}" for k, v in attrs.items() if k in ("IO_TYPE", "PULLMODE"))
        if kv:
            lines.append(f'IOBUF PORT "{port}" {kv};')
    lines.append(f'FREQUENCY PORT "clk" {bp.clock_mhz:g} MHZ;')
    return f"{name}.lpf", "\n".join(lines) + "\n"
