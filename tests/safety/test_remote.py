"""The remote backend against a mocked OpenAI-compatible /v1/moderations."""

from __future__ import annotations

import json

import httpx
import pytest

from safety.categories import Category
from safety.classifiers import ModerationUnavailable
from safety.classifiers.remote import RemoteClassifier


def _scores(**scores: float) -> dict[str, float]:
    names = [
        "harassment",
        "hate",
        "self-harm",
        "self-harm/intent",
        "self-harm/instructions",
        "sexual",
        "sexual/minors",
        "violence",
        "illicit",
        "illicit/violent",
    ]
    return {n: scores.get(n.replace("/", "_").replace("-", "_"), 0.01) for n in names}


def _transport(
    seen: list[dict[str, object]], results: list[dict[str, object]]
) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(
            {
                "url": str(request.url),
                "auth": request.headers.get("authorization"),
                "body": json.loads(request.content),
            }
        )
        return httpx.Response(
            200, json={"id": "modr-1", "model": "m", "results": results}
        )

    return httpx.MockTransport(handler)


def test_scores_map_onto_our_categories() -> None:
    seen: list[dict[str, object]] = []
    results = [{"flagged": True, "category_scores": _scores(violence=0.9, hate=0.7)}]
    backend = RemoteClassifier(
        base_url="http://mod.test/v1",
        api_key="k",
        model="m",
        transport=_transport(seen, results),
    )
    verdict = backend.classify("some text")
    assert set(verdict.flagged) == {Category.VIOLENCE, Category.HATE}
    assert verdict.flagged[0] is Category.VIOLENCE
    assert seen == [
        {
            "url": "http://mod.test/v1/moderations",
            "auth": "Bearer k",
            "body": {"model": "m", "input": ["some text"]},
        }
    ]


def test_distress_is_recorded_not_flagged() -> None:
    results = [{"category_scores": _scores(self_harm=0.8, self_harm_intent=0.9)}]
    backend = RemoteClassifier(
        base_url="http://mod.test/v1", transport=_transport([], results)
    )
    verdict = backend.classify("I feel like giving up")
    assert verdict.flagged == ()
    assert set(verdict.hazards) == {"self-harm", "self-harm/intent"}


def test_batch_is_one_request() -> None:
    seen: list[dict[str, object]] = []
    results = [
        {"category_scores": _scores()},
        {"category_scores": _scores(illicit=0.95)},
    ]
    backend = RemoteClassifier(
        base_url="http://mod.test/v1", transport=_transport(seen, results)
    )
    verdicts = backend.classify_batch(["a", "b"])
    assert [v.flagged for v in verdicts] == [(), (Category.FRAUD,)]
    assert len(seen) == 1


@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(500, text="boom"),
        httpx.Response(200, text="not json"),
        httpx.Response(200, json={"results": []}),
    ],
)
def test_a_failing_endpoint_is_moderation_unavailable(response: httpx.Response) -> None:
    transport = httpx.MockTransport(lambda request: response)
    with pytest.raises(ModerationUnavailable):
        RemoteClassifier(base_url="http://mod.test/v1", transport=transport).classify(
            "x"
        )


def test_an_unreachable_endpoint_is_moderation_unavailable() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(ModerationUnavailable, match="ConnectError"):
        RemoteClassifier(
            base_url="http://mod.test/v1", transport=httpx.MockTransport(refuse)
        ).classify("x")
