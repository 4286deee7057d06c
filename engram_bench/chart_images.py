"""--png / --svg: each chart of a report as an image, drawn by the same plotly.js in a headless
Chromium (Debian's, which `make test` installs; CHROMIUM names another). No Python package
beyond plotly: Plotly.toImage draws in the browser and `--dump-dom` returns the images, so it
works offline, where kaleido would need a Chrome of its own fetched from the web."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engram_bench.errors import UserError
from harness.results.handover import images

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
TIMEOUT_S = 120


def browser() -> str:
    """The headless browser: $CHROMIUM, else the first of BROWSERS on PATH."""
    given = os.environ.get("CHROMIUM")
    if given:
        if not os.access(given, os.X_OK):
            raise UserError(f"CHROMIUM={given} is not an executable browser")
        return given
    for name in BROWSERS:
        if found := shutil.which(name):
            return found
    raise UserError("--png and --svg draw the charts in a headless Chromium, and none is "
                    "installed: apt-get install chromium (or set CHROMIUM to a Chrome's path)")


def _name(index: int, figure: dict[str, Any]) -> str:
    title = str(figure.get("layout", {}).get("title", {}).get("text", "chart"))
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "chart"
    return f"{index + 1:02d}-{slug}"


def write(figures: Sequence[dict[str, Any]], plotly_js: str, folder: Path, fmt: str
          ) -> list[Path]:
    """Each figure as folder/NN-title.fmt; one sentence (UserError) where the browser fails."""
    if not figures:
        return []
    exe = browser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create {folder}: {exc.strerror or exc}") from None
    with tempfile.TemporaryDirectory(prefix="engram-bench-images-") as work:
        page = Path(work) / "charts.html"
        page.write_text(images.page(figures, plotly_js, fmt), encoding="utf-8")
        try:
            done = subprocess.run(
                [exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-dev-shm-usage", f"--user-data-dir={work}/profile",
                 "--virtual-time-budget=60000", "--dump-dom", page.as_uri()],
                capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise UserError(f"the headless browser {exe} did not draw the charts: {exc}") from None
        try:
            drawn = images.images(done.stdout, len(figures), fmt)
        except ValueError as exc:
            raise UserError(f"{exc} in {exe} (exit {done.returncode})") from None
    paths = []
    for i, (figure, data) in enumerate(zip(figures, drawn, strict=True)):
        path = folder / f"{_name(i, figure)}.{fmt}"
        try:
            path.write_bytes(data)
        except OSError as exc:
            raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None
        paths.append(path)
    return paths
