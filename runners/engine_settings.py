"""The engine settings a recipe may print, declared with their source (data/engine_settings.toml),
and the check of a launch command against them: an engine flag, a field of a JSON-valued flag or
an environment variable that is not declared, or a value it does not take, is named. Pure but
for reading the declared list."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

SETTINGS_FILE = Path(__file__).parent / "data" / "engine_settings.toml"
FORMS = ("flag", "field", "env")
TAKES = ("none", "int", "path", "text", "json", "bool", "choice")
ORIGINS = ("upstream", "patched-image")
# How each engine's server is started: the words before its flags, and the positional
# arguments after them (vLLM's model path).
LAUNCH = {"vllm": ("vllm", "serve"), "sglang": ("python", "-m", "sglang.launch_server")}
POSITIONALS = {"vllm": 1, "sglang": 0}
_ENV_WORD = re.compile(r"[A-Z_][A-Z0-9_]*=")
_COMMIT = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True, slots=True)
class Setting:
    engine: str
    form: str  # one of FORMS
    name: str
    parent: str | None  # the JSON-valued flag a field belongs to
    takes: str  # one of TAKES
    choices: tuple[str, ...]
    default: str | None  # the engine's own, as its source says: printed beside the setting
    meaning: str
    source: str
    version: str
    origin: str  # one of ORIGINS
    image: str | None  # for a patched-image setting, the image that reads it

    @property
    def key(self) -> tuple[str, str, str, str | None]:
        return self.engine, self.form, self.name, self.parent

    def accepts(self, value: object) -> bool:
        """Whether `value` (a word of the command, or a JSON value of a field) is one this
        setting takes."""
        if self.takes == "none":
            return value is None
        if self.takes == "bool":
            return isinstance(value, bool)
        if self.takes == "int":
            number = int(value) if isinstance(value, str) and value.isdigit() else value
            return isinstance(number, int) and not isinstance(number, bool) and number > 0
        if self.takes == "choice":
            return value in self.choices
        if self.takes == "path":
            return isinstance(value, str) and value.startswith("/")
        return isinstance(value, str) and bool(value.strip())  # text, or json (checked apart)


@dataclass(frozen=True, slots=True)
class Printed:
    """One setting as a command sets it."""

    engine: str
    form: str
    name: str
    parent: str | None
    value: object

    @property
    def key(self) -> tuple[str, str, str, str | None]:
        return self.engine, self.form, self.name, self.parent

    def shown(self) -> str:
        """How the setting reads to a user: --flag VALUE, parent.field=VALUE or NAME=VALUE."""
        value = json.dumps(self.value) if self.form == "field" else self.value
        if self.form == "flag":
            return self.name if value is None else f"{self.name} {value}"
        prefix = f"{self.parent} {self.name}" if self.form == "field" else self.name
        return f"{prefix}={value}"


class SettingsFileError(ValueError):
    """The declared list itself is malformed."""


def _setting(entry: dict) -> Setting:
    setting = Setting(entry["engine"], entry["form"], entry["name"], entry.get("parent"),
                      entry["takes"], tuple(entry.get("choices", ())), entry.get("default"),
                      entry["meaning"], entry["source"], entry["version"], entry["origin"],
                      entry.get("image"))
    checks = [
        (setting.engine not in LAUNCH, f"engine {setting.engine!r}"),
        (setting.form not in FORMS, f"form {setting.form!r}"),
        (setting.takes not in TAKES, f"takes {setting.takes!r}"),
        (setting.origin not in ORIGINS, f"origin {setting.origin!r}"),
        ((setting.form == "field") != (setting.parent is not None), "parent only on a field"),
        ((setting.takes == "choice") != bool(setting.choices), "choices only with choice"),
        ((setting.origin == "patched-image") != bool(setting.image),
         "an image on a patched-image setting only"),
        (not (setting.source.strip() and setting.version.strip()), "a source and a version"),
    ]
    if wrong := [message for bad, message in checks if bad]:
        raise SettingsFileError(f"{SETTINGS_FILE.name}: {setting.engine} {setting.name}: "
                                f"{', '.join(wrong)}")
    return setting


@cache
def declared(path: Path = SETTINGS_FILE) -> dict[tuple[str, str, str, str | None], Setting]:
    with open(path, "rb") as f:
        settings = [_setting(entry) for entry in tomllib.load(f)["setting"]]
    by_key = {s.key: s for s in settings}
    if len(by_key) != len(settings):
        raise SettingsFileError(f"{path.name}: a setting is declared twice")
    for s in settings:
        if s.form == "field" and (s.engine, "flag", s.parent, None) not in by_key:
            raise SettingsFileError(f"{path.name}: field {s.name} of undeclared {s.parent}")
    return by_key


def parse_command(engine: str, line: str) -> list[Printed]:
    """The settings a launch command line sets: the environment words before the program,
    its flags with their values, and the fields of each JSON-valued flag. A flag the list does
    not declare takes the next word as its value unless that word is a flag itself."""
    words = shlex.split(line)
    settings: list[Printed] = []
    while words and _ENV_WORD.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        settings.append(Printed(engine, "env", name, None, value))
    launch = LAUNCH[engine]
    if tuple(words[:len(launch)]) != launch:
        raise ValueError(f"not a {engine} launch command: {line!r}")
    words = words[len(launch) + POSITIONALS[engine]:]
    known = declared()
    while words:
        flag = words.pop(0)
        setting = known.get((engine, "flag", flag, None))
        takes_value = (setting.takes != "none" if setting
                       else bool(words) and not words[0].startswith("-"))
        argument = words.pop(0) if takes_value and words else None
        settings.append(Printed(engine, "flag", flag, None, argument))
        if setting is not None and setting.takes == "json" and argument is not None:
            settings += _fields(engine, flag, argument)
    return settings


def _fields(engine: str, flag: str, text: str) -> list[Printed]:
    try:
        fields = json.loads(text)
    except json.JSONDecodeError:
        fields = None
    if not isinstance(fields, dict):
        return [Printed(engine, "field", "(not a JSON object)", flag, text)]
    return [Printed(engine, "field", name, flag, value) for name, value in fields.items()]


def problems(settings: list[Printed]) -> list[str]:
    """One sentence for each setting the list does not declare, or sets a value it does
    not take."""
    known = declared()
    out = []
    for printed in settings:
        setting = known.get(printed.key)
        if setting is None:
            where = f" in {printed.parent}" if printed.parent else ""
            out.append(f"{printed.engine} has no {printed.form} {printed.name}{where} in "
                       f"{SETTINGS_FILE.name}")
        elif setting.takes != "json" and not setting.accepts(printed.value):
            out.append(f"{printed.shown()}: {printed.name} takes "
                       f"{', '.join(setting.choices) if setting.choices else setting.takes}")
    return out


def source_line(printed: Printed) -> str:
    """The declared setting's origin, source and version, for a comment beside the command."""
    setting = declared()[printed.key]
    if setting.origin == "patched-image":
        return (f"patched image only ({setting.image}); {setting.source}: "
                f"{setting.meaning}")
    version = setting.version[:12] if _COMMIT.fullmatch(setting.version) else setting.version
    default = f" (the engine's default: {setting.default})" if setting.default else ""
    return f"{setting.source} @ {version}: {setting.meaning}{default}"
