"""Run configuration: every knob of a sweep, validated once, stored with the run."""

from __future__ import annotations

import json
import math
import random
from dataclasses import asdict, dataclass, fields
from typing import TypeVar

_V = TypeVar("_V", int, float)

MODES = ("closed", "burst", "rate", "users")
DEFAULT_LEVELS = (1, 2, 4, 8, 16, 32)
MAX_TEMPERATURE = 2.0  # OpenAI's range is 0..2
MAX_SCHEDULED_REQUESTS = 1_000_000  # mode rate: a schedule is held in memory before it runs
ARRIVALS = ("poisson", "constant")  # mode rate: harness.run.arrivals
PROFILE_DUTY = {"chat": 0.25, "agentic": 2 / 3}  # published: x4 and x1.5 users per Max C
PROFILES = tuple(PROFILE_DUTY)


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
    prompts: str = "words"  # words, text, or a file's absolute path (harness.run.prompts)
    server_metrics: bool = True  # scrape the target's Prometheus /metrics per level
    search: bool = False  # after the levels, probe until Max C is known to the integer
    max_concurrency: int = 256  # the search never probes above this
    rates: tuple[float, ...] = ()  # mode rate: requests/s per level (its levels are empty)
    arrival: str = "poisson"  # mode rate: poisson or constant gaps (harness.run.arrivals)
    duration_s: float = 60.0  # mode rate: seconds each rate level sends for
    repeat: int = 1  # passes over the sweep, interleaved per level (harness.results.confidence)
    profile: str = ""  # mode users: chat or agentic (harness.config.PROFILES); "" with a duty
    duty_cycle: float | None = None  # mode users: share of a user's time with a request running
    think_s: float | None = None  # mode users: a fixed mean think time instead of a duty cycle
    think_dist: str = "exponential"  # mode users: how thinks spread around their mean
    turns: int = 1  # requests per conversation: each turn resends the conversation so far
    keep_going: bool = False  # go on when a whole round cannot connect (else the run fails)
    token_times: bool = False  # store every chunk's arrival and tokens (chunk_times table)

    def __post_init__(self) -> None:
        self._check_rate_mode()
        self._check_users_mode()
        if any(c < 1 for c in self.levels) or (not self.levels and self.mode != "rate"):
            raise ConfigError("levels must be positive integers")
        if self.rounds < 1:
            raise ConfigError(f"--rounds must be at least 1, not {self.rounds}")
        if self.mode not in MODES:
            raise ConfigError(f"--mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if self.input_tokens < 8:
            raise ConfigError("--input-tokens must be at least 8")
        if self.output_tokens < 1:
            raise ConfigError("--output-tokens must be at least 1")
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
        if self.repeat < 1:
            raise ConfigError(f"--repeat must be at least 1, not {self.repeat}")
        if self.repeat > 1 and self.mode == "rate":
            raise ConfigError("--repeat applies to --mode closed and burst: a rate level is "
                              "repeated by running it for a longer --duration")
        if self.warmup < 0:
            raise ConfigError("--warmup must be 0 or more")
        if not self.prompts:
            raise ConfigError("--prompts needs words, text or a file")

    def _check_rate_mode(self) -> None:
        """Rates and concurrency levels are different load points: a run has one kind."""
        if self.mode != "rate":
            if self.rates:
                raise ConfigError("--rates needs --mode rate")
            return
        if not self.rates:
            raise ConfigError("--mode rate needs --rates, e.g. --rates 0.5,1,2,4")
        if any(not 0 < r < math.inf for r in self.rates):
            raise ConfigError("--rates must be numbers of requests/s above 0")
        if not 0 < self.duration_s < math.inf:
            raise ConfigError(f"--duration must be a positive number of seconds, "
                              f"not {self.duration_s}")
        if self.arrival not in ARRIVALS:
            raise ConfigError(f"--arrival must be one of {', '.join(ARRIVALS)}, "
                              f"not {self.arrival!r}")
        scheduled = sum(rate * self.duration_s for rate in self.rates)
        if scheduled > MAX_SCHEDULED_REQUESTS:
            raise ConfigError(f"--rates x --duration schedule {scheduled:,.0f} requests, above "
                              f"the {MAX_SCHEDULED_REQUESTS:,} one run may hold: lower the "
                              "rates or the duration")
        if self.levels:
            raise ConfigError("--levels are concurrencies: --mode rate takes --rates instead")
        if self.search:
            raise ConfigError("--search looks for a concurrency: it does not apply to --mode rate")

    def _check_users_mode(self) -> None:
        """Users need one think rule; a conversation needs a user who waits for each answer."""
        if self.turns < 1:
            raise ConfigError(f"--turns must be at least 1, not {self.turns}")
        if self.turns > 1 and self.mode == "rate":
            raise ConfigError("--turns needs a user that waits for each answer: --mode closed, "
                              "burst or users, not rate")
        if self.duty_cycle is not None and not 0 < self.duty_cycle <= 1:
            raise ConfigError(f"--duty-cycle must be in (0, 1], the share of a user's time "
                              f"with a request running, not {self.duty_cycle:g}")
        if self.think_s is not None and not 0 <= self.think_s < math.inf:
            raise ConfigError(f"--think-time must be 0 or more seconds, not {self.think_s:g}")
        chosen = [flag for flag, given in (("--profile", bool(self.profile)),
                                           ("--duty-cycle", self.duty_cycle is not None),
                                           ("--think-time", self.think_s is not None)) if given]
        if self.think_dist not in THINK_DISTS:
            raise ConfigError(f"--think-dist must be one of {', '.join(THINK_DISTS)}, "
                              f"not {self.think_dist!r}")
        if self.mode != "users":
            if chosen or self.think_dist != "exponential":
                raise ConfigError(f"{chosen[0] if chosen else '--think-dist'} needs --mode users")
            return
        if self.profile and self.profile not in PROFILES:
            raise ConfigError(f"--profile must be one of {', '.join(PROFILES)}, "
                              f"not {self.profile!r}")
        if len(chosen) > 1:  # a profile's published factor would misname another duty
            raise ConfigError(f"{' and '.join(chosen)} each set the think time: give one")

    @property
    def think(self) -> ThinkModel | None:
        """Mode users: the think rule (a --think-time, a --duty-cycle, else the profile's)."""
        if self.mode != "users":
            return None
        if self.think_s is not None:
            return ThinkModel(fixed_s=self.think_s, dist=self.think_dist)
        return ThinkModel(duty_cycle=self.duty_cycle or PROFILE_DUTY[self.profile or "chat"],
                          dist=self.think_dist)

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
        data["rates"] = list(self.rates)
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
        kept["rates"] = tuple(kept.get("rates", ()))
        return cls(**kept)


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

    def to_json(self) -> str:
        assert self.config is not None  # a new run always has its config
        extras: dict[str, object] = {"prompt_words": self.prompt_words,
                                     "calibration_prompt_tokens": self.calibration_prompt_tokens,
                                     "prompts_digest": self.prompts_digest}
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
        return cls(config, data.get("prompt_words"), data.get("calibration_prompt_tokens"),
                   data.get("prompts_digest"), server if isinstance(server, dict) else None)

    @property
    def calibrated(self) -> bool:
        """Prompts were sized to input_tokens (not a .jsonl file sent at its own lengths)."""
        return self.prompt_words is not None
