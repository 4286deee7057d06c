"""Trace replay: reading a trace file, and prompts whose shared blocks are shared exactly."""
