"""The ``tilewright`` command line: :mod:`~tilewright.app.cli.main` holds the Typer app and the
error path, one module per command group beside it."""

#: the largest GEMM dimension, batch or token count a command takes: a product of three stays
#: within int64 (beyond it numpy overflowed: 'Python int too large to convert to C long')
MAX_DIM = 1 << 20
#: the largest element size (bytes) a command takes (the widest format, fp32, is 4)
MAX_ELEM_BYTES = 8


def mesh_elem_bytes(spec, elem_bytes: int | None) -> int:
    """Bytes per element of a mesh command on ``spec``: its cores' operand format
    (``tensor_engine.input_format``, which also sets their area and MAC energy). An
    ``--elem-bytes`` that disagrees is refused (MeshMappingError) rather than run as another
    design."""
    from tilewright.dataflow_sim.mesh import MeshMappingError  # noqa: PLC0415  (lazy: pulls in numpy)
    from tilewright.formats import FORMATS  # noqa: PLC0415  (lazy: pulls in ml_dtypes)
    fmt = spec.tensor_engine.input_format
    own = FORMATS[fmt].bits // 8
    if elem_bytes is not None and elem_bytes != own:
        raise MeshMappingError(
            f"--elem-bytes {elem_bytes}: the mesh cores of {spec.name} compute in "
            f"tensor_engine.input_format {fmt} ({own} byte{'s' if own > 1 else ''} per element); "
            f"omit --elem-bytes or set input_format in the ArchSpec")
    return own
