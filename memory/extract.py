"""Turn an uploaded file into text: .txt / .md (UTF-8) and .pdf (pypdf text layer).

Two steps, split by cost. :func:`upload_check` runs in the upload request and looks
only at the name and the byte count. :func:`text_extract` runs in the ingest task
(:mod:`memory.tasks`), never in a request: a PDF is read in a child process
(:mod:`memory.pdf_text`) that runs at the lowest CPU priority under a memory cap and
is killed at a deadline, with caps on pages, decompressed page content and characters
(:class:`ExtractLimits`, from the MEMORY_EXTRACT_* and MEMORY_PDF_* settings).

Errors raise :class:`chatsite.errors.InvalidInput` (unsupported type, empty, not UTF-8,
unreadable PDF, no text layer) or :class:`PayloadTooLarge` (over a cap); each message
is for the person who uploaded the file and names the cap it is over.
"""

from __future__ import annotations

import multiprocessing
from dataclasses import asdict, dataclass
from pathlib import PurePath

from django.conf import settings

from chatsite.errors import DomainError, InvalidInput, PayloadTooLarge

SUPPORTED_TYPES = {".txt": "txt", ".md": "md", ".markdown": "md", ".pdf": "pdf"}


@dataclass(frozen=True)
class ExtractLimits:
    """Caps of one extraction: pages, decompressed page content (bytes), characters
    of text, wall time (s) and memory (bytes) of the PDF reader's process."""

    max_pages: int
    max_content_bytes: int
    max_chars: int
    timeout_s: float
    max_memory_bytes: int

    @classmethod
    def from_settings(cls) -> ExtractLimits:
        """The caps configured in settings (chatsite/settings/base.py)."""
        return cls(
            max_pages=settings.MEMORY_PDF_MAX_PAGES,
            max_content_bytes=settings.MEMORY_PDF_MAX_CONTENT_BYTES,
            max_chars=settings.MEMORY_EXTRACT_MAX_CHARS,
            timeout_s=settings.MEMORY_EXTRACT_TIMEOUT_S,
            max_memory_bytes=settings.MEMORY_EXTRACT_MAX_MEMORY_BYTES,
        )


def file_type(name: str) -> str:
    """Return ``txt``, ``md`` or ``pdf`` from a file name; raises InvalidInput otherwise."""
    suffix = PurePath(name or "").suffix.lower()
    if suffix not in SUPPORTED_TYPES:
        raise InvalidInput(
            f"“{name}” is not a supported file type. Upload a .txt, .md or .pdf file.",
            code="unsupported_type",
        )
    return SUPPORTED_TYPES[suffix]


def upload_too_large(name: str, max_bytes: int) -> PayloadTooLarge:
    """The error of a file larger than ``max_bytes`` bytes (its exact size may be
    unknown: the request stops reading at the limit)."""
    return PayloadTooLarge(
        f"“{name}” is larger than the upload limit of {max_bytes:,} bytes "
        f"({max_bytes / 1024 / 1024:.1f} MB). Nothing was saved.",
        code="file_too_large",
    )


def upload_check(*, name: str, size: int, max_bytes: int) -> str:
    """Return the type of an uploaded file of ``size`` bytes (checks only the name and
    the size: no parsing). Raises InvalidInput (unsupported type, empty) or
    PayloadTooLarge (over ``max_bytes``)."""
    kind = file_type(name)
    if size > max_bytes:
        raise upload_too_large(name, max_bytes)
    if size == 0:
        raise InvalidInput(f"“{name}” is empty.", code="empty_file")
    return kind


def _text_too_large(name: str, max_chars: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"“{name}” has more than {max_chars:,} characters of text; the limit is "
        f"{max_chars:,} characters.",
        code="text_too_large",
    )


def text_extract(*, name: str, kind: str, data: bytes, limits: ExtractLimits) -> str:
    """Return the text of a ``kind`` file's ``data`` within ``limits``.

    Text files must be UTF-8 (a BOM is dropped). NUL characters, which PostgreSQL
    text cannot hold, become spaces. Raises InvalidInput or PayloadTooLarge (module
    docstring).
    """
    if kind == "pdf":
        text = _pdf_text_bounded(name, data, limits)
    else:
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise InvalidInput(
                f"“{name}” is not UTF-8 text. Save it as UTF-8 and upload it again.",
                code="not_utf8",
            ) from exc
        if len(text) > limits.max_chars:
            raise _text_too_large(name, limits.max_chars)
    text = text.replace("\x00", " ")
    if not text.strip():
        raise InvalidInput(f"“{name}” has no text in it.", code="empty_file")
    return text


def _pdf_text_bounded(name: str, data: bytes, limits: ExtractLimits) -> str:
    """Run :func:`memory.pdf_text.pdf_text` in a child process (spawned: nothing of
    this process, its connections or threads, is shared) and wait at most
    ``limits.timeout_s`` seconds; the child is killed at the deadline."""
    from memory.pdf_text import child_main

    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    kwargs = {
        "name": name,
        "data": data,
        "max_pages": limits.max_pages,
        "max_content_bytes": limits.max_content_bytes,
        "max_chars": limits.max_chars,
    }
    caps = {**asdict(limits), "cpu_s": limits.timeout_s}
    child = context.Process(target=child_main, args=(sender, caps, kwargs), daemon=True)
    child.start()
    sender.close()
    try:
        if not receiver.poll(limits.timeout_s):
            raise PayloadTooLarge(
                f"Reading “{name}” took longer than the limit of "
                f"{limits.timeout_s:g} seconds.",
                code="extract_timeout",
            )
        result = receiver.recv()
    except EOFError:  # the child died: over its memory or CPU cap
        result = ("error", "extract_memory", "")
    finally:
        receiver.close()
        if child.is_alive():
            child.kill()
        child.join()
    if result[0] == "ok":
        return str(result[1])
    return _child_error(name, result[1], result[2], limits)


def _child_error(name: str, code: str, message: str, limits: ExtractLimits) -> str:
    """Raise the DomainError of a child's ``("error", code, message)``."""
    error: DomainError
    if code == "extract_memory":
        error = PayloadTooLarge(
            f"Reading “{name}” needed more than the limit of "
            f"{limits.max_memory_bytes // (1024 * 1024):,} MB of memory.",
            code=code,
        )
    elif code in {"bad_pdf", "pdf_no_text"}:
        error = InvalidInput(message, code=code)
    else:
        error = PayloadTooLarge(message, code=code)
    raise error
