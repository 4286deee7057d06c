"""Run configuration: every knob of a sweep, validated once, stored with the run."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

MODES = ("closed", "burst")
DEFAULT_LEVELS = (1, 2, 4, 8, 16, 32)


class ConfigError(ValueError):
    """A setting the user chose that cannot work; the message is one sentence."""


def parse_levels(text: str) -> tuple[int, ...]:
    """'1,2,4' -> (1, 2, 4); refuses anything but distinct positive integers."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise ConfigError("--levels needs at least one concurrency, e.g. --levels 1,2,4,8")
    levels = []
    for item in items:
        if not item.isdigit() or int(item) < 1:
            raise ConfigError(f"--levels must be positive integers; {item!r} is not")
        levels.append(int(item))
    if len(set(levels)) != len(levels):
        raise ConfigError("--levels lists a concurrency twice")
    return tuple(sorted(levels))


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
    timeout_s: float = 300.0
    warmup: int = 0
    seed: int = 0
    temperature: float = 0.0
    label: str = ""
    device: str = ""
    engine: str = ""
    table_placement: str = ""
    server_args: tuple[str, ...] = ()  # set: the bundled server, started with these flags
    prompts: str = "words"  # words, text, or a file's absolute path (harness.prompts)

    def __post_init__(self) -> None:
        if not self.levels or any(c < 1 for c in self.levels):
            raise ConfigError("levels must be positive integers")
        if self.rounds < 1:
            raise ConfigError(f"--rounds must be at least 1, not {self.rounds}")
        if self.mode not in MODES:
            raise ConfigError(f"--mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if self.input_tokens < 8:
            raise ConfigError("--input-tokens must be at least 8")
        if self.output_tokens < 1:
            raise ConfigError("--output-tokens must be at least 1")
        if self.timeout_s <= 0:
            raise ConfigError("--timeout must be positive")
        if self.warmup < 0:
            raise ConfigError("--warmup must be 0 or more")
        if not self.prompts:
            raise ConfigError("--prompts needs words, text or a file")

    def to_json_dict(self) -> dict:
        """What is stored in runs.config (no secrets: the API key never is)."""
        data = asdict(self)
        data["levels"] = list(self.levels)
        data["server_args"] = list(self.server_args)
        return data

    @classmethod
    def from_json_dict(cls, data: dict) -> RunConfig:
        """A stored config back (resume); keys stored beside the knobs are left out."""
        known = {f.name for f in fields(cls)}
        kept = {k: v for k, v in data.items() if k in known}
        kept["levels"] = tuple(kept["levels"])
        kept["server_args"] = tuple(kept.get("server_args", ()))
        return cls(**kept)
