"""The ``tilewright`` command line: :mod:`~tilewright.app.cli.main` holds the Typer app and the
error path, one module per command group beside it."""

#: the largest GEMM dimension, batch or token count a command takes: a product of three stays
#: within int64 (beyond it numpy overflowed: 'Python int too large to convert to C long')
MAX_DIM = 1 << 20
#: the largest element size (bytes) a command takes (the widest format, fp32, is 4)
MAX_ELEM_BYTES = 8
