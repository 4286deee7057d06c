"""Launch commands for external engines (vLLM, SGLang) in the published configurations.

Rendered from data/recipes.toml. Every engine setting a command prints must be declared in
data/engine_settings.toml with the source and version it was read from (engine_settings.py);
the command says, for each, where it comes from, and marks the settings only patched images
read. Engines distribute the model (tensor parallel across GPUs or nodes); the harness then
drives the endpoint: `make bench URL=... MODEL=...`; `engram-bench agent` on the serving host
reads what the table costs it.
"""

from __future__ import annotations

import shlex
import tomllib
from pathlib import Path

from runners import engine_settings
from runners.engine_settings import Printed

RECIPES_FILE = Path(__file__).parent / "data" / "recipes.toml"
VERSION_NOTE = ("# engine settings change between releases: each one below names the source and "
                "version it was read from; check `--help` of your build")
# The text of the serving process's command line, for `engram-bench agent --match`.
AGENT_MATCH = {"vllm": "vllm serve", "sglang": "sglang.launch_server"}
WORKER_PID = "WORKER_PID"  # a placeholder: the user finds each node's worker


def load(path: Path = RECIPES_FILE) -> list[dict]:
    with open(path, "rb") as f:
        return tomllib.load(f)["recipe"]


class RecipeError(ValueError):
    pass


def _label(recipe: dict) -> str:
    return (f"--engine {recipe['engine']} --model {recipe['model']} --device {recipe['device']}"
            f" --nodes {recipe['nodes']} --placement {recipe['table_placement']}")


def find(engine: str, model: str, device: str, nodes: int | None = None,
         placement: str | None = None) -> list[dict]:
    """The published recipes that match; several when --nodes or --placement is left open."""
    recipes = load()
    matches = [r for r in recipes if (r["engine"], r["model"], r["device"]) == (engine, model,
                                                                               device)
               and (nodes is None or r["nodes"] == nodes)
               and (placement is None or r["table_placement"] == placement)]
    if not matches:
        wanted = " / ".join(str(x) for x in (engine, model, device, nodes and f"{nodes} nodes",
                                               placement) if x)
        raise RecipeError(f"no published recipe for {wanted}; published: "
                          f"{'; '.join(_label(r) for r in recipes)}")
    return matches


def command(recipe: dict, port: int = 8000) -> tuple[list[tuple[str, str]], list[str]]:
    """The launch command: its environment and its words."""
    model_path = f"/models/{recipe['model']}"
    launch = list(engine_settings.LAUNCH[recipe["engine"]])
    if recipe["engine"] == "vllm":
        args = [*launch, model_path, "--served-model-name", recipe["model"],
                "--tensor-parallel-size", str(recipe["tp"]), "--max-num-seqs",
                str(recipe["max_running"]), "--port", str(port)]
        if recipe["nodes"] > 1:
            args += ["--distributed-executor-backend", "ray"]
    else:
        args = [*launch, "--model-path", model_path,
                "--served-model-name", recipe["model"], "--tp", str(recipe["tp"]),
                "--max-running-requests", str(recipe["max_running"]), "--port", str(port)]
    args += [word for flag in recipe.get("flags", []) for word in flag]
    return [tuple(pair) for pair in recipe.get("env", [])], args


def command_line(env: list[tuple[str, str]], args: list[str]) -> str:
    return shlex.join([f"{name}={value}" for name, value in env] + args)


def settings(recipe: dict, port: int = 8000) -> list[Printed]:
    """The engine settings the recipe's command sets; RecipeError names any the declared list
    does not hold, or a value it does not take."""
    return _checked(command_line(*command(recipe, port)), recipe)


def _checked(line: str, recipe: dict) -> list[Printed]:
    printed = engine_settings.parse_command(recipe["engine"], line)
    if wrong := engine_settings.problems(printed):
        raise RecipeError(f"the {_label(recipe)} recipe sets what no engine declares: "
                          f"{'; '.join(wrong)}")
    return printed


def agent_lines(recipe: dict) -> list[str]:
    """`engram-bench agent` for the serving host: the engine's process tree and the file the
    engine reads the table from, where there is one."""
    table = ["--table", recipe["table_path"]] if "table_path" in recipe else []
    memory = "pinned host" if recipe["table_placement"] == "host" else "GPU"
    where = (f"# --table {recipe['table_path']}: {recipe['table_note']}" if table
             else f"# no --table: the table is in {memory} memory, no file; the agent reads the "
                  "process tree's pinned and resident memory")
    if recipe["nodes"] == 1:
        run = ["# on the serving host (it serves http://127.0.0.1:9477/metrics; --host ADDRESS "
               "lets another host scrape it):",
               shlex.join(["engram-bench", "agent", "--match", AGENT_MATCH[recipe["engine"]],
                           *table])]
    else:
        run = [f"# on each of the {recipe['nodes']} nodes: Ray starts the worker that reads the "
               "table, no child of `vllm serve`: give the agent its PID, the process that holds "
               "the node's GPU (`nvidia-smi --query-compute-apps=pid --format=csv,noheader`); "
               "it serves 127.0.0.1:9477/metrics, --host ADDRESS lets another host scrape it:",
               shlex.join(["engram-bench", "agent", "--pid", WORKER_PID, *table])]
    return [where, *run]


def render(recipe: dict, port: int = 8000, agent: bool = False) -> str:
    """The launch command, each setting's source, how to point the harness at the endpoint
    and, with `agent`, the host agent's command."""
    line = command_line(*command(recipe, port))
    printed = _checked(line, recipe)
    lines = [VERSION_NOTE,
             f"# {recipe['model']} on {recipe['nodes']} x {recipe['device']}: TP {recipe['tp']}, "
             f"speculative decoding {recipe['speculative']}, table {recipe['table_placement']}",
             "# settings (runners/data/engine_settings.toml):"]
    lines += [f"#   {p.shown()}  [{engine_settings.source_line(p)}]" for p in printed]
    if recipe["nodes"] > 1:
        lines.append(f"# multi-node: start a Ray cluster over the {recipe['nodes']} nodes "
                     "first (`ray start --head` on one, `ray start --address=HEAD:6379` on the "
                     "others), then run on the head node:")
    lines.append(line)
    lines.append(f"# then: make bench URL=http://HEAD:{port}/v1 MODEL={recipe['model']} "
                 f"DEVICE={recipe['device']} PLACEMENT={recipe['table_placement']}")
    if agent:
        lines += agent_lines(recipe)
    return "\n".join(lines)
