"""One way every command prints a table: rich on a terminal (cells fold, numbers are never cut),
a plain tab-separated layout with full numbers when stdout is not a terminal (piped, redirected).

Values are given raw (int, float, str, None) and formatted here: integers — and floats that hold
a whole number, such as a count that went through a float sum — print as integers (thousands
separators on a terminal only); other floats with 6 significant digits.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Sequence

__all__ = ["Column", "fmt_value", "print_table", "plain_output"]

#: the narrowest a numeric column is drawn (characters); folding handles longer numbers
MIN_NUMERIC_WIDTH = 8


class Column:
    """A table column: its header, whether it holds numbers (right-aligned, a minimum width)
    and an optional format for floats (e.g. ``"{:.2f}"``, ``"{:.0%}"``)."""

    def __init__(self, name: str, numeric: bool = False, float_fmt: str | None = None):
        self.name, self.numeric, self.float_fmt = name, numeric, float_fmt


def plain_output() -> bool:
    """True when stdout is not a terminal: tables switch to the plain layout."""
    return not (hasattr(sys.stdout, "isatty") and sys.stdout.isatty())


def fmt_value(v: Any, float_fmt: str | None = None, sep: bool = True) -> str:
    """``v`` as text: None -> ``-``; a bool as ``True``/``False``; an int or a whole-number
    float (below 2**53, exact) as an integer (``,`` separators if ``sep``); NaN as ``nan``;
    another float with ``float_fmt`` or 6 significant digits."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float) and math.isfinite(v) and v.is_integer() and abs(v) < 2**53 \
            and float_fmt is None:
        v = int(v)
    if isinstance(v, int):
        return f"{v:,}" if sep else str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        return float_fmt.format(v) if float_fmt else f"{v:.6g}"
    try:                                      # numpy scalars
        import numbers  # noqa: PLC0415  (lazy: only for non-builtin numbers)
        if isinstance(v, numbers.Integral):
            return fmt_value(int(v), float_fmt, sep)
        if isinstance(v, numbers.Real):
            return fmt_value(float(v), float_fmt, sep)
    except TypeError:
        pass
    return str(v)


def print_table(title: str | None, columns: Sequence[Column | str],
                rows: Sequence[Sequence[Any]], console=None) -> None:
    """Print ``rows`` under ``columns``: a rich table (``overflow="fold"``, never ``…``) on a
    terminal, else ``# title`` and tab-separated lines with full numbers (no separators)."""
    cols = [c if isinstance(c, Column) else Column(c) for c in columns]
    if plain_output():
        out = sys.stdout
        if title:
            out.write(f"# {title}\n")
        out.write("\t".join(c.name for c in cols) + "\n")
        for r in rows:
            out.write("\t".join(fmt_value(v, c.float_fmt, sep=False).replace("\t", " ")
                                for c, v in zip(cols, r)) + "\n")
        out.flush()
        return
    from rich.console import Console  # noqa: PLC0415  (lazy: rich only on a terminal)
    from rich.table import Table  # noqa: PLC0415  (lazy: rich only on a terminal)
    console = console or Console()
    table = Table(title=title)
    # a minimum width keeps numbers whole where it fits (3 = a cell's padding and border);
    # a table too wide for it folds every cell instead of running off the screen
    fits = len(cols) * (MIN_NUMERIC_WIDTH + 3) + 1 <= console.width
    for c in cols:
        table.add_column(c.name, justify="right" if c.numeric else "left", no_wrap=False,
                         overflow="fold",
                         min_width=MIN_NUMERIC_WIDTH if c.numeric and fits else None)
    for r in rows:
        table.add_row(*(fmt_value(v, c.float_fmt) for c, v in zip(cols, r)))
    console.print(table)
