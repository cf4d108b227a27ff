"""Griffe extension: the project's reST-flavoured docstrings read as Markdown on the API pages.

The docstrings are written for Sphinx-style readers (``:class:`X```, ``text::`` before a literal
block, simple tables of ``====`` borders); mkdocstrings renders docstrings as Markdown, where
those come out as stray colons and tables run into one paragraph. This extension rewrites each
docstring's text (the code is not touched):

* a role ``:kind:`target``` becomes the code span `` `target` `` (``~a.b.c`` -> `` `c` ``;
  ``title <target>`` -> `` `title` ``);
* ``text::`` ending a paragraph becomes ``text:`` (the indented block after it is already a
  Markdown code block), a line holding only ``::`` is dropped;
* a simple table that starts at the margin is fenced as a text block, so its columns stay
  aligned (an indented one already is a Markdown code block).

Registered by ``docs/_hooks/reference.py`` (``on_config``) as a mkdocstrings-python extension.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?[a-z]+:`(~?)([^`]+)`")
_BORDER = re.compile(r"^ {0,3}=+( +=+)+ *$")


def _role(m: re.Match) -> str:
    short, target = m.group(1), m.group(2)
    titled = re.fullmatch(r"(.+?)\s*<[^>]+>", target)
    if titled:
        return f"`{titled.group(1)}`"
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


def rst_to_markdown(text: str) -> str:
    """The docstring ``text`` with roles, ``::`` and margin tables rewritten (module doc)."""
    text = _ROLE.sub(_role, text)
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if _BORDER.match(line):                    # a table: up to a border before a blank line
            indent = line[:len(line) - len(line.lstrip())]
            j = i + 1
            while j < len(lines) and not (_BORDER.match(lines[j]) and
                                          (j + 1 == len(lines) or not lines[j + 1].strip())):
                j += 1
            out += [f"{indent}```text", *lines[i:j + 1], f"{indent}```"]
            i = j + 1
            continue
        if line.strip() == "::":
            line = ""
        elif line.rstrip().endswith("::"):
            line = line.rstrip()[:-1]
        out.append(line)
        i += 1
    return "\n".join(out)


class RstToMarkdown(griffe.Extension):
    """Rewrites every object's docstring with :func:`rst_to_markdown` once it is loaded."""

    def on_instance(self, *, obj: Any, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rst_to_markdown(obj.docstring.value)
