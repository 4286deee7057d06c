"""Launch commands for external engines (vLLM, SGLang) in the published configurations.

Rendered from data/recipes.toml. Engines distribute the model (tensor parallel across GPUs or
nodes); the harness then drives the endpoint: `make bench URL=... MODEL=...`.
"""

from __future__ import annotations

import shlex
import tomllib
from pathlib import Path

RECIPES_FILE = Path(__file__).parent / "data" / "recipes.toml"
VERSION_NOTE = ("# engine-version dependent: flag names change between engine releases, and the "
                "--engram-* table-offload flags are illustrative (engines do not name them "
                "alike); check `--help` of your version")


def load(path: Path = RECIPES_FILE) -> list[dict]:
    with open(path, "rb") as f:
        return tomllib.load(f)["recipe"]


class RecipeError(ValueError):
    pass


def find(engine: str, model: str, device: str, nodes: int | None = None) -> dict:
    matches = [r for r in load() if (r["engine"], r["model"], r["device"]) == (engine, model,
                                                                              device)
               and (nodes is None or r["nodes"] == nodes)]
    if not matches:
        known = "; ".join(f"--engine {r['engine']} --model {r['model']} --device {r['device']}"
                          f" --nodes {r['nodes']}" for r in load())
        raise RecipeError(f"no published recipe for {engine} / {model} / {device}"
                          f"{f' / {nodes} nodes' if nodes else ''}; published: {known}")
    return matches[0]


def render(recipe: dict, port: int = 8000) -> str:
    """The launch command(s), with how to point the harness at the endpoint."""
    model_path = f"/models/{recipe['model']}"
    if recipe["engine"] == "vllm":
        args = ["vllm", "serve", model_path, "--served-model-name", recipe["model"],
                "--tensor-parallel-size", str(recipe["tp"]), "--max-num-seqs",
                str(recipe["max_running"]), "--port", str(port)]
        if recipe["nodes"] > 1:
            args += ["--distributed-executor-backend", "ray"]
    else:
        args = ["python", "-m", "sglang.launch_server", "--model-path", model_path,
                "--served-model-name", recipe["model"], "--tp", str(recipe["tp"]),
                "--max-running-requests", str(recipe["max_running"]), "--port", str(port)]
    args += recipe["speculative_flags"] + recipe["offload_flags"]
    lines = [VERSION_NOTE,
             f"# {recipe['model']} on {recipe['nodes']} x {recipe['device']}: TP {recipe['tp']}, "
             f"speculative decoding {recipe['speculative']}, table {recipe['table_placement']}"]
    if recipe["nodes"] > 1:
        lines.append(f"# multi-node: start a Ray cluster over the {recipe['nodes']} nodes "
                     "first (`ray start --head` on one, `ray start --address=HEAD:6379` on the "
                     "others), then run on the head node:")
    lines.append(shlex.join(args))
    lines.append(f"# then: make bench URL=http://HEAD:{port}/v1 MODEL={recipe['model']} "
                 f"DEVICE={recipe['device']} PLACEMENT={recipe['table_placement']}")
    return "\n".join(lines)
