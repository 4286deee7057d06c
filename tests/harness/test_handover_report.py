"""`engram-bench report` and `summary --format md` over a real run against the fake server:
the file, what it says, and every way a user can get it wrong (one sentence, exit 2)."""

from __future__ import annotations

import os
import re

import pytest

from harness.results.handover import document, sources
from harness.results.handover.markup import script_json
from harness.results.handover.measured import public_url
from tests.helpers import run_cli

HOSTILE_MODEL = "<img src=x onerror=alert(1)>"
HOSTILE_LABEL = "</script><script>alert(2)</script> **bold** | pipe"


@pytest.fixture
def hostile_run(sweep):
    """A short run whose model id and label are markup, with failed requests at C=4."""
    done = sweep({"model": HOSTILE_MODEL, "fault": "http_500", "fault_every": 3,
                  "fault_match": "-c4-"}, levels=(1, 2, 4), rounds=2, output_tokens=16,
                 label=HOSTILE_LABEL)
    return done


def test_report_is_one_file_with_the_library_once_and_markup_as_text(hostile_run, tmp_path):
    out = tmp_path / "report.html"
    done = run_cli("report", hostile_run.run_id, "--db", str(hostile_run.store.path), "-o",
                   str(out))
    assert done.returncode == 0, done.stderr
    assert f"report: {out}" in done.stdout
    page = out.read_text()
    assert page.count(sources.plotly_js()[:300]) == 1  # the chart library, once
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "</script><script>alert(2)" not in page  # neither as markup nor in the data
    ours = page.replace(sources.plotly_js(), "")
    assert not re.search(r"""(src|href)=["']?https?:""", ours)  # nothing to fetch


def test_folder_output_is_named_for_the_run(hostile_run, tmp_path):
    done = run_cli("report", "latest", "--db", str(hostile_run.store.path), "-o", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / f"report-{hostile_run.run_id}.html").exists()


def test_a_results_file_stands_for_all_its_runs(sweep, tmp_path):
    first = sweep(levels=(1, 2), rounds=1, output_tokens=8)
    sweep(first.server, store=first.store, levels=(1, 2), rounds=1, output_tokens=8)
    out = tmp_path / "both.html"
    done = run_cli("report", str(first.store.path), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "Comparison of 2 runs" in out.read_text()


def test_bad_input_is_one_sentence_and_exit_2(hostile_run, tmp_path):
    db = str(hostile_run.store.path)
    not_results = tmp_path / "notes.duckdb"
    not_results.write_text("not a database\n")
    out = str(tmp_path / "r.html")
    for args in (("no-such-run", "--db", db, "-o", out), (str(not_results), "-o", out),
                 ("--db", db, "-o", str(tmp_path / "missing" / "r.html"))):
        done = run_cli("report", *args)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.startswith("engram-bench: error:"), done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.duckdb", "notes.duckdb"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_unwritable_output_leaves_nothing(hostile_run, tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    done = run_cli("report", "--db", str(hostile_run.store.path), "-o", str(folder / "r.html"))
    assert done.returncode == 2 and "cannot write" in done.stderr
    assert list(folder.iterdir()) == []


def test_an_unfinished_run_says_so_on_the_first_line(hostile_run, tmp_path):
    hostile_run.store.finish_run(hostile_run.run_id, "failed", "stopped by the test")
    out = tmp_path / "r.html"
    done = run_cli("report", "--db", str(hostile_run.store.path), "-o", str(out))
    assert done.returncode == 0, done.stderr
    body = out.read_text().split("<body>", 1)[1]
    first = re.sub(r"<[^>]+>", "", body.split("</p>", 1)[0])
    assert first.startswith(f"Run {hostile_run.run_id} is failed (stopped by the test)")


def test_summary_md_is_a_markdown_table_with_markup_escaped(hostile_run):
    done = run_cli("summary", "--db", str(hostile_run.store.path), "--format", "md")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    table = [line for line in lines if line.startswith("|")]
    assert len(table) == 2 + 3  # header, separator, a row a level
    assert re.fullmatch(r"\|(:?-+:?\|)+", table[1])
    assert len({line.count(" | ") for line in table if line is not table[1]}) == 1
    assert "\\<img src=x onerror=alert(1)\\>" in done.stdout
    assert "\\| pipe" in done.stdout  # the label cannot open a column


def test_credentials_never_reach_the_page():
    assert public_url("https://user:pass@host:8443/v1?key=abc#frag") == "https://host:8443/v1"


def test_script_data_cannot_close_its_block():
    data = script_json({"model": "</script><!--"})
    assert "</" not in data and "<!--" not in data


def test_the_timestamp_is_the_only_thing_that_varies(hostile_run):
    from harness.results.metrics import Targets

    report = sources.run_report(hostile_run.store, hostile_run.run_id, Targets())
    one = document.build([report], "", "A").html
    two = document.build([report], "", "B").html
    assert one != two and one.replace(">A<", ">B<") == two


def test_two_runs_that_differ_only_in_placement_get_the_placement_verdict(sweep, tmp_path):
    host = sweep(levels=(1, 2), rounds=2, output_tokens=8, table_placement="memory")
    nvme = sweep(host.server, store=host.store, levels=(1, 2), rounds=2, output_tokens=8,
                 table_placement="nvme")
    out = tmp_path / "placement.html"
    done = run_cli("report", host.run_id, nvme.run_id, "--db", str(host.store.path), "-o",
                   str(out))
    assert done.returncode == 0, done.stderr
    assert "Placement verdict" in out.read_text()


def test_the_charts_draw_the_statistic_the_targets_judged(sweep, tmp_path):
    import json

    done = sweep(levels=(1, 2), rounds=3, output_tokens=8)
    db = str(done.store.path)
    out = tmp_path / "p90.html"
    made = run_cli("report", done.run_id, "--db", db, "-o", str(out), "--statistic", "p90")
    assert made.returncode == 0, made.stderr
    summary = json.loads(run_cli("summary", done.run_id, "--db", db, "--json",
                                 "--statistic", "p90").stdout)
    figures = json.loads(re.search(r"const FIGURES=(\[.*?\]);", out.read_text()).group(1))
    by_title = {f["layout"]["title"]["text"]: f["data"][0]["y"] for f in figures
                if f["layout"].get("title")}
    assert by_title["p90 TTFT"] == [lv["p90_ttft_ms"] for lv in summary["levels"]]
    assert by_title["p90 TPS per request"] == [lv["p10_tps"] for lv in summary["levels"]]


def test_the_default_output_is_a_folder_made_where_it_is_missing(hostile_run, tmp_path):
    here = tmp_path / "elsewhere"
    here.mkdir()
    done = run_cli("report", hostile_run.run_id, "--db", str(hostile_run.store.path),
                   cwd=here)
    assert done.returncode == 0, done.stderr
    assert [p.name for p in (here / "results").iterdir()] == [
        f"report-{hostile_run.run_id}.html"]


def test_the_command_to_measure_again_repeats_the_table_state_and_the_first_token_judged():
    import json
    import shlex

    from engram_bench.parser import build_parser, targets
    from harness.config import RunConfig
    from harness.results.handover.measured import reproduce
    from harness.results.metrics import Targets
    from harness.results.run_row import RunRow

    config = RunConfig(url="http://127.0.0.1:8000/v1", model="m", levels=(1, 2),
                       table_state="warm", warm_budget_gb=1.5, idle_s=30.0,
                       host_metrics=("http://127.0.0.1:9100/metrics",))
    row = RunRow(run_id="r", status="complete", mode="closed", levels=[1, 2], rounds=10,
                 output_tokens=128, config=json.dumps(config.to_json_dict()))
    command = reproduce(row, Targets(ttft_of="output"))
    args = build_parser().parse_args(shlex.split(command)[1:])
    assert (args.table_state, args.warm_budget_gb, args.idle) == ("warm", 1.5, 30.0)
    assert targets(args).ttft_of == "output"


def test_the_command_to_measure_again_names_every_setting_a_run_stores():
    """A setting added to RunConfig is repeated by the command (FLAGS), or is named here with
    how the command gets it otherwise: the next one cannot drift out unnoticed."""
    from dataclasses import fields

    from harness.config import RunConfig
    from harness.results.handover.measured import FLAGS

    otherwise = {"url": "--url, or the server's device", "model": "--model",
                 "server_args": "its engine's flags", "server_flags": "given whole",
                 "server_metrics": "--no-server-metrics", "engine": "detected again"}
    assert {f.name for f in fields(RunConfig)} == set(FLAGS) | set(otherwise)
