"""Build caches cannot go stale: a top's build key hashes its generator's actual source closure
(found from the imports, not listed by hand), its parameters and the Verilator version.

Before: the keys hashed hand-typed file lists (``systolic.py``, ``gemm_core.py``, ``verilog.py``
for the GEMM core) while the generator also imports ``compiler/layout.py``, which shapes the
core's buffers: an edit there reused a stale simulator.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

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
