"""`--workers auto`: how many load processes it picks, and where a server takes a CPU."""

from __future__ import annotations

import pytest

from harness.config import RunConfig
from harness.run import workers


def _picked(monkeypatch: pytest.MonkeyPatch, url: str, c: int, cpus: int) -> tuple[int, str]:
    monkeypatch.setattr(workers.os, "cpu_count", lambda: cpus)
    return workers.auto(RunConfig(url=url, model="m", levels=(c,), max_concurrency=c))


def test_a_server_on_this_host_keeps_a_cpu_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    # on 2 cores beside its server a second load process read later or starved the server
    for url in ("http://127.0.0.1:8000/v1", "http://localhost:8000/v1", "http://[::1]:80/v1"):
        count, why = _picked(monkeypatch, url, 2048, cpus=2)
        assert count == 1, why
        assert "one of them the server's on this host" in why
    assert _picked(monkeypatch, "", 2048, cpus=2)[0] == 1  # a server the run starts itself
    # with CPUs to spare, a process per STREAMS_PER_WORKER streams
    streams = 3 * workers.STREAMS_PER_WORKER
    assert _picked(monkeypatch, "http://127.0.0.1:8000/v1", streams, cpus=16)[0] == 3
    assert _picked(monkeypatch, "http://127.0.0.1:8000/v1", streams + 1, cpus=16)[0] == 4


def test_a_remote_server_leaves_every_cpu_to_the_load(monkeypatch: pytest.MonkeyPatch) -> None:
    count, why = _picked(monkeypatch, "http://10.0.0.7:8000/v1", 1024, cpus=2)
    assert count == 2 and "server" not in why
    assert _picked(monkeypatch, "http://10.0.0.7:8000/v1", 512, cpus=2)[0] == 1


def test_a_ray_clusters_cpus_are_counted_whole() -> None:
    config = RunConfig(url="http://127.0.0.1:8000/v1", model="m", levels=(2048,),
                       max_concurrency=2048)
    assert workers.auto(config, cpus=8, where=" of the cluster")[0] == 4
