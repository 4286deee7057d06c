"""The wire: talking to the server under test and parsing what it sends back (HTTP/1.1, SSE,
OpenAI chunks, Prometheus /metrics), with timing taken where the bytes arrive."""
