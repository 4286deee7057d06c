"""The error every command may raise for what the user can fix (stdlib only)."""

from __future__ import annotations


class UserError(Exception):
    """Anything the user can fix; printed as one sentence, exit 2."""
