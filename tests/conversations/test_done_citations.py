"""Done frames of answers settled in one batch each carry their own citations, in
number order (conversations/sse.py: ``_finals_read`` reads every answer's citations
in one query and groups them)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from conversations.models import Conversation, Message
from conversations.sse import _FinalRecorder, _finals_read
from memory.models import EMBEDDING_DIM, Chunk, Citation, Document

pytestmark = pytest.mark.django_db


def _answer_citing(user, title: str, ords: list[int]) -> tuple[Message, Document]:
    """An answer citing passages ``ords`` of a new document, numbered in reverse of
    their creation (so id order is not number order)."""
    conversation = Conversation.objects.create(user=user, title=title)
    question = Message.objects.create(
        conversation=conversation, role="user", content="Where?"
    )
    answer = Message.objects.create(
        conversation=conversation, role="assistant", parent=question, content="There."
    )
    doc = Document.objects.create(user=user, title=title, content_type="md")
    for number, ord_ in reversed(list(enumerate(ords, start=1))):
        chunk = Chunk.objects.create(
            document=doc,
            user=user,
            ord=ord_,
            text=f"passage {ord_}",
            start_char=0,
            end_char=9,
            embedding=[0.0] * EMBEDDING_DIM,
        )
        Citation.objects.create(message=answer, chunk=chunk, number=number)
    return answer, doc


def test_answers_read_together_each_get_their_own_citations_in_number_order(user):
    heron, heron_doc = _answer_citing(user, "heron.md", [3, 0])
    plain = Message.objects.create(
        conversation=heron.conversation, role="assistant", content="No sources."
    )
    lark, lark_doc = _answer_citing(user, "lark.md", [1])
    recorders = [_FinalRecorder(m.id) for m in (heron, plain, lark)]

    _finals_read(recorders)

    def cited(recorder: _FinalRecorder) -> list[tuple[int, str, int, str]]:
        assert recorder.final is not None
        return [
            (c["number"], c["title"], c["passage"], c["url"])
            for c in recorder.final[1]["citations"]
        ]

    heron_url = reverse("document-detail", args=[heron_doc.id])
    lark_url = reverse("document-detail", args=[lark_doc.id])
    assert cited(recorders[0]) == [
        (1, "heron.md", 4, heron_url + "#p3"),
        (2, "heron.md", 1, heron_url + "#p0"),
    ]
    assert cited(recorders[1]) == []
    assert cited(recorders[2]) == [(1, "lark.md", 2, lark_url + "#p1")]
