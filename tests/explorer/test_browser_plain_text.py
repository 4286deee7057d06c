"""Names from a results file or a server shown as typed, in headless Chromium: a run id, model
id and label written as markdown images (pointing at a port this test listens on) make no
request on any page, and their text shows as it was stored; a 200k-character run id, model and
label render the Run page, cut to one line."""

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.results.run_row import RunRow
from harness.results.store import Store
from tests.explorer import fixtures
from tests.explorer.browser import chromium, serve


@pytest.fixture
def bait() -> Iterator[tuple[int, list[str]]]:
    """A port on 127.0.0.1 that records every connection made to it: (port, connections)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    connections: list[str] = []

    def accept() -> None:
        while True:
            try:
                conn, peer = listener.accept()
            except OSError:  # closed at teardown
                return
            connections.append(f"{peer[0]}:{peer[1]}")
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1], connections
    listener.shutdown(socket.SHUT_RDWR)  # wakes the accept
    listener.close()
    thread.join(5)


def hostile(port: int) -> dict[str, str]:
    """A run id, model id and label that fetch an image from `port` where read as markdown,
    and show tags where read as HTML; each short enough to show whole."""
    image = f"http://127.0.0.1:{port}"
    return {"run_id": f"![r]({image}/run.png)",
            "model": f"![m]({image}/model.png) {image}/link",
            "label": f"![l]({image}/l.png) **b** <b>t</b> :red[r] :smile: $x$ www.x.io"}


HOSTILE_USERS = "users-of-a-hostile-setup"


def build_hostile(path: Path, names: dict[str, str]) -> None:
    """The users fixture database, plus a closed run named by `names` (with server metrics)
    and a users run of its setup (so it is paired with it), labelled by `names` too."""
    fixtures.build_with_users(path)
    store = Store(path)
    setup = {**fixtures.USERS_SETUP, "model": names["model"]}
    store.create_run(RunRow(
        run_id=names["run_id"], **setup, mode="closed", levels=list(fixtures.PAIRED_PROFILE),
        rounds=10, label=names["label"], config=json.dumps({"prompt_words": 118})))
    store.write_requests(names["run_id"], fixtures.paired_records())
    for c in fixtures.PAIRED_PROFILE:
        store.write_server_metrics(names["run_id"], c, fixtures.server_metric_rows(c))
    store.finish_run(names["run_id"], "complete")
    store.create_run(RunRow(
        run_id=HOSTILE_USERS, **setup, mode="users", levels=list(fixtures.USERS_LEVELS),
        rounds=fixtures.USERS_REQUESTS, label=names["label"],
        config=fixtures.stored(mode="users", levels=fixtures.USERS_LEVELS,
                               rounds=fixtures.USERS_REQUESTS, profile="chat")))
    store.write_requests(HOSTILE_USERS, fixtures.users_records())
    store.finish_run(HOSTILE_USERS, "complete")


def squeezed(text: str) -> str:
    """Text as read, without the invisible word joiners that keep a URL from being a link."""
    return " ".join(text.replace("\u2060", "").split())


def test_names_from_the_file_are_plain_text_on_every_page_in_chromium(tmp_path, bait):
    port, connections = bait
    names = hostile(port)
    app = serve(tmp_path, lambda db: build_hostile(db, names))
    url = next(app)
    requested: list[str] = []
    seen: dict[str, str] = {}
    try:
        with chromium() as browser:
            page = browser.new_page(viewport={"width": 1400, "height": 1400})
            page.on("request", lambda r: requested.append(r.url) if f":{port}" in r.url
                    else None)

            def visit(path: str, heading: str, last: str) -> None:
                """The page, once `last` (a locator of what it draws last) shows."""
                page.goto(f"{url}/{path}", wait_until="domcontentloaded")
                page.get_by_role("heading", name=heading, exact=True).wait_for(timeout=60_000)
                page.locator(last).first.wait_for(timeout=60_000)
                page.wait_for_timeout(1000)  # an image is asked for as its element is drawn

            def text(key: str) -> None:
                seen[key] = squeezed(page.locator('[data-testid="stMain"]').inner_text())
                seen[key + " legends"] = squeezed(" ".join(
                    page.locator(".legendtext").all_text_contents()))
                assert page.locator('[data-testid="stException"]').count() == 0, key
                links = page.locator(f'a[href*=":{port}"]').count()
                assert links == 0, (key, links)

            visit("", "Runs", '[data-testid="stDataFrame"]')
            page.locator('[data-testid="stMultiSelect"]').nth(2).click()  # the models
            page.get_by_role("option").first.wait_for(timeout=30_000)
            seen["models"] = squeezed(" ".join(page.get_by_role("option").all_inner_texts()))
            page.keyboard.press("Escape")
            text("runs")
            visit("run", "Run", "text=from the closed run")  # the newest: the users run
            text("run users")
            page.locator('[data-testid="stSelectbox"]').first.click()
            page.get_by_role("option", name=names["run_id"][:6], exact=False).first.click()
            page.get_by_text("Server metrics per level").wait_for(timeout=60_000)
            page.locator(".js-plotly-plot").nth(6).wait_for(timeout=60_000)
            page.wait_for_timeout(1000)
            text("run closed")
            seen["chooser"] = page.locator('[data-testid="stSelectbox"] input').first.input_value()
            visit("compare", "Compare", "text=Not recorded for")  # the newest two: hostile
            page.locator(".legendtext", has_text="l.png").first.wait_for(timeout=60_000)
            text("compare")
            for path, heading, last in (
                    ("capacity", "Capacity", '[data-testid="stDataFrame"]'),
                    ("reference", "Published reference", ".js-plotly-plot >> nth=1"),
                    ("sizing", "Sizing", ".js-plotly-plot")):
                visit(path, heading, last)
                text(path)
    finally:
        next(app, None)
    time.sleep(0.5)  # a request sent as the page closed still reaches the port
    assert connections == [] and requested == [], (connections, requested)
    label = squeezed(names["label"])
    assert names["model"] in seen["models"], seen
    assert f"Difference against {HOSTILE_USERS} · rtx-pro-6000 · {names['model']}" in \
        seen["compare"]
    assert f"Not recorded for: {HOSTILE_USERS} · rtx-pro-6000 · {names['model']}" in \
        seen["compare"]
    assert f"from the closed run {names['run_id']} of the same setup" in seen["run users"], \
        seen
    assert label in seen["compare legends"], seen["compare legends"]
    assert seen["chooser"].startswith(f"{names['run_id']} · rtx-pro-6000 · {names['model']}")


LONG = 200_000


def build_long(path: Path) -> None:
    """The fixture database plus a run whose id, model and label are LONG characters each."""
    fixtures.build(path)
    store = Store(path)
    run_id = "r" * LONG
    store.create_run(RunRow(
        run_id=run_id, device="spark", engine="vllm", model="m" * LONG, table_placement="nvme",
        target_url="http://127.0.0.1:8000/v1", api="chat", mode="closed",
        levels=list(fixtures.LEVELS), rounds=10, input_tokens=128,
        output_tokens=128, measured_input_tokens=128, label="l" * LONG,
        config=json.dumps({"prompt_words": 118})))
    store.write_requests(run_id, fixtures.records("nvme", start=fixtures.T0 + 20000))
    store.finish_run(run_id, "complete")


def test_a_run_with_a_200k_character_id_and_label_renders_its_page_in_chromium(tmp_path):
    """The newest run, the long one, is the Run page's first: its charts draw (they never did
    within two minutes with the names whole) and the chooser shows the names cut."""
    app = serve(tmp_path, build_long)
    url = next(app)
    try:
        with chromium() as browser:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{url}/run", wait_until="domcontentloaded")
            page.locator('[data-testid="stMetric"]', has_text="Max C").wait_for(timeout=60_000)
            page.locator(".js-plotly-plot").nth(1).wait_for(timeout=60_000)
            chooser = page.locator('[data-testid="stSelectbox"] input').first.input_value()
            legends = page.locator(".legendtext").all_text_contents()
            errors = page.locator('[data-testid="stException"]').count()
    finally:
        next(app, None)
    assert errors == 0
    assert "rrrr" in chooser and "…" in chooser and len(chooser) < 1000, len(chooser)
    assert any("llll" in name for name in legends), legends
    assert max(len(name) for name in legends) < 1000, legends
