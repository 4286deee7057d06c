"""OpenAI request shapes the bundled server accepts, and its OpenAI-style error bodies."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator


class APIError(Exception):
    """Becomes an OpenAI error object with this HTTP status."""

    def __init__(self, status: int, message: str, code: str = "invalid_request_error",
                 param: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.param = param
        self.headers = headers or {}

    def body(self) -> dict:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": str(self), "type": kind, "param": self.param,
                          "code": self.code}}


class StreamOptions(BaseModel):
    include_usage: bool = False


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
    seed: int | None = None
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


class Message(BaseModel):
    role: str
    content: str


class ChatRequest(_Common):
    messages: list[Message] = Field(min_length=1)


class CompletionRequest(_Common):
    prompt: str | list[str]

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, value: str | list[str]) -> str:
        if isinstance(value, list):
            if len(value) != 1:
                raise ValueError("exactly one prompt is supported")
            return value[0]
        return value


class TokenizeRequest(BaseModel):
    model: str | None = None
    prompt: str | None = None
    messages: list[Message] | None = None
