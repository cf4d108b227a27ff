"""Tiling and blocking choices of the LLM path: how big a piece of each op the on-chip buffers hold.

All sizes are in elements unless a name says bytes. The buffers are those of the ArchSpec's GEMM
core (``memory.scratchpad_kib`` split equally into the A and B buffers, ``memory.accumulator_kib``
for fp32/int32 partial sums, 4 bytes each):

* :func:`plan_gemm_tiles` — (a simple reference tiling; the LLM lowering now asks
  :func:`tilewright.compiler.gemm_mapper.map_gemm` instead) an M x K x N GEMM with
  ``elem_bytes`` operands is cut into
  ``tile_m x tile_k x tile_n`` pieces with ``tile_k * tile_n * elem_bytes <= B buffer``,
  ``tile_m * tile_k * elem_bytes <= A buffer`` and ``tile_m * tile_n * 4 <= accumulator``;
  ``tile_n`` is N or a multiple of the array's cols, ``tile_k`` is K or a multiple of its rows.
  K is only split when one ``K x cols`` weight panel does not fit.
* :func:`plan_attention_blocks` — FlashAttention block sizes chosen for utilization: among the
  power-of-two ``(block_q, block_kv)`` ``<= ATTENTION_BLOCK_MAX`` whose cascade buffer
  (:meth:`AttentionTask.buffer_bytes`) fits the scratchpad, the one with the least time —
  ``max(cycles, DRAM bytes / bytes per cycle)`` of
  :func:`tilewright.compiler.attention_timing.attention_cost` (ties: the smaller buffer, then
  the larger query block). The buffer is bounded by the scratchpad whatever the sequence length.
* :func:`plan_scan_chunks` — channel and time chunks of the selective scan whose buffer
  (:meth:`ScanTask.buffer_bytes`) fits the scratchpad.
"""

from __future__ import annotations

from functools import lru_cache

from tilewright.arch import ArchSpec
from tilewright.compiler.attention_timing import attention_cost
from tilewright.compiler.layout import DoesNotFit, ab_buffer_bytes

__all__ = ["plan_gemm_tiles", "plan_attention_blocks", "plan_scan_chunks", "attention_buffer_bytes",
           "scan_buffer_bytes", "ATTENTION_BLOCK_MAX", "SCAN_CHUNK_L_MAX"]

ATTENTION_BLOCK_MAX = 512
"""largest query/key block the planner tries (elements): the search bound, not a preference —
large arrays need blocks well above FlashAttention-2's 64-128 to amortise their fill"""
SCAN_CHUNK_L_MAX = 64
"""largest time chunk of the selective scan (steps)"""


def plan_gemm_tiles(arch: ArchSpec, m: int, k: int, n: int, elem_bytes: int = 4
                    ) -> tuple[int, int, int]:
    """``(tile_m, tile_n, tile_k)`` for an M x K x N GEMM (see module doc); raises
    :class:`DoesNotFit` if not even a ``1 x rows x cols`` tile fits."""
    te, mem = arch.tensor_engine, arch.memory
    a_bytes = b_bytes = ab_buffer_bytes(arch)
    acc_bytes = mem.accumulator_bytes
    rows, cols = te.rows, te.cols
    if min(rows, k) * min(cols, n) * elem_bytes > b_bytes or min(cols, n) * 4 > acc_bytes:
        raise DoesNotFit(f"GEMM {m}x{k}x{n}: not even a {rows}x{cols} tile of {elem_bytes}-byte "
                         f"elements fits {arch.name}'s buffers")
    if k * min(cols, n) * elem_bytes <= b_bytes:
        tile_k = k
        panels = b_bytes // (k * elem_bytes * cols)           # weight panels of cols columns
        # panels == 0 only when n < cols (then the whole n fits, by the test above)
        tile_n = n if panels * cols >= n or panels == 0 else panels * cols
    else:
        tile_n = min(cols, n)
        tile_k = max(rows, (b_bytes // (tile_n * elem_bytes)) // rows * rows)
    tile_m = max(1, min(m, a_bytes // (tile_k * elem_bytes), acc_bytes // (tile_n * 4)))
    return tile_m, tile_n, tile_k


def attention_buffer_bytes(block_q: int, block_kv: int, d: int, elem_bytes: int = 4) -> int:
    """Bytes of the attention cascade's on-chip working set (q block, k and v blocks in
    ``elem_bytes``; score block, output accumulator, running max and sum in fp32)."""
    return elem_bytes * (block_q * d + 2 * block_kv * d) + 4 * (block_q * block_kv + block_q * d
                                                                + 2 * block_q)


def plan_attention_blocks(arch: ArchSpec, s: int, t: int, d: int, elem_bytes: int = 4, *,
                          causal_offset: int | None = None, batch: int = 1) -> tuple[int, int]:
    """``(block_q, block_kv)`` of the cascade for ``batch`` heads of S queries, T keys, head dim
    d (module doc); raises :class:`DoesNotFit` if not even 1-row blocks fit the scratchpad."""
    return _plan_attention_blocks(arch, s, t, d, elem_bytes, causal_offset, batch)


def _pow2_upto(n: int) -> list[int]:
    """Powers of two ``<= min(n, ATTENTION_BLOCK_MAX)``, plus n itself when n is smaller (a whole
    axis in one block)."""
    out = [1 << i for i in range(ATTENTION_BLOCK_MAX.bit_length()) if 1 << i <= n]
    return out + [n] * (n < ATTENTION_BLOCK_MAX and n not in out)


@lru_cache(maxsize=1024)
def _plan_attention_blocks(arch: ArchSpec, s: int, t: int, d: int, elem_bytes: int,
                           causal_offset: int | None, batch: int) -> tuple[int, int]:
    cap = arch.memory.scratchpad_bytes
    if attention_buffer_bytes(1, 1, d, elem_bytes) > cap:
        raise DoesNotFit(f"attention with head dim {d} does not fit {arch.name}'s scratchpad "
                         f"even with 1-row blocks")
    bytes_per_cycle = arch.offchip.bandwidth_gbps * 1e9 / (arch.clock_mhz * 1e6)
    best: tuple[float, int, int] | None = None
    choice = (1, 1)
    for bq in _pow2_upto(s):
        for bk in _pow2_upto(t):
            buf = attention_buffer_bytes(bq, bk, d, elem_bytes)
            if buf > cap:
                continue
            c = attention_cost(arch, s=s, t=t, d=d, block_q=bq, block_kv=bk,
                               causal_offset=causal_offset, batch=batch, elem_bytes=elem_bytes)
            key = (max(c.cycles, c.bytes / bytes_per_cycle), buf, -bq)
            if best is None or key < best:
                best, choice = key, (bq, bk)
    return choice


def scan_buffer_bytes(chunk_l: int, chunk_d: int, n: int) -> int:
    """fp32 bytes of one scan chunk: state, a and b chunks, c chunk, y chunk."""
    return 4 * (chunk_d * n + 2 * chunk_l * chunk_d * n + chunk_l * n + chunk_l * chunk_d)


def plan_scan_chunks(arch: ArchSpec, length: int, channels: int, n: int) -> tuple[int, int]:
    """``(chunk_l, chunk_d)``: time chunk <= SCAN_CHUNK_L_MAX and the largest channel chunk
    (all channels, else a multiple of the array's cols) whose buffer fits the scratchpad."""
    cap = arch.memory.scratchpad_bytes
    chunk_l = min(length, SCAN_CHUNK_L_MAX)
    while chunk_l > 1 and scan_buffer_bytes(chunk_l, min(channels, arch.tensor_engine.cols), n) > cap:
        chunk_l //= 2
    chunk_d = channels
    step = arch.tensor_engine.cols
    while chunk_d > 1 and scan_buffer_bytes(chunk_l, chunk_d, n) > cap:
        chunk_d = max(1, (chunk_d - 1) // step * step) if chunk_d > step else chunk_d // 2
    if scan_buffer_bytes(chunk_l, chunk_d, n) > cap:
        raise DoesNotFit(f"selective scan with state size {n} does not fit {arch.name}'s "
                         f"scratchpad even one channel at a time")
    return chunk_l, chunk_d
