"""uvicorn as the bundled server runs it: HTTP/1.1 (h11) with a deadline on request headers.

uvicorn's keep-alive timer is cancelled by the first byte that arrives, so a client that
sends half a request head (or none after connecting) holds its connection, and a slot of
the server, for ever. Here every connection must deliver a complete head within
HEADER_TIMEOUT_S of opening, or of its previous response ending; otherwise it is closed.
A response that ends before its request's body (a refused body, a route that reads none)
closes the connection too: uvicorn would otherwise read and discard the rest, however long.
"""

from __future__ import annotations

import asyncio

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT_S = 10.0


class HeaderDeadlineH11(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request head is late."""

    header_timeout_s = HEADER_TIMEOUT_S

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_deadline: asyncio.TimerHandle | None = None
        self._await_head()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # the head is in: its body is the app's
            self._cancel_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
            self.transport.close()
        elif self.conn.their_state is h11.IDLE:  # ready for the next request's head
            self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_deadline()
        super().connection_lost(exc)

    def _await_head(self) -> None:
        self._cancel_deadline()
        self._head_deadline = self.loop.call_later(self.header_timeout_s, self._head_late)

    def _cancel_deadline(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_late(self) -> None:
        self._head_deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


def server_config(app: object, host: str, port: int, log_level: str = "warning",
                  header_timeout_s: float = HEADER_TIMEOUT_S) -> uvicorn.Config:
    """The uvicorn config of the bundled server (and of the tests' servers in a thread)."""
    protocol = type("HeaderDeadline", (HeaderDeadlineH11,), {"header_timeout_s": header_timeout_s})
    return uvicorn.Config(app, host=host, port=port, log_level=log_level,  # type: ignore[arg-type]
                          http=protocol)
