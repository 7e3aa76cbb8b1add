"""What a surface asks the gateway to generate: one value, built once, passed down.

The chat turn, the OpenAI-compatible API and evaluation each build a
:class:`GenerationRequest` and hand it to :func:`gateway.generations.generation_start`,
which hands it on to admission (:func:`gateway.generations.generation_admit`) and
submission; no layer re-lists its fields as keyword arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User

from gateway.cache import CachePolicy
from gateway.requestrate import RequestCounter
from inference.embeddings import TextVector


@dataclass(frozen=True)
class GenerationRequest:
    """A request for one generation, as a surface describes it.

    - ``user``: who asks (quota, plan, suspension, moderation events);
    - ``messages``: the OpenAI chat messages to send (``role``/``content``);
    - ``params``: sampling parameters (``max_tokens`` in tokens; ``cache`` true opts
      in to cached answers and is never enqueued);
    - ``surface``: a :data:`gateway.generations.Surface` value (chat / api), what
      moderation events and the follower name;
    - ``model``: an explicit pool/model choice (None: the plan's routing decides);
    - ``prompt_tokens``: the prompt's tokens by the serving model's tokenizer and
      chat template, reserved (None: :func:`gateway.generations.prompt_tokens_estimate`);
    - ``context_tokens``: the prompt's tokens checked against the routed pool's
      ``max_context`` (None: not checked);
    - ``cache_policy``: how the answer caches may be used (None: not at all);
    - ``query``: the shared :class:`TextVector` of the user's message, read by input
      moderation and the semantic cache (None: the last user message is moderated);
    - ``conversation_id``/``message_id``: what a moderation event refers to;
    - ``client_authored``: the client wrote every message (the API), so input
      moderation screens all of them;
    - ``fallback``: False refuses a saturated pool rather than replacing it by its
      fallback (evaluation runs pin their pool);
    - ``max_tokens_strict``: a ``max_tokens`` above the routed pool's limit is refused
      (the API: the client chose it) rather than lowered to the limit;
    - ``tools_optional``: the tool parameters (:data:`inference.params.TOOLS`) are an
      offer (the chat's tools): dropped, not refused, when the routed pool's engine
      does not implement them;
    - ``request_count``: an API request still to count against its requests per
      minute (:class:`gateway.requestrate.RequestCounter`); admission counts it in
      the reservation's round trip, or before input moderation when that is on (a
      request over its limit is refused before it is screened). None: not counted.

    Frozen: admission copies ``params`` before it caps them, and nothing downstream
    changes the request.
    """

    user: User
    messages: list[dict[str, str]]
    params: dict[str, Any]
    surface: str
    model: str | None = None
    prompt_tokens: int | None = None
    context_tokens: int | None = None
    cache_policy: CachePolicy | None = None
    query: TextVector | None = None
    conversation_id: Any = None
    message_id: Any = None
    client_authored: bool = False
    fallback: bool = True
    max_tokens_strict: bool = False
    tools_optional: bool = False
    request_count: RequestCounter | None = None
