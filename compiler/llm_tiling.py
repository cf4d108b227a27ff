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
* :func:`plan_attention_blocks` — FlashAttention block sizes: the largest power of two
  ``<= ATTENTION_BLOCK_MAX`` with the cascade's buffer (:meth:`AttentionTask.buffer_bytes`) within
  the scratchpad. Independent of the sequence length by construction.
* :func:`plan_scan_chunks` — channel and time chunks of the selective scan whose buffer
  (:meth:`ScanTask.buffer_bytes`) fits the scratchpad.
"""

from __future__ import annotations

from tilewright.arch import ArchSpec
from tilewright.compiler.layout import DoesNotFit, ab_buffer_bytes

__all__ = ["plan_gemm_tiles", "plan_attention_blocks", "plan_scan_chunks", "attention_buffer_bytes",
           "scan_buffer_bytes", "ATTENTION_BLOCK_MAX", "SCAN_CHUNK_L_MAX"]

ATTENTION_BLOCK_MAX = 128
"""largest query/key block of the attention cascade (elements), as in FlashAttention-2"""
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


def plan_attention_blocks(arch: ArchSpec, s: int, t: int, d: int, elem_bytes: int = 4
                          ) -> tuple[int, int]:
    """``(block_q, block_kv)`` of the cascade for S queries, T keys, head dim d."""
    block = ATTENTION_BLOCK_MAX
    while block > 1 and attention_buffer_bytes(block, block, d, elem_bytes) \
            > arch.memory.scratchpad_bytes:
        block //= 2
    if attention_buffer_bytes(1, 1, d, elem_bytes) > arch.memory.scratchpad_bytes:
        raise DoesNotFit(f"attention with head dim {d} does not fit {arch.name}'s scratchpad "
                         f"even with 1-row blocks")
    return min(block, s), min(block, t)


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
