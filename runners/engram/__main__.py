"""`python -m runners.engram` (also `engram-bench serve`): start the bundled Engram server."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from runners.profiles import PROFILES, UnknownDevice, profile

DEFAULT_PAGE_CACHE_GIB = 8.0  # nvme resident budget when the profile sets none (DESIGN.md)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="engram-bench serve", description=__doc__)
    p.add_argument("--device", default="cpu", help=f"device profile: {', '.join(PROFILES)}")
    p.add_argument("--placement", choices=("device", "host", "nvme"),
                   help="where the table lives (default: the profile's)")
    p.add_argument("--io", choices=("mmap", "direct"), help="nvme I/O mode")
    p.add_argument("--table-size-gb", type=float, default=2.0, help="table size in GiB")
    p.add_argument("--table-path", type=Path)
    p.add_argument("--memory-budget-gb", type=float, help="default: free RAM")
    p.add_argument("--no-prefetch", action="store_true")
    p.add_argument("--preset", default="qwen-mini")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key")
    p.add_argument("--max-running", type=int, help="default: the profile's")
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
    from runners.engram.runtime import Runtime, ServerConfigError, ServerOptions

    torch.set_num_threads(args.threads or max(1, (os.cpu_count() or 2) - 1))
    try:
        options = ServerOptions(
            preset=args.preset, placement=args.placement or prof.table_placement,
            io_mode=args.io or prof.io_mode, table_gib=args.table_size_gb,
            table_path=args.table_path, memory_budget_gib=args.memory_budget_gb,
            page_cache_gib=prof.page_cache_budget_gib or DEFAULT_PAGE_CACHE_GIB,
            max_running=args.max_running or prof.max_running_requests,
            prefetch=not args.no_prefetch,
        )
        runtime = Runtime(options)
    except (ServerConfigError, OSError) as exc:
        print(f"engram-bench serve: error: {exc}", file=sys.stderr)
        return 2
    runtime.start()
    print(f"serving {runtime.cfg.name} on http://{args.host}:{args.port}/v1 ({prof.name}: table "
          f"{options.placement}, {runtime.table.data_bytes / 2**30:.1f} GiB at "
          f"{runtime.table.path}, compute {runtime.device})", flush=True)
    try:
        uvicorn.run(create_app(runtime, args.api_key), host=args.host, port=args.port,
                    log_level="warning")
    finally:
        runtime.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
