"""Parsing a /v1/embeddings body (conversations/openai/embedding_requests.py), directly;
the views' 4xx answers are in test_embeddings.py."""

from __future__ import annotations

import json

import pytest

from chatsite.errors import InvalidInput
from conversations.openai.embedding_requests import (
    EmbeddingRequest,
    embedding_request_parse,
)


def test_a_string_input_is_one_text_and_the_defaults_are_float_and_no_dimensions():
    parsed = embedding_request_parse(
        json.dumps({"model": " e5 ", "input": "hi"}).encode()
    )
    assert parsed == EmbeddingRequest(model="e5", texts=["hi"])


def test_every_field_given_is_kept():
    body = {
        "model": "e5",
        "input": ["a", "b"],
        "encoding_format": "base64",
        "dimensions": 8,
        "user": "u-1",
    }
    assert embedding_request_parse(json.dumps(body).encode()) == EmbeddingRequest(
        model="e5", texts=["a", "b"], encoding_format="base64", dimensions=8, user="u-1"
    )


@pytest.mark.parametrize("raw", [b"", b"{not json", b'"text"', b"\xff"])
def test_a_body_that_is_not_a_json_object_is_invalid_json_with_no_param(raw):
    with pytest.raises(InvalidInput) as caught:
        embedding_request_parse(raw)
    assert caught.value.code == "invalid_json" and caught.value.param is None


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "hi"}, "model"),
        ({"model": "e5", "input": [1, 2]}, "input"),
        ({"model": "e5", "input": "hi", "dimensions": True}, "dimensions"),
    ],
)
def test_an_invalid_field_is_named_in_param(body, param):
    with pytest.raises(InvalidInput) as caught:
        embedding_request_parse(json.dumps(body).encode())
    assert caught.value.param == param
