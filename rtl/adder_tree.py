"""Multiplier-adder-tree (dot-product) tensor engine, signed int8 x int8 -> int32.

``N`` int8 multipliers feed a pipelined binary adder tree (``ceil(log2 N)`` register levels) and
an int32 accumulator (wrapping modulo 2**32). It computes C = A·B one output element at a time: a
beat carries A[m, k0:k0+N] (``a``) and B[k0:k0+N, n] (``b``); ``ceil(K/N)`` beats (``first`` on
the first, ``last`` on the last) accumulate C[m, n], i.e. one length-N dot product per cycle.

It is the Tm = Tn = 1, Tk = N shape of :class:`tilewright.rtl.cube.TileMacEngine` and shares its
stream interface and timing contract: C[m, n] is on ``c_out`` (one int32) ``2 + ceil(log2 N)``
cycles after its ``last`` beat. An M x K x N GEMM streamed back to back takes
M·N·ceil(K/N) + 2 + ceil(log2 N) cycles (first beat to last output, inclusive); peak N MAC/cycle.
"""

from __future__ import annotations

from tilewright.rtl.cube import TileMacEngine, check_dim

__all__ = ["AdderTreeEngine"]


class AdderTreeEngine(TileMacEngine):
    """Dot-product unit of ``n`` multipliers (keyword-only, 1..64) and a pipelined adder tree."""

    def __init__(self, *, n: int):
        check_dim("n", n)
        super().__init__(tm=1, tk=n, tn=1)

    @property
    def n(self) -> int:
        """Multipliers = dot-product length per beat (elements)."""
        return self.dims[1]
