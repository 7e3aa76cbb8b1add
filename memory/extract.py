"""Turn an uploaded file into text: .txt / .md (UTF-8) and .pdf (pypdf text layer).

Raises :class:`chatsite.errors.InvalidInput` (unsupported type, empty, undecodable, a
PDF with no text layer or that cannot be read) or :class:`PayloadTooLarge` (over the
size limit, in bytes), each with a message for the person who uploaded it.
"""

from __future__ import annotations

import io
from pathlib import PurePath

from chatsite.errors import InvalidInput, PayloadTooLarge

SUPPORTED_TYPES = {".txt": "txt", ".md": "md", ".markdown": "md", ".pdf": "pdf"}


def file_type(name: str) -> str:
    """Return ``txt``, ``md`` or ``pdf`` from a file name; raises InvalidInput otherwise."""
    suffix = PurePath(name or "").suffix.lower()
    if suffix not in SUPPORTED_TYPES:
        raise InvalidInput(
            f"“{name}” is not a supported file type. Upload a .txt, .md or .pdf file.",
            code="unsupported_type",
        )
    return SUPPORTED_TYPES[suffix]


def text_extract(*, name: str, data: bytes, max_bytes: int) -> tuple[str, str]:
    """Return ``(type, text)`` of an uploaded file of ``len(data)`` bytes.

    ``max_bytes`` is the size limit in bytes. Text files must be UTF-8 (a BOM is
    dropped). NUL characters, which PostgreSQL text cannot hold, become spaces.
    """
    kind = file_type(name)
    if len(data) > max_bytes:
        raise PayloadTooLarge(
            f"“{name}” is {len(data):,} bytes; the limit is {max_bytes:,} bytes.",
            code="file_too_large",
        )
    if not data:
        raise InvalidInput(f"“{name}” is empty.", code="empty_file")
    if kind == "pdf":
        text = _pdf_text(name, data)
    else:
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise InvalidInput(
                f"“{name}” is not UTF-8 text. Save it as UTF-8 and upload it again.",
                code="not_utf8",
            ) from exc
    text = text.replace("\x00", " ")
    if not text.strip():
        raise InvalidInput(f"“{name}” has no text in it.", code="empty_file")
    return kind, text


def _pdf_text(name: str, data: bytes) -> str:
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data))
        pages = [page.extract_text() or "" for page in reader.pages]
    except (PyPdfError, ValueError, KeyError, TypeError, OSError) as exc:
        raise InvalidInput(
            f"“{name}” could not be read as a PDF.", code="bad_pdf"
        ) from exc
    text = "\n\n".join(p.strip("\n") for p in pages)
    if not text.strip():
        raise InvalidInput(
            f"“{name}” has no text layer (it looks like a scanned image). "
            "Upload a PDF with selectable text, or a .txt/.md file.",
            code="pdf_no_text",
        )
    return text
