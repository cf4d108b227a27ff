"""cocotb 2.x helper shared by the AXI4-Lite benches: a CPU's accesses to a ``s_axil`` port.

:class:`AxiLiteHost` wraps cocotbext-axi's ``AxiLiteMaster`` on the DUT's ``s_axil`` port (clock
``clk``, active-high ``rst``): reset, accesses that must answer OKAY, named registers through a
map with ``reg(name) -> byte address``, raw probes that report any response, and optional seeded
random valid/ready pauses on a set of AXI channels. Used by :mod:`tilewright.cocotb_tests.axi_bench` and
:mod:`tilewright.cocotb_tests.axi_accel_bench`; loaded only inside the simulator.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable

import cocotb
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiLiteBus, AxiLiteMaster, AxiResp

__all__ = ["AxiLiteHost", "pauses", "add_random_pauses", "quiet", "channels"]


def pauses(rng: random.Random):
    """Endless random pause pattern: pause about one cycle in three."""
    while True:
        yield rng.random() < 0.35


def add_random_pauses(chans: Iterable, seed: int) -> None:
    """Give each cocotbext-axi channel its own random pause generator, all drawn from ``seed``."""
    rng = random.Random(seed)
    for ch in chans:
        ch.set_pause_generator(pauses(random.Random(rng.random())))


def quiet(*interfaces) -> None:
    """cocotbext-axi logs one INFO line per access: most of a bench's run time otherwise."""
    for side in interfaces:
        side.log.setLevel(logging.WARNING)


def channels(iface) -> tuple:
    """The five channels (AW, W, B, AR, R) of a cocotbext-axi master or RAM."""
    return (iface.write_if.aw_channel, iface.write_if.w_channel, iface.write_if.b_channel,
            iface.read_if.ar_channel, iface.read_if.r_channel)


class AxiLiteHost:
    """A CPU's view of a top through its ``s_axil`` port; ``regmap.reg(name)`` gives register
    addresses. ``pause_seed`` (None: none) seeds random pauses on the master's own channels."""

    def __init__(self, dut, regmap, pause_seed: int | None = None):
        self.dut, self.map = dut, regmap
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
        quiet(self.axil.write_if, self.axil.read_if)
        if pause_seed is not None:
            add_random_pauses(channels(self.axil), pause_seed)

    async def reset(self) -> None:
        self.dut.rst.value = 1
        for _ in range(3):
            await RisingEdge(self.dut.clk)
        self.dut.rst.value = 0
        await RisingEdge(self.dut.clk)

    async def write(self, addr: int, data: bytes) -> None:
        resp = await self.axil.write(addr, data)
        assert resp.resp == AxiResp.OKAY, f"write at {addr:#x}: {resp.resp!r}"

    async def read(self, addr: int, length: int) -> bytes:
        resp = await self.axil.read(addr, length)
        assert resp.resp == AxiResp.OKAY, f"read at {addr:#x}: {resp.resp!r}"
        return resp.data

    async def write_reg(self, name: str, value: int) -> None:
        await self.write(self.map.reg(name), int(value).to_bytes(4, "little"))

    async def read_reg(self, name: str) -> int:
        return int.from_bytes(await self.read(self.map.reg(name), 4), "little")

    async def probe(self, access: dict) -> dict:
        """One raw access; its response code and (reads) data."""
        if access["op"] == "write":
            r = await self.axil.write(access["addr"], int(access["data"]).to_bytes(4, "little"))
            return {"resp": int(r.resp), "data": None}
        r = await self.axil.read(access["addr"], 4)
        return {"resp": int(r.resp), "data": int.from_bytes(r.data, "little")}

    async def probe_groups(self, groups) -> list[list[dict]]:
        """:meth:`probe` each access of each group; one group's accesses run concurrently."""
        results = []
        for group in groups:
            tasks = [cocotb.start_soon(self.probe(acc)) for acc in group]
            results.append([await t for t in tasks])
        return results
