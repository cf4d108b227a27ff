"""A passthrough pipeline: the smallest generated top, and the worked example of adding a top
(docs/design.md, "Add a top").

:class:`Passthrough` moves each word of stream ``i`` (``width`` bits) through ``latency``
register stages to stream ``o``. It never stalls: ``i.ready`` is always 1 and ``o.ready`` is
ignored (a sink that cannot keep up would lose words, as it would on the wire).

Timing contract: a word accepted at rising edge t (``i.valid`` high) is presented on ``o`` with
``o.valid`` high during the cycle after rising edge t + ``latency`` − 1, i.e. exactly
``latency`` cycles after it was presented on ``i`` (:func:`passthrough_cycles`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from amaranth import Module, Signal
from amaranth.back import verilog
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from tilewright.rtl.emit import write_verilog

__all__ = ["Passthrough", "PassthroughParams", "PASSTHROUGH_TOP_NAME", "passthrough_cycles",
           "write_passthrough_rtl"]

#: name of the generated top-level Verilog module
PASSTHROUGH_TOP_NAME = "tw_passthrough"


@dataclass(frozen=True)
class PassthroughParams:
    """What a passthrough is generated from: word ``width`` (bits) and ``latency`` (cycles)."""

    width: int = 8
    latency: int = 2

    def __post_init__(self) -> None:
        if not 1 <= self.width <= 1024:
            raise ValueError(f"passthrough width must be from 1 to 1024 bits, not {self.width}")
        if not 1 <= self.latency <= 64:
            raise ValueError(f"passthrough latency must be from 1 to 64 cycles, not "
                             f"{self.latency}")

    def key(self) -> str:
        """The build-key part of these parameters."""
        return f"w{self.width}-l{self.latency}"


def passthrough_cycles(latency: int) -> int:
    """Cycles from a word on ``i`` to the same word on ``o``: the latency itself."""
    return latency


class Passthrough(wiring.Component):
    """``latency`` register stages between stream ``i`` and stream ``o`` (see module doc)."""

    def __init__(self, params: PassthroughParams) -> None:
        self._params = params
        super().__init__({
            "i": In(stream.Signature(params.width)),
            "o": Out(stream.Signature(params.width)),
        })

    @property
    def params(self) -> PassthroughParams:
        return self._params

    def elaborate(self, platform) -> Module:
        m = Module()
        data, valid = self.i.payload, self.i.valid
        for n in range(self._params.latency):
            d = Signal(self._params.width, name=f"stage{n}_data")
            v = Signal(name=f"stage{n}_valid")
            m.d.sync += [d.eq(data), v.eq(valid)]
            data, valid = d, v
        m.d.comb += [self.i.ready.eq(1), self.o.payload.eq(data), self.o.valid.eq(valid)]
        return m


def write_passthrough_rtl(params: PassthroughParams, out_dir: str | Path) -> Path:
    """Write ``<PASSTHROUGH_TOP_NAME>.v`` for ``params`` to ``out_dir``; return its path."""
    text = verilog.convert(Passthrough(params), name=PASSTHROUGH_TOP_NAME, emit_src=False)
    return write_verilog(out_dir, PASSTHROUGH_TOP_NAME, text)
