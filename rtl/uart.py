"""A UART (8 data bits, no parity, 1 stop bit: "8N1"): :class:`UartRx`, :class:`UartTx` and the
baud divisor :func:`baud_divisor` derived from a clock and a baud rate.

amaranth-stdio (which has a serial core) is not on the package index this project installs from,
so these are the project's own: one bit every ``divisor`` clock cycles, least significant data
bit first, the line idle high.

Timing contract (``sync`` domain, ``divisor`` = clock cycles per bit, at least
:data:`MIN_DIVISOR`)
    * :class:`UartTx`: ``ready`` is high while idle; a byte is taken in the cycle ``valid &
      ready``; from the next cycle ``tx`` holds the start bit (0), the 8 data bits and the stop
      bit (1) for ``divisor`` cycles each, then ``ready`` rises again (10 · ``divisor`` cycles per
      byte).
    * :class:`UartRx`: ``rx`` passes two synchronizer flip-flops; a falling edge starts a frame;
      the start bit is checked ``divisor // 2`` cycles later (a glitch shorter than that is
      ignored) and each data bit and the stop bit is sampled ``divisor`` cycles after the
      previous sample (mid-bit). ``valid`` is high for one cycle with ``data`` when the stop bit
      is 1; ``frame_error`` pulses instead when it is 0 (the byte is dropped).
"""

from __future__ import annotations

from amaranth import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["UartRx", "UartTx", "baud_divisor", "MIN_DIVISOR", "MAX_BAUD_ERROR", "BITS_PER_BYTE"]

#: fewest clock cycles per bit the receiver takes (it samples mid-bit, two cycles after a
#: two-flip-flop synchronizer)
MIN_DIVISOR = 4
#: largest relative baud error accepted (8N1 tolerates about 5 % between both ends; half of that
#: for each end)
MAX_BAUD_ERROR = 0.025
#: bits on the line per byte: start, 8 data, stop
BITS_PER_BYTE = 10


def baud_divisor(clock_hz: float, baud: float) -> int:
    """Clock cycles per bit: ``round(clock_hz / baud)``. ValueError (naming both) when that is
    below :data:`MIN_DIVISOR` or the achieved rate ``clock_hz / divisor`` is more than
    :data:`MAX_BAUD_ERROR` off ``baud``."""
    if not baud > 0 or not clock_hz > 0:
        raise ValueError(f"baud {baud!r} at clock {clock_hz!r} Hz: both must be positive")
    div = round(clock_hz / baud)
    if div < MIN_DIVISOR:
        raise ValueError(f"baud {baud:g} at {clock_hz / 1e6:g} MHz is {clock_hz / baud:.3g} "
                         f"clocks per bit; the UART needs at least {MIN_DIVISOR} "
                         f"(accepted: baud <= {clock_hz / MIN_DIVISOR:g})")
    err = abs(clock_hz / div - baud) / baud
    if err > MAX_BAUD_ERROR:
        raise ValueError(f"baud {baud:g} at {clock_hz / 1e6:g} MHz: the nearest divisor {div} "
                         f"gives {clock_hz / div:.6g} baud, {100 * err:.2g} % off (accepted: "
                         f"within {100 * MAX_BAUD_ERROR:g} %)")
    return div


def _check_divisor(divisor) -> int:
    if not isinstance(divisor, int) or isinstance(divisor, bool) or divisor < MIN_DIVISOR:
        raise ValueError(f"divisor must be an int >= {MIN_DIVISOR} (clock cycles per bit), "
                         f"not {divisor!r}")
    return divisor


class UartTx(wiring.Component):
    """8N1 transmitter (timing in the module docstring)."""

    def __init__(self, *, divisor: int):
        self._div = _check_divisor(divisor)
        super().__init__({"data": In(8), "valid": In(1), "ready": Out(1), "tx": Out(1, init=1)})

    @property
    def divisor(self) -> int:
        return self._div

    def elaborate(self, platform):
        m = Module()
        shreg = Signal(BITS_PER_BYTE, init=(1 << BITS_PER_BYTE) - 1)
        bits = Signal(range(BITS_PER_BYTE + 1))
        timer = Signal(range(self._div))
        m.d.comb += [self.ready.eq(bits == 0), self.tx.eq(shreg[0])]   # a register's bit
        with m.If(bits == 0):
            with m.If(self.valid):
                m.d.sync += [shreg.eq(Cat(0, self.data, 1)), bits.eq(BITS_PER_BYTE),
                             timer.eq(self._div - 1)]
        with m.Elif(timer == 0):
            m.d.sync += [shreg.eq(Cat(shreg[1:], 1)), bits.eq(bits - 1),
                         timer.eq(self._div - 1)]
        with m.Else():
            m.d.sync += timer.eq(timer - 1)
        return m


class UartRx(wiring.Component):
    """8N1 receiver (timing in the module docstring)."""

    def __init__(self, *, divisor: int):
        self._div = _check_divisor(divisor)
        super().__init__({"rx": In(1, init=1), "data": Out(8), "valid": Out(1),
                          "frame_error": Out(1)})

    @property
    def divisor(self) -> int:
        return self._div

    def elaborate(self, platform):
        m = Module()
        s1, s2 = Signal(init=1), Signal(init=1)
        m.d.sync += [s1.eq(self.rx), s2.eq(s1)]
        timer = Signal(range(self._div))
        bits = Signal(range(8))
        shreg = Signal(8)
        m.d.sync += [self.valid.eq(0), self.frame_error.eq(0)]
        with m.FSM():
            with m.State("IDLE"):
                with m.If(~s2):
                    m.d.sync += timer.eq(self._div // 2 - 1)
                    m.next = "START"
            with m.State("START"):
                m.d.sync += timer.eq(timer - 1)
                with m.If(timer == 0):
                    with m.If(s2):
                        m.next = "IDLE"          # a glitch, not a start bit
                    with m.Else():
                        m.d.sync += [timer.eq(self._div - 1), bits.eq(0)]
                        m.next = "DATA"
            with m.State("DATA"):
                m.d.sync += timer.eq(timer - 1)
                with m.If(timer == 0):
                    m.d.sync += [shreg.eq(Cat(shreg[1:], s2)), timer.eq(self._div - 1),
                                 bits.eq(bits + 1)]
                    with m.If(bits == 7):
                        m.next = "STOP"
            with m.State("STOP"):
                m.d.sync += timer.eq(timer - 1)
                with m.If(timer == 0):
                    with m.If(s2):
                        m.d.sync += [self.valid.eq(1), self.data.eq(shreg)]
                    with m.Else():
                        m.d.sync += self.frame_error.eq(1)
                    m.next = "IDLE"
        return m
