"""Test data for memory: files and synthetic vectors."""

from __future__ import annotations

import io

import numpy as np


def pdf_with_text(text: str) -> bytes:
    """Return a one-page PDF whose text layer holds ``text`` (ASCII, one line)."""
    safe = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    stream = f"BT /F1 12 Tf 72 720 Td ({safe}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length "
        + str(len(stream)).encode()
        + b" >>\nstream\n"
        + stream
        + b"\nendstream",
    ]
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(f"{i} 0 obj\n".encode() + body + b"\nendobj\n")
    xref = out.tell()
    out.write(f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode())
    for off in offsets:
        out.write(f"{off:010d} 00000 n \n".encode())
    out.write(
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\n"
        f"startxref\n{xref}\n%%EOF\n".encode()
    )
    return out.getvalue()


def pdf_shared_stream(
    *, pages: int, text_bytes: int = 0, content: bytes | None = None
) -> bytes:
    """Return a small PDF of ``pages`` pages that all draw one Flate-compressed content
    stream showing ``text_bytes`` letters (or holding ``content``, operators of your
    own): each page's text extraction parses the whole stream again (a few KB of file,
    ``pages`` times the stream's bytes to parse)."""
    import zlib

    if content is None:
        content = b"BT /F1 12 Tf 72 720 Td (" + b"A" * text_bytes + b") Tj ET"
    packed = zlib.compress(content, 9)
    kids = " ".join(f"{4 + i} 0 R" for i in range(pages)).encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count " + str(pages).encode() + b" >>",
        b"<< /Length "
        + str(len(packed)).encode()
        + b" /Filter /FlateDecode >>\nstream\n"
        + packed
        + b"\nendstream",
    ]
    font = 4 + pages
    objects += [
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 " + str(font).encode() + b" 0 R >> >> "
        b"/Contents 3 0 R >>"
    ] * pages
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    return _pdf_write(objects)


def _pdf_write(objects: list[bytes]) -> bytes:
    """Return a PDF file of ``objects`` (numbered from 1; object 1 the catalog)."""
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(f"{i} 0 obj\n".encode() + body + b"\nendobj\n")
    xref = out.tell()
    out.write(f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode())
    for off in offsets:
        out.write(f"{off:010d} 00000 n \n".encode())
    out.write(
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\n"
        f"startxref\n{xref}\n%%EOF\n".encode()
    )
    return out.getvalue()


def pdf_without_text() -> bytes:
    """Return a valid PDF with one blank page (no text layer, like a scan)."""
    from pypdf import PdfWriter

    writer = PdfWriter()
    writer.add_blank_page(width=612, height=792)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def random_unit_vectors(n: int, *, seed: int = 0, dim: int = 384) -> np.ndarray:
    """Return ``n`` random unit vectors (float32, shape (n, dim))."""
    rng = np.random.default_rng(seed)
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def chunks_bulk_load(*, document, vectors, build_index: bool = True) -> None:
    """Insert one chunk per row of ``vectors`` for ``document`` fast (binary COPY).

    Inside the current transaction: drops the HNSW index, copies the rows and builds
    the index again in one pass (inserting into a live HNSW index row by row is ~100x
    slower). Texts are ``"{title} passage {i}"``. For tests and benchmarks only.
    """
    from django.db import connection
    from pgvector.psycopg.vector import register_vector_info
    from psycopg.types import TypeInfo

    connection.ensure_connection()
    with connection.cursor() as c:
        c.execute("SET CONSTRAINTS ALL IMMEDIATE")
        c.execute("DROP INDEX IF EXISTS chunk_embedding_hnsw")
    raw = connection.connection.cursor()
    # Binary vector dumpers on this cursor only (Django's own adapters stay as they are).
    register_vector_info(raw, TypeInfo.fetch(connection.connection, "vector"))
    start = document.chunks.count()
    with raw.copy(
        "COPY memory_chunk (document_id, user_id, ord, text, start_char, end_char, "
        "embedding) FROM STDIN WITH (FORMAT BINARY)"
    ) as copy:
        copy.set_types(["int8", "int4", "int4", "text", "int4", "int4", "vector"])
        for i, v in enumerate(vectors, start):
            copy.write_row(
                (
                    document.id,
                    document.user_id,
                    i,
                    f"{document.title} passage {i}",
                    0,
                    1,
                    v,
                )
            )
    raw.close()
    if build_index:
        hnsw_index_build()


def hnsw_index_build() -> None:
    """(Re)create the chunk HNSW index as the migration defines it."""
    from django.db import connection

    with connection.cursor() as c:
        c.execute("SET LOCAL maintenance_work_mem = '256MB'")
        c.execute(
            "CREATE INDEX IF NOT EXISTS chunk_embedding_hnsw ON memory_chunk "
            "USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)"
        )
        c.execute("ANALYZE memory_chunk")
