"""The chat-completions client: the `openai` SDK's timeouts and retries, request counts, a probe
of the endpoint, a stall watchdog, and the API key kept out of every message
(docs/rephrase.md#requests-and-retries)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from recipes.tools.rephrase.prompt import SOLVE_PROMPT


class RunError(Exception):
    """Stops the run; its message is safe to print (it never contains the API key)."""


def redact(text: str, secret: str | None) -> str:
    return text.replace(secret, "***") if secret else text


@dataclass
class Client:
    """Chat completions through the `openai` SDK, whose own retries (connection errors, timeouts,
    408, 409, 429, 5xx; exponential backoff with jitter; `Retry-After` honoured) apply to every
    request. Counts HTTP requests and retries; stops the run on the first request that still
    fails after its retries, on any other 4xx, and when nothing has been answered for
    `stall_s` seconds."""

    base_url: str
    model: str
    api_key: str | None
    temperature: float
    timeout_s: float
    max_retries: int
    concurrency: int
    max_tokens: int | None = None  # None: the endpoint's default (vLLM: up to the model's context)
    stall_s: float | None = None  # None: 3 x timeout_s
    requests: int = 0
    retries: int = 0
    verify_max_tokens: int = 2048  # per solution of a candidate (`--verify K`)
    _sdk: Any = field(default=None, repr=False)
    _sem: asyncio.Semaphore | None = field(default=None, repr=False)
    _last_answer: float = field(default=0.0, repr=False)

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    async def __aenter__(self) -> Client:
        import openai

        # no key: the SDK's placeholder (a local `vllm serve` without --api-key ignores it)
        self._sdk = openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=self.api_key or "EMPTY",
            timeout=self.timeout_s,
            max_retries=self.max_retries,
        )
        self._sem = asyncio.Semaphore(self.concurrency)
        self._last_answer = time.monotonic()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._sdk.close()

    async def probe(self) -> None:
        """Fail in seconds, not after every retry of every question, when nothing answers at
        base_url: one `GET /models` (10 s, one retry). Any HTTP answer, even an error, will do."""
        import openai

        try:
            await self._sdk.with_options(timeout=min(10.0, self.timeout_s), max_retries=1).models.list()
        except openai.APIStatusError:
            pass
        except (openai.APIConnectionError, openai.APITimeoutError) as exc:
            raise RunError(
                f"nothing answers at {self.base_url} ({type(exc).__name__}: {redact(str(exc), self.api_key)}); "
                "is the server running and --base-url right?"
            ) from None

    async def watchdog(self) -> None:
        """RunError once no request has been answered for `stall_s` seconds (a hung endpoint)."""
        limit = self.stall_s or 3 * self.timeout_s
        while True:
            await asyncio.sleep(min(limit, 1.0))
            if time.monotonic() - self._last_answer > limit:
                raise RunError(f"no answer from {self.url} for {limit:g} s; the endpoint seems to hang")

    async def complete(self, content: str) -> tuple[str, int, int]:
        """The answer's text for one user message, with (HTTP requests, retries) spent on it. A 200
        whose body is not a chat completion gives "" (the round finds no rephrasing)."""
        texts, reqs, retries, _ = await self._chat(content, 1, self.max_tokens)
        return texts[0], reqs, retries

    async def solve(self, problem: str, k: int) -> tuple[list[str], int, int, int]:
        """`k` sampled solutions of `problem` (SOLVE_PROMPT; one request, `n=k`), with (HTTP
        requests, retries, tokens as the endpoint reports them); missing choices come back as ""."""
        return await self._chat(SOLVE_PROMPT.format(problem=problem), k, self.verify_max_tokens)

    async def _chat(self, content: str, n: int, max_tokens: int | None) -> tuple[list[str], int, int, int]:
        """`n` answers' texts to one user message, (HTTP requests, retries), tokens used."""
        import openai

        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "user", "content": content}],
            "temperature": self.temperature,
        }
        if n > 1:
            kwargs["n"] = n
        if max_tokens is not None:
            kwargs["max_tokens"] = max_tokens
        async with self._sem:
            try:
                raw = await self._sdk.chat.completions.with_raw_response.create(**kwargs)
            except openai.APIStatusError as exc:
                taken = _retries_taken(exc, self.max_retries)
                self.requests += 1 + taken
                self.retries += taken
                body = redact(" ".join(exc.response.text.split())[:200], self.api_key)
                if _retryable(exc.status_code):
                    raise RunError(
                        f"request to {self.url} still failing after {taken} retries: "
                        f"HTTP {exc.status_code}{_retry_after_note(self._sdk, exc.response.headers)}"
                    ) from None
                raise RunError(f"HTTP {exc.status_code} from {self.url}: {body}") from None
            except (openai.APIConnectionError, openai.APITimeoutError) as exc:
                taken = _retries_taken(exc, self.max_retries)
                self.requests += 1 + taken
                self.retries += taken
                problem = "timed out" if isinstance(exc, openai.APITimeoutError) else str(exc)
                raise RunError(
                    f"request to {self.url} still failing after {taken} retries: "
                    f"{redact(problem, self.api_key)}"
                ) from None
        self._last_answer = time.monotonic()
        retries = raw.retries_taken
        self.requests += 1 + retries
        self.retries += retries
        texts, tokens = [], 0
        try:
            parsed = raw.parse()
            texts = [c.message.content for c in parsed.choices]
            tokens = int(getattr(parsed.usage, "total_tokens", 0) or 0)
        except (ValueError, AttributeError, IndexError, TypeError, openai.APIResponseValidationError):
            pass
        # an endpoint may echo what it was sent, the Authorization header too: never cache the key
        texts = [redact(t, self.api_key) if isinstance(t, str) else "" for t in texts[:n]]
        return texts + [""] * (n - len(texts)), 1 + retries, retries, tokens


def _retries_taken(exc: Exception, default: int) -> int:
    """The retries the SDK made before the request that failed (it numbers each request's attempt
    in the `x-stainless-retry-count` header); `default` where the request cannot be read."""
    try:
        return int(exc.request.headers.get("x-stainless-retry-count", default))  # type: ignore[attr-defined]
    except (AttributeError, RuntimeError, TypeError, ValueError):
        return default


def _retry_after_note(sdk: Any, headers: Any) -> str:
    """Why the SDK gave up early: a `Retry-After` beyond the longest wait it honours (120 s), read
    with the SDK's own parser (milliseconds, seconds or a date)."""
    from openai._constants import MAX_RETRY_AFTER_DELAY

    wait = sdk._parse_retry_after_header(headers)
    if wait is None or wait <= MAX_RETRY_AFTER_DELAY:
        return ""
    return (
        f" (the server asked to wait {wait:g} s before retrying, Retry-After; this tool waits "
        f"at most {MAX_RETRY_AFTER_DELAY} s, so it did not retry: try again later)"
    )


def _retryable(status: int) -> bool:
    """What the SDK retries: a final error with this status is reported with the retries it made."""
    return status in (408, 409, 429) or status >= 500
