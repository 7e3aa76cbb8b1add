"""The one generation lifecycle of the gateway: start, follow, settle.

Every surface that makes the model write — the chat turn, the OpenAI-compatible API —
goes through these three steps, so a policy added here (quotas, caches, fallback,
output moderation) applies to all of them and none can skip it:

- **start** (:mod:`.start`, :mod:`.admission`): the surface builds a
  :class:`GenerationRequest` (:mod:`.request`); admit it (input moderation, route,
  reserve tokens, caches, admission control), store the surface's rows, submit the job;
- **follow** (:mod:`.follow`): the only async reader of a generation's Redis stream
  (resume, coalescing, stream policies, watchdog, fallback restart, settlement);
- **settle** (:mod:`.settle`): the outcome (:mod:`.outcome`, one map for every
  surface) stored once, its usage recorded and its reservation settled, by whoever
  sees the end first — the follower, or the reaper.
"""

from gateway.generations.admission import (
    Admission,
    Surface,
    generation_admit,
    generation_release,
    input_check,
    last_user_text,
    prompt_tokens_estimate,
    quota_seed_from_records,
    reservation_guard,
)
from gateway.generations.follow import coalesce_interval_s, generation_follow
from gateway.generations.items import (
    Broken,
    Delta,
    Ended,
    Idle,
    Meta,
    Queued,
    ToolCall,
)
from gateway.generations.leave import generation_leave
from gateway.generations.outcome import GenerationFailed, Outcome, outcome_from_events
from gateway.generations.params_fit import ContextOverflow, UnsupportedParameter
from gateway.generations.policy import Release, StreamPolicy
from gateway.generations.request import GenerationRequest
from gateway.generations.settle import (
    Recorder,
    Settlement,
    generation_settle,
    generation_sweep,
    outcome_settle,
    usage_cost,
    usage_settle,
)
from gateway.generations.start import (
    Generation,
    Started,
    generation_abandon,
    generation_cancel,
    generation_start,
    generation_submit,
)

__all__ = [
    "Admission",
    "Broken",
    "ContextOverflow",
    "UnsupportedParameter",
    "Delta",
    "ToolCall",
    "Ended",
    "Generation",
    "GenerationFailed",
    "GenerationRequest",
    "Idle",
    "Meta",
    "Outcome",
    "Queued",
    "Recorder",
    "Release",
    "Settlement",
    "Started",
    "StreamPolicy",
    "Surface",
    "coalesce_interval_s",
    "generation_abandon",
    "generation_admit",
    "generation_cancel",
    "generation_follow",
    "generation_leave",
    "generation_release",
    "generation_settle",
    "generation_start",
    "generation_submit",
    "generation_sweep",
    "input_check",
    "last_user_text",
    "outcome_from_events",
    "outcome_settle",
    "prompt_tokens_estimate",
    "quota_seed_from_records",
    "reservation_guard",
    "usage_cost",
    "usage_settle",
]
