"""`python -m runners.engram` (also `engram-bench serve`): start the bundled Engram server."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from common.help_format import DefaultsHelp
from common.reasoning import REASONING_FIELDS
from runners.profiles import PROFILES, UnknownDevice, profile


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="engram-bench serve", description=__doc__,
                                formatter_class=DefaultsHelp)
    p.add_argument("--device", default="cpu", help=f"device profile: {', '.join(PROFILES)}")
    p.add_argument("--placement", choices=("device", "host", "nvme"),
                   help="where the table lives (default: the profile's)")
    p.add_argument("--io", choices=("mmap", "direct"),
                   help="nvme I/O mode (default: the profile's)")
    p.add_argument("--table-size-gb", "--table-gb", type=float, default=2.0,
                   help="table size in GiB (--table-gb: the name `run` used)")
    p.add_argument("--table-path", type=Path,
                   help="table file (default: one per preset and size under results/tables)")
    p.add_argument("--memory-budget-gb", type=float,
                   help="memory the fit check allows the table (default: free RAM)")
    p.add_argument("--cache-ratio", type=float,
                   help="nvme: share of the table its cache may hold (default: the device's "
                        "published ratio, e.g. spark 8 GiB / 47.7 GiB = 0.168; 1 elsewhere)")
    p.add_argument("--page-cache-gb", type=float,
                   help="nvme: the cache budget in GiB instead of a ratio (default: none)")
    p.add_argument("--cache-state", choices=("cold", "warm"),
                   help="nvme: start with the table dropped from the page cache (cold, the "
                        "default) or with what the kernel holds, trimmed to the budget (warm)")
    p.add_argument("--page-reads", choices=("parallel", "faults"), default="parallel",
                   help="nvme mmap: read a gather's missing pages all at once (MADV_WILLNEED, "
                        "the default) or let each fault read its page, one at a time")
    p.add_argument("--decode", choices=("sample", "replay"), default="sample",
                   help="replay: every step's logits are computed, the emitted token is the "
                        "next of a natural English text chosen by the prompt (default: sample)")
    p.add_argument("--no-prefetch", action="store_true",
                   help="gather a step's Engram rows at the layer, not before layer 0")
    p.add_argument("--preset", default="qwen-mini", help="model preset")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=8000, help="port to listen on")
    p.add_argument("--api-key", help="bearer token clients must send (default: none)")
    p.add_argument("--max-running", type=int, help="default: the profile's")
    p.add_argument("--kv-pool-gb", type=float,
                   help="KV pool size in GiB (default: the device's published pool scaled like "
                        "the table, e.g. spark; else 1,024 tokens per running request, at least "
                        "one full context)")
    p.add_argument("--no-prefix-caching", action="store_true",
                   help="do not reuse the KV of prompt prefixes (16-token blocks) across requests")
    p.add_argument("--request-log", type=Path, metavar="FILE",
                   help="append one JSON line per finished request: received, admitted, first "
                        "and last token written, finished (time.monotonic() seconds, the clock "
                        "of perf_counter), token counts, status, the sampling fields received, "
                        "the client's X-Request-Id (default: no log)")
    reasoning = p.add_mutually_exclusive_group()
    reasoning.add_argument(
        "--reasoning-tokens", type=int, default=0, metavar="N",
        help="stream a chat's first N generated tokens as reasoning, counted in "
             "usage.completion_tokens_details.reasoning_tokens and in /metrics' "
             "engram_reasoning_tokens_total, as a reasoning model thinks before its answer; a "
             "max_tokens of N or less never answers")
    reasoning.add_argument(
        "--reasoning-share", type=float, default=0.0, metavar="F",
        help="or stream this share of each chat's max_tokens (rounded down) as reasoning, in "
             "[0, 1]")
    p.add_argument("--reasoning-field", choices=REASONING_FIELDS, default=REASONING_FIELDS[0],
                   help="the delta field reasoning streams in: reasoning_content (vLLM, "
                        "SGLang) or reasoning (newer vLLM)")
    p.add_argument("--threads", type=int,
                   help="CPU compute threads (default: all cores but one, which is left to the "
                        "HTTP loop, the table gathers and a load generator on the same host)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        prof = profile(args.device)
    except UnknownDevice as exc:
        print(f"engram-bench serve: error: {exc}", file=sys.stderr)
        return 2
    import torch
    import uvicorn

    from runners.engram.api import create_app
    from runners.engram.http_server import server_config
    from runners.engram.runtime import Runtime, ServerConfigError, ServerOptions

    torch.set_num_threads(args.threads or max(1, (os.cpu_count() or 2) - 1))
    try:
        options = ServerOptions(
            preset=args.preset, placement=args.placement or prof.table_placement,
            io_mode=args.io or prof.io_mode, table_gib=args.table_size_gb,
            table_path=args.table_path, memory_budget_gib=args.memory_budget_gb,
            cache_ratio=prof.cache_ratio if args.cache_ratio is None else args.cache_ratio,
            page_cache_gib=args.page_cache_gb, cache_state=args.cache_state,
            decode=args.decode, page_reads=args.page_reads,
            max_running=args.max_running or prof.max_running_requests,
            prefetch=not args.no_prefetch, request_log=args.request_log,
            device_profile=prof.name, kv_pool_gib=args.kv_pool_gb,
            prefix_caching=not args.no_prefix_caching,
            reasoning_tokens=args.reasoning_tokens, reasoning_share=args.reasoning_share,
            reasoning_field=args.reasoning_field,
        )
        runtime = Runtime(options)
    except (ServerConfigError, OSError) as exc:
        print(f"engram-bench serve: error: {exc}", file=sys.stderr)
        return 2
    runtime.start()
    print(f"serving {runtime.cfg.name} on http://{args.host}:{args.port}/v1 ({prof.name}, "
          f"compute {runtime.device}): {runtime.describe_table()}; {runtime.describe_kv()}",
          flush=True)
    try:
        uvicorn.Server(server_config(create_app(runtime, args.api_key), args.host,
                                     args.port)).run()
    finally:
        runtime.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
