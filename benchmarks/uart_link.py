"""What the UART host link costs: bytes on the line and seconds per Program at board baud rates.

    python benchmarks/uart_link.py

Runs the host driver's own ``BridgeOps.run_program`` (the code a PC runs over pyserial and the
cocotb bench runs over the Verilated line) on a counting transport that answers like the bridge
(OK, the ID register, DONE on the first STATUS poll, zero memory), for the Programs the tests
run over the simulated line: mlp-tiny and the int8 GEMMs of a tiny-llama layer (seq 4) on the
4x4 WS ArchSpec of tests/test_uart_bridge.py (4-byte memory words). Time on the line = bytes
x 10 bits / baud (8N1, half duplex; the accelerator's run, microseconds, and the PC's turnaround
are left out, so these are lower bounds). The protocol's byte counts are exact; no figure here
is a measurement of a board.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.test_uart_bridge import ARCH  # noqa: E402
from tilewright.compiler.codegen import codegen  # noqa: E402
from tilewright.cosim.uart_host import DONE, BridgeOps, run_sync  # noqa: E402
from tilewright.rtl.uart import BITS_PER_BYTE  # noqa: E402
from tilewright.rtl.uart_bridge_top import Cmd, UartLink  # noqa: E402

BAUDS = (115_200, 921_600, 3_000_000)


class CountingBridge:
    """A transport that counts bytes both ways and answers as the bridge does."""

    def __init__(self, ops: BridgeOps):
        self.ops, self.sent, self.received, self._reply = ops, 0, 0, b""

    def write(self, data: bytes) -> None:
        self.sent += len(data)
        cmd, w = data[0], self.ops.w
        if cmd == Cmd.REG_READ:
            addr = int.from_bytes(data[1:3], "little")
            value = {self.ops.map.reg("ID"): self.ops.map.reset_values()["ID"],
                     self.ops.map.reg("STATUS"): DONE}.get(addr, 0)
            self._reply = b"\x00" + value.to_bytes(4, "little")
        elif cmd == Cmd.MEM_READ:
            self._reply = b"\x00" + bytes(w * int.from_bytes(data[5:7], "little"))
        else:
            self._reply = b"\x00"

    def read(self, n: int) -> bytes:
        out, self._reply = self._reply[:n], self._reply[n:]
        self.received += n
        return out


def programs():
    from tilewright.app.flows.sim_rtl import gemm_program
    from tilewright.compiler import compile_model
    from tilewright.dataflow_sim.compile_flow import compile_module
    from tilewright.dataflow_sim.functional import gemm_int8, int8_matmul, run_program
    from tilewright.models.configs import build
    from tilewright.models.llm_configs import build_llm
    module, x = build("mlp-tiny", seed=0)
    mlp = compile_model(module, x, ARCH)
    x8 = np.clip(np.round(x.numpy() / mlp.meta["input_scale"]), -128, 127).astype(np.int8)
    yield "mlp-tiny", mlp, {"x": x8}
    module, example = build_llm("tiny-llama", seed=0, seq=4, batch=1)
    compiled = compile_module(module, example, ARCH, fmt="int8", name="tiny-llama")
    recorded = []

    def record(a, b):
        recorded.append((a.copy(), b.copy()))
        return gemm_int8(a, b)

    with int8_matmul(record):
        run_program(compiled.program, compiled.inputs)
    yield "tiny-llama layer GEMMs (seq 4)", gemm_program(recorded, ARCH, "tl"), {}


def main() -> None:
    link = UartLink(ARCH, mem_words=32768)
    head = ["program", "GEMMs", "to board B", "from board B"] + [f"s @ {b:,}" for b in BAUDS]
    rows = []
    for name, program, inputs in programs():
        ops = BridgeOps(link)
        line = CountingBridge(ops)
        env = {**program.constants, **inputs}
        records = run_sync(ops.run_program(program, codegen(program, ARCH), env), line)
        total = line.sent + line.received
        rows.append([name, str(len(records)), f"{line.sent:,}", f"{line.received:,}"]
                    + [f"{total * BITS_PER_BYTE / b:.3f}" for b in BAUDS])
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, ["-" * w for w in widths], *rows]:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w)
                        in enumerate(zip(r, widths))))


if __name__ == "__main__":
    main()
