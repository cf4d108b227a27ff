"""The layers contract (``layers.ini``, docs/design.md) holds, and it catches a wrong-way import —
a function-local one too.

import-linter (grimp) finds a package's modules by walking its folder, but this repository maps a
top-level folder to each layer (``package-dir`` in pyproject.toml). :func:`stage` therefore copies
the Python sources into a temporary tree laid out as the import names say, and import-linter runs
there. ``python tests/test_layers.py`` prints the report for the working tree.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def package_dirs() -> dict[str, Path]:
    """Import name -> source folder, from pyproject.toml's ``package-dir``."""
    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {name: REPO / folder for name, folder in cfg["package-dir"].items()}


def stage(dest: Path) -> Path:
    """Copy every mapped folder's ``.py`` files to ``dest/<import path>``; return ``dest``."""
    for name, src in sorted(package_dirs().items()):
        target = dest.joinpath(*name.split("."))
        for py in src.rglob("*.py"):
            rel = py.relative_to(src)
            if "__pycache__" in rel.parts:
                continue
            out = target / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(py, out)
    return dest


def lint(staged: Path) -> subprocess.CompletedProcess:
    """Run import-linter with ``layers.ini`` on a staged tree."""
    cli = "import sys; from importlinter.cli import lint_imports_command; lint_imports_command()"
    return subprocess.run([sys.executable, "-c", cli, "--no-cache", str(REPO / "layers.ini")],
                          cwd=staged, capture_output=True, text=True,
                          env={"PYTHONPATH": str(staged), "PATH": "/usr/bin:/bin"})


def test_every_layer_folder_is_staged(tmp_path):
    """The staged tree holds every mapped package (a layer that is not found is not checked)."""
    staged = stage(tmp_path)
    for name in package_dirs():
        assert (staged.joinpath(*name.split(".")) / "__init__.py").exists(), name


def test_layers_contract_holds(tmp_path):
    res = lint(stage(tmp_path))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Contracts: 1 kept, 0 broken." in res.stdout


def test_a_wrong_way_function_local_import_breaks_the_contract(tmp_path):
    """compiler importing the application layer inside a function is reported, with its line."""
    staged = stage(tmp_path)
    ir = staged / "tilewright" / "compiler" / "ir.py"
    ir.write_text(ir.read_text() + "\n\ndef _wrong_way():\n"
                  "    from tilewright.app.cli import main  # noqa: F401\n")
    res = lint(staged)
    assert res.returncode != 0
    assert "BROKEN" in res.stdout and "tilewright.compiler.ir -> tilewright.app.cli.main" in res.stdout


def test_a_wrong_way_import_between_sibling_layers_breaks_the_contract(tmp_path):
    """rtl and dataflow_sim are independent: one importing the other is reported."""
    staged = stage(tmp_path)
    mod = staged / "tilewright" / "rtl" / "emit.py"
    mod.write_text(mod.read_text() + "\nimport tilewright.dataflow_sim.cycle  # noqa: E402,F401\n")
    res = lint(staged)
    assert res.returncode != 0
    assert "tilewright.rtl.emit -> tilewright.dataflow_sim.cycle" in res.stdout


def function_local_imports_without_reason() -> list[str]:
    """``file:line: import`` for every import inside a function, in any layer, whose line does
    not say why it is lazy (``(lazy: …)``). Lazy imports are for heavy or optional dependencies
    only (docs/design.md, "The layers contract")."""
    bad = []
    for name, src in sorted(package_dirs().items()):
        for py in sorted(src.rglob("*.py")):
            text = py.read_text()
            lines = text.splitlines()
            for fn in ast.walk(ast.parse(text)):
                if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for node in ast.walk(fn):
                    if isinstance(node, (ast.Import, ast.ImportFrom)):
                        stmt = " ".join(lines[node.lineno - 1:node.end_lineno])
                        if "(lazy:" not in stmt:
                            bad.append(f"{py.relative_to(REPO)}:{node.lineno}: {stmt.strip()}")
    return sorted(set(bad))


def test_every_function_local_import_says_why_it_is_lazy():
    bad = function_local_imports_without_reason()
    assert not bad, "function-local imports without a (lazy: reason):\n" + "\n".join(bad)


if __name__ == "__main__":
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        out = lint(stage(Path(tmp)))
        print(out.stdout + out.stderr)
        sys.exit(out.returncode)
