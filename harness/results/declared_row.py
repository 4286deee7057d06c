"""The summary level row's keys of the declared per-request figures: written by
`python -m harness.results.request_figures` from its REQUEST_FIGURES; do not edit."""

from __future__ import annotations

from typing import TypedDict


class DeclaredRow(TypedDict, total=False):
    """The declared figures' level statistics (harness.results.request_figures)."""
