"""`make bench-streams`: random words against natural text, rows per 1,000 tokens and hit rate.

Why: Engram rows are addressed by n-grams of the token stream (docs/design.md, "the token stream
matters"), so what a benchmark feeds the server decides how many distinct rows it touches and
how often a page is already cached. Greedy decoding of the bundled dummy model collapses into
repetition, which flatters every placement; uniform-random tokens make every row a miss. This
script measures how far apart the streams are, through the bundled server in-process (no HTTP):

- `words`: the harness's random-words prompts (`--prompts words`), greedy decode (the default);
- `text`: natural-prose prompts (`--prompts text`), output replayed from natural text
  (`decode="replay"`);
- `words, T=1`: random-words prompts sampled at temperature 1 (a near-uniform stream).

Each arm runs in its own Runtime on the same table file (nvme, mmap), one after another, with
the page cache cold at the spark ratio (8 GB of table cache per 47.7 GB of table). Prompts are
sized to ~N tokens in the chat template as the harness calibrates them. Reported per arm:

- distinct Engram rows per 1,000 tokens, with the runtime's own geometry (compression map
  applied), over every token the model processed (prompt ids, then emitted ids but the last,
  which ends the request unprocessed); also over the decode tokens alone, and the share of
  distinct tokens and bigrams among the outputs;
- page hit rate from the kernel counters: 1 - (disk bytes read / 4 KiB) / pages the gathers
  requested, with disk bytes and major faults per token, and mean TPS per request.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.cells import cell
from harness.run import prompts as prompt_sources
from harness.run.workload import calibrate
from runners.engram.runtime import Runtime, ServerConfigError, ServerOptions
from runners.engram.scheduler import SamplingParams, Sequence
from runners.engram.table_store import PAGE, TableCacheError

SPARK_RATIO = 8 / 47.7  # the device's share of the table: 8 GB cache, 47.7 GB table
CALIBRATION_SAMPLES = 4  # prompts per calibration probe, as harness.run.session


@dataclass(slots=True, frozen=True)
class Arm:
    label: str
    prompts: str  # harness prompt source: words or text
    decode: str  # sample or replay
    temperature: float


ARMS = (
    Arm("words", "words", "sample", 0.0),
    Arm("text", "text", "replay", 0.0),
    Arm("words, T=1", "words", "sample", 1.0),
)


@dataclass(slots=True)
class Outcome:
    label: str
    rows_per_kt: float  # distinct rows per 1,000 processed tokens
    decode_rows_per_kt: float  # distinct rows per 1,000 decode tokens
    distinct_tokens: float  # share of output tokens that are distinct
    distinct_bigrams: float  # share of output bigrams that are distinct
    hit_rate: float | None
    disk_per_token: float | None  # bytes
    faults_per_token: float | None  # major faults
    tps: float  # mean output tokens per second per request
    tokens: int  # processed, by our count
    server_tokens: int  # processed, by the server's stats


def prompt_ids(runtime: Runtime, spec: str, target: int, count: int,
               seed: int) -> list[list[int]]:
    """`count` chat prompts from harness source `spec`, calibrated to ~`target` tokens."""
    tok = runtime.tokenizer
    source = prompt_sources.load(spec, seed)

    def ids(words: int, key: str, ordinal: int) -> list[int]:
        text = source.sized(words).text(key, ordinal)
        return tok.chat_prompt([{"role": "user", "content": text}])

    async def probe(words: int) -> int:
        counts = [len(ids(words, f"streams-c0-r0-w{s}", -1 - s))
                  for s in range(CALIBRATION_SAMPLES)]
        return round(sum(counts) / len(counts))

    words = asyncio.run(calibrate(target, probe)).words
    return [ids(words, f"streams-c0-r0-w{i}", i) for i in range(count)]


def drive(runtime: Runtime, prompts: list[list[int]], tokens: int, concurrency: int,
          temperature: float) -> tuple[list[Sequence], list[float]]:
    """Closed loop: `concurrency` workers, each sends its share back to back. Returns the
    finished sequences and each request's TPS (output tokens / its time from submit)."""
    seqs: list[Sequence] = []
    tps: list[float] = []
    lock = threading.Lock()
    failures: list[str] = []

    def worker(w: int) -> None:
        for i in range(w, len(prompts), concurrency):
            done = threading.Event()
            params = SamplingParams(tokens, min_tokens=tokens, ignore_eos=True,
                                    temperature=temperature, seed=i)
            seq = Sequence(f"streams-{i}", list(prompts[i]), params)

            def on_token(token: int | None, reason: str | None, done: threading.Event = done,
                         ) -> None:
                if reason is not None:
                    done.set()

            sent = time.perf_counter()
            if not runtime.engine.submit(seq, on_token):
                failures.append("the engine's queue is full")
                return
            done.wait()
            elapsed = time.perf_counter() - sent
            if seq.finish_reason != "length":
                failures.append(f"request {i} ended with {seq.finish_reason}")
            with lock:
                seqs.append(seq)
                tps.append(len(seq.output) / elapsed)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise RuntimeError(failures[0])
    return seqs, tps


def stream_figures(runtime: Runtime, seqs: list[Sequence]) -> tuple[float, float, float, float,
                                                                     int]:
    """Distinct rows per 1,000 tokens (all, decode), distinct token and bigram shares, and
    the processed token count, with the runtime's geometry (compression map applied)."""
    geometry = runtime.geometry
    rows, decode_rows = [], []
    tokens = decode_tokens = 0
    outputs: list[int] = []
    bigrams: set[tuple[int, int]] = set()
    n_bigrams = 0
    for seq in seqs:
        processed = np.asarray(seq.prompt + seq.output[:-1])  # the last id is never fed
        new_decode = len(seq.output) - 1
        r = geometry.row_ids(processed, len(processed))
        rows.append(r.ravel())
        decode_rows.append(r[len(seq.prompt):].ravel())
        tokens += len(processed)
        decode_tokens += new_decode
        outputs += seq.output
        bigrams.update(zip(seq.output, seq.output[1:], strict=False))
        n_bigrams += max(len(seq.output) - 1, 0)
    distinct = np.unique(np.concatenate(rows)).size
    distinct_decode = np.unique(np.concatenate(decode_rows)).size
    return (distinct / tokens * 1000, distinct_decode / max(decode_tokens, 1) * 1000,
            len(set(outputs)) / max(len(outputs), 1), len(bigrams) / max(n_bigrams, 1), tokens)


def run_arm(arm: Arm, args: argparse.Namespace, table: Path) -> Outcome:
    options = ServerOptions(preset=args.preset, placement="nvme", io_mode="mmap",
                            table_gib=args.table_gib, table_path=table, cache_state="cold",
                            cache_ratio=args.cache_ratio, decode=arm.decode,
                            max_running=args.concurrency, results_dir=Path("results"))
    runtime = Runtime(options)
    try:
        runtime.start()
        prompts = prompt_ids(runtime, arm.prompts, args.input_tokens, args.requests, args.seed)
        warm = runtime.tokenizer.chat_prompt([{"role": "user", "content": "Warm up."}])
        drive(runtime, [warm], 4, 1, 0.0)  # first-call costs, outside the measurement ...
        runtime.drop_table_cache()  # ... and the page cache cold again
        before = runtime.stats()
        seqs, tps = drive(runtime, prompts, args.output_tokens, args.concurrency,
                          arm.temperature)
        after = runtime.stats()
    finally:
        runtime.close()
    delta = {k: after[k] - before[k] for k in ("tokens", "pages_requested")}
    served = delta["tokens"]
    disk = faults = hit = None
    if after["disk_read_bytes"] is not None and before["disk_read_bytes"] is not None:
        disk = after["disk_read_bytes"] - before["disk_read_bytes"]
        if delta["pages_requested"]:
            hit = max(0.0, 1 - disk / PAGE / delta["pages_requested"])
    if after["page_faults_major"] is not None and before["page_faults_major"] is not None:
        faults = after["page_faults_major"] - before["page_faults_major"]
    rows_kt, decode_kt, tok_share, bigram_share, tokens = stream_figures(runtime, seqs)
    return Outcome(arm.label, rows_kt, decode_kt, tok_share, bigram_share, hit,
                   None if disk is None else disk / served,
                   None if faults is None else faults / served,
                   statistics.fmean(tps), tokens, served)



def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="qwen-mini")
    parser.add_argument("--table-gib", type=float, default=2.0)
    parser.add_argument("--table", type=Path, default=None,
                        help="table file (default results/tables/<preset>-<gib>gib.bin)")
    parser.add_argument("--cache-ratio", type=float, default=SPARK_RATIO)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--input-tokens", type=int, default=128)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arms", default="", help="comma-separated labels (default: all)")
    args = parser.parse_args()
    if min(args.requests, args.input_tokens, args.output_tokens, args.concurrency) < 1:
        parser.error("--requests, --input-tokens, --output-tokens and --concurrency must be "
                     "at least 1")
    table = args.table or Path("results/tables") / f"{args.preset}-{args.table_gib:g}gib.bin"
    wanted = [w.strip() for w in args.arms.split(",") if w.strip()]
    arms = [a for a in ARMS if not wanted or a.label in wanted]
    if not arms:
        parser.error(f"--arms: choose from {', '.join(a.label for a in ARMS)}")
    outcomes = []
    for arm in arms:  # one at a time: each Runtime starts with the table's page cache cold
        try:
            outcomes.append(run_arm(arm, args, table))
        except (ServerConfigError, TableCacheError) as exc:
            print(f"arm {arm.label!r} cannot run: {exc}")
            return 1
    print(f"preset {args.preset}, table {args.table_gib:g} GiB ({table}), nvme/mmap cold, "
          f"cache ratio {args.cache_ratio:.3f}, {args.requests} requests x ~"
          f"{args.input_tokens} in + {args.output_tokens} out at C={args.concurrency}")
    print(f"{'arm':<12}{'rows/kt':>9}{'dec rows/kt':>13}{'uniq tok':>10}{'uniq bigr':>11}"
          f"{'hit rate':>10}{'disk B/tok':>12}{'majflt/tok':>12}{'TPS/req':>9}")
    for o in outcomes:
        print(f"{o.label:<12}{o.rows_per_kt:>9.0f}{o.decode_rows_per_kt:>13.0f}"
              f"{o.distinct_tokens:>10.1%}{o.distinct_bigrams:>11.1%}"
              f"{cell(o.hit_rate, '.1%', 'n/a'):>10}"
              f"{cell(o.disk_per_token, '.0f', 'n/a'):>12}"
              f"{cell(o.faults_per_token, '.2f', 'n/a'):>12}{o.tps:>9.1f}")
        if o.tokens != o.server_tokens:
            print(f"  note: {o.tokens} tokens counted here, {o.server_tokens} by the server")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
