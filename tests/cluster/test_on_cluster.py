"""The chat turn, the API, quotas, caches, resuming and embedding requests, run on
a Redis Cluster: the suites' own tests (imported here, so each runs twice: on one
node in its module, on the cluster here, with every Redis client of the product
pointed at it by tests/cluster/conftest.py)."""

from __future__ import annotations

import pytest

from tests.conversations.openai.conftest import one_minute  # noqa: F401
from tests.conversations.openai.test_stream import (  # noqa: F401
    test_a_repeated_deterministic_request_is_answered_by_the_exact_cache,
)
from tests.conversations.openai.test_views import (  # noqa: F401
    test_a_completion_returns_the_answer_with_usage_and_records_it_once,
    test_a_request_over_its_limit_gets_the_429_whatever_else_is_wrong,
    test_a_stream_sends_role_deltas_finish_usage_and_done,
)
from tests.conversations.test_turn import (  # noqa: F401
    test_reconnect_with_last_event_id_yields_exactly_the_rest,
    test_stop_aborts_generation_within_one_second_and_keeps_the_partial_text,
    test_turn_streams_tokens_and_persists_the_answer_with_usage,
)
from tests.gateway.test_cache import (  # noqa: F401
    test_exact_hit_at_temperature_0_streams_without_a_job_and_costs_nothing,
)
from tests.gateway.test_generations_reads import (  # noqa: F401
    routed,
    test_the_load_read_with_the_reservation_still_refuses_a_full_pool,
)
from tests.gateway.test_quota import (  # noqa: F401
    test_a_failed_request_consumes_nothing_and_is_recorded_once,
    test_concurrent_requests_never_spend_past_the_budget,
)
from tests.gateway.test_requestrate import (  # noqa: F401
    test_the_reservation_counts_the_request_in_its_own_script,
)
from tests.inference.test_embeddings import (  # noqa: F401
    test_a_lone_job_whose_caller_left_is_dropped_unrun,
    test_answered_requests_leave_no_result_stream,
    test_no_live_worker_fails_at_once_and_enqueues_nothing,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster]
