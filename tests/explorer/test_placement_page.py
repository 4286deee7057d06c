"""The compare page gives the first two runs' placement verdict, as `compare` prints it."""

from harness.results.metrics import Targets
from harness.results.store import Store
from harness.results.stored_summary import stored_verdict
from tests.explorer.apptest import app
from tests.harness import placement_fixtures


def test_compare_page_shows_the_placement_verdict(monkeypatch, tmp_path):
    db = tmp_path / "bench.duckdb"
    ids = placement_fixtures.build(db)
    at = app(monkeypatch, db, "views/compare.py")
    at.multiselect(key="compare_runs").set_value([ids["ram"], ids["disk"]]).run()
    assert not at.exception
    expected = stored_verdict(Store(db), ids["ram"], ids["disk"], Targets())
    shown = " ".join(m.value for m in at.markdown)
    assert "lowered Max C by 2" in shown and "of host memory" in shown
    assert "Placement verdict" in [h.value for h in at.subheader]
    table = next(t.value for t in at.dataframe if list(t.value.columns) == ["figure", "A", "B",
                                                                            "B - A"])
    figures = table.set_index("figure")
    assert figures.loc["Max C", "A"] == expected.a.max_c_text()
    assert figures.loc["Max C", "B - A"] == "-2"


def test_compare_page_says_why_a_pair_has_no_verdict(monkeypatch, tmp_path):
    """A users run beside a closed one: its capacity is no Max C, so one sentence."""
    db = tmp_path / "bench.duckdb"
    ids = placement_fixtures.build(db, disk={"mode": "users"})
    at = app(monkeypatch, db, "views/compare.py")
    at.multiselect(key="compare_runs").set_value([ids["ram"], ids["disk"]]).run()
    assert not at.exception
    assert any("is a users run" in info.value for info in at.info)
