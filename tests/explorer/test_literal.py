"""explorer.literal: names cut to one short line; ordinary names left as they are."""

from explorer import literal


def test_a_long_name_is_cut_to_one_line_with_an_ellipsis():
    cut = literal.shorten("x" * 200_000)
    assert len(cut) == literal.NAME_CHARS and cut.endswith("…")
    assert literal.shorten("a\nb\t c") == "a b c"
    assert literal.shorten("fixture-nvme") == "fixture-nvme"
    spaced = literal.shorten("a" + " " * 100_000 + "b")  # what is left after the spaces
    assert spaced.startswith("a") and len(spaced) <= literal.NAME_CHARS


def test_ordinary_names_and_sentences_reach_markdown_unchanged():
    for text in ("fixture-nvme · spark · qwen3.8 · table nvme", "20261129-112506-83be",
                 "Max users 6 (lower bound: U=7-11 not tested) at duty cycle 0.25"):
        assert literal.markdown(text) == text


def test_markup_reaches_markdown_and_plotly_escaped():
    assert "![" not in literal.markdown("![p](http://h/b.png)")
    assert "<b>" not in literal.plotly("<b>x</b>") and "&lt;b&gt;" in literal.plotly("<b>")
