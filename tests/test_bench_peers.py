"""`make bench-peers` parts each tool's TTFT bias into the server's and the tool's by pairing
its runs on the two fake-server arms, pass by pass."""

from benchmarks.peers import COUNTING, STREAMING, split


def graded(server: str, tool: str, level: int, n: int, bias: float, send: float | None,
           error: str | None = None) -> dict:
    return {"server": server, "tool": tool, "level": level, "pass": n, "error": error,
            "ttft_bias_mean": bias, "send_lag_mean": send}


def test_the_streaming_servers_bias_is_the_tools_and_the_rest_the_servers():
    rows = split([graded(COUNTING, "AIPerf", 8, 1, 30.0, 28.0),
                  graded(STREAMING, "AIPerf", 8, 1, 10.0, 9.0),
                  graded(STREAMING, "AIPerf", 32, 1, 12.0, 11.0)])  # no counting run: no row
    assert rows == [{"tool": "AIPerf", "level": 8, "passes": 1, "counting": 30.0,
                     "tool_part": 10.0, "server_part": 20.0, "server_range": (20.0, 20.0),
                     "server_send_part": 19.0}]


def test_passes_pair_within_themselves_and_give_medians():
    """A pass's counting run is set against the same pass's streaming run, not another's."""
    runs = [(1, 30.0, 10.0), (2, 90.0, 80.0), (3, 14.0, 10.0)]
    grades = [g for n, counting, streaming in runs
              for g in (graded(COUNTING, "vllm bench serve", 32, n, counting, None),
                        graded(STREAMING, "vllm bench serve", 32, n, streaming, None))]
    [row] = split(grades)
    assert row["server_part"] == 10.0  # the differences 20, 10, 4; pooled medians give 20
    assert row["server_range"] == (4.0, 20.0)
    assert row["server_send_part"] is None


def test_a_failed_run_parts_nothing():
    assert split([graded(COUNTING, "GuideLLM", 8, 1, 30.0, 28.0),
                  graded(STREAMING, "GuideLLM", 8, 1, 10.0, None, error="exit 1")]) == []
