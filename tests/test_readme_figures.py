"""The README's figures and links: every image it shows and every repository file it links
exists (the figures are rendered by ``benchmarks/readme_figures.py`` and committed), each image
is a real picture, and the install command brings the browser the report's browser test needs."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def _images() -> list[str]:
    return re.findall(r'<img src="([^"]+)"', README) + re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)",
                                                                  README)


def test_readme_images_exist_and_are_pictures():
    import matplotlib.image as mpimg
    imgs = _images()
    assert len(imgs) >= 3                               # the README opens with figures
    for src in imgs:
        assert not src.startswith(("http:", "https:")), src
        f = REPO / src
        assert f.is_file(), f"README image {src}: no such file"
        img = mpimg.imread(f)[..., :3]
        assert min(img.shape[:2]) > 200 and float(np.std(img)) > 0.02, src


def test_readme_file_links_exist():
    links = [t for t in re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", README)
             if not t.startswith(("http:", "https:", "mailto:"))]
    assert any(t.startswith("docs/") for t in links)
    for t in links:
        assert (REPO / t).exists(), f"README links {t}: no such file"


def test_install_command_installs_chromium():
    """.ci/run runs the first line after <!-- ci:install -->; the browser test needs chromium."""
    block = README.split("<!-- ci:install -->", 1)[1]
    cmd = re.search(r"```bash\n(.*?)\n", block).group(1)
    assert re.search(r"apt-get install -y( -qq)? chromium", cmd) and "pip install" in cmd
    assert cmd.index("apt-get update") < cmd.index("apt-get install")
