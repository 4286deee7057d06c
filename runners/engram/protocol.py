"""OpenAI request shapes the bundled server accepts, and its OpenAI-style error bodies."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

# OpenAI parameters this server does not implement, each with the value that asks for nothing:
# anything else is refused rather than silently ignored.
NEUTRAL: dict[str, object] = {
    "n": 1, "best_of": 1, "logprobs": False, "top_logprobs": 0, "echo": False, "suffix": "",
    "logit_bias": {}, "presence_penalty": 0, "frequency_penalty": 0,
}
INT64 = 2**63


class APIError(Exception):
    """Becomes an OpenAI error object with this HTTP status."""

    def __init__(self, status: int, message: str, code: str | None = "invalid_request_error",
                 param: str | None = None, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.param = param
        self.headers: Mapping[str, str] = headers or {}

    def body(self) -> dict:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": str(self), "type": kind, "param": self.param,
                          "code": self.code}}


def json_object(body: bytes) -> dict:
    """The request body as a JSON object, else a 400 (json's parser recurses: nesting past
    about a thousand levels ends it in RecursionError)."""
    try:
        data = json.loads(body)
    except RecursionError:
        raise APIError(400, "the request body nests JSON too deeply to parse") from None
    except ValueError:
        raise APIError(400, "the request body is not valid JSON") from None
    if not isinstance(data, dict):
        raise APIError(400, "the request body must be a JSON object")
    return data


def reject_unsupported(data: dict) -> None:
    """A 400 for the first parameter that asks for what this server does not do."""
    for name, neutral in NEUTRAL.items():
        value = data.get(name)
        # bools apart: logprobs 0 (a completions count) is not logprobs false
        if value is None or (value == neutral
                             and isinstance(value, bool) == isinstance(neutral, bool)):
            continue
        raise APIError(400, f"{name}={json.dumps(value)} is not supported by this server; "
                       f"omit it or send {json.dumps(neutral)}", code="unsupported_parameter",
                       param=name)


class StreamOptions(BaseModel):
    include_usage: bool = False
    continuous_usage_stats: bool = False  # usage on every chunk too (as vLLM offers)


class _Common(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str
    max_tokens: int | None = Field(default=None)
    max_completion_tokens: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False
    min_tokens: int = Field(default=0, ge=0)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: int | None = Field(default=None, ge=-INT64, lt=INT64)  # int64, as vLLM
    stop: str | list[str] | None = None

    @property
    def requested_tokens(self) -> int:
        value = self.max_completion_tokens or self.max_tokens
        return 16 if value is None else value

    @property
    def stop_strings(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else [s for s in self.stop if s]

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    @property
    def usage_per_chunk(self) -> bool:
        """Each chunk carries the usage so far: its tokens are then known, not estimated."""
        return bool(self.stream_options and self.stream_options.include_usage
                    and self.stream_options.continuous_usage_stats)


_T = TypeVar("_T")


def _encodable(value: _T) -> _T:
    """Refuse text JSON may carry but no tokenizer can: a lone surrogate such as "\\ud800"."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("text must be valid Unicode; it holds a lone surrogate "
                             "(an unpaired \\ud800-\\udfff escape)") from None
    return value


def _part_text(part: object) -> str:
    if not isinstance(part, dict):
        raise ValueError("each content part must be an object with a type")
    if part.get("type") != "text":
        raise ValueError(f"content parts of type {json.dumps(part.get('type'))} are not "
                         "supported by this server; send text parts only")
    if not isinstance(part.get("text"), str):
        raise ValueError("a text content part needs a string `text`")
    return part["text"]


class Message(BaseModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str

    @field_validator("content", mode="before")
    @classmethod
    def _text_parts(cls, value: object) -> object:
        """SDKs and agent frameworks send a list of parts: text parts join with newlines
        (as vLLM joins them); any other part is refused, never dropped."""
        if isinstance(value, list):
            return "\n".join(_part_text(part) for part in value)
        return value

    @field_validator("content")
    @classmethod
    def _content_encodable(cls, value: str) -> str:
        return _encodable(value)


class ChatRequest(_Common):
    messages: list[Message] = Field(min_length=1)


class CompletionRequest(_Common):
    prompt: str | list[int]  # text or token ids (checked against the vocabulary by serving)

    @field_validator("prompt", mode="before")
    @classmethod
    def _one_prompt(cls, value: object) -> object:
        """A batch ([text] or [[ids]]) is accepted with exactly one prompt in it."""
        if isinstance(value, list) and value and isinstance(value[0], str | list):
            if len(value) != 1:
                raise ValueError("exactly one prompt is supported")
            return value[0]
        return value

    @field_validator("prompt")
    @classmethod
    def _prompt_encodable(cls, value: str | list[int]) -> str | list[int]:
        return _encodable(value)


class TokenizeRequest(BaseModel):
    model: str | None = None
    prompt: str | None = None
    messages: list[Message] | None = None

    @field_validator("prompt")
    @classmethod
    def _prompt_encodable(cls, value: str | None) -> str | None:
        return _encodable(value)
