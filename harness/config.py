"""Run configuration: every knob of a sweep, validated once (the knobs of one load mode by
that mode: harness.run.modes), stored with the run."""

from __future__ import annotations

import json
import math
import os
import random
from dataclasses import asdict, dataclass, fields
from typing import TypeVar

_V = TypeVar("_V", int, float)

DEFAULT_LEVELS = (1, 2, 4, 8, 16, 32)
MAX_TEMPERATURE = 2.0  # OpenAI's range is 0..2
# Bounds on what one run may ask for. Each lies far past what a real run needs, so that only a
# slip (three zeros too many) meets one, refused in one sentence before anything is sent rather
# than filling memory or idling for years.
MAX_RUN_REQUESTS = 1_000_000  # a run keeps every record it measured in memory until it ends (a
# rate level's schedule, too, before it runs): ~1 GB at this count
MAX_WARMUP_REQUESTS = 100_000  # a warm-up fills compile caches and first-touch pages in tens of
# requests; this many take hours at any real server's rate
MAX_REQUEST_TOKENS = 2**24  # ~16.8M, past the longest context a served model states (10M): a
# word prompt that long is ~100 MB of text, and each takes seconds to build
MAX_REPEAT = 1000  # a level's interval narrows as 1/sqrt(passes), and 20 already give one
MAX_THINK_S = 3600.0  # a user silent for an hour has left: a new request is a new session
MIN_DUTY_CYCLE = 0.001  # thinks ~1000x the level's mean request: an hour after 3.6 s requests
MAX_DURATION_S = 86_400.0  # a rate level is stored only when it ends, so a stop loses it whole:
# a day is the most worth risking on one level
MAX_LABEL_CHARS = 1000  # a label names a run in tables and chart legends: a paragraph at most
MAX_RUN_ID_CHARS = 128  # the tool's own ids have 20 characters, and every request id repeats it
ARRIVALS = ("poisson", "constant")  # mode rate: harness.run.arrivals (the first the default)
DEFAULT_DURATION_S = 60.0  # mode rate: seconds a rate level sends for
# The published explorer's users per Max C of each profile (metrics.Targets' defaults). A user
# in flight 1/factor of the time fills 1/factor of a slot, so each profile's duty cycle is one
# over its factor
USERS_PER_MAX_C = {"chat": 4.0, "agentic": 1.5}
TABLE_STATES = ("cold", "warm")  # what `run --table-state` sets the table to before its run
PROFILE_DUTY = {profile: 1 / factor for profile, factor in USERS_PER_MAX_C.items()}
PROFILES = tuple(PROFILE_DUTY)


def max_workers() -> int:
    """The most load processes a run may split into: 4 per CPU (past that they only take
    turns on the CPUs)."""
    return 4 * (os.cpu_count() or 1)


class ConfigError(ValueError):
    """A setting the user chose that cannot work; the message is one sentence."""


def _list_items(text: str, flag: str, noun: str, example: str) -> list[str]:
    """A comma-separated flag's items, stripped; none at all, or an empty one, is refused."""
    items = [t.strip() for t in text.split(",")]
    if not any(items):
        raise ConfigError(f"{flag} needs at least one {noun}, e.g. {flag} {example}")
    if not all(items):
        raise ConfigError(f"{flag} {text!r} has an empty item between its commas")
    return items


def _distinct_sorted(values: list[_V], flag: str, what: str) -> tuple[_V, ...]:
    if len(set(values)) != len(values):
        raise ConfigError(f"{flag} lists {what} twice")
    return tuple(sorted(values))


def parse_levels(text: str) -> tuple[int, ...]:
    """'1,2,4' -> (1, 2, 4); refuses anything but distinct positive integers."""
    levels = []
    for item in _list_items(text, "--levels", "concurrency", "1,2,4,8"):
        if not item.isdigit() or int(item) < 1:
            raise ConfigError(f"--levels must be positive integers; {item!r} is not")
        levels.append(int(item))
    return _distinct_sorted(levels, "--levels", "a concurrency")


def parse_rates(text: str) -> tuple[float, ...]:
    """'0.5,1,2' -> (0.5, 1.0, 2.0): the request rates (requests/s) of `--mode rate`."""
    rates = []
    for item in _list_items(text, "--rates", "request rate", "0.5,1,2,4"):
        try:
            rate = float(item)
        except ValueError:
            rate = math.nan
        if not 0 < rate < math.inf:
            raise ConfigError(f"--rates must be numbers of requests/s above 0; {item!r} is not")
        rates.append(rate)
    return _distinct_sorted(rates, "--rates", "a rate")


THINK_DISTS = ("exponential", "constant", "lognormal")
LOGNORMAL_SIGMA = 0.8  # spread of log-normal thinks: a coefficient of variation of ~0.95


def think_cv(dist: str) -> float:
    """A think's coefficient of variation (sd / mean) around its mean Z, by distribution."""
    if dist == "constant":
        return 0.0
    if dist == "lognormal":
        return math.sqrt(math.exp(LOGNORMAL_SIGMA ** 2) - 1)
    return 1.0  # exponential


@dataclass(slots=True, frozen=True)
class ThinkModel:
    """How a users level thinks: its mean think Z from a duty cycle (Z = (1 - d) / d times the
    level's mean request, steered by harness.run.think) or a fixed number of seconds, and the
    distribution each think is drawn from around Z."""

    duty_cycle: float | None = None
    fixed_s: float | None = None
    dist: str = "exponential"

    def __post_init__(self) -> None:
        if (self.duty_cycle is None) == (self.fixed_s is None):
            raise ValueError("a think model needs exactly one of a duty cycle or a think time")
        if self.duty_cycle is not None and not 0 < self.duty_cycle <= 1:
            raise ValueError(f"a duty cycle must be in (0, 1], not {self.duty_cycle}")
        if self.fixed_s is not None and not 0 <= self.fixed_s < math.inf:
            raise ValueError(f"a think time must be 0 or more seconds, not {self.fixed_s}")
        if self.dist not in THINK_DISTS:
            raise ValueError(f"a think distribution is one of {', '.join(THINK_DISTS)}, "
                             f"not {self.dist!r}")

    def mean_for(self, mean_latency_s: float) -> float:
        """The mean think that gives the duty cycle over requests of this mean length."""
        if self.fixed_s is not None:
            return self.fixed_s
        assert self.duty_cycle is not None
        return mean_latency_s * (1 - self.duty_cycle) / self.duty_cycle

    def draw(self, rng: random.Random, mean_s: float) -> float:
        """One think time in seconds around `mean_s` (0 when the mean is 0)."""
        if mean_s <= 0:
            return 0.0
        if self.dist == "constant":
            return mean_s
        if self.dist == "lognormal":
            return rng.lognormvariate(math.log(mean_s) - LOGNORMAL_SIGMA ** 2 / 2,
                                      LOGNORMAL_SIGMA)
        return rng.expovariate(1 / mean_s)

    def describe(self) -> str:
        if self.fixed_s is not None:
            return f"{self.dist} thinks of {self.fixed_s:g} s on average"
        ratio = (1 - self.duty_cycle) / self.duty_cycle  # type: ignore[operator]
        return (f"duty cycle {self.duty_cycle:.2f} ({self.dist} thinks around one mean per "
                f"level, ~{ratio:.2g}x the level's mean request)")


@dataclass(slots=True, frozen=True)
class RunConfig:
    url: str
    model: str
    api: str = "chat"
    levels: tuple[int, ...] = DEFAULT_LEVELS
    rounds: int = 10
    mode: str = "closed"
    input_tokens: int = 128
    output_tokens: int = 128
    request_timeout_s: float = 600.0  # the whole request, queueing and first byte included
    connect_timeout_s: float = 10.0  # opening the TCP (and TLS) connection
    stall_timeout_s: float = 60.0  # the longest gap between two chunks after the first
    ca_bundle: str = ""  # PEM file of CAs to trust for https (absolute path), "" = system's
    insecure: bool = False  # https without certificate checks
    warmup: int = 0
    seed: int = 0
    temperature: float = 0.0
    label: str = ""
    device: str = ""
    engine: str = ""
    table_placement: str = ""
    server_args: tuple[str, ...] = ()  # set: the bundled server, started with these flags
    # the `run` flags that start that server again (its engine's, beside --device and
    # --placement); None in a run that started one, stored before they were
    server_flags: tuple[str, ...] | None = ()
    prompts: str = "words"  # words, text, or a file's absolute path (harness.run.prompts)
    server_metrics: bool = True  # scrape the target's Prometheus /metrics per level
    # the serving hosts' kernel counters (engram-bench agent or node_exporter), one URL a node,
    # scraped every second of each level (harness.results.host_level)
    host_metrics: tuple[str, ...] = ()
    # the table's start state set through the hosts' agents before the first pass: "", cold
    # or warm (harness.run.table_state); warm reads this many GB at most (None: all)
    table_state: str = ""
    warm_budget_gb: float | None = None
    idle_s: float = 0.0  # a wait before each pass after the first, the table's decay read over it
    search: bool = False  # after the levels, probe until Max C is known to the integer
    max_concurrency: int = 256  # the search never probes above this
    rates: tuple[float, ...] = ()  # mode rate: requests/s per level (its levels are empty)
    arrival: str = ARRIVALS[0]  # mode rate: poisson or constant gaps (harness.run.arrivals)
    duration_s: float = DEFAULT_DURATION_S  # mode rate: seconds each rate level sends for
    repeat: int = 1  # passes over the sweep, interleaved per level (harness.results.confidence)
    profile: str = ""  # mode users: chat or agentic (harness.config.PROFILES); "" with a duty
    duty_cycle: float | None = None  # mode users: share of a user's time with a request running
    think_s: float | None = None  # mode users: a fixed mean think time instead of a duty cycle
    think_dist: str = "exponential"  # mode users: how thinks spread around their mean
    turns: int = 1  # requests per conversation: each turn resends the conversation so far
    keep_going: bool = False  # go on when a whole round cannot connect (else the run fails)
    token_times: bool = False  # store every chunk's arrival and tokens (chunk_times table)
    # modes trace and trace-closed (harness.run.modes.trace): the trace file (absolute path),
    # its format, the speedups a timed replay runs at, and how its lengths are fitted
    trace: str = ""
    trace_format: str = ""
    speedups: tuple[float, ...] = ()
    trace_block_tokens: int = 512  # tokens of a Mooncake hash id's block
    sort_trace: bool = False
    trace_start_s: float = 0.0
    trace_duration_s: float | None = None
    trace_limit: int | None = None
    input_scale: float = 1.0  # every input length and the block size times this
    max_input_tokens: int | None = None  # clips
    max_output_tokens: int | None = None
    lengths_from: str = ""  # a sweep's request lengths drawn from this trace's (absolute path)
    workers: int = 1  # load processes a level's streams (or requests) are split across
    ray: str = ""  # the Ray cluster (HOST:PORT) they run on as actors; "": this host's processes

    def __post_init__(self) -> None:
        """The knobs every mode shares; each mode checks its own (harness.run.modes.check)."""
        if self.turns < 1:
            raise ConfigError(f"--turns must be at least 1, not {self.turns}")
        if any(c < 1 for c in self.levels):
            raise ConfigError("levels must be positive integers")
        if self.rounds < 1:
            raise ConfigError(f"--rounds must be at least 1, not {self.rounds}")
        if self.input_tokens < 8:
            raise ConfigError("--input-tokens must be at least 8")
        if self.output_tokens < 1:
            raise ConfigError("--output-tokens must be at least 1")
        self._check_table_state()
        for flag, seconds in (("--request-timeout", self.request_timeout_s),
                              ("--connect-timeout", self.connect_timeout_s),
                              ("--stall-timeout", self.stall_timeout_s)):
            if not 0 < seconds < math.inf:
                raise ConfigError(f"{flag} must be a positive number of seconds, not {seconds}")
        if not 0 <= self.temperature <= MAX_TEMPERATURE:
            raise ConfigError(f"--temperature must be between 0 and {MAX_TEMPERATURE:g}, "
                              f"not {self.temperature}")
        if self.ca_bundle and self.insecure:
            raise ConfigError("--ca-bundle and --insecure contradict each other: give one")
        if self.levels and self.max_concurrency < max(self.levels):
            raise ConfigError(f"--max-concurrency {self.max_concurrency} is below the highest "
                              f"level, {max(self.levels)}")
        if not 1 <= self.repeat <= MAX_REPEAT:
            raise ConfigError(f"--repeat must be from 1 to {MAX_REPEAT:,}, not {self.repeat:,}")
        if self.workers < 1 or (not self.ray and self.workers > max_workers()):
            raise ConfigError(f"--workers must be from 1 to {max_workers()} (4 per CPU), not "
                              f"{self.workers}")
        if self.levels and self.workers > max(self.levels):
            raise ConfigError(f"--workers {self.workers} is more than the highest level's "
                              f"{max(self.levels)} streams: a worker would have none")
        if not 0 <= self.warmup <= MAX_WARMUP_REQUESTS:
            raise ConfigError(f"--warmup must be from 0 to {MAX_WARMUP_REQUESTS:,} requests, not "
                              f"{self.warmup:,}")
        if not self.prompts:
            raise ConfigError("--prompts needs words, text or a file")
        if len(self.label) > MAX_LABEL_CHARS:
            raise ConfigError(f"--label must be at most {MAX_LABEL_CHARS:,} characters, not "
                              f"{len(self.label):,}")
        self._check_sizes()

    def _check_table_state(self) -> None:
        if self.table_state not in ("", *TABLE_STATES):
            raise ConfigError(f"--table-state must be cold or warm, not {self.table_state!r}")
        if self.table_state and not self.host_metrics and not self.server_args:
            raise ConfigError("--table-state works through the serving host's agent: give "
                              "--host-metrics with an `engram-bench agent --table PATH` URL")
        if self.warm_budget_gb is not None and (self.table_state != "warm"
                                                or not 0 < self.warm_budget_gb < math.inf):
            raise ConfigError("--warm-budget-gb needs --table-state warm and a number of GB "
                              "above 0")
        if not 0 <= self.idle_s < math.inf:
            raise ConfigError(f"--idle must be 0 or more seconds, not {self.idle_s}")

    def _check_sizes(self) -> None:
        """What no run should hold: more requests than fit in memory, or a request longer
        than any server's context (which a server that states none cannot refuse)."""
        planned = self.level_requests
        if planned > MAX_RUN_REQUESTS:
            search = (f" (and --search up to --max-concurrency {self.max_concurrency})"
                      if self.search else "")
            raise ConfigError(f"--rounds {self.rounds:,} x --repeat {self.repeat} over --levels "
                              f"{','.join(map(str, self.levels))}{search} ask for {planned:,} "
                              f"requests, above the {MAX_RUN_REQUESTS:,} one run may hold: "
                              f"lower --rounds, --levels{', --max-concurrency' * self.search} "
                              "or --repeat")
        if (need := self.longest_request_tokens) > MAX_REQUEST_TOKENS:
            turns = f" x --turns {self.turns_reached}" if self.turns_reached > 1 else ""
            raise ConfigError(f"--input-tokens {self.input_tokens:,} + --output-tokens "
                              f"{self.output_tokens:,}{turns} make requests of {need:,} tokens, "
                              f"above the {MAX_REQUEST_TOKENS:,} one request may hold (past any "
                              "served model's context)")

    @property
    def level_requests(self) -> int:
        """Requests the levels store over every repeat, a search's highest probe counted in."""
        probes = [self.max_concurrency] if self.search else []
        return sum([*self.levels, *probes]) * self.rounds * self.repeat

    @property
    def turns_reached(self) -> int:
        """Turns a conversation gets to: a level's rounds end it early when fewer."""
        return min(self.turns, self.rounds)

    @property
    def longest_request_tokens(self) -> int:
        """Context the last turn of a conversation needs: every turn's message and answer."""
        return self.turns_reached * (self.input_tokens + self.output_tokens)

    def check_server_limits(self, context: int | None, kv_pool: int | None) -> None:
        """Refuse, before anything is sent, a length the server said it cannot hold: its
        context (/v1/models max_model_len) or its whole KV pool (vllm:cache_config_info)."""
        need, turns = self.longest_request_tokens, self.turns_reached
        how = (f"{self.input_tokens} prompt + {self.output_tokens} output tokens"
               + (f" x {turns} turns" if turns > 1 else ""))
        if context is not None and need > context:
            raise ConfigError(f"the longest request of this run needs {need} tokens ({how}), "
                              f"above the server's {context}-token context (its max_model_len)")
        if kv_pool is not None and need > kv_pool:
            raise ConfigError(f"the server's KV pool holds {kv_pool} tokens, too small for one "
                              f"request of {need} tokens ({how}): give the server more KV "
                              "memory or send shorter requests")

    def to_json_dict(self) -> dict:
        """What is stored in runs.config (no secrets: the API key never is)."""
        data = asdict(self)
        data["levels"] = list(self.levels)
        data["server_args"] = list(self.server_args)
        data["host_metrics"] = list(self.host_metrics)
        data["rates"] = list(self.rates)
        data["speedups"] = list(self.speedups)
        return data

    @classmethod
    def from_json_dict(cls, data: dict) -> RunConfig:
        """A stored config back (resume); keys stored beside the knobs are left out, and a
        run stored before the three timeouts keeps its `timeout_s` as the request timeout."""
        known = {f.name for f in fields(cls)}
        kept = {k: v for k, v in data.items() if k in known}
        if "timeout_s" in data:
            kept.setdefault("request_timeout_s", data["timeout_s"])
        kept["levels"] = tuple(kept["levels"])
        kept["server_args"] = tuple(kept.get("server_args", ()))
        flags = kept.get("server_flags")
        kept["server_flags"] = (tuple(flags) if flags is not None
                                else None if kept["server_args"] else ())
        kept["host_metrics"] = tuple(kept.get("host_metrics", ()))
        kept["rates"] = tuple(kept.get("rates", ()))
        kept["speedups"] = tuple(kept.get("speedups", ()))
        return cls(**kept)


def check_run_id(run_id: str) -> str:
    """A run id given back (--resume, summary, export) or chosen by a caller, bounded in
    length: the id is repeated in every request's id and shown on each explorer page."""
    if len(run_id) > MAX_RUN_ID_CHARS:
        raise ConfigError(f"a run id has at most {MAX_RUN_ID_CHARS} characters, not "
                          f"{len(run_id):,}")
    return run_id


@dataclass(slots=True, frozen=True)
class StoredRun:
    """What `runs.config` holds: the run's knobs and what the run learned before its first
    level. JSON only at the store's edge: `to_json` when the run is created, `from_json` for
    every reader (resume, summary, explorer)."""

    config: RunConfig | None  # None: a config this version cannot rebuild (an older file's)
    prompt_words: int | None = None  # calibrated words per prompt (None: sent as given)
    calibration_prompt_tokens: float | None = None  # what the server counted for them
    prompts_digest: str | None = None  # the prompt source, to refuse a resume on other prompts
    server: dict[str, object] | None = None  # the server's table and start state (/stats)
    # the server's count of a prompt of w words (or pieces): base + per word x w, fitted over
    # calibration's probes; a trace's prompts of every length are sized on it
    prompt_line: tuple[float, float] | None = None

    def to_json(self) -> str:
        assert self.config is not None  # a new run always has its config
        extras: dict[str, object] = {"prompt_words": self.prompt_words,
                                     "calibration_prompt_tokens": self.calibration_prompt_tokens,
                                     "prompts_digest": self.prompts_digest,
                                     "prompt_line": self.prompt_line}
        if self.server:
            extras["server"] = self.server
        return json.dumps({**self.config.to_json_dict(), **extras})

    @classmethod
    def from_json(cls, text: str | None) -> StoredRun:
        """The stored run back; text that is no JSON object, or knobs this version refuses,
        leave `config` None rather than failing a reader."""
        try:
            data = json.loads(text or "null")
        except json.JSONDecodeError:
            data = None
        if not isinstance(data, dict):
            return cls(None)
        try:
            config: RunConfig | None = RunConfig.from_json_dict(data)
        except (ConfigError, KeyError, TypeError, ValueError):
            config = None
        server = data.get("server")
        line = data.get("prompt_line")
        return cls(config, data.get("prompt_words"), data.get("calibration_prompt_tokens"),
                   data.get("prompts_digest"), server if isinstance(server, dict) else None,
                   (float(line[0]), float(line[1]))
                   if isinstance(line, list) and len(line) == 2 else None)

    @property
    def calibrated(self) -> bool:
        """Prompts were sized to input_tokens (not a .jsonl file sent at its own lengths)."""
        return self.prompt_words is not None
