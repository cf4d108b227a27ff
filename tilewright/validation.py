"""Reading user-written files (ArchSpec, cluster, sweep, tech and energy tables) one way, with
one-line errors: :func:`read_user_text` refuses folders, unreadable, oversized, binary and non-UTF-8
files; :func:`parse_yaml` refuses YAML syntax errors and duplicate keys (naming both lines);
:func:`validate_mapping` checks the top level is a mapping and turns pydantic validation errors into
``SOURCE: field.path = VALUE: what is accepted``. Imports no layer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

__all__ = ["validation_error_line", "find_user_file", "read_user_text", "parse_yaml",
           "validate_mapping", "load_user_yaml", "MAX_USER_FILE_BYTES"]

#: the largest user file read (bytes): user files are hand-written YAML of a few kilobytes; a larger
#: file is almost surely the wrong one, and reading it whole would cost memory for nothing
MAX_USER_FILE_BYTES = 16 * 2**20


def _field_info(root: Any, loc: list[str]) -> Any:
    """The pydantic FieldInfo at ``loc`` under model ``root`` (None if not found)."""
    model, info = root, None
    for part in loc:
        fields = getattr(model, "model_fields", None)
        if not fields or part not in fields:
            return None
        info = fields[part]
        model = info.annotation
        for member in getattr(model, "__args__", ()):       # Optional[Section] -> Section
            if hasattr(member, "model_fields"):
                model = member
    return info


def _range_text(root: Any, loc: list[str]) -> str | None:
    """'must be an integer from 1 to 64' (both bounds inclusive) or, with an exclusive bound,
    'must be a number above 0 and at most 10000' — never an exclusive bound shown as inclusive."""
    info = _field_info(root, loc)
    if info is None:
        return None
    bound = {name: getattr(m, name) for m in info.metadata
             for name in ("gt", "ge", "lt", "le") if getattr(m, name, None) is not None}
    kind = "an integer" if info.annotation is int else "a number"
    if "ge" in bound and "le" in bound:
        return f"must be {kind} from {bound['ge']} to {bound['le']}"
    words = {"gt": "above", "ge": "of at least", "lt": "below", "le": "at most"}
    parts = [f"{words[name]} {value}" for name, value in bound.items()]
    return f"must be {kind} {' and '.join(parts)}" if parts else None


def validation_error_line(exc: ValidationError, source: str, *, root: Any = None,
                          what: str = "field", union_fields: tuple[str, ...] = ()) -> str:
    """The first error of ``exc`` as ``SOURCE: field = VALUE: accepted (+N more)``.

    ``root`` is the model validated (for numeric bounds); ``what`` names its kind in the message
    for unknown keys; ``union_fields`` are fields holding a tagged union whose tag pydantic puts
    in the error path (it is dropped from the shown path).
    """
    errs = exc.errors(include_url=False)
    first = errs[0]
    loc = [str(p) for p in first["loc"]]
    if loc and loc[0] in union_fields and len(loc) > 2:
        del loc[1]
    field = ".".join(loc) or "<top level>"
    typ, ctx = first["type"], first.get("ctx", {}) or {}
    shown = "(missing)" if typ == "missing" else repr(first.get("input"))
    more = f" (+{len(errs) - 1} more)" if len(errs) > 1 else ""
    if typ == "value_error":                  # a cross-field check: its message names the field
        text = str(first["msg"]).removeprefix("Value error, ")
        return f"{source}: {field + '.' if loc else ''}{text}{more}"
    if typ == "extra_forbidden":
        shown, accepted = "(unknown key)", f"is not {what} (check the spelling)"
    elif typ == "literal_error":
        accepted = f"must be one of {ctx.get('expected', '?')}"
    elif typ == "union_tag_invalid":
        field, shown = f"{field}.kind", repr(ctx.get("tag"))
        accepted = f"must be one of {ctx.get('expected_tags', '?')}"
    elif typ == "union_tag_not_found":
        field, shown, accepted = f"{field}.kind", "(missing)", "is required"
    elif typ == "missing":
        accepted = "is required"
    elif typ in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        accepted = (_range_text(root, loc) if root is not None else None) or first["msg"].lower()
    else:
        accepted = str(first["msg"]).lower()
    return f"{source}: {field} = {shown}: {accepted}{more}"


def find_user_file(path: str | Path, preset_dir: Path, error: type[Exception],
                   what: str = "preset") -> Path:
    """``path`` if it exists, else ``preset_dir/<path>.yaml``; else raise ``error`` naming the
    presets there."""
    p = Path(path)
    if not p.exists() and (preset_dir / f"{path}.yaml").exists():
        p = preset_dir / f"{path}.yaml"
    if not p.exists():
        presets = ", ".join(sorted(x.stem for x in preset_dir.glob("*.yaml")))
        raise error(f"{path}: no such file (or {what}; {what}s are: {presets})")
    return p


def _a(noun: str) -> str:
    """``noun`` with its indefinite article."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def read_user_text(path: str | Path, error: type[Exception], *, what: str = "YAML") -> str:
    """The text of the user file ``path``; a folder, a missing or unreadable file, one larger than
    :data:`MAX_USER_FILE_BYTES`, a binary file or one that is not UTF-8 raises ``error`` with one
    line naming the file and what is accepted (``what``: the kind of file, for the message)."""
    p = Path(path)
    if p.is_dir():
        raise error(f"{p}: is a folder; give {_a(what)} file")
    try:
        size = p.stat().st_size
        if size > MAX_USER_FILE_BYTES:
            raise error(f"{p}: {size:,} bytes; {_a(what)} file is at most "
                        f"{MAX_USER_FILE_BYTES:,} bytes")
        data = p.read_bytes()
    except FileNotFoundError:
        raise error(f"{p}: no such file") from None
    except OSError as exc:
        raise error(f"{p}: cannot be read ({exc.strerror or exc})") from None
    if b"\0" in data:
        raise error(f"{p}: is a binary file; give {_a(what)} file (UTF-8 text)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise error(f"{p}: line {line}: byte 0x{data[exc.start]:02x} is not UTF-8; "
                    f"{_a(what)} file is UTF-8 text") from None


def _unique_key_loader():
    """A PyYAML SafeLoader whose mappings refuse a key given twice (PyYAML keeps the last)."""
    import yaml  # noqa: PLC0415  (lazy: PyYAML only for YAML files)

    class DuplicateKey(yaml.YAMLError):
        def __init__(self, key: Any, first: int, again: int):
            super().__init__(f"key {key!r} appears twice (line {first} and line {again}); "
                             f"each key may be given once")
            self.line = again

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:             # an unhashable key: PyYAML's own error follows
                    break
                if first is not None:
                    raise DuplicateKey(key, first, key_node.start_mark.line + 1)
                seen[key] = key_node.start_mark.line + 1
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader, DuplicateKey


def parse_yaml(text: str, source: str, error: type[Exception]) -> Any:
    """``yaml.safe_load(text)`` that refuses a key given twice in one mapping; a syntax error or a
    repeated key becomes ``error`` naming the source and line(s)."""
    import yaml  # noqa: PLC0415  (lazy: PyYAML only for YAML files)

    loader, duplicate = _unique_key_loader()
    try:
        return yaml.load(text, Loader=loader)  # noqa: S506  (a SafeLoader subclass)
    except duplicate as exc:
        raise error(f"{source}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise error(f"{source}:{where} is not valid YAML "
                    f"({getattr(exc, 'problem', exc)})") from None


def load_user_yaml(path: str | Path, error: type[Exception], *, what: str = "YAML") -> Any:
    """:func:`read_user_text` then :func:`parse_yaml` (source: the path)."""
    return parse_yaml(read_user_text(path, error, what=what), str(path), error)


def validate_mapping(model: Any, data: Any, source: str, error: type[Exception], *,
                     what: str, union_fields: tuple[str, ...] = ()) -> Any:
    """``model.model_validate(data)`` for a user file; a non-mapping or an invalid field becomes
    ``error`` with one line (see :func:`validation_error_line`)."""
    if not isinstance(data, dict):
        got = ("an empty file" if data is None else
               f"a {'list' if isinstance(data, list) else type(data).__name__}")
        raise error(f"{source}: the top level must be a mapping of keys to values "
                    f"({what.split(';')[0]}s), got {got}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        article = "an" if what[:1].lower() in "aeiou" else "a"
        raise error(validation_error_line(exc, source, root=model, what=f"{article} {what}",
                                          union_fields=union_fields)) from None
