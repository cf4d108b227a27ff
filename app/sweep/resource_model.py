"""Fast FPGA resource predictor for the GEMM core, fitted on real Yosys (and nextpnr) runs.

:func:`predict_resources` returns, for an ArchSpec's GEMM core (:mod:`tilewright.rtl.gemm_core`),
in well under a millisecond instead of the 10 s to minutes of the tools:

* ``ice40``: the LUTs, flip-flops, DSP blocks and block RAMs Yosys' ``synth_ice40 -dsp`` reports
  for the core alone (data: 74 designs, rows and cols 1..16);
* ``ecp5``: what ``tilewright fpga --target ecp5`` reports — the core in its 4-pin harness
  through ``synth_ecp5`` and nextpnr-ecp5 on the smallest LFE5U part that fits: LUTs, FFs, DSPs,
  BRAMs and ``fmax_mhz``, nextpnr's achieved Fmax at seed 1 (data: 68 designs, rows and cols
  1..8; nextpnr's placement noise is part of the error).

The models are fitted on first use from the measured data sets shipped in
``app/sweep/data/`` (one CSV per target, made by :mod:`tilewright.app.sweep.resource_data`;
fitting takes milliseconds, so nothing is pickled) and kept in memory. Both data sets use 1..8 KiB
buffers; outside the data's ranges the prediction is an extrapolation.

Features (:func:`feature_arrays`) are physically motivated and derived from the ArchSpec only:
PE count, rows and columns split by dataflow (the WS and OS arrays and sequencers differ), the
buffers' address widths (from :meth:`GemmLayout.depths`), the skew/deskew delay lines
(R(R-1)/2 and C(C-1)/2 register stages), the write-back address carried along the array's
R + C cycle latency, and a closed-form block-RAM count (:func:`bram_estimate`).

Candidate models per metric (:data:`CANDIDATES`), compared by :func:`holdout_report` on
**leave-one-shape-out** splits (every design of one rows x cols shape is held out together, so a
prediction is always for an array shape the fit never saw):

* ``linear``: non-negative least squares on PE count, rows, cols and address widths per
  dataflow, residuals scaled by 1/y (minimizes relative error);
* ``linear_struct``: the same plus the delay-line and write-back-latency terms;
* ``loglinear``: log y linear in log rows, log cols, log address bits and the dataflow (a power
  law);
* ``boosting``: scikit-learn gradient boosting on the raw parameters, log target;
* ``closed_form`` (BRAMs): :func:`bram_estimate` itself, no fit;
* ``median`` / ``dataflow_median`` (Fmax): the training designs' median (per dataflow) — the
  baselines a Fmax model must beat.

:data:`CHOSEN` names, per target, the model each metric uses: the one with the lowest held-out
mean absolute percentage error (MAPE; it weighs the large misses a resource constraint cares
about more than the median does) on the shipped data (``benchmarks/resource_predictor.py``
prints the comparison). The non-negative linear models grow with rows and cols except through the
address-width terms, which shrink slightly as a buffer's depth (capacity / lanes) falls;
monotonicity in the PE count is therefore checked by a test, not guaranteed by construction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from tilewright.app.sweep.resource_data import DATA_DIR
from tilewright.arch import ArchSpec
from tilewright.compiler.layout import GemmLayout
from tilewright.rtl.limits import rtl_limits_exceeded
from tilewright.extras import installed, require

__all__ = ["METRICS", "CANDIDATES", "CHOSEN", "ResourceModelError", "data_path", "load_data",
           "design_features", "feature_arrays", "bram_estimate", "BRAM_MODES", "fit_models",
           "predict_resources", "predict_frame", "fpga_metrics", "holdout_predictions",
           "holdout_report"]

#: predicted metrics (counts of the target's cells); a target whose data set comes from place and
#: route (ECP5) also predicts ``fmax_mhz`` (:data:`PNR_METRICS`)
METRICS = ("luts", "ffs", "dsps", "brams")
PNR_METRICS = METRICS + ("fmax_mhz",)
#: raw design parameters (CSV columns) the features are computed from
PARAMS = ("rows", "cols", "dataflow", "scratchpad_kib", "accumulator_kib",
          "depth_a_words", "depth_b_words", "depth_acc_words")

_ELEMENT_BITS, _ACC_BITS = 8, 32                     # int8 operands, int32 accumulator lanes
#: block-RAM aspect ratios (data bits, words) per target: iCE40 SB_RAM40_4K (4 kbit); ECP5
#: DP16KD (18 kbit; 36 bits wide only with one write and one read port, which every buffer copy
#: here has)
BRAM_MODES: dict[str, tuple[tuple[int, int], ...]] = {
    "ice40": ((16, 256), (8, 512), (4, 1024), (2, 2048)),
    "ecp5": ((36, 512), (18, 1024), (9, 2048), (4, 4096), (2, 8192), (1, 16384)),
}


#: targets whose Yosys flow can put a memory in distributed (LUT) RAM instead of block RAM:
#: (words, bits, cost) of one LUT-RAM cell and the cost of one block RAM, from Yosys' memory_libmap
#: rule files (share/lattice/lutrams_trellis.txt: $__TRELLIS_DPR16X4_ 16 x 4, cost 4;
#: brams_16kd.txt: DP16KD/PDPW16KD cost 128). Yosys takes the cheaper; a tie goes to block RAM.
LUTRAM_COST: dict[str, tuple[int, int, int, int]] = {"ecp5": (16, 4, 4, 128)}


class ResourceModelError(ValueError):
    """A design or target the predictor has no data for; the message is one line."""


def data_path(target: str) -> Path:
    """The shipped data set of ``target``; :class:`ResourceModelError` if there is none."""
    p = DATA_DIR / f"gemm_core_{target}.csv"
    if not p.exists():
        have = sorted(f.stem.removeprefix("gemm_core_") for f in DATA_DIR.glob("gemm_core_*.csv"))
        raise ResourceModelError(f"resource predictor target {target!r}: no measured data set; "
                                 f"accepted: {', '.join(have) or 'none'}")
    return p


def load_data(target: str = "ice40", path: str | Path | None = None) -> pd.DataFrame:
    """The measured designs of ``target`` (one row each; columns of
    :data:`tilewright.app.sweep.resource_data.COLUMNS`)."""
    return pd.read_csv(path or data_path(target), comment="#",
                       dtype={"yosys_version": str, "generator_version": str})


@lru_cache(maxsize=4096)
def _blocks(target: str, width_bits: int, depth_words: int) -> int:
    """Fewest block RAMs of ``target`` holding a ``width_bits`` x ``depth_words`` memory: the
    data bits are split into slices, each slice in one aspect ratio (w, d) taking
    ceil(depth / d) blocks per w bits (an unbounded covering knapsack over the width, solved
    exactly)."""
    modes = BRAM_MODES[target]
    best = [0] * (width_bits + 1)           # best[b]: fewest blocks covering b data bits
    for b in range(1, width_bits + 1):
        best[b] = min(-(-depth_words // d) + best[max(0, b - w)] for w, d in modes)
    return best[width_bits]


def bram_estimate(df: Mapping[str, Any], target: str = "ice40") -> np.ndarray:
    """Block RAMs of the three SRAMs on ``target``, in closed form (count per design of ``df``,
    a frame or mapping with the :data:`PARAMS`).

    Each memory of W data bits x D words is split into width slices, each in the aspect ratio
    of :data:`BRAM_MODES` (w bits x d words) that needs the fewest blocks overall
    (:func:`_blocks`); the WS accumulator has two read ports (read-modify-write and host read),
    which Yosys implements as two copies. On a target with LUT RAM (:data:`LUTRAM_COST`) a
    memory whose LUT-RAM cost is below its block-RAM cost takes no block RAM (Yosys'
    memory_libmap picks the cheaper mapping)."""
    if target not in BRAM_MODES:
        raise ResourceModelError(f"block-RAM estimate for target {target!r}: unknown; accepted: "
                                 f"{', '.join(BRAM_MODES)}")

    lut = LUTRAM_COST.get(target)

    def one(w: int, d: int) -> int:
        n = _blocks(target, w, d)
        if lut is not None:
            words, bits, cell_cost, block_cost = lut
            if -(-d // words) * -(-w // bits) * cell_cost < n * block_cost:
                return 0                                  # cheaper in LUT RAM
        return n

    def blocks(width: np.ndarray, depth: np.ndarray) -> np.ndarray:
        return np.array([one(int(w), int(d)) for w, d in zip(width, depth)], float)
    r, c = _col(df, "rows"), _col(df, "cols")
    acc_copies = np.where(np.asarray(df["dataflow"]) == "ws", 2.0, 1.0)
    return (blocks(r * _ELEMENT_BITS, _col(df, "depth_a_words"))
            + blocks(c * _ELEMENT_BITS, _col(df, "depth_b_words"))
            + acc_copies * blocks(c * _ACC_BITS, _col(df, "depth_acc_words")))


def _col(src: Mapping[str, Any], name: str) -> np.ndarray:
    return np.asarray(src[name], dtype=float)


def design_features(df: pd.DataFrame, target: str = "ice40") -> pd.DataFrame:
    """Model features of each design (rows of ``df`` with the :data:`PARAMS` columns); see
    :func:`feature_arrays`."""
    return pd.DataFrame(feature_arrays(df, target), index=df.index)


def feature_arrays(df: Mapping[str, Any], target: str = "ice40") -> dict[str, np.ndarray]:
    """Model features (name -> array, one entry per design) of the designs in ``df`` (a frame or
    a mapping of the :data:`PARAMS` to equal-length sequences) for ``target``.

    ``ws``/``os`` (0/1), ``pes_ws``/``pes_os`` (PE count of that dataflow, else 0), same for
    ``rows_*`` and ``cols_*``, ``abits_*`` (sum of the three buffers' address widths, bits),
    ``acc_lanes_abits_*`` (cols x accumulator address bits), ``bram_est`` (closed form), and
    the raw parameters for the boosting model."""
    ws = (np.asarray(df["dataflow"]) == "ws").astype(float)
    os_ = 1.0 - ws
    r, c = _col(df, "rows"), _col(df, "cols")

    def abits(col: str) -> np.ndarray:
        return np.maximum(1.0, np.ceil(np.log2(_col(df, col))))
    ab = abits("depth_a_words") + abits("depth_b_words") + abits("depth_acc_words")
    out = {"ws": ws, "os": os_, "pes_ws": r * c * ws, "pes_os": r * c * os_,
           "rows_ws": r * ws, "rows_os": r * os_, "cols_ws": c * ws, "cols_os": c * os_,
           "abits_ws": ab * ws, "abits_os": ab * os_,
           "acc_lanes_abits_ws": c * abits("depth_acc_words") * ws,
           "acc_lanes_abits_os": c * abits("depth_acc_words") * os_,
           # skew/deskew delay lines: row i (column j) delayed i (j) cycles -> R(R-1)/2 stages
           "tri_rows_ws": r * (r - 1) / 2 * ws, "tri_rows_os": r * (r - 1) / 2 * os_,
           "tri_cols_ws": c * (c - 1) / 2 * ws, "tri_cols_os": c * (c - 1) / 2 * os_,
           # write-back address riding beside the array for its R + C cycle latency
           "lat_abits_ws": (r + c) * abits("depth_acc_words") * ws,
           "lat_abits_os": (r + c) * abits("depth_acc_words") * os_,
           "pes": r * c, "rows": r, "cols": c,
           "log_rows": np.log(r), "log_cols": np.log(c), "log_abits": np.log(ab),
           "log_acc_abits": np.log(abits("depth_acc_words")),
           "scratchpad_kib": _col(df, "scratchpad_kib"),
           "accumulator_kib": _col(df, "accumulator_kib"),
           "bram_est": bram_estimate(df, target)}
    return out


# ---- candidate models --------------------------------------------------------------------------
_LINEAR_COLS = ("ws", "os", "pes_ws", "pes_os", "rows_ws", "rows_os", "cols_ws", "cols_os",
                "abits_ws", "abits_os", "acc_lanes_abits_ws", "acc_lanes_abits_os")
_STRUCT_COLS = _LINEAR_COLS + ("tri_rows_ws", "tri_rows_os", "tri_cols_ws", "tri_cols_os",
                               "lat_abits_ws", "lat_abits_os")
_LOG_COLS = ("os", "log_rows", "log_cols", "log_abits")
_FMAX_LOG_COLS = ("os", "log_rows", "log_cols", "log_abits", "log_acc_abits")
_RAW_COLS = ("rows", "cols", "pes", "os", "scratchpad_kib", "accumulator_kib")


def _mat(x: Mapping[str, np.ndarray], cols: tuple[str, ...]) -> np.ndarray:
    return np.column_stack([x[c] for c in cols])


def _rows(x: Mapping[str, np.ndarray], idx: np.ndarray) -> dict[str, np.ndarray]:
    return {k: v[idx] for k, v in x.items()}


@dataclass(frozen=True)
class Candidate:
    """One model family: ``fit(X, y) -> predict`` where X is a :func:`feature_arrays` mapping."""

    name: str
    fit: Callable[[pd.DataFrame, np.ndarray], Callable[[pd.DataFrame], np.ndarray]]


#: optional packages the fitters need (the ``fpga`` extra): SciPy's NNLS, scikit-learn's boosting
PREDICTOR_MODULES = ("scipy", "sklearn")


def predictor_installed() -> bool:
    """Whether :data:`PREDICTOR_MODULES` are installed (else sweeps produce no ``fpga_*``)."""
    return all(installed(m) for m in PREDICTOR_MODULES)


def require_predictor() -> None:
    """Raise :class:`~tilewright.extras.ExtraMissing` naming the extra unless the predictor's
    packages are installed."""
    for m in PREDICTOR_MODULES:
        require(m)


def _fit_linear(cols: tuple[str, ...]) -> Callable:
    def fit(x: pd.DataFrame, y: np.ndarray) -> Callable:
        nnls = require("scipy.optimize").nnls
        a = _mat(x, cols)
        w = 1.0 / np.maximum(y, 1.0)                      # rows scaled by 1/y: relative error
        coef, _ = nnls(a * w[:, None], y * w)
        return lambda xn: _mat(xn, cols) @ coef
    return fit


def _fit_loglinear(x: pd.DataFrame, y: np.ndarray) -> Callable:
    a = np.column_stack([np.ones(len(y)), _mat(x, _LOG_COLS)])
    coef, *_ = np.linalg.lstsq(a, np.log(np.maximum(y, 1.0)), rcond=None)
    return lambda xn: np.exp(np.column_stack(
        [np.ones(len(xn["ws"])), _mat(xn, _LOG_COLS)]) @ coef)


def _fit_boosting(x: pd.DataFrame, y: np.ndarray) -> Callable:
    GradientBoostingRegressor = require("sklearn.ensemble").GradientBoostingRegressor
    gb = GradientBoostingRegressor(n_estimators=300, max_depth=2, learning_rate=0.05,
                                   subsample=1.0, random_state=0)
    gb.fit(_mat(x, _RAW_COLS), np.log(np.maximum(y, 1.0)))
    return lambda xn: np.exp(gb.predict(_mat(xn, _RAW_COLS)))


def _fit_loglinear_cols(cols: tuple[str, ...]) -> Callable:
    def fit(x: pd.DataFrame, y: np.ndarray) -> Callable:
        a = np.column_stack([np.ones(len(y)), _mat(x, cols)])
        coef, *_ = np.linalg.lstsq(a, np.log(np.maximum(y, 1e-3)), rcond=None)
        return lambda xn: np.exp(np.column_stack([np.ones(len(xn["ws"])), _mat(xn, cols)]) @ coef)
    return fit


def _fit_median(x: pd.DataFrame, y: np.ndarray) -> Callable:
    """The baseline a model must beat: every design at the training set's median."""
    med = float(np.median(y))
    return lambda xn: np.full(len(xn["ws"]), med)


def _fit_dataflow_median(x: pd.DataFrame, y: np.ndarray) -> Callable:
    """Median of the training designs of the same dataflow (the WS and OS arrays' critical
    paths differ; within one dataflow Fmax is nearly flat until the part grows)."""
    ws = np.asarray(x["ws"]) > 0.5
    med_ws = float(np.median(y[ws])) if ws.any() else float(np.median(y))
    med_os = float(np.median(y[~ws])) if (~ws).any() else float(np.median(y))
    return lambda xn: np.where(np.asarray(xn["ws"]) > 0.5, med_ws, med_os)


def _fit_closed_form(x: pd.DataFrame, y: np.ndarray) -> Callable:
    return lambda xn: xn["bram_est"]


#: metric -> candidate models compared by :func:`holdout_report`
CANDIDATES: dict[str, tuple[Candidate, ...]] = {
    **{m: (Candidate("linear", _fit_linear(_LINEAR_COLS)),
           Candidate("linear_struct", _fit_linear(_STRUCT_COLS)),
           Candidate("loglinear", _fit_loglinear),
           Candidate("boosting", _fit_boosting)) for m in ("luts", "ffs")},
    "dsps": (Candidate("linear", _fit_linear(("pes_ws", "pes_os"))),
             Candidate("loglinear", _fit_loglinear), Candidate("boosting", _fit_boosting)),
    "brams": (Candidate("closed_form", _fit_closed_form),
              Candidate("linear", _fit_linear(("bram_est",))),
              Candidate("boosting", _fit_boosting)),
    # nextpnr's achieved Fmax (MHz): falls with the array's fan-out and the address widths;
    # placement noise (one seed) bounds how well any model can do
    "fmax_mhz": (Candidate("median", _fit_median),
                 Candidate("dataflow_median", _fit_dataflow_median),
                 Candidate("loglinear", _fit_loglinear_cols(_FMAX_LOG_COLS)),
                 Candidate("boosting", _fit_boosting)),
}
#: target -> the model each metric uses (lowest held-out mean APE on the shipped data)
CHOSEN: dict[str, dict[str, str]] = {
    "ice40": {"luts": "linear_struct", "ffs": "linear_struct", "dsps": "linear",
              "brams": "closed_form"},
    "ecp5": {"luts": "linear", "ffs": "linear_struct", "dsps": "linear", "brams": "closed_form",
             "fmax_mhz": "boosting"},
}


def _candidate(metric: str, name: str) -> Candidate:
    for c in CANDIDATES[metric]:
        if c.name == name:
            return c
    raise ResourceModelError(f"resource model {name!r} for {metric}: unknown; accepted: "
                             f"{', '.join(c.name for c in CANDIDATES[metric])}")


def fit_models(data: pd.DataFrame, target: str = "ice40", chosen: dict[str, str] | None = None
               ) -> dict[str, Callable[[Mapping[str, np.ndarray]], np.ndarray]]:
    """Fit the chosen model (default ``CHOSEN[target]``) of every metric on ``data``;
    metric -> predict(:func:`feature_arrays` of the designs)."""
    x = feature_arrays(data, target)
    return {m: _candidate(m, name).fit(x, data[m].to_numpy(float))
            for m, name in (chosen or CHOSEN[target]).items()}


@lru_cache(maxsize=4)
def _models(target: str) -> dict[str, Callable[[Mapping[str, np.ndarray]], np.ndarray]]:
    path = data_path(target)
    if target not in CHOSEN:
        raise ResourceModelError(f"resource predictor target {target!r}: no model chosen; "
                                 f"accepted: {', '.join(CHOSEN)}")
    return fit_models(load_data(target, path), target)


def _params(arch: ArchSpec) -> dict[str, Any]:
    """The :data:`PARAMS` of ``arch``; :class:`ResourceModelError` for what the RTL lacks."""
    te, mem = arch.tensor_engine, arch.memory
    if te.kind != "systolic":
        raise ResourceModelError(f"{arch.name}: tensor_engine.kind = {te.kind!r}: the resource "
                                 f"predictor covers the systolic GEMM core; accepted: 'systolic'")
    if beyond := rtl_limits_exceeded(arch):     # 'is', count > 1, dimensions > the RTL's
        raise ResourceModelError(f"{arch.name}: {'; '.join(beyond)}: no GEMM-core RTL to "
                                 f"predict")
    if te.input_format != "int8":
        raise ResourceModelError(f"{arch.name}: tensor_engine.input_format = "
                                 f"{te.input_format!r}: the resource predictor (and the GEMM-core "
                                 f"RTL) covers int8 only; accepted: 'int8'")
    for field in ("scratchpad_banks", "accumulator_banks"):
        if getattr(mem, field) != 1:
            raise ResourceModelError(f"{arch.name}: memory.{field} = {getattr(mem, field)}: the "
                                     f"resource data sets have 1 bank per SRAM; accepted: 1")
    da, db, dc = GemmLayout.depths(arch)
    return {"rows": te.rows, "cols": te.cols, "dataflow": te.dataflow,
            "scratchpad_kib": mem.scratchpad_kib, "accumulator_kib": mem.accumulator_kib,
            "depth_a_words": da, "depth_b_words": db, "depth_acc_words": dc}


def _predict(params: list[dict[str, Any]], target: str) -> dict[str, np.ndarray]:
    models = _models(target)
    x = feature_arrays({k: [p[k] for p in params] for k in PARAMS}, target)
    return {m: np.maximum(f(x), 0.0) for m, f in models.items()}


def predict_frame(archs: list[ArchSpec], target: str = "ice40") -> pd.DataFrame:
    """:func:`predict_resources` of many designs at once (one row each, :data:`METRICS`)."""
    return pd.DataFrame(_predict([_params(a) for a in archs], target))


def predict_resources(arch: ArchSpec, target: str = "ice40") -> dict[str, float]:
    """Predicted post-synthesis counts of ``arch``'s GEMM core on ``target``: ``luts``, ``ffs``,
    ``dsps``, ``brams`` (cells of the target, e.g. SB_LUT4, SB_DFF*, SB_MAC16, SB_RAM40_4K).

    About a millisecond per call once the models are fitted (the first call per process and
    target reads the CSV and fits, tens of ms). Raises :class:`ResourceModelError` for a target
    without data or a design the GEMM-core RTL does not implement (non-systolic, non-int8,
    banks != 1).
    Rows and cols outside the data set's range (1..16) are extrapolated."""
    pred = _predict([_params(arch)], target)
    return {m: float(pred[m][0]) for m in pred}


def fpga_metrics(arch: ArchSpec, target: str = "ice40") -> dict[str, float]:
    """Sweep metrics ``fpga_<metric>_<target>`` (e.g. ``fpga_luts_ice40``) of ``arch``'s GEMM core
    from :func:`predict_resources`; NaN (so a constraint on them is never met) for a design the
    predictor does not cover: formats other than int8, banked SRAMs, a mesh or a tensor_engine.kind
    other than systolic (whose RTL is not the GEMM core)."""
    try:
        if arch.mesh is not None:
            raise ResourceModelError("a mesh design is not the GEMM core")
        if arch.tensor_engine.kind != "systolic":
            raise ResourceModelError("a tile-MAC engine kind is not the systolic GEMM core")
        pred = predict_resources(arch, target)
    except ResourceModelError:
        pred = {m: math.nan for m in CHOSEN.get(target, METRICS)}
    return {f"fpga_{m}_{target}": pred[m] for m in pred}


# ---- held-out error ----------------------------------------------------------------------------
def holdout_predictions(data: pd.DataFrame | None = None, target: str = "ice40",
                        candidates: dict[str, tuple[Candidate, ...]] | None = None
                        ) -> pd.DataFrame:
    """Leave-one-shape-out predictions: for every rows x cols shape, fit every candidate on the
    designs of all other shapes and predict that shape's designs. Long format: one row per
    (design, metric, model) with ``measured``, ``predicted`` and ``ape`` (absolute percentage
    error, %)."""
    LeaveOneGroupOut = require("sklearn.model_selection").LeaveOneGroupOut
    data = load_data(target) if data is None else data.reset_index(drop=True)
    x = feature_arrays(data, target)
    groups = data["rows"].astype(str) + "x" + data["cols"].astype(str)
    parts = []
    for metric, cands in (candidates or CANDIDATES).items():
        if metric not in data:
            continue                              # e.g. fmax_mhz of a synthesis-only data set
        y = data[metric].to_numpy(float)
        for cand in cands:
            pred = np.full(len(data), math.nan)
            for train, test in LeaveOneGroupOut().split(y, y, groups):
                f = cand.fit(_rows(x, train), y[train])
                pred[test] = np.maximum(f(_rows(x, test)), 0.0)
            parts.append(pd.DataFrame({
                "shape": groups, "dataflow": data["dataflow"],
                "scratchpad_kib": data["scratchpad_kib"],
                "accumulator_kib": data["accumulator_kib"], "metric": metric,
                "model": cand.name, "measured": y, "predicted": pred,
                "ape": 100.0 * np.abs(pred - y) / np.maximum(y, 1.0)}))
    return pd.concat(parts, ignore_index=True)


def holdout_report(data: pd.DataFrame | None = None, target: str = "ice40",
                   candidates: dict[str, tuple[Candidate, ...]] | None = None) -> pd.DataFrame:
    """Held-out error per metric and model (leave-one-shape-out, see
    :func:`holdout_predictions`): ``median_ape``, ``mape``, ``max_ape`` (%), ``designs`` and
    ``chosen`` (True for the model ``CHOSEN[target]`` uses)."""
    p = holdout_predictions(data, target, candidates)
    rep = p.groupby(["metric", "model"], sort=False)["ape"].agg(
        median_ape="median", mape="mean", max_ape="max", designs="count").reset_index()
    chosen = CHOSEN.get(target, {})
    rep["chosen"] = [chosen.get(m) == n for m, n in zip(rep["metric"], rep["model"])]
    return rep
