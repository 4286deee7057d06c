"""The tiny model vLLM serves here: a LlamaForCausalLM with seeded random weights and this
project's tokenizer, written once under results/models/ (no model hub is reachable).

The project side (`ensure_model`) is stdlib only; the writing itself runs this module
(`python -m runners.vllm.model DIR SPEC`) under the vLLM venv's python, which has torch and
transformers. A directory is
reused only when its `engram-bench.json` (written last) says it is complete and matches.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from runners.lifecycle import ServerStartError

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER = ROOT / "runners" / "engram" / "data" / "tokenizer.json"
MODELS_DIR = Path("results/models")
MARKER = "engram-bench.json"
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


@dataclass(slots=True, frozen=True)
class TinyLlama:
    """Sized so one request decodes near the bundled Engram server's speed on this CPU: 403 M
    parameters (771 MiB of bf16) decode ~37 tok/s at C=1 here; hidden 1024 (202 M) ran ~70,
    and the issue's hidden 256, 2 layers ~250."""

    hidden: int = 1536
    layers: int = 12
    intermediate: int = 4096
    heads: int = 12
    kv_heads: int = 4
    vocab: int = 32768  # the tokenizer's
    max_positions: int = 1024
    seed: int = 0

    @property
    def name(self) -> str:
        return f"tiny-llama-h{self.hidden}-l{self.layers}"

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of every layer in bf16: 24 KiB a token at the default size."""
        return self.layers * 2 * self.kv_heads * (self.hidden // self.heads) * 2

    @property
    def parameters(self) -> int:
        head = self.hidden // self.heads
        attn = self.hidden * head * (2 * self.heads + 2 * self.kv_heads)
        mlp = 3 * self.hidden * self.intermediate
        per_layer = attn + mlp + 2 * self.hidden
        return 2 * self.vocab * self.hidden + self.layers * per_layer + self.hidden


class ModelWriteError(ServerStartError):
    """The model could not be written; the message says why."""


def complete(path: Path, spec: TinyLlama) -> bool:
    try:
        return json.loads((path / MARKER).read_text()) == asdict(spec)
    except (OSError, ValueError):
        return False


def ensure_model(python: Path, spec: TinyLlama = TinyLlama(), root: Path = MODELS_DIR,
                 say: Callable[[str], None] = print) -> Path:
    """The model's directory, written first (by `python`, the vLLM venv's) when missing."""
    path = root / spec.name
    if complete(path, spec):
        return path
    t0 = time.monotonic()
    proc = subprocess.run(
        [str(python), "-m", "runners.vllm.model", str(path), json.dumps(asdict(spec))],
        capture_output=True, text=True, stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT), "TRANSFORMERS_OFFLINE": "1"})
    if proc.returncode != 0 or not complete(path, spec):
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ModelWriteError(f"writing the model {path} failed: {last}")
    size = sum(f.stat().st_size for f in path.iterdir()) / 2**20
    say(f"wrote the model {path} ({spec.parameters / 1e6:.0f} M parameters, {size:.0f} MiB) "
        f"in {time.monotonic() - t0:.1f} s")
    return path


def write(path: Path, spec: TinyLlama) -> None:  # runs under the vLLM venv
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    (path / MARKER).unlink(missing_ok=True)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=str(TOKENIZER), eos_token="<|im_end|>", pad_token="<|endoftext|>",
        bos_token="<|endoftext|>", additional_special_tokens=["<|im_start|>"],
        model_max_length=spec.max_positions)
    tokenizer.chat_template = CHATML
    tokenizer.save_pretrained(path)
    config = LlamaConfig(
        vocab_size=spec.vocab, hidden_size=spec.hidden, intermediate_size=spec.intermediate,
        num_hidden_layers=spec.layers, num_attention_heads=spec.heads,
        num_key_value_heads=spec.kv_heads, max_position_embeddings=spec.max_positions,
        bos_token_id=0, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False,
        torch_dtype="bfloat16")
    torch.manual_seed(spec.seed)
    with torch.device("cpu"):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(path, safe_serialization=True)
    (path / MARKER).write_text(json.dumps(asdict(spec)))


if __name__ == "__main__":
    write(Path(sys.argv[1]), TinyLlama(**json.loads(sys.argv[2])))
