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


# --- CLI conventions (docs/design.md "CLI conventions"): one spelling per concept -------------

#: per command: an old long spelling -> its canonical one. Kept for one release: the old spelling
#: still works and prints one line ``warning: OLD is deprecated; use NEW`` to stderr.
DEPRECATED_FLAGS: dict[str, dict[str, str]] = {
    "cluster": {"--seq-len": "--seq"},          # train: tokens per sequence
    "mesh-layer": {"--tokens": "--seq"},        # prefill: prompt tokens (decode: --context)
}
#: per (command, option): an old value -> its canonical one (same rule as the flags)
DEPRECATED_VALUES: dict[tuple[str, str], dict[str, str]] = {
    ("fpga", "--top"): {"gemm": "core", "axi": "axi-core"},
    ("rtl", "--synth"): {"xilinx": "xc7"},
}
#: per command: the option a deprecated positional argument stands for (``mesh-layer MODEL``)
DEPRECATED_POSITIONAL: dict[str, str] = {"mesh-layer": "--model"}


def deprecated(old: str, new: str) -> None:
    """Print the one deprecation line of an old spelling to stderr."""
    import sys  # noqa: PLC0415  (lazy: only on this path)
    print(f"warning: {old} is deprecated; use {new}", file=sys.stderr)


def canonical_args(command: str, args: list[str], value_opts: set[str]) -> list[str]:
    """``args`` of ``command`` with every deprecated spelling (:data:`DEPRECATED_FLAGS`,
    :data:`DEPRECATED_VALUES`, :data:`DEPRECATED_POSITIONAL`) replaced by its canonical one,
    one warning line per replacement. ``value_opts``: the option names that take a value (their
    next word is a value, not a positional argument). Words after ``--`` are left alone."""
    flags = DEPRECATED_FLAGS.get(command, {})
    positional = DEPRECATED_POSITIONAL.get(command)
    has_option = positional is not None and any(
        a == positional or a.startswith(positional + "=") for a in args)
    out: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            out += args[i:]
            break
        name, eq, val = a.partition("=") if a.startswith("--") else (a, "", "")
        if name in flags:
            deprecated(name, flags[name])
            name = flags[name]
        values = DEPRECATED_VALUES.get((command, name), {})
        if eq:
            if val in values:
                deprecated(f"{name} {val}", f"{name} {values[val]}")
                val = values[val]
            out.append(f"{name}={val}")
        elif name in value_opts and i + 1 < len(args):
            val = args[i + 1]
            if val in values:
                deprecated(f"{name} {val}", f"{name} {values[val]}")
                val = values[val]
            out += [name, val]
            i += 1
        elif positional and not has_option and not name.startswith("-"):
            deprecated(f"the positional {positional[2:].upper()}",
                       f"{positional} {positional[2:].upper()}")
            out += [positional, name]
            has_option = True
        else:
            out.append(name)
        i += 1
    return out


def _command_class():
    """A Typer command that applies :func:`canonical_args` before click parses its arguments."""
    from typer.core import TyperCommand  # noqa: PLC0415  (lazy: typer is imported by main anyway)

    class CanonicalCommand(TyperCommand):
        def parse_args(self, ctx, args):
            value_opts = {o for p in self.params if not getattr(p, "is_flag", True)
                          and getattr(p, "param_type_name", "") == "option"
                          for o in (*p.opts, *p.secondary_opts)}
            return super().parse_args(ctx, canonical_args(self.name, list(args), value_opts))

    return CanonicalCommand


def print_json(obj) -> None:
    """``--json``: print ``obj`` as one JSON object on one line of stdout (paths and other
    non-JSON values as their text)."""
    import json  # noqa: PLC0415  (lazy: only on this path)
    print(json.dumps(obj, default=str))


#: the help of every ``--json`` option
JSON_HELP = "print one JSON object"
