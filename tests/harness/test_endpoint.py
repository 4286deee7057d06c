"""Endpoint: IPv6 literals, CA bundle validation, and the proxy refusal (no network here)."""

import pytest

from harness.run import aio
from harness.wire import target
from harness.wire.client import ConnectionPool, build_request
from harness.wire.endpoint import Endpoint, EndpointError, check_proxies


def test_ipv6_literal_is_bracketed_in_host_header_and_server_root():
    ep = Endpoint("http://[::1]:8000/v1")
    assert (ep.host, ep.port, ep.authority) == ("::1", 8000, "[::1]:8000")
    assert ep.server_root == "http://[::1]:8000"
    assert b"\r\nHost: [::1]:8000\r\n" in build_request(ep, {}, "r1")


def test_server_root_drops_only_the_openai_suffix():
    assert Endpoint("https://h.example/api/v1/").server_root == "https://h.example:443/api"
    assert Endpoint("http://h.example:81/serve").root_path == "/serve"


def test_missing_ca_bundle_is_one_sentence(tmp_path):
    with pytest.raises(EndpointError, match=r"^CA bundle .*nope\.pem does not exist$"):
        Endpoint("https://h.example/v1", ca_bundle=tmp_path / "nope.pem")


def test_ca_bundle_without_a_certificate_is_refused(tmp_path):
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(EndpointError, match="holds no PEM certificate"):
        Endpoint("https://h.example/v1", ca_bundle=junk)


PROXY = "http://proxy.corp:3128"


@pytest.mark.parametrize(
    ("url", "env", "refused_by"),
    [
        ("https://api.example.com/v1", {"HTTPS_PROXY": PROXY}, "HTTPS_PROXY"),
        ("https://api.example.com/v1", {"https_proxy": PROXY}, "https_proxy"),
        ("http://api.example.com/v1", {"ALL_PROXY": PROXY}, "ALL_PROXY"),
        ("http://api.example.com/v1", {"all_proxy": PROXY, "NO_PROXY": "other.com"}, "all_proxy"),
        ("https://api.example.com:8443/v1",
         {"HTTPS_PROXY": PROXY, "NO_PROXY": "api.example.com:443"}, "HTTPS_PROXY"),
        ("http://10.1.2.3:8000/v1", {"HTTP_PROXY": PROXY, "NO_PROXY": "10.2.0.0/16"},
         "HTTP_PROXY"),
        # not proxied: another scheme's variable, empty values, NO_PROXY, loopback
        ("https://api.example.com/v1", {"HTTP_PROXY": PROXY}, None),
        ("http://api.example.com/v1", {"HTTP_PROXY": ""}, None),
        ("https://api.example.com/v1", {"HTTPS_PROXY": PROXY, "NO_PROXY": "example.com"}, None),
        ("https://api.example.com/v1", {"HTTPS_PROXY": PROXY, "no_proxy": ".example.com"}, None),
        ("https://api.example.com/v1", {"HTTPS_PROXY": PROXY, "NO_PROXY": "*.example.com"}, None),
        ("https://api.example.com/v1", {"HTTPS_PROXY": PROXY, "NO_PROXY": "a.org, *"}, None),
        ("https://api.example.com:8443/v1",
         {"HTTPS_PROXY": PROXY, "NO_PROXY": "api.example.com:8443"}, None),
        ("http://10.1.2.3:8000/v1", {"HTTP_PROXY": PROXY, "NO_PROXY": "10.0.0.0/8"}, None),
        ("http://[fd00::5]:8000/v1", {"HTTP_PROXY": PROXY, "NO_PROXY": "[fd00::5]"}, None),
        ("http://127.0.0.1:8000/v1", {"HTTP_PROXY": PROXY, "ALL_PROXY": PROXY}, None),
        ("http://localhost:8000/v1", {"HTTP_PROXY": PROXY}, None),
        ("http://[::1]:8000/v1", {"ALL_PROXY": PROXY}, None),
        ("http://[::ffff:127.0.0.1]:8000/v1", {"HTTP_PROXY": PROXY}, None),  # IPv4-mapped
        ("http://[::ffff:10.1.2.3]:8000/v1", {"HTTP_PROXY": PROXY}, "HTTP_PROXY"),
    ],
)
def test_proxy_variables_that_apply_are_refused(url, env, refused_by):
    if refused_by is None:
        check_proxies(Endpoint(url), env)
        return
    with pytest.raises(EndpointError) as info:
        check_proxies(Endpoint(url), env)
    host = Endpoint(url).host
    assert str(info.value) == (
        f"{refused_by} is set; engram-bench connects directly and does not use proxies: "
        f"unset it or add {host} to NO_PROXY"
    )


def test_preflight_refuses_a_proxied_target_before_connecting(monkeypatch):
    async def must_not_connect(self):
        raise AssertionError("connected despite the proxy refusal")

    monkeypatch.setattr(ConnectionPool, "_open", must_not_connect)
    monkeypatch.setenv("HTTPS_PROXY", PROXY)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    with pytest.raises(EndpointError, match="HTTPS_PROXY is set"):
        aio.run(target.describe(Endpoint("https://api.example.com/v1"), None))
    with pytest.raises(EndpointError, match="HTTPS_PROXY is set"):
        ConnectionPool(Endpoint("https://api.example.com/v1"))
