"""The gateway's one exception, its small set of codes, and the mapping from provider errors to them.

Callers (the agent runtime, the chat surface) branch on `code`; users read `message`, in the active language.
"""

from __future__ import annotations

import json
from typing import Any

import openai
from django.utils.translation import get_language, gettext, gettext_noop, override

AUTH_FAILED = "auth_failed"
RATE_LIMITED = "rate_limited"
PROVIDER_TIMEOUT = "provider_timeout"
CONTEXT_TOO_LONG = "context_too_long"
PROVIDER_UNREACHABLE = "provider_unreachable"
QUOTA_EXCEEDED = "quota_exceeded"
PROVIDER_QUOTA_EXCEEDED = "provider_quota_exceeded"
PROVIDER_ERROR = "provider_error"
STREAM_DROPPED = "stream_dropped"
CANCELLED = "cancelled"
# Not the model's: the platform process writing the reply died (engine.interrupted.end_interrupted_turns).
INTERRUPTED = "interrupted"
BAD_REQUEST = "bad_request"
PRIVATE_ADDRESS = "private_address"
HOST_UNRESOLVED = "host_unresolved"
# An API client asked for JSON (response_format) and the model's reply was not, even after one repair.
INVALID_OUTPUT = "invalid_output"

# English msgids for gettext, and the Chinese text used while the compiled catalog lacks a translation, so the
# Chinese UI never shows an English error because `compilemessages` has not run yet.
_MESSAGES: dict[str, tuple[str, str]] = {
    AUTH_FAILED: (
        gettext_noop(
            "The model provider refused the API key. Check the provider's API key in Admin › Models › Model providers."
        ),
        "模型服务商拒绝了 API 密钥。请在“管理后台 › 模型 › 模型服务商”中检查它的 API 密钥。",
    ),
    RATE_LIMITED: (
        gettext_noop("The model provider is rate limiting requests. Wait a moment and try again."),
        "模型服务商限流，请稍候再试。",
    ),
    PROVIDER_TIMEOUT: (
        gettext_noop("The model provider did not answer in time. Try again, or raise the provider's timeout."),
        "模型服务商未在规定时间内响应。请重试，或调大它的超时时间。",
    ),
    CONTEXT_TOO_LONG: (
        gettext_noop(
            "The conversation is too long for the model's context window. Shorten it or choose a larger model."
        ),
        "对话超出了模型的上下文窗口。请缩短内容或选择上下文更大的模型。",
    ),
    PROVIDER_UNREACHABLE: (
        gettext_noop("The model provider cannot be reached. Check its base URL and that the server is running."),
        "无法连接模型服务商。请检查它的基础 URL 以及服务是否在运行。",
    ),
    QUOTA_EXCEEDED: (
        gettext_noop(
            "This tenant's monthly token budget is used up, so the call was not sent. "
            "Ask the platform operator to raise it."
        ),
        "本租户本月的 Token 预算已用完，调用未发送。请联系平台运营者提高预算。",
    ),
    PROVIDER_QUOTA_EXCEEDED: (
        gettext_noop("The model provider account has no quota or credit left. Top it up at the provider."),
        "模型服务商账户的额度或余额已用完。请到服务商处充值。",
    ),
    PROVIDER_ERROR: (
        gettext_noop("The model provider returned an error. Try again later."),
        "模型服务商返回了错误，请稍后再试。",
    ),
    STREAM_DROPPED: (
        gettext_noop("The model's reply was cut off mid-way. The partial answer is kept; try again."),
        "模型的回复中途断开。已保留部分回答，请重试。",
    ),
    CANCELLED: (gettext_noop("The model call was cancelled."), "模型调用已取消。"),
    INTERRUPTED: (
        gettext_noop(
            "The reply was cut off because the server writing it stopped. What arrived is kept; send your message "
            "again."
        ),
        "生成回复的服务器进程中途停止，回复被中断。已保留收到的部分，请重新发送消息。",
    ),
    PRIVATE_ADDRESS: (
        gettext_noop(
            "The model provider's base URL is a private or loopback address, where the platform does not send "
            "requests. Ask the platform operator to allow it, or use the provider's public address."
        ),
        "模型服务商的基础 URL 是私有或回环地址，平台不会向其发送请求。请联系平台运营者放行，或改用它的公网地址。",
    ),
    HOST_UNRESOLVED: (
        gettext_noop(
            "The host name of the model provider's base URL does not resolve to an address. Check the base URL in "
            "Admin › Models › Model providers."
        ),
        "模型服务商基础 URL 中的主机名无法解析为地址。请在“管理后台 › 模型 › 模型服务商”中检查基础 URL。",
    ),
    BAD_REQUEST: (
        gettext_noop("The model provider rejected the request. Check the model name and the provider settings."),
        "模型服务商拒绝了请求。请检查模型名称和服务商设置。",
    ),
    INVALID_OUTPUT: (
        gettext_noop(
            "The model's reply did not follow the requested response format (JSON, or the JSON schema), even when "
            "asked again. Simplify the schema, or choose a model that supports structured output."
        ),
        "模型的回复不符合请求的响应格式（JSON 或 JSON Schema），重新要求后仍不符合。"
        "请简化 Schema，或换用支持结构化输出的模型。",
    ),
}

RETRYABLE = frozenset({RATE_LIMITED, PROVIDER_ERROR, PROVIDER_UNREACHABLE})


def message_for(code: str, language: str | None = None) -> str:
    """The user-facing message of `code` in `language` (default: the active language)."""
    english, chinese = _MESSAGES.get(code, _MESSAGES[PROVIDER_ERROR])
    language = language or get_language() or "en"
    with override(language):
        text = gettext(english)
    if text == english and language.lower().startswith("zh"):
        return chinese
    return text


class LLMError(Exception):
    """A model call failed, for a reason named by `code`.

    `message` is for users; `detail` is the provider's own words for logs (API keys scrubbed); `partial_text`
    holds what was streamed before a failure; `retry_after` is the provider's hint in seconds, if any.
    """

    def __init__(
        self,
        code: str,
        message: str | None = None,
        *,
        detail: str = "",
        status: int | None = None,
        partial_text: str = "",
        retry_after: float | None = None,
    ) -> None:
        self.code = code
        self._message = message
        self.detail = detail
        self.status = status
        self.partial_text = partial_text
        self.retry_after = retry_after
        super().__init__(code)

    @property
    def message(self) -> str:
        return self._message or message_for(self.code)

    @property
    def retryable(self) -> bool:
        return self.code in RETRYABLE

    def __str__(self) -> str:
        return f"[{self.code}] {self._message or message_for(self.code, 'en')}"


_CONTEXT_MARKERS = ("context_length_exceeded", "maximum context length", "context length", "too many tokens")
_QUOTA_MARKERS = ("insufficient_quota", "exceeded your current quota", "quota", "arrearage", "balance")


def _scrub(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return text[:500]


def _body_code_and_text(body: Any) -> tuple[str, str]:
    """The provider's error code and message from an OpenAI-style error body ({"error": {...}})."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            return str(inner.get("code") or inner.get("type") or ""), str(inner.get("message") or "")
        return "", str(inner)
    if isinstance(body, (str, bytes)):
        return "", body.decode() if isinstance(body, bytes) else body
    return "", json.dumps(body, default=str) if body is not None else ""


def code_for_status(status: int, body_code: str = "", text: str = "") -> str:
    """The gateway code for an HTTP error status and the provider's own error code/text."""
    probe = f"{body_code} {text}".lower()
    if status in (401, 403):
        return AUTH_FAILED
    if status == 429:
        return (
            PROVIDER_QUOTA_EXCEEDED
            if any(m in probe for m in ("insufficient_quota", "exceeded your current quota"))
            else RATE_LIMITED
        )
    if status == 402:
        return PROVIDER_QUOTA_EXCEEDED
    if status in (400, 413, 422):
        if any(marker in probe for marker in _CONTEXT_MARKERS) or status == 413:
            return CONTEXT_TOO_LONG
        return BAD_REQUEST
    if status == 404:
        return BAD_REQUEST
    if status == 408:
        return PROVIDER_TIMEOUT
    return PROVIDER_ERROR


def _retry_after(headers: Any) -> float | None:
    if headers is None:
        return None
    for name in ("retry-after-ms", "retry-after"):
        value = headers.get(name)
        if value:
            try:
                seconds = float(value)
            except ValueError:
                return None
            return seconds / 1000 if name.endswith("-ms") else seconds
    return None


def from_exception(
    exc: BaseException, *, secrets: tuple[str, ...] = (), partial_text: str = "", streaming: bool = False
) -> LLMError:
    """Map an exception raised while talking to a provider (the openai SDK's or the transport's) to an LLMError.

    `streaming` means the response had started: a broken connection then is a dropped stream, not an unreachable
    provider.
    """

    if isinstance(exc, LLMError):
        if partial_text and not exc.partial_text:
            exc.partial_text = partial_text
        return exc
    if isinstance(exc, openai.APITimeoutError):
        return LLMError(PROVIDER_TIMEOUT, detail=_scrub(str(exc), secrets), partial_text=partial_text)
    if isinstance(exc, openai.APIStatusError):
        body_code, text = _body_code_and_text(exc.body)
        code = code_for_status(exc.status_code, body_code, text or str(exc))
        return LLMError(
            code,
            detail=_scrub(f"HTTP {exc.status_code} {body_code} {text}".strip(), secrets),
            status=exc.status_code,
            partial_text=partial_text,
            retry_after=_retry_after(getattr(exc.response, "headers", None)),
        )
    if isinstance(exc, openai.APIConnectionError):
        return LLMError(
            STREAM_DROPPED if streaming else PROVIDER_UNREACHABLE,
            detail=_scrub(f"{exc}: {exc.__cause__!r}" if exc.__cause__ else str(exc), secrets),
            partial_text=partial_text,
        )
    if isinstance(exc, openai.APIError):
        # An error event inside an SSE stream ({"error": ...} in a data line) arrives as a bare APIError.
        body_code, text = _body_code_and_text(getattr(exc, "body", None))
        probe = f"{body_code} {text}".lower()
        code = CONTEXT_TOO_LONG if any(m in probe for m in _CONTEXT_MARKERS) else PROVIDER_ERROR
        return LLMError(code, detail=_scrub(f"{body_code} {text or exc}".strip(), secrets), partial_text=partial_text)
    name = type(exc).__name__
    if "Timeout" in name:
        return LLMError(PROVIDER_TIMEOUT, detail=_scrub(f"{name}: {exc}", secrets), partial_text=partial_text)
    if isinstance(exc, (OSError, EOFError)) or any(word in name for word in ("Protocol", "Network", "Connect", "Read")):
        return LLMError(
            STREAM_DROPPED if streaming else PROVIDER_UNREACHABLE,
            detail=_scrub(f"{name}: {exc}", secrets),
            partial_text=partial_text,
        )
    return LLMError(PROVIDER_ERROR, detail=_scrub(f"{name}: {exc}", secrets), partial_text=partial_text)
