"""A synthetic trace in Mooncake's format, for the benchmarks (no trace is downloaded here).

Conversations arrive as a Poisson process; each has a few turns, a think of its own between
them; a turn's prompt is the shared system block(s), the whole conversation so far (every
earlier turn's blocks, and the answer it got, as blocks), then its new message. So its hash
ids share a prefix with the turn before it, and every prompt shares the system blocks, as a
chat service's prompts do. Every number that shapes it is an argument, and the benchmarks that
use it print what its hash ids imply (the prefix share, harness.run.trace.requests.shaped).

    python -m benchmarks.trace_file out.jsonl --requests 2000 --rate 4
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass
from pathlib import Path

BLOCK = 512  # tokens a hash id covers in Mooncake's traces


@dataclass(frozen=True)
class Shape:
    """How the conversations are drawn."""

    session_rate: float = 1.0  # conversations starting per second
    mean_turns: float = 3.0  # turns per conversation (geometric)
    think_s: float = 20.0  # mean think between a turn's arrival and the next (exponential)
    system_blocks: int = 2  # blocks every prompt starts with
    message_blocks: tuple[int, int] = (1, 4)  # a new message's blocks (uniform)
    output: tuple[int, int] = (40, 400)  # output tokens (uniform)


def write(path: Path, requests: int, shape: Shape = Shape(), seed: int = 0) -> Path:
    """`requests` lines in arrival order."""
    rng = random.Random(seed)
    rows: list[dict] = []
    next_id = shape.system_blocks
    start = 0.0
    while len(rows) < requests:
        start += rng.expovariate(shape.session_rate)
        t, context = start, list(range(shape.system_blocks))
        turns = 1
        while rng.random() > 1 / shape.mean_turns:
            turns += 1
        for _ in range(turns):
            new = rng.randint(*shape.message_blocks)
            ids = [*context, *range(next_id, next_id + new)]
            next_id += new
            output = rng.randint(*shape.output)
            rows.append({"timestamp": round(t * 1000), "input_length":
                         len(ids) * BLOCK - rng.randrange(BLOCK), "output_length": output,
                         "hash_ids": ids})
            answer = -(-output // BLOCK)  # the answer's blocks join the conversation
            context = [*ids, *range(next_id, next_id + answer)]
            next_id += answer
            t += rng.expovariate(1 / shape.think_s)
    rows.sort(key=lambda r: r["timestamp"])
    path.write_text("".join(json.dumps(r) + "\n" for r in rows[:requests]))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=1.0, help="conversations per second")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    write(args.out, args.requests, Shape(session_rate=args.rate), args.seed)


if __name__ == "__main__":
    main()
