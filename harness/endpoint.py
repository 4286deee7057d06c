"""Where requests go: an OpenAI-compatible base URL split into what a socket needs."""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from urllib.parse import urlsplit

API_PATHS = {"chat": "/chat/completions", "completions": "/completions"}


class EndpointError(ValueError):
    """A URL the harness cannot talk to; the message is one sentence for the user."""


@dataclass(slots=True, frozen=True)
class Endpoint:
    """`base_url` is the OpenAI base, e.g. http://127.0.0.1:8000/v1."""

    base_url: str
    api: str = "chat"
    api_key: str | None = None
    host: str = field(init=False)
    port: int = field(init=False)
    tls: bool = field(init=False)
    prefix: str = field(init=False)

    def __post_init__(self) -> None:
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

    @property
    def completion_path(self) -> str:
        return self.prefix + API_PATHS[self.api]

    @property
    def server_root(self) -> str:
        """The URL without the OpenAI prefix, where engines serve /stats, /metrics, /health."""
        scheme = "https" if self.tls else "http"
        root = f"{scheme}://{self.host}:{self.port}"
        prefix = self.prefix
        if prefix.endswith("/v1"):
            prefix = prefix[: -len("/v1")]
        return root + prefix

    def ssl_context(self) -> ssl.SSLContext | None:
        return ssl.create_default_context() if self.tls else None

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
