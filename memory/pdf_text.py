"""Read the text layer of a PDF within caps; runs in a child process
(:func:`memory.extract.text_extract`).

Imports only pypdf and the standard library, so the child starts fast. A PDF is cheap
to write and can be costly to read: one compressed content stream can be shared by
every page, and each page that refers to it is parsed again. So before any text is
extracted, the decompressed length of each page's content streams (and of the form
XObjects its resources name) is summed over all pages, a shared stream once per page
that uses it, and compared with ``max_content_bytes``; the page count is checked
first and the extracted text is cut off at ``max_chars``.

:func:`pdf_text` returns ``("ok", text)`` or ``("error", code, message)`` with a
message for the person who uploaded the file; never raises for a bad file.
"""

from __future__ import annotations

import io
from typing import Any

Result = tuple[str, ...]


def _stream_length(obj: Any, seen: dict[int, int]) -> int:
    """Decompressed length of one stream (bytes); pypdf caches the decoded data, so a
    stream shared by many pages is decompressed once."""
    key = id(obj)
    if key not in seen:
        seen[key] = len(obj.get_data())
    return seen[key]


def _page_content_bytes(page: Any, seen: dict[int, int]) -> int:
    """Bytes of content a page's text extraction parses: its content streams and the
    form XObjects of its resources (one level)."""
    total = 0
    contents = page.get("/Contents")
    if contents is not None:
        contents = contents.get_object()
        parts = contents if isinstance(contents, list) else [contents]
        for part in parts:
            total += _stream_length(part.get_object(), seen)
    resources = page.get("/Resources")
    xobjects = resources.get_object().get("/XObject") if resources else None
    if xobjects:
        for ref in xobjects.get_object().values():
            xobject = ref.get_object()
            if xobject.get("/Subtype") == "/Form":
                total += _stream_length(xobject, seen)
    return total


def pdf_text(
    *, name: str, data: bytes, max_pages: int, max_content_bytes: int, max_chars: int
) -> Result:
    """Return the text of the PDF ``data`` (pages joined by a blank line).

    Caps: ``max_pages`` pages, ``max_content_bytes`` bytes of decompressed page
    content (summed per page, see the module docstring), ``max_chars`` characters of
    text. Error codes: ``bad_pdf``, ``pdf_no_text``, ``too_many_pages``,
    ``content_too_large``, ``text_too_large``.
    """
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data))
        count = len(reader.pages)
        if count > max_pages:
            return (
                "error",
                "too_many_pages",
                f"“{name}” has {count:,} pages; the limit is {max_pages:,} pages.",
            )
        seen: dict[int, int] = {}
        content = 0
        for page in reader.pages:
            content += _page_content_bytes(page, seen)
            if content > max_content_bytes:
                return (
                    "error",
                    "content_too_large",
                    f"“{name}” has more than {max_content_bytes:,} bytes of page "
                    f"content once decompressed; the limit is "
                    f"{max_content_bytes:,} bytes.",
                )
        pages: list[str] = []
        chars = 0
        for page in reader.pages:
            text = (page.extract_text() or "").strip("\n")
            chars += len(text) + 2
            if chars > max_chars + 2:
                return (
                    "error",
                    "text_too_large",
                    f"“{name}” has more than {max_chars:,} characters of text; "
                    f"the limit is {max_chars:,} characters.",
                )
            pages.append(text)
    except (PyPdfError, ValueError, KeyError, TypeError, OSError, AttributeError):
        return ("error", "bad_pdf", f"“{name}” could not be read as a PDF.")
    text = "\n\n".join(pages)
    if not text.strip():
        return (
            "error",
            "pdf_no_text",
            f"“{name}” has no text layer (it looks like a scanned image). "
            "Upload a PDF with selectable text, or a .txt/.md file.",
        )
    return ("ok", text)


def child_main(conn: Any, limits: dict[str, Any], kwargs: dict[str, Any]) -> None:
    """Entry point of the extraction child: lower its priority, cap its memory and
    CPU time (``limits``: ``max_memory_bytes``, ``cpu_s``), run :func:`pdf_text` and
    send the result through ``conn``."""
    import os
    import resource

    os.nice(19)  # the lowest priority: only CPU that requests leave idle
    memory = int(limits["max_memory_bytes"])
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    cpu = int(limits["cpu_s"]) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    try:
        result = pdf_text(**kwargs)
    except MemoryError:
        result = ("error", "extract_memory", "")
    conn.send(result)
    conn.close()
