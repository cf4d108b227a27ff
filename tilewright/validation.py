"""One-line messages for pydantic validation errors of any user-written file (ArchSpec, cluster,
sweep): ``SOURCE: field.path = VALUE: what is accepted``. Imports no layer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

__all__ = ["validation_error_line", "find_user_file", "parse_yaml", "validate_mapping"]


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
    """'must be an integer from LO to HI' from the field's own bounds."""
    info = _field_info(root, loc)
    if info is None:
        return None
    lo = hi = None
    for meta in info.metadata:
        for name in ("ge", "gt"):
            if getattr(meta, name, None) is not None:
                lo = getattr(meta, name)
        for name in ("le", "lt"):
            if getattr(meta, name, None) is not None:
                hi = getattr(meta, name)
    kind = "an integer" if info.annotation is int else "a number"
    if lo is not None and hi is not None:
        return f"must be {kind} from {lo} to {hi}"
    if lo is not None:
        return f"must be {kind} above {lo}" if any(getattr(m, "gt", None) is not None
                                                   for m in info.metadata) \
            else f"must be {kind} of at least {lo}"
    return f"must be at most {hi}" if hi is not None else None


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


def parse_yaml(text: str, source: str, error: type[Exception]) -> Any:
    """``yaml.safe_load(text)``; a syntax error becomes ``error`` naming the source and line."""
    import yaml  # noqa: PLC0415

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise error(f"{source}:{where} is not valid YAML "
                    f"({getattr(exc, 'problem', exc)})") from None


def validate_mapping(model: Any, data: Any, source: str, error: type[Exception], *,
                     what: str, union_fields: tuple[str, ...] = ()) -> Any:
    """``model.model_validate(data)`` for a user file; a non-mapping or an invalid field becomes
    ``error`` with one line (see :func:`validation_error_line`)."""
    if not isinstance(data, dict):
        raise error(f"{source}: expected a mapping of {what}s at top level, "
                    f"got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        article = "an" if what[:1].lower() in "aeiou" else "a"
        raise error(validation_error_line(exc, source, root=model, what=f"{article} {what}",
                                          union_fields=union_fields)) from None
