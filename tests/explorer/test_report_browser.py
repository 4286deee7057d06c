"""The report of a real run opened in headless Chromium with the network blocked: every chart
drawn, no console error, no request leaving the page, a hostile model id and label shown as
text; and --png writes one image per chart."""

from __future__ import annotations

from tests.explorer.browser import chromium
from tests.helpers import run_cli

HOSTILE_MODEL = "<img src=x onerror=alert(1)>"
HOSTILE_LABEL = "<b>bold</b> **md**"


def test_the_report_draws_every_chart_offline_and_shows_markup_as_text(sweep, tmp_path):
    done = sweep({"model": HOSTILE_MODEL, "fault": "http_500", "fault_every": 3,
                  "fault_match": "-c4-"}, levels=(1, 2, 4), rounds=2, output_tokens=16,
                 label=HOSTILE_LABEL)
    out = tmp_path / "report.html"
    pngs = tmp_path / "png"
    made = run_cli("report", done.run_id, "--db", str(done.store.path), "-o", str(out),
                   "--png", str(pngs))
    assert made.returncode == 0, made.stderr
    with chromium() as browser:
        page = browser.new_page()
        errors: list[str] = []
        left: list[str] = []
        dialogs: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))

        def block(route):
            if not route.request.url.startswith("file://"):
                left.append(route.request.url)
                route.abort()
            else:
                route.continue_()

        page.route("**/*", block)
        page.goto(out.as_uri())
        charts = page.locator("div.chart")
        count = charts.count()
        assert count == 3  # TTFT, TPS, errors by kind
        page.wait_for_function(f"document.querySelectorAll('div.chart .main-svg').length >= "
                               f"{count}", timeout=20_000)
        for i in range(count):
            assert charts.nth(i).locator("g.trace, g.barlayer .point").count() > 0
        text = page.inner_text("body")
        assert HOSTILE_MODEL in text and HOSTILE_LABEL in text
        assert page.locator("body img").count() == 0 and page.locator("body b").count() == 0
        assert errors == [] and left == [] and dialogs == []
    assert len(list(pngs.glob("*.png"))) == count
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs.glob("*.png"))
