"""Documents: upload, ingest, status page, bad input, delete (memory/services.py, views)."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.urls import reverse

from chatsite.errors import InvalidInput, PayloadTooLarge
from chatsite.uploads import upload_file_name
from conversations import services as chat_services
from inference.embeddings import embed_text
from memory import selectors, services
from memory.models import Chunk, Document
from tests.memory.factories import pdf_with_text, pdf_without_text

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("embedding_worker")]

NOTES = (
    "Project Heron notes.\n\nThe launch window opens on 14 March. "
    "The budget owner is Dana Whitfield. "
) * 40


def upload(client, name, data):
    return client.post(
        reverse("document-upload"), {"file": SimpleUploadedFile(name, data)}
    )


def test_upload_is_chunked_embedded_and_shown_ready_on_the_documents_page(
    auth_client, user, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(auth_client, "heron.md", NOTES.encode())
    assert response.status_code == 302
    document = Document.objects.get(user=user)
    assert document.status == Document.Status.READY
    assert document.content_type == "md"
    chunks = list(document.chunks.order_by("ord"))
    assert len(chunks) == document.chunk_count > 1
    for c in chunks:
        assert document.text[c.start_char : c.end_char] == c.text
        assert len(c.embedding) == 384
    page = auth_client.get(reverse("document-list"))
    assert page.status_code == 200
    assert b"heron.md" in page.content and b'data-status="ready"' in page.content
    listing = auth_client.get(
        reverse("document-list"), HTTP_ACCEPT="application/json"
    ).json()
    assert listing["documents"][0]["status"] == "ready"
    detail = auth_client.get(reverse("document-detail", args=[document.id]))
    assert b'id="p0"' in detail.content


def test_an_uploads_name_keeps_all_but_its_leading_directories(auth_client, user):
    """The newcomer trial's ``../../etc/<b>passwd</b>.txt`` was listed as ``b>.txt``
    (cut at the ``/`` of ``</b>``). The test client would cut the name itself, so
    the multipart body is written here as a browser or script sends it."""
    boundary = "----trial"
    body = (
        f"--{boundary}\r\n"
        'Content-Disposition: form-data; name="file"; '
        'filename="../../etc/<b>passwd</b>.txt"\r\n'
        "Content-Type: text/plain\r\n\r\n"
        "root:x:0:0\r\n"
        f"--{boundary}--\r\n"
    ).encode()
    response = auth_client.post(
        reverse("document-upload"),
        body,
        content_type=f"multipart/form-data; boundary={boundary}",
    )
    assert response.status_code == 302
    assert Document.objects.get(user=user).title == "<b>passwd<\u2215b>.txt"
    page = auth_client.get(reverse("document-list")).content.decode()
    assert "&lt;b&gt;passwd&lt;\u2215b&gt;.txt" in page  # shown as text
    assert "<b>passwd" not in page


@pytest.mark.parametrize(
    ("raw", "kept"),
    [
        ("notes.md", "notes.md"),
        ("../../etc/<b>passwd</b>.txt", "<b>passwd<\u2215b>.txt"),
        ("C:\\Users\\ada\\report.pdf", "report.pdf"),
        ("/tmp/a<b/c.txt", "a<b\u2215c.txt"),
        ("dir/..", ""),
        ("bell\x07.txt", "bell.txt"),
    ],
)
def test_upload_file_name_drops_directories_and_keeps_the_rest(raw, kept):
    assert upload_file_name(raw) == kept


def test_pdf_text_layer_is_ingested(user):
    document = services.document_upload(
        user=user,
        name="memo.pdf",
        data=pdf_with_text("The vault code is ZEBRA-7731."),
        ingest_on_commit=False,
    )
    document = services.document_ingest(document_id=document.id)
    assert document.status == Document.Status.READY
    assert "ZEBRA-7731" in document.chunks.get().text


@pytest.mark.parametrize(
    ("name", "data", "error", "code"),
    [
        ("virus.exe", b"MZ...", InvalidInput, "unsupported_type"),
        ("empty.txt", b"", InvalidInput, "empty_file"),
        ("big.txt", b"x" * 2049, PayloadTooLarge, "file_too_large"),
    ],
)
def test_bad_upload_gets_a_clear_message_and_stores_nothing(
    user, settings, name, data, error, code
):
    settings.MEMORY_UPLOAD_MAX_BYTES = 2048
    with pytest.raises(error) as info:
        services.document_upload(user=user, name=name, data=data)
    assert info.value.code == code
    assert name in info.value.message
    assert not Document.objects.exists() and not Chunk.objects.exists()


@pytest.mark.parametrize(
    ("name", "data", "words"),
    [
        ("blank.md", b"  \n\t ", "has no text"),
        ("latin1.txt", "caf\xe9".encode("latin-1"), "not UTF-8"),
        ("scan.pdf", None, "has no text layer"),
        ("broken.pdf", b"%PDF-1.4 garbage", "could not be read as a PDF"),
    ],
)
def test_unreadable_file_fails_in_the_task_with_a_clear_message_and_no_chunk(
    user, name, data, words
):
    if data is None:
        data = pdf_without_text()
    document = services.document_upload(
        user=user, name=name, data=data, ingest_on_commit=False
    )
    document = services.document_ingest(document_id=document.id)
    assert document.status == Document.Status.FAILED
    assert name in document.error and words in document.error
    assert document.text == "" and bytes(document.data) == b""
    assert not Chunk.objects.exists()


def test_bad_upload_through_the_page_shows_the_message(
    auth_client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(auth_client, "scan.pdf", pdf_without_text())
    page = auth_client.get(response.url)
    assert "has no text layer" in page.content.decode()
    assert Document.objects.get().status == Document.Status.FAILED


def test_failed_ingest_is_marked_failed_with_no_chunk_left(user, monkeypatch):
    document = services.document_upload(
        user=user, name="a.txt", data=NOTES.encode(), ingest_on_commit=False
    )

    def broken(texts, **kwargs):
        raise RuntimeError("embedding backend exploded")

    monkeypatch.setattr(services, "embed_texts", broken)
    document = services.document_ingest(document_id=document.id)
    assert document.status == Document.Status.FAILED
    assert "exploded" in document.error
    assert not Chunk.objects.exists()


def test_deleting_a_document_removes_its_chunks_and_marker_search_finds_nothing(
    user,
):
    marker = "Xylophone-Quasar-4411 is the secret launch phrase."
    doc = services.document_upload(
        user=user,
        name="secret.txt",
        data=(NOTES + marker).encode(),
        ingest_on_commit=False,
    )
    services.document_ingest(document_id=doc.id)
    vector = embed_text(marker)
    hits = selectors.chunks_search(user=user, vector=vector, k=3)
    assert any("Xylophone-Quasar-4411" in h.chunk.text for h in hits)
    services.document_delete(user=user, document_id=doc.id)
    assert not Chunk.objects.filter(document_id=doc.id).exists()
    assert selectors.chunks_search(user=user, vector=vector, k=3) == []


def test_deleting_a_conversation_deletes_the_documents_uploaded_in_it(
    user, pool_heartbeat
):
    turn = chat_services.turn_start(user=user, content="hello")
    doc = services.document_upload(
        user=user,
        name="in-chat.txt",
        data=NOTES.encode(),
        conversation_id=turn.conversation.id,
        ingest_on_commit=False,
    )
    services.document_ingest(document_id=doc.id)
    assert Chunk.objects.filter(document=doc).exists()
    chat_services.conversation_delete(user=user, conversation_id=turn.conversation.id)
    assert not Document.objects.filter(id=doc.id).exists()
    assert not Chunk.objects.exists()


def test_another_users_document_is_not_visible_or_deletable(auth_client, other_user):
    doc = services.document_upload(
        user=other_user, name="theirs.txt", data=b"private", ingest_on_commit=False
    )
    assert auth_client.get(reverse("document-detail", args=[doc.id])).status_code == 404
    response = auth_client.post(reverse("document-delete", args=[doc.id]))
    assert response.status_code == 404
    assert Document.objects.filter(id=doc.id).exists()


def test_ingest_documents_command_loads_a_directory(tmp_path, user, capsys):
    (tmp_path / "a.txt").write_text(NOTES)
    (tmp_path / "b.md").write_text("# Title\n\nSome *markdown* body")
    (tmp_path / "skip.bin").write_bytes(b"\x00\x01")
    call_command("ingest_documents", str(tmp_path), "--user", user.username)
    out = capsys.readouterr()
    assert out.out.count("chunks") == 2
    assert "chunk" in out.err  # the progress bar
    assert set(Document.objects.values_list("status", flat=True)) == {"ready"}


def test_documents_page_status_json_follows_a_document_to_ready(auth_client, user):
    """The page polls its JSON (static/documents.js; tests/browser/test_layout.py
    checks the row turns Ready in a browser) instead of reloading itself."""
    doc = services.document_upload(
        user=user, name="wait.txt", data=NOTES.encode(), ingest_on_commit=False
    )
    url = reverse("document-list")
    page = auth_client.get(url).content.decode()
    assert 'data-status="pending"' in page and 'http-equiv="refresh"' not in page
    polled = auth_client.get(url, HTTP_ACCEPT="application/json").json()
    assert polled["documents"][0]["status"] == "pending"
    services.document_ingest(document_id=doc.id)
    polled = auth_client.get(url, HTTP_ACCEPT="application/json").json()
    assert polled["documents"][0]["status_display"] == "Ready"


@pytest.mark.django_db
def test_ingest_command_without_an_embedding_worker_says_so_and_keeps_nothing(
    tmp_path, django_user_model, settings
):
    settings.EMBEDDING_POOL = "embed-nobody-serves"
    owner = django_user_model.objects.create_user(username="bob", password="pw-b-1")
    (tmp_path / "a.md").write_text("Some notes about herons.")
    with pytest.raises(CommandError, match="Start an embedding worker"):
        call_command("ingest_documents", str(tmp_path), "--user", owner.username)
    assert not Document.objects.filter(user=owner).exists()
