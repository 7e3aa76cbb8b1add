"""Domain exceptions shared by every app (CONVENTIONS §3).

Services raise these; :mod:`chatsite.http` maps them to HTTP in one place and the SSE
relay maps them to ``error`` events. Every message is written for the person who sees it.
"""

from __future__ import annotations


class DomainError(Exception):
    """Base of the errors a user can see: an HTTP status, a stable code and a message."""

    status = 400
    code = "bad_request"
    message = "The request could not be processed."
    # Whether the same request can succeed later (a client may retry it after
    # ``retry_after_s`` seconds). Surfaces read these fields, never the message text.
    retryable = False
    # The request field the error is about (OpenAI's ``error.param``), where one is.
    param: str | None = None

    def __init__(
        self,
        message: str | None = None,
        *,
        code: str | None = None,
        headers: dict[str, str] | None = None,
        retryable: bool | None = None,
        retry_after_s: int | None = None,
        status: int | None = None,
    ) -> None:
        self.message = message or self.message
        self.code = code or self.code
        self.headers = dict(headers or {})
        if status is not None:
            self.status = status
        if retryable is not None:
            self.retryable = retryable
        if retry_after_s is None and "Retry-After" in self.headers:
            retry_after_s = int(self.headers["Retry-After"])
        self.retry_after_s = retry_after_s
        if retry_after_s is not None:
            self.headers.setdefault("Retry-After", str(retry_after_s))
        super().__init__(self.message)


class InvalidInput(DomainError):
    """The input is malformed or empty (400)."""

    status = 400
    code = "invalid_input"


class PayloadTooLarge(DomainError):
    """The input is over a configured size limit (413)."""

    status = 413
    code = "too_large"


class NotFound(DomainError):
    """The object does not exist or belongs to someone else (404, never 403: no leak)."""

    status = 404
    code = "not_found"
    message = "Not found."


class Conflict(DomainError):
    """The object is in a state that forbids the action (409)."""

    status = 409
    code = "conflict"


class ServiceUnavailable(DomainError):
    """A backing service cannot take the request now (503, with ``Retry-After``)."""

    status = 503
    code = "unavailable"
    retryable = True


class Forbidden(DomainError):
    """The user may not do this (403), e.g. a model their plan does not include."""

    status = 403
    code = "forbidden"


class QuotaExceeded(DomainError):
    """A token or request limit is reached (429, with ``Retry-After`` and
    ``x-ratelimit-*`` headers)."""

    status = 429
    code = "quota_exceeded"
    message = "You have reached a usage limit. Please wait and try again."
    retryable = True


class PoolSaturated(ServiceUnavailable):
    """Every model pool that could serve the request is busy or down (503)."""

    code = "pool_saturated"
    message = "The assistant is busy right now. Please try again in a moment."


class ModerationBlocked(InvalidInput):
    """The input was refused by the content policy (400, OpenAI's
    ``content_policy_violation`` on ``messages``). ``category`` is the matched
    moderation category's value; the message names it and says what the user can do."""

    status = 400
    code = "content_policy_violation"
    param = "messages"
    message = "This message was not sent because it goes against the content policy."

    def __init__(self, message: str | None = None, *, category: str = "") -> None:
        super().__init__(message)
        self.category = category


class Suspended(Forbidden):
    """The user's account is suspended (403 ``account_suspended``): the message names
    the reason and when the suspension ends (UTC)."""

    code = "account_suspended"
    message = "Your account is suspended."
