"""The OpenAI-compatible API (DESIGN §8): ``POST /v1/chat/completions``, ``GET /v1/models``.

Bearer API keys (``Authorization: Bearer sk-...``, :func:`gateway.services.api_key_authenticate`);
no session, no CSRF. A request takes the same gateway path as a chat turn: routing,
token reservation and admission (:func:`gateway.generations.generation_start` with a
:class:`gateway.generations.GenerationRequest`) before anything is enqueued (429 with
``Retry-After`` and ``x-ratelimit-*`` headers; 503 when every pool that could answer is
saturated).
The generation's Redis stream is relayed as ``chat.completion.chunk`` SSE lines
(``data: [DONE]`` at the end) or collected into one ``chat.completion``. Its usage is
settled exactly once (one :class:`gateway.models.UsageRecord`) when the terminal event
arrives; a client that disconnects cancels the job. API requests are not stored as
conversations.

One module per job:

- :mod:`.requests`, :mod:`.embedding_requests`: parse and validate the request
  bodies (pure).
- :mod:`.errors`: the one mapping of domain errors to OpenAI's error shape and HTTP.
- :mod:`.stream`: admit, enqueue and follow a generation; settle its usage once.
- :mod:`.chunks`: render completion objects and SSE lines (pure).
- :mod:`.schemas`: the schema of every object the API emits (checked by the tests).
- :mod:`.views`: the two async views; :mod:`.urls`: their URLconf, which
  ``chatsite.asgi`` also reads to route API paths to the API's own handler.
"""
