"""vLLM, the CPU build, as a bundled target (`run --bundled vllm`): its venv (setup.py), its
tiny model (model.py) and its server (server.py)."""
