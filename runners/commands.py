"""The `devices`, `sizing`, `recipe` and `agent` subcommands of `engram-bench` (stdlib, rich
and, for the agent, prometheus_client)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import asdict

from rich.console import Console
from rich.table import Table

from common.flag_types import positive_int
from runners import recipes, sizing
from runners.host_agent import cli as agent_cli
from runners.profiles import PROFILES


class CommandError(ValueError):
    """Bad input to one of these commands; one sentence for the user."""


def add_parsers(sub: argparse._SubParsersAction) -> None:
    recipe = sub.add_parser("recipe", help="launch command of a published vLLM/SGLang setup")
    recipe.add_argument("--engine", required=True, choices=("vllm", "sglang"))
    recipe.add_argument("--model", required=True)
    recipe.add_argument("--device", required=True)
    recipe.add_argument("--nodes", type=positive_int)
    recipe.add_argument("--placement", choices=("device", "host", "nvme"),
                        help="where the table is (default: every published placement)")
    recipe.add_argument("--port", type=positive_int, default=8000)
    recipe.add_argument("--agent", action="store_true",
                        help="add the `engram-bench agent` command for the serving host")

    devices = sub.add_parser("devices", help="list the device profiles")
    devices.add_argument("--json", action="store_true")

    sizing_p = sub.add_parser("sizing", help="what must fit where, and whether it fits")
    sizing_p.add_argument("--model", required=True, help=f"one of {', '.join(sizing.MODELS)}")
    sizing_p.add_argument("--device", required=True, help=f"one of {', '.join(sizing.DEVICES)}")
    sizing_p.add_argument("--nodes", type=positive_int, default=1)
    sizing_p.add_argument("--placement", choices=("device", "host", "nvme"),
                        help="judge this placement only (default: in memory, else offloaded)")
    sizing_p.add_argument("--context", type=positive_int, help="tokens of context per request")
    sizing_p.add_argument("--concurrency", type=positive_int, help="requests at once")
    sizing_p.add_argument("--set", action="append", default=[], metavar="FIGURE=VALUE",
                        help="override any figure, e.g. --set kv_pool_gb=18 --set table_gb=60")
    sizing_p.add_argument("--json", action="store_true")

    agent = sub.add_parser("agent", help=agent_cli.HELP, description=agent_cli.DESCRIPTION)
    agent_cli.add_arguments(agent)

def cmd_agent(args: argparse.Namespace, console: Console) -> int:
    try:
        return agent_cli.serve(args)
    except agent_cli.ERRORS as exc:
        raise CommandError(str(exc)) from None


def cmd_recipe(args: argparse.Namespace, console: Console) -> int:
    try:
        found = recipes.find(args.engine, args.model, args.device, args.nodes, args.placement)
        print("\n\n".join(recipes.render(recipe, args.port, args.agent) for recipe in found))
    except recipes.RecipeError as exc:
        raise CommandError(str(exc)) from None
    return 0


def cmd_devices(args: argparse.Namespace, console: Console) -> int:
    if args.json:
        print(json.dumps({name: {**asdict(p), "cache_ratio": p.cache_ratio}
                          for name, p in PROFILES.items()}))
        return 0
    table = Table(title="device profiles (runners/data/devices.toml)", title_justify="left")
    for column in ("profile", "memory", "bandwidth", "offload link", "table", "running",
                   "default levels"):
        table.add_column(column)
    for p in PROFILES.values():
        memory = f"{p.memory_gb:g} GB {'unified' if p.unified else 'GPU'}"
        table_at = p.table_placement
        if p.page_cache_budget_gib and p.published_table_gib:
            table_at += (f" ({p.io_mode}, page cache {p.page_cache_budget_gib:g} GiB of "
                         f"{p.published_table_gib:g} GiB: ratio {p.cache_ratio:.3f})")
        table.add_row(f"{p.name}\n{p.description}", memory, f"{p.bandwidth_gbs:g} GB/s",
                      p.link, table_at, str(p.max_running_requests),
                      ",".join(map(str, p.default_levels)))
    console.print(table)
    return 0


def _overrides(pairs: list[str]) -> dict[str, float]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise CommandError(f"--set takes FIGURE=NUMBER, not {pair!r}")
    return out


def cmd_sizing(args: argparse.Namespace, console: Console) -> int:
    try:
        report = sizing.size(args.model, args.device, args.nodes, args.placement,
                                 args.context, args.concurrency, _overrides(args.set))
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    if args.json:
        print(json.dumps(report))
        return 0
    console.print(f"{report['model']} on {report['nodes']} x {report['device']} "
                  f"({report['memory_gb_per_node']:g} GB per node"
                  f"{', unified with the CPU' if report['unified_memory'] else ''}): "
                  f"[bold]{report['verdict']}[/] with the table on {report['placement']}",
                  highlight=False)
    for name, gb in report["required_items_gb"].items():
        console.print(f"  {name:<24} {gb:>8.2f} GB", highlight=False)
    console.print(f"  {'required per node':<24} {report['required_gb']:>8.2f} GB "
                  f"(in memory: {report['in_memory_required_gb']:.2f}, offloaded: "
                  f"{report['offloaded_required_gb']:.2f})", highlight=False)
    if report["offload_gb"]:
        console.print(f"  offload tier per node    {report['offload_gb']:>8.2f} GB over "
                      f"{report['offload_link']}: {report['offload_bytes_per_token']} B/token "
                      f"read ({report['offload_tier_bytes_per_token']} B moved), "
                      f"{report['offload_us_per_token']} us/token", highlight=False)
    console.print(f"  decode ceiling (upper bound, bandwidth / active bytes): "
                  f"{report['decode_ceiling_tps_upper_bound']} tok/s", highlight=False)
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace, Console], int]] = {
    "devices": cmd_devices, "sizing": cmd_sizing, "recipe": cmd_recipe, "agent": cmd_agent}
