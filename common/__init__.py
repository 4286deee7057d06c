"""Leaves every floor may import: help formatting and the built-in prose."""
