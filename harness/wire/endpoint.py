"""Where requests go: an OpenAI-compatible base URL split into what a socket needs.

Proxies are refused, not supported: the harness times every byte on its own connection, and a
proxy in the path would add its own queueing to TTFT. `check_proxies` turns a proxy variable
that would apply to the target into one sentence for the user; loopback targets are exempt,
since no proxy is ever meant for them.

Credentials in a URL (`http://user:password@host/v1`) are refused, never sent: the harness
authenticates with a bearer key (`--api-key`), and a refused URL is repeated without them, so a
password typed there reaches no results file and no output.
"""

from __future__ import annotations

import ipaddress
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

API_PATHS = {"chat": "/chat/completions", "completions": "/completions"}

# the user-info part of a URL: what lies between the scheme's // (if any) and the last @ before
# the path, query or fragment
_USERINFO = re.compile(r"^((?:[A-Za-z][A-Za-z0-9+.-]*:)?//)?[^/?#]*@")


class EndpointError(ValueError):
    """A URL the harness cannot talk to; the message is one sentence for the user."""


@dataclass(slots=True, frozen=True)
class Endpoint:
    """`base_url` is the OpenAI base, e.g. http://127.0.0.1:8000/v1.

    `ca_bundle`: a PEM file of CAs to trust for https (else the system's); `insecure`: skip
    certificate and host name checks.
    """

    base_url: str
    api: str = "chat"
    api_key: str | None = None
    ca_bundle: Path | None = None
    insecure: bool = False
    host: str = field(init=False)
    port: int = field(init=False)
    tls: bool = field(init=False)
    prefix: str = field(init=False)

    def __post_init__(self) -> None:
        if _USERINFO.match(self.base_url):
            bare = _USERINFO.sub(r"\1", self.base_url, count=1)
            raise EndpointError(
                f"URL {bare!r} was given with credentials before its host (user:password@), "
                "which engram-bench does not send: give the server's key with --api-key (or "
                "OPENAI_API_KEY) and the URL without them"
            )
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise EndpointError(
                f"URL {self.base_url!r} is not an http(s) URL such as http://127.0.0.1:8000/v1"
            )
        if self.api not in API_PATHS:
            raise EndpointError(f"API {self.api!r} is not one of {', '.join(API_PATHS)}")
        object.__setattr__(self, "host", parts.hostname)
        object.__setattr__(self, "tls", parts.scheme == "https")
        try:
            port = parts.port or (443 if self.tls else 80)
        except ValueError:
            raise EndpointError(f"URL {self.base_url!r} has an invalid port") from None
        object.__setattr__(self, "port", port)
        object.__setattr__(self, "prefix", parts.path.rstrip("/"))
        if self.ca_bundle is not None:
            if not Path(self.ca_bundle).is_file():
                raise EndpointError(f"CA bundle {self.ca_bundle} does not exist")
            try:
                ssl.create_default_context(cafile=str(self.ca_bundle))
            except (ssl.SSLError, ValueError):
                raise EndpointError(
                    f"CA bundle {self.ca_bundle} holds no PEM certificate"
                ) from None

    @property
    def authority(self) -> str:
        """host:port as the Host header and URLs write it (IPv6 literals in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def completion_path(self) -> str:
        return self.prefix + API_PATHS[self.api]

    @property
    def root_path(self) -> str:
        """The path prefix without the OpenAI `/v1`, where engines serve /stats, /metrics."""
        return self.prefix.removesuffix("/v1")

    @property
    def server_root(self) -> str:
        """The URL without the OpenAI prefix, where engines serve /stats, /metrics, /health."""
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{self.authority}{self.root_path}"

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        ctx = ssl.create_default_context(
            cafile=str(self.ca_bundle) if self.ca_bundle is not None else None
        )
        if self.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        ctx.set_alpn_protocols(["http/1.1"])
        return ctx

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


def check_proxies(endpoint: Endpoint, environ: Mapping[str, str]) -> None:
    """EndpointError when a proxy variable in `environ` would apply to `endpoint`.

    The variables are those curl and httpx read for the URL's scheme, in either case:
    HTTP_PROXY or HTTPS_PROXY, then ALL_PROXY; NO_PROXY exempts hosts as they do.
    """
    if is_loopback(endpoint.host):
        return
    scheme = "https" if endpoint.tls else "http"
    names = (f"{scheme}_proxy", "all_proxy")
    found = next((v for n in names for v in (n.upper(), n) if environ.get(v)), None)
    if found is None:
        return
    no_proxy = environ.get("no_proxy") or environ.get("NO_PROXY") or ""
    if _no_proxy_covers(no_proxy, endpoint.host, endpoint.port):
        return
    raise EndpointError(
        f"{found} is set; engram-bench connects directly and does not use proxies: "
        f"unset it or add {endpoint.host} to NO_PROXY"
    )


def is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback  # ::ffff:127.0.0.1 (before Python 3.13: False)
    return address.is_loopback


def _no_proxy_covers(no_proxy: str, host: str, port: int) -> bool:
    """NO_PROXY entries: `*`, domains (suffix match, leading `.` or `*.` optional), IP
    addresses or CIDR blocks, each optionally with `:port`."""
    host = host.lower()
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for raw in no_proxy.split(","):
        entry = raw.strip().lower()
        if entry == "*":
            return True
        entry, entry_port = _split_port(entry)
        if not entry or (entry_port is not None and entry_port != port):
            continue
        if address is not None:
            try:
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                pass
            continue
        domain = entry.removeprefix("*").removeprefix(".")
        if host == domain or host.endswith("." + domain):
            return True
    return False


def _split_port(entry: str) -> tuple[str, int | None]:
    """`host:port`, `[v6]:port`, `[v6]`, or a bare IPv6 address (no port)."""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        return host, int(rest[1:]) if rest[1:].isdigit() else None
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        return host, int(port) if port.isdigit() else None
    return entry, None
