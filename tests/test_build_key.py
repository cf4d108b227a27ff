"""Build caches cannot go stale and are not duplicated: a top's request key hashes its generator's
actual source closure (found from the imports, not listed by hand), its parameters and the
Verilator version; the build itself is stored under the hash of the Verilog it generates and its
recipe, so requests with identical Verilog share one build.

Before: the keys hashed hand-typed file lists (``systolic.py``, ``gemm_core.py``, ``verilog.py``
for the GEMM core) while the generator also imports ``compiler/layout.py``, which shapes the
core's buffers: an edit there reused a stale simulator.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.rtl_suite import _cache_dir, _tool_check  # noqa: F401  (autouse session fixtures)
from tests.test_layers import REPO, stage
from tilewright.arch import default_arch
from tilewright.cosim.build import build_key
from tilewright.cosim.source_hash import source_closure
from tilewright.cosim.tops import TOPS


def test_the_core_closure_holds_what_shapes_its_verilog():
    names = {p.relative_to(REPO).as_posix() for p in source_closure("tilewright.rtl.verilog")}
    for needed in ("rtl/gemm_core.py", "rtl/systolic.py", "rtl/verilog.py", "compiler/layout.py",
                   "tilewright/arch.py", "tilewright/formats.py"):
        assert needed in names, needed
    assert not any(n.startswith(("dataflow_sim/", "cosim/", "app/")) for n in names)


def test_the_accelerator_closure_holds_the_isa_table():
    names = {p.relative_to(REPO).as_posix() for p in source_closure("tilewright.rtl.accel_top")}
    assert {"compiler/codegen.py", "rtl/controller.py", "rtl/dma.py"} <= names


def test_the_key_follows_params_and_driver():
    arch = default_arch()
    core = TOPS["core"]
    key = build_key(core, arch)
    assert build_key(core, arch) == key                   # deterministic
    assert build_key(core, arch, driver="fast") != key
    assert build_key(core, arch, waves=True) != key
    wider = type(arch).from_dict({**arch.model_dump(mode="json"),
                                  "tensor_engine": {**arch.tensor_engine.model_dump(mode="json"),
                                                    "rows": 4}})
    assert build_key(core, wider) != key


def test_an_edit_to_an_imported_compiler_module_changes_the_key(tmp_path):
    """In a staged copy of the sources, appending a comment to compiler/layout.py changes the
    GEMM core's key, and appending one to a module outside its closure does not."""
    staged = stage(tmp_path / "src")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "from tilewright.arch import default_arch; from tilewright.cosim.build import "
            "build_key; from tilewright.cosim.tops import TOPS; "
            "print(build_key(TOPS['core'], default_arch()))")

    def key() -> str:
        out = subprocess.run([sys.executable, "-c", code, str(staged)], capture_output=True,
                             text=True, check=True, cwd=tmp_path)
        return out.stdout.strip()

    configs = staged / "tilewright" / "configs"
    for yaml_file in (REPO / "configs").glob("*.yaml"):
        shutil.copy(yaml_file, configs / yaml_file.name)
    before = key()
    with open(staged / "tilewright" / "dataflow_sim" / "report.py", "a") as f:
        f.write("\n# unrelated edit\n")
    assert key() == before
    with open(staged / "tilewright" / "compiler" / "layout.py", "a") as f:
        f.write("\n# edit\n")
    assert key() != before


def _stub_step(calls: list[str], text: str):
    """A build step that records its call and leaves a file standing for the simulator."""
    def step(tmp):
        calls.append(text)
        (tmp / "sim").mkdir(parents=True)
        (tmp / "sim" / "model").write_text(text)
    return step


def test_builds_are_stored_once_per_verilog_text(tmp_path, monkeypatch):
    """The cache logic alone (the build step stands in for Verilator): two requests whose
    generated Verilog is identical share one build, a repeated request generates nothing, and
    other Verilog or another recipe builds again."""
    from tilewright.cosim.verilator import cached_build

    monkeypatch.setenv("TILEWRIGHT_CACHE", str(tmp_path))
    generated: list[str] = []
    built: list[str] = []

    def request(key: str, verilog: str, recipe: str = "cocotb"):
        def write(rtl_dir):
            generated.append(key)
            rtl_dir.mkdir(parents=True)
            (rtl_dir / "top.v").write_text(verilog)
        return cached_build(key, "top", write, what=key, recipe=recipe, label="t",
                            build_step=_stub_step(built, key))

    first = request("a", "module top; endmodule\n")
    assert (first.cached, generated, built) == (False, ["a"], ["a"])
    same = request("b", "module top; endmodule\n")          # other params, same Verilog
    assert same.cached and same.build_dir == first.build_dir and same.build_seconds == 0
    assert (generated, built) == (["a", "b"], ["a"])
    again = request("b", "module top; endmodule\n")         # a recorded request
    assert again.cached and again.build_dir == first.build_dir and generated == ["a", "b"]
    other = request("c", "module top(input x); endmodule\n")
    # the same request with other flags is not answered by the recorded build
    flags = request("a", "module top; endmodule\n", recipe="cocotb -O3")
    assert not other.cached and not flags.cached and built == ["a", "c", "a"]
    assert len({first.build_dir, other.build_dir, flags.build_dir}) == 3
    assert (first.build_dir / "sim" / "model").read_text() == "a"


def test_the_recipe_follows_driver_flags_and_waves():
    from tilewright.cosim.build import build_recipe
    core = TOPS["core"]
    arch = default_arch()
    recipe = build_recipe(core, arch)
    assert build_recipe(core, arch, waves=True) != recipe
    assert build_recipe(core, arch, driver="fast") != recipe
    four = type(arch).from_dict({**arch.model_dump(mode="json"),
                                 "tensor_engine": {**arch.tensor_engine.model_dump(mode="json"),
                                                   "rows": 4}})
    # the fast driver is compiled for the array shape (-DTW_ROWS): its recipe follows it
    assert build_recipe(core, four, driver="fast") != build_recipe(core, arch, driver="fast")


def test_the_fast_recipe_reaches_the_verilator_command_line_and_the_build_recipe(monkeypatch):
    """Each fast-driver recipe's Verilator options and g++ flags appear in the command that
    builds it (g++ flags after the top's own, so its -O wins); $TILEWRIGHT_FAST_RECIPE picks
    one, changes the build recipe (no build of another recipe is reused), and an unknown name
    is a user error naming the accepted ones."""
    from pathlib import Path

    from tilewright.cosim import driver_process as dp
    from tilewright.cosim.build import build_recipe
    for name, recipe in dp.FAST_RECIPES.items():
        cmd = recipe.command(top="t", source=Path("d.cpp"), executable="x", cflags="-O2 -DW=4",
                             mdir=Path("obj"), verilog=Path("t.v"))
        assert cmd[:4] == ["verilator", "--cc", "--exe", "--build"], name
        start = cmd.index("--top-module")
        assert tuple(cmd[5:start]) == recipe.verilator, name
        assert cmd[cmd.index("-CFLAGS") + 1].split() == ["-O2", "-DW=4", *recipe.cflags.split()]
        assert ("-LDFLAGS" in cmd) == bool(recipe.ldflags), name
        assert cmd[-2:] == ["t.v", "d.cpp"], name
    accel, arch = TOPS["accel"], default_arch()
    monkeypatch.delenv(dp.RECIPE_ENV, raising=False)
    recipes = {build_recipe(accel, arch, driver="fast")}
    for name in dp.FAST_RECIPES:
        if name != "default":
            monkeypatch.setenv(dp.RECIPE_ENV, name)
            recipes.add(build_recipe(accel, arch, driver="fast"))
    assert len(recipes) == len(dp.FAST_RECIPES)
    monkeypatch.setenv(dp.RECIPE_ENV, "turbo")
    from tilewright.errors import UserError   # the CLI prints it as one line, exit 2
    with pytest.raises(UserError, match="TILEWRIGHT_FAST_RECIPE='turbo'.*accepted: default"):
        build_recipe(accel, arch, driver="fast")


@pytest.mark.verilator
def test_archspecs_with_the_same_verilog_share_one_verilator_build():
    """A real Verilator build: the 4x4 WS core of the RTL suite (built by
    test_gemm_core_rtl.py in the same run) and an ArchSpec differing only in fields the core
    does not read (name, clock, off-chip port) are one build: the second request generates its
    Verilog, finds it identical and runs no Verilator."""
    from tests.rtl_suite import suite_arch
    from tilewright.cosim.build import build
    arch = suite_arch(4, 4, "ws")
    other = type(arch).from_dict({**arch.model_dump(mode="json"), "name": "renamed",
                                  "clock_mhz": 250.0,
                                  "offchip": {"bandwidth_gbps": 1.0, "latency_ns": 20.0}})
    assert other.content_hash() != arch.content_hash()
    first = build("core", arch)
    second = build("core", other)
    assert second.build_dir == first.build_dir
    assert second.cached and second.build_seconds == 0.0 and second.params is other


def test_builds_compile_through_ccache_when_it_is_installed(tmp_path, monkeypatch):
    """With ccache on PATH, Verilator's makefile gets ``OBJCACHE=ccache`` and a store under the
    build cache (unless CCACHE_DIR is set); without it, neither; both are restored after."""
    from tilewright.cosim import verilator

    monkeypatch.setenv("TILEWRIGHT_CACHE", str(tmp_path))
    monkeypatch.delenv("CCACHE_DIR", raising=False)
    monkeypatch.delenv("OBJCACHE", raising=False)
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "ccache").write_text("#!/bin/sh\nexec \"$@\"\n")
    (tools / "ccache").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")
    with verilator.verilator_env():
        assert os.environ["OBJCACHE"] == "ccache"
        assert os.environ["CCACHE_DIR"] == str(tmp_path / "ccache")
    assert "OBJCACHE" not in os.environ and "CCACHE_DIR" not in os.environ
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(sys, "executable", str(tools / "python"))   # ccache beside this Python
    with verilator.verilator_env():
        assert os.environ["OBJCACHE"] == "ccache"
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))  # neither on PATH nor beside
    with verilator.verilator_env():
        assert "OBJCACHE" not in os.environ
