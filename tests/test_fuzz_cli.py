"""Fuzzing the command line's error path (docs/design.md, "The error path"): malformed input to
every subcommand is refused with exit status 2 and exactly one stderr line ``error: ...``, no
traceback, and nothing written (``-o``, ``--db``, ``--save``, ``--trace``, ``--export`` targets
in the example's folder stay absent).

The one allowed exception to "one line" is click's own usage error for a malformed flag (an
``int`` that is not a number, a value outside a flag's ``min``/``max``, an unknown option): click
prints its standard block ``Usage: tilewright CMD ...`` / ``Try 'tilewright CMD --help' ...`` /
``Error: ...`` and also exits 2. :func:`assert_refused` accepts exactly that block and nothing
else.

The CLI runs in-process (``main()`` with ``sys.argv`` set; ``SystemExit`` and stdout/stderr
captured; warnings are shown on the captured stderr as the real process would show them) for
speed; a few cases run through a real process (:func:`tests.test_cli.tw`) to show it behaves the
same. Every generated input is refused before any heavy work (no Verilator, no simulation, no
sweep), so the file runs in well under a minute. Examples are derandomized for CI.

Defects the fuzzer found (each also has an example below, :data:`FOUND`): GEMM dimensions,
tokens and ``--batch`` beyond int64 (``OverflowError``/``MemoryError``, exit 1), ``compile
--limit 0`` (exit 0, ignored), ``cluster --rate nan|inf`` (exit 0), ``--requests 1e12``
(``MemoryError``), a binary or non-numeric ``--expert-trace`` (exit 1), requests longer than the
model's context (ran: a 1e14-token output never ended), a request-trace arrival of 1e300 s
(``ZeroDivisionError``) or token count of 1e30 (int64 overflow), ``sweep --export x.zz`` (the
whole sweep ran and wrote its database before the refusal), ``sweep --db FOLDER`` and ``report
NOT_A_DB`` (sqlite errors, exit 1), ``arch PATH --schema`` (PATH silently ignored), an ArchSpec ``mesh.hop_latency_cycles`` (or
``routing_stage_cycles``, off-chip ``bandwidth_gbps``, ``latency_ns``, ``capacity_gib``) of 1e30
(no upper bound: accepted), a sweep ``name: [0]`` (accepted as the text '[0]': the sweep ran).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import re
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_cli import REPO, tw

FUZZ = settings(max_examples=200, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

ARCH_BASE = yaml.safe_load((REPO / "configs" / "ws8x8.yaml").read_text())
MESH_BASE = yaml.safe_load((REPO / "configs" / "mesh4x4.yaml").read_text())
CLUSTER_BASE = yaml.safe_load((REPO / "configs" / "clusters" / "h100-8x-nvlink.yaml").read_text())
SWEEP_BASE = {
    "name": "f", "base": "ws8x8", "tech": "45nm",
    "axes": {"tensor_engine.rows,tensor_engine.cols": [4, 8],
             "tensor_engine.dataflow": ["ws", "os"]},
    "workloads": [{"gemm": [16, 16, 16], "format": "int8"}],
    "objectives": ["latency", "energy"],
}

#: names that exist, filtered out of the "unknown name" generator
KNOWN = {"ws8x8", "ws16x16", "os16x16", "ws8x8v", "mesh4x4", "cube2x4x2v", "wse2", "gemm", "gemv",
         "h100-8x-nvlink", "h100-64x-ib", "pd-h100-64", "torus-1024", "ice40", "ecp5", "xc7",
         "xilinx", "generic", "core", "accel", "axi-accel", "axi", "mesh", "summa", "cannon",
         "prefill", "decode", "train", "serve", "skip", "route", "local", "dask", "ray",
         "fp32", "bf16", "int8", "channel", "tensor", "1f1b", "interleaved", "network", "phase",
         "uniform", "zipf", "trace", "compiler", "table", "cocotb", "fast", "tilewright",
         "scalesim", "mlp-tiny", "mlp-small", "tiny-llama", "tiny-moe", "tiny-mamba",
         "tiny-moe-sigmoid", "llama3-8b", "llama3-70b", "llama3-405b", "mixtral-8x7b",
         "deepseek-v3",
         "mamba-130m", "mamba-2.8b"}
unknown_name = st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True).filter(
    lambda s: s not in KNOWN and not (REPO / s).exists())


# ---- running the CLI and the property ---------------------------------------------------------
def run_cli(*argv: str) -> tuple[object, str, str]:
    """``tilewright ARGV`` in this process: (exit code, stdout, stderr)."""
    from tilewright.app.cli import main as cli_main
    out, err = io.StringIO(), io.StringIO()
    old_argv = sys.argv
    sys.argv = ["tilewright", *argv]
    code: object = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")          # every warning a user would see, but
            for quiet in (DeprecationWarning, PendingDeprecationWarning, ImportWarning,
                          ResourceWarning):             # not those Python hides by default
                warnings.simplefilter("ignore", quiet)
            try:
                cli_main.main()
            except SystemExit as exc:
                code = exc.code
    finally:
        sys.argv = old_argv
        cli_main._DEBUG["on"] = False
    text = err.getvalue() + "".join(f"{w.filename}:{w.lineno}: {w.category.__name__}: "
                                    f"{w.message}\n" for w in caught)
    return code, out.getvalue(), text


def is_click_usage_error(err: str) -> bool:
    """click's standard usage-error block (``Usage:``, ``Try '... --help'``, ``Error: ...``)."""
    lines = [line for line in err.splitlines() if line.strip()]
    # click names the program after argv[0] or, under ``python -m pytest``, 'python -m pytest.'
    prog = r"(\S.* )?\S*tilewright\S* "
    return (len(lines) >= 3 and re.match(f"Usage: {prog}", lines[0]) is not None
            and re.match(f"Try '{prog}.*--help' for help", lines[1]) is not None
            and lines[2].startswith("Error: ")
            and all(not line.startswith(("Usage:", "Try ")) for line in lines[3:]))


def assert_refused(code: object, err: str, argv) -> None:
    """Exit 2, no traceback, and one ``error: ...`` line (or click's usage block)."""
    assert "Traceback" not in err, (argv, err)
    assert code == 2, (argv, code, err)
    lines = [line for line in err.splitlines() if line.strip()]
    one_line = len(lines) == 1 and lines[0].startswith("error: ") and err.count("\n") == 1
    assert one_line or is_click_usage_error(err), (argv, err)


def snapshot(folder: Path) -> dict[str, str]:
    """Every path below ``folder`` with a hash of its content (folders: '/')."""
    return {str(p.relative_to(folder)): ("/" if p.is_dir() else
                                         hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.rglob("*"))}


@contextlib.contextmanager
def workdir():
    d = Path(tempfile.mkdtemp(prefix="twfuzz-"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def check(d: Path, *argv: str) -> str:
    """Run ``argv`` (paths inside ``d``), assert it is refused and wrote nothing; its stderr."""
    before = snapshot(d)
    code, _, err = run_cli(*argv)
    assert_refused(code, err, argv)
    assert snapshot(d) == before, (argv, "wrote something", set(snapshot(d)) - set(before))
    return err


# ---- generators: malformed YAML documents ------------------------------------------------------
def _paths(doc, prefix=()):
    """(path, value) of every mapping entry of ``doc``, recursively."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield prefix + (k,), v
            yield from _paths(v, prefix + (k,))


def _set(doc, path, value):
    for k in path[:-1]:
        doc = doc[k]
    doc[path[-1]] = value


scalar = st.one_of(st.integers(-10**6, 10**6), st.floats(allow_nan=False, width=32),
                   st.text(max_size=8), st.booleans(), st.none())
wrong_container = st.one_of(st.lists(scalar, min_size=1, max_size=3),
                            st.dictionaries(st.from_regex(r"[a-z]{1,6}", fullmatch=True), scalar,
                                            min_size=1, max_size=3))
out_of_range = st.one_of(st.integers(-10**30, -1), st.just(10**30), st.just(float("nan")),
                         st.just(float("-inf")), st.floats(-1e30, -1e-9))


@st.composite
def mutated(draw, base, *, numbers_out_of_range=True):
    """``base`` with one change that no schema accepts: an unknown key, a mapping, list or scalar
    where the other is expected, or (for a numeric field) a negative, NaN or huge number."""
    doc = copy.deepcopy(base)
    entries = list(_paths(doc))
    path, value = draw(st.sampled_from(entries))
    kinds = ["unknown_key", "wrong_container"]
    if isinstance(value, dict):
        kinds.append("section_scalar")
    if numbers_out_of_range and isinstance(value, (int, float)) and not isinstance(value, bool):
        kinds.append("out_of_range")
    kind = draw(st.sampled_from(kinds))
    if kind == "unknown_key":
        section = value if isinstance(value, dict) else doc
        section["zz_" + draw(st.from_regex(r"[a-z]{1,8}", fullmatch=True))] = draw(scalar)
    elif kind == "wrong_container":
        if isinstance(value, list):
            _set(doc, path, draw(st.dictionaries(st.from_regex(r"[a-z]{1,6}", fullmatch=True),
                                                 scalar, min_size=1, max_size=3)))
        else:
            _set(doc, path, draw(wrong_container) if not isinstance(value, dict)
                 else draw(st.lists(scalar, min_size=1, max_size=3)))
    elif kind == "section_scalar":
        _set(doc, path, draw(st.one_of(st.integers(), st.text(min_size=1, max_size=8))))
    else:
        _set(doc, path, draw(out_of_range))
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True).encode()


@st.composite
def duplicate_keys(draw, base):
    """``base`` as YAML text with one top-level key given twice."""
    key = draw(st.sampled_from(sorted(base)))
    text = yaml.safe_dump(base, sort_keys=False)
    extra = yaml.safe_dump({key: base[key]}, sort_keys=False)
    return (text + extra if draw(st.booleans()) else extra + text).encode()


garbage = st.one_of(
    st.binary(min_size=1, max_size=64).map(lambda b: b + b"\0"),                # binary
    st.binary(max_size=32).map(lambda b: b"a: " + b + b"\xff\xfe"),             # not UTF-8
    st.sampled_from([b"", b"\n", b"# only a comment\n", b"- 1\n- 2\n", b"42\n", b"just text\n",
                     b"~\n", b"a: [1, 2\n", b"a: {b: 1\n", b"\t- x: y\n", b"a: *nope\n",
                     b"{a: 1, a: 2}\n", b"!!python/object:os.system {}\n"]),
    st.lists(scalar, max_size=4).map(lambda v: yaml.safe_dump(v).encode()),   # a list
)


def yaml_file(base, *, numbers_out_of_range=True):
    return st.one_of(mutated(base, numbers_out_of_range=numbers_out_of_range),
                     duplicate_keys(base), garbage)


# ---- ArchSpec files, to every command that takes --arch ------------------------------------------
ARCH_COMMANDS = [
    ["arch", "{f}"],
    ["cycles", "--arch", "{f}", "-m", "4", "-k", "4", "-n", "4"],
    ["rtl", "--arch", "{f}", "-o", "{d}/out"],
    ["compile", "--model", "tiny-llama", "--arch", "{f}"],
    ["sim", "--model", "tiny-llama", "--arch", "{f}"],
    ["mesh", "gemm", "--arch", "{f}", "--k", "8", "--n", "8"],
    ["mesh-layer", "--model", "tiny-llama", "--arch", "{f}", "--save", "{d}/prog.json"],
    ["fpga", "--arch", "{f}", "--target", "ice40", "-o", "{d}/fpga"],
    ["demo", "--arch", "{f}"],
]


def _fill(cmd, d: Path, f: Path | str = "") -> list[str]:
    return [a.format(d=d, f=f) for a in cmd]


@FUZZ
@given(cmd=st.sampled_from(ARCH_COMMANDS),
       data=st.one_of(yaml_file(ARCH_BASE), yaml_file(MESH_BASE)))
def test_fuzz_archspec_files(cmd, data):
    with workdir() as d:
        f = d / "arch.yaml"
        f.write_bytes(data)
        check(d, *_fill(cmd, d, f))


# ---- cluster files ---------------------------------------------------------------------------------
@FUZZ
@given(data=yaml_file(CLUSTER_BASE), mode=st.sampled_from(["train", "serve"]))
def test_fuzz_cluster_files(data, mode):
    with workdir() as d:
        f = d / "cluster.yaml"
        f.write_bytes(data)
        check(d, "cluster", "--cluster", str(f), "--model", "llama3-8b", "--mode", mode,
              "--dp", "8" if mode == "train" else "1", "--requests", "4", "--json",
              "--db", str(d / "r.db"), "--trace", str(d / "t.json"))


# ---- sweep files -----------------------------------------------------------------------------------
@FUZZ
@given(data=yaml_file(SWEEP_BASE, numbers_out_of_range=True))
def test_fuzz_sweep_files(data):
    with workdir() as d:
        f = d / "s.yaml"
        f.write_bytes(data)
        check(d, "sweep", str(f), "--db", str(d / "s.db"), "--export", str(d / "s.csv"),
              "--workers", "1")


# ---- request traces (cluster --mode serve --request-trace) -----------------------------------------
GOOD_CELL = {"arrival_s": st.sampled_from(["0", "0.5", "1", "2.25", "10"]),
             "prompt_tokens": st.sampled_from(["1", "8", "64", "100"]),
             "output_tokens": st.sampled_from(["1", "4", "16"])}
BAD_CELL = {
    "arrival_s": st.one_of(st.sampled_from(["-1", "nan", "inf", "-inf", "1e300", "", "x", "1s",
                                            "0x10", "--1"]),
                           st.text(alphabet="abcxyz!?", min_size=1, max_size=5)),
    "prompt_tokens": st.one_of(st.sampled_from(["0", "-3", "1.5", "nan", "inf", "1e30", "", "x",
                                                "99999999999999999999", "8193", "1e5"]),
                               st.integers(-10**12, 0).map(str)),
    "output_tokens": st.one_of(st.sampled_from(["0", "-1", "2.5", "nan", "1e30", "", "y",
                                                "100000000000000"]),
                               st.integers(-10**12, 0).map(str)),
}
COLUMNS = ["arrival_s", "prompt_tokens", "output_tokens"]


@st.composite
def bad_trace(draw):
    """A request-trace CSV with a bad header or at least one bad cell."""
    kind = draw(st.sampled_from(["cell", "cell", "header", "garbage"]))
    if kind == "garbage":
        return draw(st.one_of(st.binary(min_size=1, max_size=32).map(lambda b: b + b"\0"),
                              st.sampled_from([b"", b"\n", b"arrival_s,prompt_tokens,"
                                               b"output_tokens\n", b"a,b\n1,2\n",
                                               b"\xff\xfe,,\n"])))
    header = list(COLUMNS)
    if kind == "header":
        change = draw(st.sampled_from(["drop", "rename", "extra"]))
        if change == "drop":
            header.pop(draw(st.integers(0, 2)))
        elif change == "rename":
            header[draw(st.integers(0, 2))] = draw(unknown_name)
        else:
            header.append(draw(unknown_name))
    n = draw(st.integers(1, 4))
    rows = [[draw(GOOD_CELL[c]) if c in GOOD_CELL else "1" for c in header] for _ in range(n)]
    if kind == "cell":
        r, c = draw(st.integers(0, n - 1)), draw(st.integers(0, 2))
        rows[r][c] = draw(BAD_CELL[header[c]])
    return ("\n".join([",".join(header)] + [",".join(r) for r in rows]) + "\n").encode()


@FUZZ
@given(data=bad_trace())
def test_fuzz_request_traces(data):
    with workdir() as d:
        f = d / "trace.csv"
        f.write_bytes(data)
        check(d, "cluster", "--cluster", "h100-8x-nvlink", "--model", "llama3-8b", "--mode",
              "serve", "--request-trace", str(f), "--json", "--db", str(d / "r.db"),
              "--trace", str(d / "t.json"))


# ---- flags -------------------------------------------------------------------------------------------
below_one = st.one_of(st.sampled_from(["0", "-1", "x", "", "1.5", "nan", "1e3"]),
                      st.integers(-10**20, 0).map(str))
bad_count = st.one_of(below_one, st.integers(2**20 + 1, 10**30).map(str))   # and above MAX_DIM
bad_positive_float = st.one_of(st.sampled_from(["0", "-1", "nan", "inf", "-inf", "x", ""]),
                               st.floats(max_value=0, allow_nan=False).map(repr))
bad_lengths = st.one_of(st.sampled_from(["0", "-5", "9-3", "x", "", "1-", "-", "0-4", "1.5"]),
                        st.integers(8193, 10**20).map(str))


@st.composite
def bad_flags(draw):
    """A command line of one subcommand with one malformed flag (a bad number, an unknown name,
    an unknown option); the rest is valid and cheap."""
    nm = draw(unknown_name)
    choices = {
        "cycles": lambda: ["cycles", "--arch", "ws8x8", *draw(st.sampled_from([
            ["-m", draw(bad_count), "-k", "4", "-n", "4"],
            ["-m", "4", "-k", draw(bad_count), "-n", "4"],
            ["-m", "4", "-k", "4", "-n", draw(bad_count)],
            ["-m", "4", "-k", "4", "-n", "4", "--convention", nm]]))],
        "cycles-arch": lambda: ["cycles", "--arch", nm, "-m", "4", "-k", "4", "-n", "4"],
        "arch": lambda: draw(st.sampled_from([["arch", nm], ["arch", "ws8x8", "--schema"]])),
        "rtl": lambda: ["rtl", "--arch", "ws8x8", "-o", "{d}/out", *draw(st.sampled_from([
            ["--synth", nm], ["--top", nm]]))],
        "rtl-arch": lambda: ["rtl", "--arch", nm, "-o", "{d}/out"],
        "compile": lambda: ["compile", *draw(st.sampled_from([
            ["--model", nm, "--arch", "ws8x8"],
            ["--model", "tiny-llama", "--arch", nm],
            ["--model", "tiny-llama", "--arch", "ws8x8", "--format", nm],
            ["--model", "tiny-llama", "--arch", "ws8x8", "--phase", nm],
            ["--model", "tiny-llama", "--arch", "ws8x8", "--granularity", nm],
            ["--model", "tiny-llama", "--arch", "ws8x8", "--seq", draw(bad_count)],
            ["--model", "tiny-llama", "--arch", "ws8x8", "--batch", draw(bad_count)],
            ["--model", "tiny-llama", "--arch", "ws8x8", "--limit", draw(below_one)]]))],
        "models": lambda: ["models", draw(st.sampled_from([nm, "--" + nm]))],
        "sim": lambda: ["sim", *draw(st.sampled_from([
            ["--model", nm, "--arch", "ws8x8"],
            ["--model", "tiny-llama", "--arch", nm],
            ["--model", "tiny-llama", "--arch", "ws8x8", "--top", nm],
            ["--model", "tiny-llama", "--arch", "ws8x8", "--seq", draw(bad_count)],
            ["--model", "tiny-llama", "--arch", "ws8x8", "--trace", "{d}/t.vcd"]]))],
        "mesh": lambda: ["mesh", *draw(st.sampled_from([
            [nm, "--arch", "mesh4x4", "--k", "8", "--n", "8"],
            ["gemm", "--arch", nm, "--k", "8", "--n", "8"],
            ["gemm", "--arch", "ws8x8", "--k", "8", "--n", "8"],
            ["gemm", "--arch", "mesh4x4", "--k", draw(bad_count), "--n", "8"],
            ["gemm", "--arch", "mesh4x4", "--k", "8", "--n", draw(bad_count)],
            ["gemm", "--arch", "mesh4x4", "--k", "8", "--n", "8", "--m", draw(bad_count)],
            ["gemm", "--arch", "mesh4x4", "--k", "8", "--n", "8", "--algo", nm],
            ["gemv", "--arch", "mesh4x4", "--k", "8", "--n", "8", "--m", "2"],
            ["gemm", "--arch", "mesh4x4", "--k", "8", "--n", "8", "--elem-bytes",
             draw(st.sampled_from(["0", "-1", "9", "x", "99999999999999"]))]]))],
        "mesh-layer": lambda: ["mesh-layer", "--model", *draw(st.sampled_from([
            [nm, "--arch", "mesh4x4"],
            ["tiny-llama", "--arch", nm],
            ["tiny-llama", "--arch", "mesh4x4", "--phase", nm],
            ["tiny-llama", "--arch", "mesh4x4", "--algo", nm],
            ["tiny-llama", "--arch", "mesh4x4", "--defects", nm],
            ["tiny-llama", "--arch", "mesh4x4", "--seq", draw(bad_count)],
            ["tiny-llama", "--arch", "mesh4x4", "--phase", "decode", "--context",
             draw(bad_count)],
            ["tiny-moe", "--arch", "mesh4x4", "--phase", "decode", "--experts",
             draw(st.sampled_from(["x", "1,,2", "999", "-1", "0,0", ";", "1;x"]))]])),
            "--save", "{d}/p.json"],
        "cluster": lambda: ["cluster", "--json", "--db", "{d}/r.db", "--trace", "{d}/t.json",
                            *draw(st.sampled_from([
                                ["--cluster", nm, "--model", "llama3-8b"],
                                ["--cluster", "h100-8x-nvlink", "--model", nm],
                                ["--cluster", "h100-8x-nvlink", "--model", "llama3-8b",
                                 "--mode", nm],
                                ["--cluster", "h100-8x-nvlink", "--model", "llama3-8b",
                                 draw(st.sampled_from(["--dp", "--tp", "--pp", "--sp", "--ep",
                                                       "--micro-batches", "--seq"])),
                                 draw(st.sampled_from(["0", "-1", "x", "", "1.5"]))],
                                ["--cluster", "h100-8x-nvlink", "--model", "llama3-8b",
                                 "--dp", "8", "--schedule", nm],
                                ["--cluster", "h100-8x-nvlink", "--model", "llama3-8b",
                                 "--dp", "8", "--inlayer-comm", nm],
                                ["--cluster", "h100-8x-nvlink", "--model", "llama3-8b",
                                 "--dp", "8", "--cost-source", nm],
                                ["--cluster", "h100-8x-nvlink", "--model", "llama3-8b",
                                 "--dp", "8", "--grad-bucket-mb",
                                 draw(st.sampled_from(["-1", "nan", "x", "-inf"]))],
                                ["--cluster", "h100-8x-nvlink", "--model", "llama3-8b",
                                 "--mode", "serve", "--requests", "4", "--rate",
                                 draw(bad_positive_float)],
                                ["--cluster", "h100-8x-nvlink", "--model", "llama3-8b",
                                 "--mode", "serve", "--requests", draw(st.sampled_from(
                                     ["0", "-1", "x", "1000001", "1000000000000"]))],
                                ["--cluster", "h100-8x-nvlink", "--model", "llama3-8b",
                                 "--mode", "serve", "--requests", "4",
                                 draw(st.sampled_from(["--prompt-tokens", "--output-tokens"])),
                                 draw(bad_lengths)],
                                ["--cluster", "h100-8x-nvlink", "--model", "llama3-8b",
                                 "--mode", "serve", "--requests", "4", "--routing", nm],
                                ["--cluster", "h100-8x-nvlink", "--model", "llama3-8b",
                                 "--mode", "serve", "--requests", "4", "--max-seqs",
                                 draw(bad_count)],
                                ["--cluster", "h100-8x-nvlink", "--model", "llama3-8b",
                                 "--mode", "serve", "--requests", "4", "--request-trace",
                                 "{d}/none.csv"],
                                ["--cluster", "h100-8x-nvlink", "--model", "llama3-8b",
                                 "--mode", "serve", "--requests", "4", "--expert-trace",
                                 "{d}/bad-experts.txt"]]))],
        "sweep": lambda: ["sweep", "{d}/ok.yaml", *draw(st.sampled_from([
            ["--db", "{d}/s.db", "--executor", nm],
            ["--db", "{d}/s.db", "--workers", draw(bad_count)],
            ["--db", "{d}/s.db", "--export", "{d}/x." + nm],
            ["--db", "{d}/s.db", "--export", "{d}"],
            ["--db", "{d}"],
            ["--db", "{d}/not-a-db.db"],
            ["--db", "{d}/s.db", "--" + nm]]))],
        "sweep-file": lambda: ["sweep", "{d}/" + nm + ".yaml", "--db", "{d}/s.db"],
        "report": lambda: ["report", *draw(st.sampled_from([
            ["{d}/none.db"], ["{d}/not-a-db.db"], ["{d}"], ["{d}/ok.yaml"]])), "-o", "{d}/rep"],
        "fpga": lambda: ["fpga", "-o", "{d}/f", *draw(st.sampled_from([
            ["--arch", "ws8x8", "--target", nm],
            ["--arch", nm, "--target", "ice40"],
            ["--arch", "ws8x8", "--target", "ice40", "--top", nm],
            ["--arch", "ws8x8", "--target", "ice40", "--freq", draw(bad_positive_float)]]))],
        "generate": lambda: ["generate", *draw(st.sampled_from([
            ["--model", nm, "--arch", "ws8x8", "--prompt-ids", "1", "--tokens", "1"],
            ["--model", "tiny-llama", "--arch", nm, "--prompt-ids", "1", "--tokens", "1"],
            ["--model", "tiny-llama", "--arch", "ws8x8", "--prompt-ids", nm, "--tokens", "1"],
            ["--model", "tiny-llama", "--arch", "ws8x8", "--prompt-ids", "1",
             "--tokens", draw(bad_count)]]))],
        "demo": lambda: ["demo", *draw(st.sampled_from([
            ["--model", nm], ["--arch", nm], ["--driver", nm],
            ["--seed", draw(st.sampled_from(["x", "1.5", ""]))]]))],
        "unknown-command": lambda: [nm],
        "unknown-option": lambda: [draw(st.sampled_from(
            ["arch", "cycles", "rtl", "compile", "models", "sim", "mesh", "mesh-layer", "cluster",
             "sweep", "report", "fpga", "demo", "generate"])), "--" + nm + "-zz"],
    }
    return choices[draw(st.sampled_from(sorted(choices)))]()


def _fixtures(d: Path) -> None:
    """The files the flag cases name: a valid tiny sweep, a file that is not a database, a bad
    expert trace."""
    (d / "ok.yaml").write_text(yaml.safe_dump(SWEEP_BASE))
    (d / "not-a-db.db").write_bytes(b"name: f\n")
    (d / "bad-experts.txt").write_bytes(b"1 2\nx\n")


@settings(FUZZ, max_examples=800)
@given(argv=bad_flags())
def test_fuzz_flags(argv):
    with workdir() as d:
        _fixtures(d)
        check(d, *_fill(argv, d))


# ---- the defects found, as examples ----------------------------------------------------------------
FOUND = [
    (["cycles", "--arch", "ws8x8", "-m", "1", "-k", "1", "-n", "99999999999999999999999"],
     "less than or equal to 1048576"),
    (["mesh", "gemm", "--arch", "mesh4x4", "--k", "99999999999", "--n", "99999999999"],
     "less than or equal to 1048576"),
    (["mesh-layer", "--model", "tiny-llama", "--arch", "mesh4x4", "--seq", "999999999999"],
     "less than or equal to 1048576"),
    (["compile", "--model", "tiny-llama", "--arch", "ws8x8", "--limit", "0"],
     "greater than or equal to 1"),
    (["compile", "--model", "tiny-llama", "--arch", "ws8x8", "--batch", "131072"],
     "a model run with real tensors takes at most"),
    (["compile", "--model", "llama3-8b", "--arch", "ws8x8", "--batch", "1048576", "--seq",
      "8000"], "error: --batch 1048576 x --seq 8000 = 8,388,608,000 tokens; at most 1,048,576"),
    (["cluster", "--cluster", "h100-8x-nvlink", "--model", "llama3-8b", "--mode", "serve",
      "--rate", "nan", "--requests", "5"], "error: --rate = nan: must be a finite number"),
    (["cluster", "--cluster", "h100-8x-nvlink", "--model", "llama3-8b", "--mode", "serve",
      "--rate", "inf", "--requests", "5"], "error: --rate = inf: must be a finite number"),
    (["cluster", "--cluster", "h100-8x-nvlink", "--model", "llama3-8b", "--mode", "serve",
      "--requests", "1000000000000"], "less than or equal to 1000000"),
    (["cluster", "--cluster", "h100-8x-nvlink", "--model", "llama3-8b", "--mode", "serve",
      "--requests", "5", "--output-tokens", "100000000000000"],
     "llama3-8b's context is max_seq_len = 8192"),
    (["cluster", "--cluster", "h100-8x-nvlink", "--model", "llama3-8b", "--mode", "serve",
      "--requests", "5", "--expert-trace", "{d}/bin.txt"], "is a binary file"),
    (["cluster", "--cluster", "h100-8x-nvlink", "--model", "llama3-8b", "--mode", "serve",
      "--requests", "5", "--expert-trace", "{d}/bad-experts.txt"],
     "line 2: 'x': expert ids are whole numbers ≥ 0"),
    (["cluster", "--cluster", "h100-8x-nvlink", "--model", "llama3-8b", "--mode", "serve",
      "--request-trace", "{d}/late.csv"], "arrival_s = '1e300': must be a finite number"),
    (["cluster", "--cluster", "h100-8x-nvlink", "--model", "llama3-8b", "--mode", "serve",
      "--request-trace", "{d}/long.csv"], "prompt_tokens = '1e30': must be a whole number"),
    (["cluster", "--cluster", "h100-8x-nvlink", "--model", "llama3-8b", "--mode", "serve",
      "--request-trace", "{d}/ctx.csv"], "request 2 (by arrival): prompt + output = 8000 + 500"),
    (["sweep", "{d}/ok.yaml", "--db", "{d}/s.db", "--workers", "4762232"],
     "--workers 4762232: must be from 1 to 256"),
    (["sweep", "{d}/ok.yaml", "--db", "{d}/s.db", "--export", "{d}/x.zz"],
     "error: {d}/x.zz: export format must be .csv or .parquet"),
    (["sweep", "{d}/ok.yaml", "--db", "{d}"], "is a folder; give a results database file"),
    (["report", "{d}/not-a-db.db", "-o", "{d}/rep"], "is not a tilewright results database"),
    (["arch", "ws8x8", "--schema"], "give a PATH or --schema, not both"),
    (["arch", "{d}/hop.yaml"], "mesh.hop_latency_cycles = 1e+30: must be a number"),
    (["sweep", "{d}/named.yaml", "--db", "{d}/s.db"], "name = [0]: must be a non-empty text"),
]


@pytest.mark.parametrize("argv,needle", FOUND, ids=[" ".join(a[:3]) + f"-{i}"
                                                    for i, (a, _) in enumerate(FOUND)])
def test_defects_found_by_the_fuzzer_are_refused(argv, needle):
    with workdir() as d:
        _fixtures(d)
        (d / "bin.txt").write_bytes(b"\x00\x01")
        hdr = "arrival_s,prompt_tokens,output_tokens\n"
        (d / "late.csv").write_text(hdr + "1e300,5,5\n")
        (d / "long.csv").write_text(hdr + "0,1e30,5\n")
        (d / "ctx.csv").write_text(hdr + "0,8,4\n1,8000,500\n")
        mesh = copy.deepcopy(MESH_BASE)
        mesh["mesh"]["hop_latency_cycles"] = 1e30
        (d / "hop.yaml").write_text(yaml.safe_dump(mesh))
        (d / "named.yaml").write_text(yaml.safe_dump({**SWEEP_BASE, "name": [0]}))
        err = check(d, *_fill(argv, d))
        assert needle.format(d=d) in err, err


# ---- the real process behaves the same -----------------------------------------------------------
@pytest.mark.parametrize("argv", [
    ["rtl", "--arch", "{d}/arch.yaml", "-o", "{d}/out"],
    ["cluster", "--cluster", "h100-8x-nvlink", "--model", "llama3-8b", "--mode", "serve",
     "--rate", "nan", "--requests", "5", "--db", "{d}/r.db"],
    ["cluster", "--cluster", "h100-8x-nvlink", "--model", "llama3-8b", "--mode", "serve",
     "--request-trace", "{d}/late.csv", "--db", "{d}/r.db"],
    ["sweep", "{d}/ok.yaml", "--db", "{d}/s.db", "--export", "{d}/x.zz"],
    ["cycles", "--arch", "ws8x8", "-m", "0", "-k", "1", "-n", "1"],
], ids=["rtl-bad-arch", "cluster-rate-nan", "cluster-trace-arrival", "sweep-export", "cycles-m0"])
def test_real_process_refuses_the_same_way(argv):
    with workdir() as d:
        _fixtures(d)
        (d / "arch.yaml").write_text("tensor_engine: {rows: 4, cols: 4, dataflow: ws}\n"
                                     "tensor_engine: {rows: 8}\n")
        (d / "late.csv").write_text("arrival_s,prompt_tokens,output_tokens\n1e300,5,5\n")
        args = _fill(argv, d)
        before = snapshot(d)
        proc = tw(*args, timeout=300)
        assert_refused(proc.returncode, proc.stderr, args)
        code, _, err = run_cli(*args)                       # in-process: the same answer
        # (click's usage lines name the program as it was started: compare from 'Error:' on)
        assert code == proc.returncode, (err, proc.stderr)
        assert err.split("\nError: ")[-1] == proc.stderr.split("\nError: ")[-1], (err,
                                                                                  proc.stderr)
        assert snapshot(d) == before


def test_assert_refused_accepts_only_one_line_or_clicks_usage_block():
    assert_refused(2, "error: x.yaml: bad\n", [])
    assert_refused(2, "Usage: tilewright cycles [OPTIONS]\nTry 'tilewright cycles --help' for "
                      "help.\n\nError: Invalid value for '-m': bad\n", [])
    for code, err in [(1, "error: x\n"), (2, "error: a\nerror: b\n"), (2, "Traceback (most\n"),
                      (2, "oops\n"), (0, "")]:
        with pytest.raises(AssertionError):
            assert_refused(code, err, [])
