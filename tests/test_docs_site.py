"""The documentation site builds with warnings as errors, and its generated reference is complete.

One ``mkdocs build --strict`` (``mkdocs.yml``, hooks in ``docs/_hooks/``) into a temporary folder;
the checks read what should be on the pages from the code itself — the pydantic models' fields,
the Typer app's commands and options, the ISA table — not from lists kept here, so a field or
command added without reaching the site fails the test.
"""

from __future__ import annotations

import html
import importlib
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
import yaml
from pydantic import BaseModel

from tilewright import arch
from tilewright.app.cli.main import app
from tilewright.arch import ArchSpec
from tilewright.compiler import codegen, entry, mesh_isa

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
NOTEBOOKS = ROOT / "notebooks"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
                          "-f", str(ROOT / "mkdocs.yml"), "-d", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"mkdocs build --strict failed:\n{run.stdout}\n{run.stderr}"
    return out


def page_text(site: Path, uri: str) -> str:
    """The HTML of a built page (``use_directory_urls``: ``a/b.md`` -> ``a/b/index.html``),
    entities unescaped."""
    return html.unescape((site / uri.removesuffix(".md").removesuffix(".ipynb")
                          / "index.html").read_text(encoding="utf-8"))


def nav_uris() -> list[str]:
    def walk(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, dict):
            for v in node.values():
                yield from walk(v)
        elif isinstance(node, list):
            for v in node:
                yield from walk(v)

    return list(walk(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]))


def model_fields(model, seen=None) -> set[tuple[str, str]]:
    """(model name, field name) of a pydantic model and of every model nested in its fields."""
    seen = set() if seen is None else seen
    out = set()
    if model in seen:
        return out
    seen.add(model)
    for name, info in model.model_fields.items():
        out.add((model.__name__, name))
        stack = [info.annotation]
        while stack:
            t = stack.pop()
            if isinstance(t, type) and issubclass(t, BaseModel):
                out |= model_fields(t, seen)
            stack += list(getattr(t, "__args__", ()))
    return out


def test_every_docs_page_is_in_the_nav():
    nav = set(nav_uris())
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")
             if "_hooks" not in p.parts}
    assert pages, "no docs/*.md found"
    assert pages - nav == set(), f"docs pages missing from mkdocs.yml's nav: {sorted(pages - nav)}"
    notebooks = {f"notebooks/{p.name}" for p in NOTEBOOKS.glob("*.ipynb")}
    assert notebooks - nav == set(), f"notebooks missing from the nav: {sorted(notebooks - nav)}"


def test_archspec_reference_lists_every_field(site):
    text = page_text(site, "reference/schemas/archspec.md")
    fields = model_fields(ArchSpec)
    assert len(fields) > 20          # the walk reached the nested sections
    missing = sorted(f"{m}.{f}" for m, f in fields if f"<code>{f}</code>" not in text)
    assert missing == [], f"ArchSpec fields missing from the reference page: {missing}"
    for model in {m for m, _ in fields}:
        assert f'id="{model.lower()}"' in text, f"no section for {model}"


@pytest.mark.parametrize("uri, model_path", [
    ("reference/schemas/cluster.md", "tilewright.dataflow_sim.cluster.cluster_spec:ClusterSpec"),
    ("reference/schemas/sweep.md", "tilewright.app.sweep.spec:SweepSpec"),
    ("reference/schemas/tech.md", "tilewright.dataflow_sim.energy_area:TechSpec"),
    ("reference/schemas/train-plan.md", "tilewright.dataflow_sim.cluster.plan:TrainPlan"),
    ("reference/schemas/serve-plan.md", "tilewright.dataflow_sim.cluster.plan:ServePlan"),
])
def test_yaml_reference_lists_every_field(site, uri, model_path):
    module, _, name = model_path.partition(":")
    model = getattr(importlib.import_module(module), name)
    text = page_text(site, uri)
    archspec_models = {m for m, _ in model_fields(ArchSpec)}
    fields = {(m, f) for m, f in model_fields(model) if m not in archspec_models}
    missing = sorted(f"{m}.{f}" for m, f in fields if f"<code>{f}</code>" not in text)
    assert missing == [], f"{name} fields missing from {uri}: {missing}"


def test_cli_reference_lists_every_command_and_option(site):
    text = page_text(site, "reference/cli.md")
    root = typer.main.get_command(app)
    commands = root.commands
    assert len(commands) >= 10
    for name, cmd in commands.items():
        assert f"tilewright {name}" in text, f"command {name} missing from the CLI page"
        section = text.split(f"<code>tilewright {name}</code>", 1)[1].split("<h2", 1)[0]
        for p in cmd.params:
            for spelling in [*p.opts, *p.secondary_opts]:
                assert spelling in section, f"{name}: option {spelling} missing"
            if p.param_type_name == "argument":
                assert p.name in section, f"{name}: argument {p.name} missing"


def test_isa_reference_lists_every_instruction_and_field(site):
    text = page_text(site, "reference/isa.md")
    for op, (code, fields) in codegen.ISA.items():
        row = re.search(rf"<code>{op}</code></td>\s*<td>{code}</td>", text)
        assert row, f"{op} (opcode {code}) missing from the ISA page"
        for name, (lo, width) in codegen.field_slices(op).items():
            assert re.search(rf"<code>{name}</code></td>\s*<td>\[{lo + width - 1}:{lo}\]</td>",
                             text), f"{op}.{name} bits [{lo + width - 1}:{lo}] missing"
    for vop in codegen.VECTOR_OPCODES:
        assert f"<code>{vop}</code>" in text
    for name, _ in mesh_isa.instr_fields(4):
        assert f"<code>{name}</code>" in text, f"mesh field {name} missing"


def test_isa_mesh_widths_follow_the_address_bits(site):
    """The page's symbolic widths (``a``, ``a + 1``, constants) evaluated at a few address widths
    give the field widths ``instr_fields`` returns."""
    text = page_text(site, "reference/isa.md")
    section = text.split('id="mesh-phase-instruction"', 1)[1]
    rows = dict(re.findall(r"<td><code>(\w+)</code></td>\s*<td>([^<]+)</td>", section))
    for a in (1, 5, 13):
        for name, width in mesh_isa.instr_fields(a):
            assert eval(rows[name], {"a": a}) == width, (name, a)    # noqa: S307 (page text)


def test_api_reference_renders_the_docstrings(site):
    text = page_text(site, "reference/api/ground.md")
    assert arch.ArchSpec.__doc__.split()[0] in text and 'id="tilewright.arch.ArchSpec"' in text
    text = page_text(site, "reference/api/compiler.md")
    assert 'id="tilewright.compiler.entry.compile"' in text, entry.__name__


def test_notebooks_render_with_their_figures(site):
    """Each committed notebook that plots shows its figures inline (no backend override) and has
    its outputs committed, and its page carries those images."""
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        source = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
        assert "matplotlib.use(" not in source, f"{path.name} overrides the backend"
        pngs = [o for c in nb["cells"] for o in c.get("outputs", [])
                if "image/png" in o.get("data", {})]
        page = page_text(site, f"notebooks/{path.name}")
        if "plt." in source:
            assert pngs, f"{path.name} plots but has no committed figure (execute it)"
            assert page.count("data:image/png;base64") >= len(pngs), path.name
        errors = [o for c in nb["cells"] for o in c.get("outputs", [])
                  if o.get("output_type") == "error"]
        assert errors == [], f"{path.name} was committed with an error output"


def test_rst_docstrings_read_as_markdown():
    """The griffe extension's rewrite on a hand-written docstring, against the Markdown written
    out by hand."""
    spec = importlib.util.spec_from_file_location("rst_docstrings",
                                                  DOCS / "_hooks" / "rst_docstrings.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    src = ("Uses :class:`~tilewright.arch.ArchSpec`, :func:`compile` and\n"
           ":mod:`the codegen <tilewright.compiler.codegen>`, e.g.::\n"
           "\n"
           "    tilewright arch ws8x8\n"
           "\n"
           "=====  ====\n"
           "kind   rows\n"
           "=====  ====\n"
           "cube   M\n"
           "=====  ====\n"
           "\n"
           "After.")
    want = ("Uses `ArchSpec`, `compile` and\n"
            "`the codegen`, e.g.:\n"
            "\n"
            "    tilewright arch ws8x8\n"
            "\n"
            "```text\n"
            "=====  ====\n"
            "kind   rows\n"
            "=====  ====\n"
            "cube   M\n"
            "=====  ====\n"
            "```\n"
            "\n"
            "After.")
    assert mod.rst_to_markdown(src) == want
