"""2-D outer-product matrix tensor engine, signed int8 x int8 -> int32.

An R x C array of MACs. Each beat broadcasts a column of A (``a`` = A[m0:m0+R, k], R values) to
every row and a row of B (``b`` = B[k, n0:n0+C], C values) to every column; MAC (i, j) adds
a[i]·b[j] to its int32 accumulator (wrapping modulo 2**32), so after K beats (``first`` on the
first, ``last`` on the last) the array holds the R x C tile of C = A·B and emits it in one cycle.
No skew: operands are broadcast, not shifted, unlike the systolic arrays of
:mod:`tilewright.rtl.systolic`.

It is the Tm = R, Tk = 1, Tn = C shape of :class:`tilewright.rtl.cube.TileMacEngine` and shares
its stream interface and timing contract: the tile is on ``c_out`` 2 cycles after its ``last``
beat (product register + accumulator/output register). An M x K x N GEMM streamed back to back
takes ceil(M/R)·ceil(N/C)·K + 2 cycles (first beat to last output, inclusive); peak R·C
MAC/cycle.
"""

from __future__ import annotations

from tilewright.rtl.cube import TileMacEngine, check_dim

__all__ = ["OuterProductEngine"]


class OuterProductEngine(TileMacEngine):
    """R x C outer-product MAC matrix: ``rows`` and ``cols`` (keyword-only, 1..64)."""

    def __init__(self, *, rows: int, cols: int):
        check_dim("rows", rows)
        check_dim("cols", cols)
        super().__init__(tm=rows, tk=1, tn=cols)

    @property
    def rows(self) -> int:
        """MAC rows R (output rows per tile)."""
        return self.dims[0]

    @property
    def cols(self) -> int:
        """MAC columns C (output columns per tile)."""
        return self.dims[2]
