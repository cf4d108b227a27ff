"""The sweep report's interactive page in a real browser: headless Chromium (the Debian package
``chromium``; README install line) loads ``interactive.html`` from disk with no network, runs its
scripts, and must log no console error; its DOM holds the Plotly graphs with the Pareto front's
trace, a click on a front point shows that point's design parameters, and the screenshot shows
the front's markers. Under ``TILEWRIGHT_REQUIRE_TOOLS=1`` a missing Chromium fails (conftest.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.test_sweep_report import brute_front, gemm_report
from tilewright.app.sweep import ResultsStore


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("chromium not found (Debian: apt-get install -y chromium)")


def _run(page: Path, *mode: str, tmp: Path) -> subprocess.CompletedProcess:
    """Chromium headless on ``page`` with its console routed to stderr; ``mode`` is
    ``--dump-dom`` or ``--screenshot=...``. The virtual-time budget lets scripts finish."""
    cmd = [_chromium(), "--headless=new", "--no-sandbox", "--disable-gpu",
           "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000",
           "--window-size=1200,900", f"--user-data-dir={tmp / 'profile'}",
           "--no-first-run", "--no-default-browser-check",
           "--host-resolver-rules=MAP * ~NOTFOUND",   # no network: a fetch would log an error
           *mode, page.as_uri()]
    env = {**os.environ, "HOME": str(tmp)}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)


def _console_errors(log: str) -> list[str]:
    """The lines of a Chromium log that carry a page's console output or an uncaught error."""
    return [ln for ln in log.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("browser")
    db, rep = gemm_report(tmp)
    with ResultsStore(db) as s:
        df = s.frame("g")
    return tmp, rep, df


def test_console_errors_are_detected(tmp_path):
    """The check below can fail: a page with a script error, or one that loads a script from
    the network, shows in the log we grep."""
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>noSuchFunction();</script></body></html>")
    out = _run(bad, "--dump-dom", tmp=tmp_path)
    assert any("noSuchFunction" in ln for ln in _console_errors(out.stderr)), out.stderr[-2000:]
    net = tmp_path / "net.html"
    net.write_text("<html><body><script src='https://cdn.example/plotly.min.js'></script>"
                   "<script>Plotly.newPlot('x', []);</script></body></html>")
    out = _run(net, "--dump-dom", tmp=tmp_path)
    assert any("Plotly is not defined" in ln for ln in _console_errors(out.stderr)), \
        out.stderr[-2000:]


def test_page_loads_and_a_click_shows_the_point(report, tmp_path):
    tmp, rep, df = report
    feas = df[df["feasible"]].reset_index(drop=True)
    front = sorted(int(feas.loc[i, "id"]) for i in
                   brute_front(feas[["latency_s", "area_mm2"]].to_numpy(float)))
    pid = front[0]
    # the same page, plus a click on the first front point of the first plot once it has loaded
    page = (rep / "interactive.html").read_text()
    click = ("<script>window.addEventListener('load', () => {"
             "const d = document.querySelector('.tw-plot .plotly-graph-div');"
             f"d.emit('plotly_click', {{points: [{{customdata: {pid}}}]}});}});</script>")
    clicked = rep / "clicked.html"
    clicked.write_text(page.replace("</body></html>", click + "</body></html>"))
    out = _run(clicked, "--dump-dom", tmp=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert _console_errors(out.stderr) == []
    dom = out.stdout
    # scripts ran: plotly turned every figure div into a graph with an SVG
    graphs = re.findall(r'class="plotly-graph-div js-plotly-plot"', dom)
    assert len(graphs) == len(re.findall(r"Plotly\.newPlot\(", page)) >= 5
    assert f"Pareto front ({len(front)})" in dom and 'class="main-svg"' in dom
    # the click filled the detail box with the point's parameters from the database
    box = re.search(r'<div class="tw-detail" id="detail-g" style="display: block;">(.*?)</div>',
                    dom, flags=re.S)
    assert box, "the click showed no detail box"
    row = df[df["id"] == pid].iloc[0]
    assert f"<h4>point #{pid}</h4>" in box.group(1)
    for col in ("tensor_engine.rows", "tensor_engine.cols", "offchip.bandwidth_gbps"):
        v = row[f"p:{col}"]
        want = f"{int(v):,}" if float(v).is_integer() else f"{v}"   # JS: integers with commas
        assert f"<th>{col}</th><td>{want}</td>" in box.group(1)
    assert f"<th>macs</th><td>{64 * 256 * 256:,}</td>" in box.group(1)


def test_screenshot_shows_the_front(report, tmp_path):
    import matplotlib.image as mpimg

    from tilewright.app.sweep.report import FRONT_COLOUR
    _, rep, _ = report
    shot = tmp_path / "shot.png"
    out = _run(rep / "interactive.html", f"--screenshot={shot}", tmp=tmp_path)
    assert out.returncode == 0 and shot.exists(), out.stderr[-2000:]
    assert _console_errors(out.stderr) == []
    img = mpimg.imread(shot)[..., :3]
    assert img.shape[:2] == (900, 1200)
    assert img.std() > 0.05                               # not a blank page
    rgb = np.array([int(FRONT_COLOUR[i:i + 2], 16) for i in (1, 3, 5)]) / 255
    hits = np.all(np.abs(img - rgb) < 2 / 255, axis=-1).sum()
    assert hits > 200, hits                               # the front's markers and line are drawn
