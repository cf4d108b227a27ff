"""MkDocs hook: the reference pages, generated from the code at build time, and the notebooks.

Nothing here is copied from the code by hand; every page is rendered from the object that is the
fact's one home:

* ``reference/schemas/<name>.md`` — each YAML file format from its pydantic model's
  ``model_json_schema()`` (:data:`SCHEMAS`): one table of field / type / default / bounds /
  description per model and per nested model;
* ``reference/isa.md`` — the accelerator ISA from :data:`tilewright.compiler.codegen.ISA` (with
  :data:`~tilewright.compiler.codegen.FIELD_MIN` and the vector opcodes) and the mesh phase
  instruction from :func:`tilewright.compiler.mesh_isa.instr_fields`;
* ``reference/cli.md`` — every command of the Typer app (``typer.main.get_command``), its
  arguments, options, defaults and help;
* the Python API pages (``::: tilewright.x``) need mkdocstrings to find the modules: the
  repository maps one folder per layer into ``tilewright.`` (``package-dir`` in pyproject.toml),
  which griffe's static finder does not follow, so :func:`on_config` stages a tree of symbolic
  links laid out as the import names say and puts it first on the handler's ``paths``, and
  registers the griffe extension of ``rst_docstrings.py`` (reST docstrings read as Markdown);
* ``notebooks/<nb>.ipynb`` — the committed, executed notebooks (rendered by mkdocs-jupyter), and
  ``notebooks/figures/<nb>-<i>.png`` — every PNG figure in their outputs, for the capability
  pages to show.

Registered in ``mkdocs.yml`` under ``hooks:``; ``exclude_docs`` keeps this folder out of the site.
"""

from __future__ import annotations

import base64
import importlib
import json
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import mkdocs.plugins
import typer.main
from mkdocs.structure.files import File, Files

from tilewright.app.cli.main import app
from tilewright.compiler import codegen, mesh_isa

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
RST_EXTENSION = str(Path(__file__).with_name("rst_docstrings.py"))

#: page name -> (title, import path of the pydantic model, what the YAML file is)
SCHEMAS: dict[str, tuple[str, str, str]] = {
    "archspec": ("ArchSpec", "tilewright.arch:ArchSpec",
                 "An accelerator design: `configs/*.yaml`, `--arch FILE`."),
    "cluster": ("Cluster", "tilewright.dataflow_sim.cluster.cluster_spec:ClusterSpec",
                "A multi-chip system: `configs/clusters/*.yaml`, "
                "`tilewright cluster --cluster FILE`."),
    "train-plan": ("Training plan", "tilewright.dataflow_sim.cluster.plan:TrainPlan",
                   "The parallelism of a training run: `tilewright cluster --mode train` options "
                   "and a sweep workload's `plan:`."),
    "serve-plan": ("Serving plan", "tilewright.dataflow_sim.cluster.plan:ServePlan",
                   "The plan of a serving run: `tilewright cluster --mode serve` options and a "
                   "sweep workload's `plan:`."),
    "sweep": ("Sweep", "tilewright.app.sweep.spec:SweepSpec",
              "A design-space sweep: `configs/sweeps/*.yaml`, `tilewright sweep FILE`."),
    "tech": ("Technology table", "tilewright.dataflow_sim.energy_area:TechSpec",
             "Energy, area, voltage-frequency and leakage of one node: `configs/tech/*.yaml`."),
    "network-energy": ("Network energy", "tilewright.dataflow_sim.cluster.energy:NetworkEnergy",
                       "Link energies of the cluster model: `configs/energy/network.yaml`."),
}


def stage_package(dest: Path) -> Path:
    """Symbolic links under ``dest`` laid out as the import names: ``dest/tilewright`` holds the
    ground package's files and one link per mapped layer folder (from pyproject's
    ``[tool.setuptools] package-dir``)."""
    dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    pkg = dest / "tilewright"
    pkg.mkdir(parents=True)
    layers = {name.split(".")[1] for name in dirs if name.count(".") == 1}
    for item in (ROOT / dirs["tilewright"]).iterdir():
        if item.name not in layers:         # a stray folder named like a layer is not the layer
            (pkg / item.name).symlink_to(item)
    for name, folder in dirs.items():
        parts = name.split(".")
        if len(parts) == 2:                 # tilewright.<layer> -> <folder>/
            (pkg / parts[1]).symlink_to(ROOT / folder, target_is_directory=True)
    return dest


_STAGED: tempfile.TemporaryDirectory | None = None


@mkdocs.plugins.event_priority(100)
def on_config(config: Any) -> Any:
    global _STAGED
    if _STAGED is None:
        _STAGED = tempfile.TemporaryDirectory(prefix="tw-docs-")
        stage_package(Path(_STAGED.name))
    python = config.plugins["mkdocstrings"].config.handlers.setdefault("python", {})
    paths = python.setdefault("paths", [])
    if _STAGED.name not in paths:
        paths.insert(0, _STAGED.name)
    extensions = python.setdefault("options", {}).setdefault("extensions", [])
    if RST_EXTENSION not in extensions:        # reST docstrings read as Markdown
        extensions.append(RST_EXTENSION)
    return config


def on_shutdown() -> None:
    global _STAGED
    if _STAGED is not None:
        _STAGED.cleanup()
        _STAGED = None


def _load(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def _cell(text: Any) -> str:
    """One Markdown table cell: no newlines, pipes escaped, and square brackets outside code
    spans escaped (click's ``[default: …; required]`` is no link reference)."""
    parts = " ".join(str(text).split()).replace("|", "\\|").split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("[", "\\[").replace("]", "\\]")
    return "`".join(parts)


def _type(prop: dict, defs_here: set[str], archspec_defs: set[str]) -> str:
    """A JSON-schema property's type as short text, nested models linked."""
    if "$ref" in prop:
        name = prop["$ref"].rsplit("/", 1)[-1]
        if name in defs_here:
            return f"[{name}](#{name.lower()})"
        if name in archspec_defs or name == "ArchSpec":
            return f"[{name}](archspec.md#{name.lower()})"
        return name
    if "enum" in prop:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in prop["enum"])
    if "const" in prop:
        return f"`{json.dumps(prop['const'])}`"
    for key in ("anyOf", "oneOf"):
        if key in prop:
            return " or ".join(_type(p, defs_here, archspec_defs) for p in prop[key])
    t = prop.get("type")
    if t == "array":
        if "prefixItems" in prop:
            return "[" + ", ".join(_type(p, defs_here, archspec_defs)
                                   for p in prop["prefixItems"]) + "]"
        items = prop.get("items")
        return f"list of {_type(items, defs_here, archspec_defs)}" if items else "list"
    if t == "object":
        extra = prop.get("additionalProperties")
        if isinstance(extra, dict) and extra:
            return f"map of {_type(extra, defs_here, archspec_defs)}"
        return "mapping"
    return str(t) if t else "any"


_BOUNDS = (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"),
           ("exclusiveMaximum", "<"), ("minLength", "length ≥"), ("maxLength", "length ≤"),
           ("minItems", "items ≥"), ("maxItems", "items ≤"), ("pattern", "matches"))


def _bounds(prop: dict) -> str:
    parts = []
    for sub in [prop, *prop.get("anyOf", []), *prop.get("oneOf", [])]:
        parts += [f"{sym} {sub[key]}" for key, sym in _BOUNDS if key in sub]
    return ", ".join(parts)


def _default(name: str, prop: dict, required: set[str]) -> str:
    if name in required:
        return "**required**"
    if "default" in prop:
        if isinstance(prop["default"], dict) and "$ref" in json.dumps(prop):
            return "each field's default"          # a nested section: its own table says
        return f"`{json.dumps(prop['default'])}`"
    return ""


def model_table(schema: dict, defs_here: set[str], archspec_defs: set[str]) -> list[str]:
    """Markdown lines: the field table of one JSON-schema object."""
    required = set(schema.get("required", ()))
    lines = ["| field | type | default | bounds | description |", "|---|---|---|---|---|"]
    for name, prop in schema.get("properties", {}).items():
        lines.append("| " + " | ".join([
            f"`{name}`", _type(prop, defs_here, archspec_defs), _default(name, prop, required),
            _cell(_bounds(prop)), _cell(prop.get("description", ""))]) + " |")
    return lines


def schema_page(title: str, model_path: str, what: str, archspec_defs: set[str]) -> str:
    """The reference page of one YAML format."""
    model = _load(model_path)
    schema = model.model_json_schema()
    defs = schema.get("$defs", {})
    shared = set() if model is _load(SCHEMAS["archspec"][1]) else archspec_defs | {"ArchSpec"}
    own = set(defs) - shared             # ArchSpec's sections are linked, not repeated
    doc = " ".join((model.__doc__ or "").split())
    lines = [f"# {title} (`{model.__name__}`)", "", what, "",
             f"Generated at build time from `{model_path.replace(':', '.')}.model_json_schema()`."
             + (" Unknown fields are refused." if model.model_config.get("extra") == "forbid"
                else ""), "", doc, "", f"## {model.__name__}", "",
             *model_table(schema, own, archspec_defs)]
    for name in sorted(own):
        sub = defs[name]
        lines += ["", f"## {name}", "", " ".join(sub.get("description", "").split()), "",
                  *model_table(sub, own, archspec_defs)]
    return "\n".join(lines) + "\n"


def isa_page() -> str:
    """The ISA reference: the accelerator's instruction table and the mesh phase instruction."""
    lines = ["# ISA", "",
             "Generated at build time from `tilewright.compiler.codegen.ISA` (the one table the "
             "assembler, disassembler, RTL decoder and cycle model read) and "
             "`tilewright.compiler.mesh_isa.instr_fields`. What each instruction does: the "
             "module documentation of [`tilewright.compiler.codegen`](api/compiler.md).", "",
             "## Accelerator instructions", "",
             f"Fixed {codegen.WORD_BITS}-bit words; the opcode is in bits "
             f"[{codegen.OPCODE_BITS - 1}:0], fields follow from bit {codegen.OPCODE_BITS} upward; "
             "every other bit must be zero. Instruction memory: "
             f"{codegen.IMEM_WORDS} words.", "",
             "| op | opcode | field | bits | width | accepted values |",
             "|---|---|---|---|---|---|"]
    for op, (code, fields) in codegen.ISA.items():
        if not fields:
            lines.append(f"| `{op}` | {code} | — | | | |")
        for i, (name, (lo, width)) in enumerate(codegen.field_slices(op).items()):
            lo_v = codegen.FIELD_MIN.get((op, name), 0)
            lines.append("| " + " | ".join([
                f"`{op}`" if i == 0 else "", str(code) if i == 0 else "", f"`{name}`",
                f"[{lo + width - 1}:{lo}]", str(width),
                f"{lo_v} … {2 ** width - 1}"]) + " |")
    lines += ["", "## Vector-unit operations (`VECTOR` field `vop`)", "",
              "From `tilewright.compiler.codegen.VECTOR_UNIT_OPS`. Operand lanes `Q8.8`: the low "
              "16 bits of each 32-bit lane, signed; `int32`: the whole lane. `requant` reads its "
              "per-lane multiplier (int32) from the beat's b word and its shift (bits "
              f"{codegen.REQUANT_SHIFT_BITS - 1}:0) from the word after it. The arithmetic: "
              "the module documentation of `tilewright.dataflow_sim.vector_numerics`.", "",
              "| vop | code | kind | operand lanes | result lanes |", "|---|---|---|---|---|"]
    for name, (code, kind, operand, result) in codegen.VECTOR_UNIT_OPS.items():
        kind = "reduction (one word per segment)" if kind == "reduction" else kind
        lines.append(f"| `{name}` | {code} | {kind} | {operand} | {result} |")
    one, two = dict(mesh_isa.instr_fields(1)), mesh_isa.instr_fields(2)
    lines += ["", "## Mesh phase instruction", "",
              "One word per tile and phase; fields LSB first. `a` is the bits of a tile's SRAM "
              "word address (`addr_bits(sram_words)`), so the widths below hold for every mesh.",
              "", "| field | width (bits) |", "|---|---|"]
    for name, w2 in two:
        growth = w2 - one[name]        # how the width grows with one more address bit
        if growth == 0:
            width = str(w2)
        else:
            const = one[name] - growth
            width = "a" if const == 0 else f"a + {const}"
        lines.append(f"| `{name}` | {width} |")
    return "\n".join(lines) + "\n"


def _param_row(p: Any, ctx: Any) -> str:
    """One table row: the option's spellings with its value's metavar, and click's own help line
    (which carries the default, the accepted range and ``required``)."""
    record = p.get_help_record(ctx)
    if record is None:                   # click's arguments have no help record
        record = (p.human_readable_name, getattr(p, "help", None) or "")
    kind = "argument" if p.param_type_name == "argument" else "option"
    return f"| `{record[0]}` | {kind} | {_cell(record[1])} |"


def cli_commands() -> list[tuple[str, Any, Any]]:
    """(full name, command, context) of the root and every command of the Typer app, groups
    walked. Duck-typed (``list_commands``, ``context_class``): typer ships its own copy of click
    in newer releases."""
    root = typer.main.get_command(app)
    root_ctx = root.context_class(root, info_name="tilewright")
    out: list[tuple[str, Any, Any]] = [("", root, root_ctx)]

    def walk(group: Any, ctx: Any, prefix: str) -> None:
        for name in group.list_commands(ctx):
            cmd = group.get_command(ctx, name)
            sub_ctx = cmd.context_class(cmd, info_name=name, parent=ctx)
            out.append((f"{prefix}{name}", cmd, sub_ctx))
            if hasattr(cmd, "list_commands"):
                walk(cmd, sub_ctx, f"{prefix}{name} ")

    walk(root, root_ctx, "")
    return out


def cli_page() -> str:
    """The CLI reference: every command with its arguments and options."""
    lines = ["# Command line", "",
             "Generated at build time from the Typer application "
             "(`tilewright.app.cli.main.app`, via `typer.main.get_command`). Exit codes: 0 done, "
             "1 a check or a tool failed, 2 the input is wrong (one line naming the file, field "
             "or option) — [the error contract](../design.md#the-error-path-the-contract-a-user-"
             "and-a-script-can-rely-on).", ""]
    for name, cmd, ctx in cli_commands():
        title = f"tilewright {name}".strip()
        lines += [f"## `{title}`", "", (cmd.help or "").strip(), ""]
        params = [p for p in cmd.params if p.name != "help"]
        if params:
            lines += ["| argument / option | kind | help (default, accepted values) |",
                      "|---|---|---|", *(_param_row(p, ctx) for p in params), ""]
    return "\n".join(lines) + "\n"


def notebook_figures(nb_path: Path) -> list[bytes]:
    """The PNG images in a notebook's committed outputs, in order."""
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    out = []
    for cell in nb["cells"]:
        for o in cell.get("outputs", []):
            png = o.get("data", {}).get("image/png")
            if png:
                out.append(base64.b64decode("".join(png) if isinstance(png, list) else png))
    return out


@mkdocs.plugins.event_priority(100)       # before mkdocs-jupyter's on_files sees the notebooks
def on_files(files: Files, config: Any) -> Files:
    archspec_defs = set(_load(SCHEMAS["archspec"][1]).model_json_schema().get("$defs", {}))
    pages = {f"reference/schemas/{n}.md": schema_page(t, m, w, archspec_defs)
             for n, (t, m, w) in SCHEMAS.items()}
    pages["reference/isa.md"] = isa_page()
    pages["reference/cli.md"] = cli_page()
    for uri, text in pages.items():
        files.append(File.generated(config, uri, content=text))
    for nb in sorted(NOTEBOOKS.glob("*.ipynb")):
        # a File rooted at the repository (not File.generated): mkdocs-jupyter's wrapper derives
        # the source path from src_dir, which a generated file lacks
        files.append(File(f"notebooks/{nb.name}", src_dir=str(ROOT), dest_dir=config.site_dir,
                          use_directory_urls=config.use_directory_urls))
        for i, png in enumerate(notebook_figures(nb), 1):
            files.append(File.generated(config, f"notebooks/figures/{nb.stem}-{i}.png",
                                        content=png))
    return files
