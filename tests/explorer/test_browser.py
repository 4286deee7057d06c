"""The real app in headless Chromium (Debian's, installed by `make test` as root): the Run
page shows Max C of the fixture run, and a users run's Max users beside its estimate; every
page renders at a wide and a narrow window with Max C in view; screenshots are saved under each
test's tmp dir, to be looked at."""

import time

import pytest

from tests.explorer import fixtures
from tests.explorer.apptest import RUNS_FIRST
from tests.explorer.browser import chromium, serve


@pytest.fixture(scope="module")
def served_app(tmp_path_factory):
    """One app on the fixture database for the module's tests: they only read it, each in its
    own browser session."""
    yield from serve(tmp_path_factory.mktemp("served"), fixtures.build)


@pytest.fixture
def served_users_app(tmp_path):
    yield from serve(tmp_path, fixtures.build_with_users)


def test_run_page_renders_max_c_in_chromium(served_app, tmp_path):
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(served_app + "/run", wait_until="domcontentloaded")
        metric = page.locator('[data-testid="stMetric"]', has_text="Max C")
        metric.wait_for(timeout=60_000)
        deadline = time.monotonic() + 30
        while "Max C2" not in metric.inner_text().replace("\n", "") and (
                time.monotonic() < deadline):
            time.sleep(0.2)
        text = metric.inner_text().replace("\n", "")
        page.locator(".js-plotly-plot").first.wait_for(timeout=30_000)
        shot = tmp_path / "run_page.png"
        page.screenshot(path=str(shot), full_page=True)
    assert text == "Max C2"  # fixture-nvme, the newest run, passes C=1,2
    assert shot.stat().st_size > 10_000


def test_run_page_shows_server_and_client_ttft_in_chromium(served_app, tmp_path):
    """The fixture run with server metrics: the server's own TTFT beside the client's, in a
    real browser; the screenshot is saved under the test's tmp dir."""
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1400})
        page.goto(served_app + "/run", wait_until="domcontentloaded")
        page.locator('[data-testid="stSelectbox"]').first.click(timeout=60_000)
        page.get_by_role("option", name="fixture-mem", exact=False).first.click()
        heading = page.get_by_text("Server metrics per level")
        heading.wait_for(timeout=60_000)
        heading.scroll_into_view_if_needed()
        table = page.locator('[data-testid="stDataFrame"]').last
        table.wait_for(timeout=30_000)
        page.wait_for_timeout(1500)
        shot = tmp_path / "run_page_server_metrics.png"
        page.screenshot(path=str(shot))
        charts = page.locator(".js-plotly-plot").count()
    assert shot.stat().st_size > 10_000
    assert charts >= 1


# url path: (heading, tables, charts) the page shows on the fixture database
PAGES = {"": ("Runs", 1, 0), "run": ("Run", 2, 7), "compare": ("Compare", 3, 6),
         "capacity": ("Capacity", 1, 0), "sizing": ("Sizing", 0, 1),
         "reference": ("Published reference", 1, 2)}
RUNS_TABLE = {"": 0, "compare": 1, "capacity": 0, "reference": 0}  # which table lists runs


def headers(table) -> list[str]:
    """The column headers the grid shows (its accessible table holds only those in view)."""
    return table.locator("th").all_text_contents()


@pytest.mark.parametrize("width", [1400, 900])
def test_every_page_reads_at_a_glance_in_chromium(served_app, tmp_path, width):
    """Every page at a wide and a narrow window: it renders without an error, its tables carry
    human headers, and every runs table starts with Max C and the users, in view. A screenshot
    of each whole page is saved as <page>_<width>.png under the test's tmp dir."""
    seen = {}
    with chromium() as browser:
        page = browser.new_page(viewport={"width": width, "height": 1000})
        for path, (heading, n_tables, n_charts) in PAGES.items():
            page.set_viewport_size({"width": width, "height": 1000})
            page.goto(f"{served_app}/{path}", wait_until="domcontentloaded")
            page.get_by_role("heading", name=heading, exact=True).wait_for(timeout=60_000)
            tables = page.locator('[data-testid="stDataFrame"]')
            for locator, n in ((tables, n_tables), (page.locator(".js-plotly-plot"), n_charts)):
                if n:
                    locator.nth(n - 1).wait_for(timeout=30_000)
            page.wait_for_timeout(1000)  # the grids and charts paint
            seen[path] = ([headers(tables.nth(i)) for i in range(tables.count())],
                          page.locator('[data-testid="stException"]').count())
            height = page.evaluate(
                "document.querySelector('[data-testid=\"stMain\"]').scrollHeight")
            page.set_viewport_size({"width": width, "height": min(height, 8000)})
            page.wait_for_timeout(500)
            page.screenshot(path=str(tmp_path / f"{path or 'runs'}_{width}.png"))
    for path, (tables, errors) in seen.items():
        assert errors == 0, path
        assert len(tables) == PAGES[path][1], path
        assert all(h and "_" not in h for table in tables for h in table), (path, tables)
        if path in RUNS_TABLE:
            assert tables[RUNS_TABLE[path]][:4] == RUNS_FIRST, (path, tables)
    assert seen["run"][0][0][:3] == ["C", "passes", "probe"]
    assert all((tmp_path / f"{p or 'runs'}_{width}.png").stat().st_size > 10_000 for p in PAGES)


def test_run_page_shows_max_users_and_turns_in_chromium(served_users_app, tmp_path):
    """A users run's headline (Max users measured, the estimate from the paired closed run)
    and a multi-turn run's per-turn table, in a real browser; screenshots under tmp dir."""
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1400})
        texts = {}
        for run_id, wait_for in ((fixtures.USERS_RUN, "Max users (measured)"),
                                 (fixtures.TURNS_RUN, "Per turn: context length")):
            page.goto(served_users_app + "/run", wait_until="domcontentloaded")
            page.locator('[data-testid="stSelectbox"]').first.click(timeout=60_000)
            page.get_by_role("option", name=run_id, exact=False).first.click()
            page.get_by_text(wait_for).first.wait_for(timeout=60_000)
            page.locator(".js-plotly-plot").first.wait_for(timeout=30_000)
            page.wait_for_timeout(1000)
            texts[run_id] = page.locator('[data-testid="stMain"]').inner_text()
            page.screenshot(path=str(tmp_path / f"{run_id}.png"), full_page=True)
        errors = page.locator('[data-testid="stException"]').count()
    assert errors == 0
    users = " ".join(texts[fixtures.USERS_RUN].split())
    assert ("Max users (measured) 6 at duty cycle 0.25, beside the estimate Max C 2 x 4 = 8 "
            "from the closed run fixture-closed") in users
    assert "estimate: Max C x 4" in users
    assert "Turns CSV (6 rows)" in texts[fixtures.TURNS_RUN]
    assert all((tmp_path / f"{r}.png").stat().st_size > 10_000
               for r in (fixtures.USERS_RUN, fixtures.TURNS_RUN))


@pytest.fixture
def served_timed_app(tmp_path):
    yield from serve(tmp_path, fixtures.build_with_token_times)


def test_run_page_shows_token_timing_goodput_and_the_timeline_in_chromium(served_timed_app,
                                                                          tmp_path):
    """A run stored with --token-times: TPOT/ITL and E2E charts, goodput once an SLO is set,
    and the request timeline with its chunk ticks; screenshots saved under the tmp dir."""
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1200})
        page.goto(served_timed_app + "/run", wait_until="domcontentloaded")
        heading = page.get_by_text("Token timing per level")
        heading.wait_for(timeout=60_000)  # the newest run, the timed one, is shown first
        slo = page.get_by_label("TTFT at most (ms)")
        slo.fill("100")
        slo.press("Enter")
        page.get_by_text("goodput (share meeting the SLO)").first.wait_for(
            state="attached", timeout=30_000)  # a grid header: in the DOM, drawn on canvas
        heading.scroll_into_view_if_needed()
        page.wait_for_timeout(1500)
        page.screenshot(path=str(tmp_path / "token_timing.png"))
        timeline = page.get_by_text("Request timeline")
        timeline.wait_for(timeout=30_000)
        timeline.scroll_into_view_if_needed()
        page.wait_for_timeout(1500)
        page.screenshot(path=str(tmp_path / "timeline.png"))
        page.screenshot(path=str(tmp_path / "run_page_timed.png"), full_page=True)
        text = page.locator("body").inner_text()
    assert "client-bound level (the harness was the limit)" in text
    assert "chunk (its tokens in the hover)" in text
    assert (tmp_path / "timeline.png").stat().st_size > 10_000
