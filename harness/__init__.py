"""engram-bench harness: drives OpenAI-compatible servers through concurrency sweeps."""

__version__ = "0.1.0"
