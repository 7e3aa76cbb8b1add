"""Bounded document reading: the upload request only stores the file; the ingest task
reads it within caps and fails a file over one with a message naming the cap, keeping
nothing of it (memory/extract.py, memory/pdf_text.py)."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from memory import extract, pdf_text, services
from memory.models import Chunk, Document
from tests.memory.factories import pdf_shared_stream, pdf_with_text

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("embedding_worker")]

# Ten pages that share one Flate stream of 2 MiB of text: a 3.5 KB file that asks a
# reader to parse 20 MiB (more than MEMORY_PDF_MAX_CONTENT_BYTES' default of 16 MiB).
SHARED_PAGES, SHARED_TEXT_BYTES = 10, 2 * 1024 * 1024


def upload(client, name, data):
    return client.post(
        reverse("document-upload"), {"file": SimpleUploadedFile(name, data)}
    )


def assert_failed_and_empty(document, *, words):
    document.refresh_from_db()
    assert document.status == Document.Status.FAILED
    for word in words:
        assert word in document.error
    assert document.text == "" and bytes(document.data) == b""
    assert not Chunk.objects.filter(document=document).exists()


def test_the_upload_request_reads_no_pdf_and_the_task_refuses_the_shared_stream(
    auth_client, user, monkeypatch, django_capture_on_commit_callbacks
):
    bomb = pdf_shared_stream(pages=SHARED_PAGES, text_bytes=SHARED_TEXT_BYTES)
    assert len(bomb) < 4096

    def no_reading_here(**kwargs):
        raise AssertionError("the request extracted text")

    monkeypatch.setattr(extract, "text_extract", no_reading_here)
    monkeypatch.setattr(services, "text_extract", no_reading_here)
    with django_capture_on_commit_callbacks(execute=False) as queued:
        response = upload(auth_client, "bomb.pdf", bomb)
    assert response.status_code == 302
    document = Document.objects.get(user=user)
    assert document.status == Document.Status.PENDING
    assert bytes(document.data) == bomb and document.text == ""
    assert len(queued) == 1  # the ingest task, queued after commit

    monkeypatch.undo()
    queued[0]()  # CELERY_TASK_ALWAYS_EAGER: the task runs here
    assert_failed_and_empty(document, words=["bomb.pdf", "16,777,216 bytes"])
    page = auth_client.get(reverse("document-list")).content.decode()
    assert 'data-status="failed"' in page and "16,777,216 bytes" in page


def test_a_pdf_over_the_page_cap_fails_naming_the_cap(user, settings):
    settings.MEMORY_PDF_MAX_PAGES = 3
    document = services.document_upload(
        user=user,
        name="long.pdf",
        data=pdf_shared_stream(pages=4, text_bytes=10),
        ingest_on_commit=False,
    )
    services.document_ingest(document_id=document.id)
    assert_failed_and_empty(document, words=["4 pages", "limit is 3 pages"])


def test_text_over_the_character_cap_fails_for_pdf_and_text_files(user, settings):
    settings.MEMORY_EXTRACT_MAX_CHARS = 100
    for name, data in [
        ("wordy.pdf", pdf_with_text("x" * 101)),
        ("wordy.txt", b"y" * 101),
    ]:
        document = services.document_upload(
            user=user, name=name, data=data, ingest_on_commit=False
        )
        services.document_ingest(document_id=document.id)
        assert_failed_and_empty(document, words=[name, "100 characters"])


def test_a_reader_past_its_deadline_is_stopped_and_the_document_fails(user, settings):
    settings.MEMORY_EXTRACT_TIMEOUT_S = 0.001  # less than starting the reader takes
    document = services.document_upload(
        user=user,
        name="slow.pdf",
        data=pdf_with_text("fine text"),
        ingest_on_commit=False,
    )
    services.document_ingest(document_id=document.id)
    assert_failed_and_empty(document, words=["slow.pdf", "0.001 seconds"])


def test_a_pdf_within_the_caps_is_read_and_its_bytes_dropped(user):
    document = services.document_upload(
        user=user,
        name="ok.pdf",
        data=pdf_with_text("The vault code is ZEBRA-7731."),
        ingest_on_commit=False,
    )
    document = services.document_ingest(document_id=document.id)
    assert document.status == Document.Status.READY
    assert "ZEBRA-7731" in document.text and bytes(document.data) == b""


def test_the_reader_counts_a_shared_stream_once_per_page():
    result = pdf_text.pdf_text(
        name="s.pdf",
        data=pdf_shared_stream(pages=5, text_bytes=1000),
        max_pages=10,
        max_content_bytes=4 * 1024,  # one copy fits, five do not
        max_chars=10**6,
    )
    assert result[:2] == ("error", "content_too_large")


def test_an_upload_over_the_size_limit_names_the_limit_not_the_bytes_read(
    auth_client, settings
):
    settings.MEMORY_UPLOAD_MAX_BYTES = 1000
    response = upload(auth_client, "big.txt", b"z" * 30_000)
    page = auth_client.get(response.url).content.decode()
    assert "larger than the upload limit of 1,000 bytes" in page
    assert "1,001" not in page
    assert not Document.objects.exists()
