"""`run --prompts` and the bundled server's flags, as users run them."""

import json

import duckdb
import pytest

from engram_bench.parser import build_parser
from engram_bench.run_config import config_for
from harness.mock_server import count_prompt_tokens
from harness.results.store import Store
from tests.helpers import run_cli

DEAD_URL = "http://127.0.0.1:9/v1"  # never reached: these runs stop before the target


def _run(url, db, *flags):
    proc = run_cli("run", "--url", url, "--db", str(db), "--output-tokens", "4", "--json", *flags)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_text_prompts_measure_the_calibrated_length(mock_process, tmp_path):
    db = tmp_path / "b.duckdb"
    out = _run(mock_process(), db, "--prompts", "text", "--levels", "1,4", "--rounds", "5")
    assert out["measured_input_tokens"] == pytest.approx(128, rel=0.05)
    sent = [r.input_tokens for r in Store(db).requests(out["run_id"])]
    assert sum(sent) / len(sent) == pytest.approx(128, rel=0.05)
    assert len(set(sent)) > 1  # natural text: windows of the same words differ in tokens
    for level in out["levels"]:
        assert level["mean_prompt_tokens"] == pytest.approx(128, rel=0.1)
    assert json.loads(Store(db).run(out["run_id"]).config)["prompts"] == "text"


PROMPTS = ["Say hi.", " ".join(["word"] * 60), "Tell me, slowly: " + " ".join(["more"] * 250)]
FORMATS = {
    "sharegpt": lambda p: {"conversations": [{"from": "human", "value": p},
                                             {"from": "gpt", "value": "ok"}]},
    "prompt": lambda p: {"prompt": p},
    "messages": lambda p: {"messages": [{"role": "user", "content": p}]},
}


@pytest.mark.parametrize("fmt", FORMATS)
def test_jsonl_prompts_keep_their_own_lengths(mock_process, tmp_path, fmt):
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(json.dumps(FORMATS[fmt](p)) for p in PROMPTS) + "\n")
    out = _run(mock_process(), tmp_path / "b.duckdb", "--prompts", str(path), "--levels", "3,6",
               "--rounds", "1")
    own = sum(count_prompt_tokens([p]) for p in PROMPTS) / len(PROMPTS)
    # C=3 sends each prompt once, C=6 each twice: the level means are the file's own mean
    assert [lv["mean_prompt_tokens"] for lv in out["levels"]] == [pytest.approx(own)] * 2
    assert out["measured_input_tokens"] == pytest.approx(own)  # what was sent, uncalibrated
    assert not any("target" in w for w in out["warnings"])  # own lengths have no target


def test_resume_rebuilds_the_same_prompts_and_refuses_a_changed_file(mock_process, tmp_path):
    url, db = mock_process(), tmp_path / "b.duckdb"
    path = tmp_path / "prompts.jsonl"
    lengths = [3, 20, 45, 90, 200]
    path.write_text("\n".join(json.dumps({"prompt": " ".join(["w"] * n)}) for n in lengths))
    out = _run(url, db, "--prompts", str(path), "--levels", "1,2", "--rounds", "2", "--seed", "4")
    run_id, before = out["run_id"], out["levels"][1]["mean_prompt_tokens"]
    with duckdb.connect(str(db)) as con:  # as if the run had been stopped after C=1
        con.execute("DELETE FROM requests WHERE run_id = ? AND concurrency = 2", [run_id])
        con.execute("UPDATE runs SET status = 'aborted' WHERE run_id = ?", [run_id])
    path.write_text(path.read_text() + "\n" + json.dumps({"prompt": "new"}))
    proc = run_cli("run", "--resume", run_id, "--url", url, "--db", str(db))
    assert proc.returncode == 2 and f"prompts file {path} has changed since run" in proc.stderr
    assert Store(db).run(run_id).status == "aborted"
    path.write_text(path.read_text().rsplit("\n", 1)[0])  # the file as the run began
    resumed = _run(url, db, "--resume", run_id)
    assert resumed["levels"][1]["mean_prompt_tokens"] == before


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "prompts.jsonl does not exist"),
        ("", "prompts.jsonl is empty"),
        ('{"prompt": "a"}\n{"prompt": "b"}\n{"prompt": \n', "prompts.jsonl line 3 is not JSON"),
        ('{"prompt": "a"}\n{"text": "b"}\n', "prompts.jsonl line 2 has no prompt"),
        ('{"prompt": "a"}\n{"prompt": "\\ud800"}\n', "prompts.jsonl line 2 holds half a surrogate"),
        ('{"prompt": "a"}\n' + "[" * 100_000 + "]" * 100_000 + "\n",
         "prompts.jsonl line 2 is JSON nested too deeply"),
    ],
)
def test_a_bad_prompts_file_is_one_sentence_and_nothing_is_stored(tmp_path, content, message):
    path = tmp_path / "prompts.jsonl"
    if content is not None:
        path.write_text(content)
    db = tmp_path / "b.duckdb"
    proc = run_cli("run", "--url", DEAD_URL, "--prompts", str(path), "--db", str(db))
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert Store(db).runs() == []


def _config(tmp_path, *flags):
    args = build_parser().parse_args(["run", *flags])
    config, _ = config_for(args, Store(tmp_path / "b.duckdb"))
    return config


def _pairs(server_args):
    return dict(zip(server_args[::2], server_args[1::2], strict=True))


def test_bundled_runs_forward_the_server_flags_and_default_to_replay_and_text(tmp_path):
    config = _config(tmp_path, "--device", "spark", "--cache-ratio", "0.168",
                     "--page-cache-gb", "0.5", "--cache-state", "warm", "--table-gb", "2")
    flags = _pairs(config.server_args)
    assert flags["--cache-ratio"] == "0.168" and float(flags["--page-cache-gb"]) == 0.5
    assert flags["--cache-state"] == "warm" and flags["--decode"] == "replay"
    assert float(flags["--table-size-gb"]) == 2 and flags["--device"] == "spark"
    assert config.prompts == "text"


def test_unset_server_flags_are_left_to_the_server(tmp_path):
    config = _config(tmp_path, "--device", "cpu", "--decode", "sample")
    flags = _pairs(config.server_args)
    assert flags["--decode"] == "sample"
    assert not {"--cache-ratio", "--page-cache-gb", "--cache-state"} & flags.keys()


def test_url_runs_start_no_server_and_default_to_words(tmp_path):
    config = _config(tmp_path, "--url", DEAD_URL, "--device", "spark", "--cache-ratio", "0.5")
    assert config.server_args == () and config.prompts == "words"


def test_a_prompts_file_is_stored_by_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = _config(tmp_path, "--url", DEAD_URL, "--prompts", "mine.jsonl")
    assert config.prompts == str(tmp_path / "mine.jsonl")
