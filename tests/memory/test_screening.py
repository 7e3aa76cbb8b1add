"""Chunks screened at ingestion through the MEMORY_CHUNK_SCREENER hook
(memory/services.py), kept out of retrieval (memory/selectors.py), shown on the
Documents pages and in admin (memory/admin.py).

The hook here is a stand-in named by its dotted path, as a deployment names
``safety.documents.chunks_screen`` (whose own tests are tests/safety/test_chunks_screen.py):
memory knows only the contract.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from chatsite.errors import ServiceUnavailable
from inference.embeddings import embed_text
from memory import selectors, services, tasks
from memory.models import Chunk, Document

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("embedding_worker")]

HOOK = "tests.memory.test_screening.screen_marked"
MARK = "QUARANTINE-ME"
GOOD = "The heron project launches on 14 March from the north pad."
BAD = f"{MARK} <script>alert(1)</script> The heron project launch is secret."
calls: list[dict] = []


def screen_marked(*, texts, vectors):
    """Flag texts holding MARK, like a screener would flag an injected instruction."""
    calls.append({"texts": list(texts), "dims": [len(v) for v in vectors]})
    return [("prompt_injection", 0.97) if MARK in t else None for t in texts]


def screen_down(*, texts, vectors):
    raise ServiceUnavailable("Content moderation is unavailable right now.")


@pytest.fixture
def hook(settings):
    settings.MEMORY_CHUNK_SCREENER = HOOK
    calls.clear()
    return calls


def ingest(user, *texts, name="heron.md"):
    """One document whose chunks are exactly ``texts`` (one chunk each)."""
    ids = []
    for i, text in enumerate(texts):
        doc = services.document_upload(
            user=user, name=f"{i}-{name}", data=text.encode(), ingest_on_commit=False
        )
        services.document_ingest(document_id=doc.id)
        ids.append(doc.id)
    return ids


def test_each_chunk_is_screened_with_its_retrieval_vector_and_flags_are_stored(
    user, hook
):
    good_id, bad_id = ingest(user, GOOD, BAD)
    assert [c["texts"] for c in hook] == [[GOOD], [BAD]]
    assert all(c["dims"] == [384] for c in hook)  # the vectors computed for retrieval
    bad = Chunk.objects.get(document_id=bad_id)
    assert (bad.flagged, bad.moderation_category, bad.moderation_score) == (
        True,
        "prompt_injection",
        0.97,
    )
    good = Chunk.objects.get(document_id=good_id)
    assert (good.flagged, good.moderation_category, good.moderation_score) == (
        False,
        "",
        None,
    )
    assert Document.objects.get(id=bad_id).status == Document.Status.READY


def test_flagged_chunks_are_not_retrieved_unless_the_setting_includes_them(
    user, hook, settings
):
    _, bad_id = ingest(user, GOOD, BAD)
    vector = embed_text("When does the heron project launch?")
    hits = selectors.chunks_search(user=user, vector=vector, k=5)
    assert [h.chunk.text for h in hits] == [GOOD]
    settings.MEMORY_RETRIEVE_FLAGGED = True
    hits = selectors.chunks_search(user=user, vector=vector, k=5)
    assert {h.chunk.document_id for h in hits} >= {bad_id}


def test_without_a_screener_nothing_is_flagged(user, settings):
    settings.MEMORY_CHUNK_SCREENER = ""
    [bad_id] = ingest(user, BAD)
    assert not Chunk.objects.get(document_id=bad_id).flagged


def test_a_screener_that_cannot_judge_leaves_the_document_waiting_to_be_retried(
    user, settings
):
    settings.MEMORY_CHUNK_SCREENER = "tests.memory.test_screening.screen_down"
    doc = services.document_upload(
        user=user, name="a.md", data=GOOD.encode(), ingest_on_commit=False
    )
    with pytest.raises(ServiceUnavailable):
        services.document_ingest(document_id=doc.id)
    doc.refresh_from_db()
    assert doc.status == Document.Status.PENDING
    assert "Waiting to be checked" in doc.error and "moderation" in doc.error
    assert not Chunk.objects.exists()
    # the task (eager here: no retry possible) ends it failed with the reason
    assert tasks.ingest_document.apply(args=[doc.id]).get() == "failed"
    doc.refresh_from_db()
    assert doc.status == Document.Status.FAILED and "moderation" in doc.error


def test_the_documents_pages_say_which_passages_were_flagged(user, auth_client, hook):
    good_id, bad_id = ingest(user, GOOD, BAD)
    page = auth_client.get(reverse("document-list")).content.decode()
    assert page.count('class="flagged"') == 1
    assert 'data-flagged="1"' in page and "1 flagged, not used in answers" in page
    listing = auth_client.get(
        reverse("document-list"), HTTP_ACCEPT="application/json"
    ).json()["documents"]
    assert {d["id"]: d["flagged_chunks"] for d in listing} == {good_id: 0, bad_id: 1}
    detail = auth_client.get(reverse("document-detail", args=[bad_id])).content
    detail = detail.decode()
    assert "passage-flagged" in detail and "prompt injection" in detail
    assert "&lt;script&gt;" in detail and "<script>alert" not in detail


@pytest.fixture
def admin_client(client, django_user_model):
    admin = django_user_model.objects.create_superuser("boss", "b@x.test", "pw-boss-1")
    client.force_login(admin)
    return client


def test_admin_lists_flagged_chunks_escaped_with_the_document_one_click_away(
    user, hook, admin_client
):
    good_id, bad_id = ingest(user, GOOD, BAD)
    url = reverse("admin:memory_chunk_changelist") + "?flagged__exact=1"
    html = admin_client.get(url).content.decode()
    assert MARK in html and GOOD not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>alert(1)" not in html
    assert reverse("admin:memory_document_change", args=[bad_id]) in html
    docs = admin_client.get(reverse("admin:memory_document_changelist")).content
    link = f"?document__id__exact={bad_id}&amp;flagged__exact=1"
    assert link in docs.decode()
    chunk = Chunk.objects.get(document_id=bad_id)
    detail = admin_client.get(reverse("admin:memory_chunk_change", args=[chunk.pk]))
    assert detail.status_code == 200 and "&lt;script&gt;" in detail.content.decode()
