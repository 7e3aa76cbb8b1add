"""`manage.py ingest_documents PATH [PATH ...] --user U`: load files as a user's documents.

PATH is a .txt/.md/.pdf file or a directory (searched recursively). Each file is
uploaded and ingested in this process, with a progress bar of embedded chunks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from chatsite.errors import DomainError
from inference.embeddings import EmbeddingUnavailable
from memory import services
from memory.extract import SUPPORTED_TYPES


class Command(BaseCommand):
    help = "Upload and ingest .txt/.md/.pdf files as a user's documents."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("paths", nargs="+", help="files or directories")
        parser.add_argument("--user", required=True, help="username of the owner")

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            user = get_user_model().objects.get(username=opts["user"])
        except get_user_model().DoesNotExist as exc:
            raise CommandError(f"no user named {opts['user']!r}") from exc
        files: list[Path] = []
        for raw in opts["paths"]:
            path = Path(raw)
            if path.is_dir():
                files += sorted(
                    p
                    for p in path.rglob("*")
                    if p.is_file() and p.suffix.lower() in SUPPORTED_TYPES
                )
            elif path.is_file():
                files.append(path)
            else:
                raise CommandError(f"{raw}: no such file or directory")
        failed = 0
        for path in files:
            try:
                document = services.document_upload(
                    user=user,
                    name=path.name,
                    data=path.read_bytes(),
                    ingest_on_commit=False,
                )
            except DomainError as exc:
                failed += 1
                self.stderr.write(f"{path}: {exc.message}")
                continue
            with tqdm(
                total=0, unit="chunk", desc=path.name[:40], file=self.stderr
            ) as bar:

                def progress(done: int, total: int, bar: Any = bar) -> None:
                    bar.total = total
                    bar.n = done
                    bar.refresh()

                try:
                    document = services.document_ingest(
                        document_id=document.id, progress=progress
                    )
                except EmbeddingUnavailable as exc:
                    # nothing half-done is kept: a second run must not duplicate it
                    services.document_delete(user=user, document_id=document.id)
                    raise CommandError(
                        f"{path}: {exc} Start an embedding worker (`manage.py "
                        "run_inference_worker --engine sentence-transformers`, or "
                        "`make run`) and run this command again."
                    ) from exc
            if document.status != document.Status.READY:
                failed += 1
                self.stderr.write(f"{path}: {document.error}")
                services.document_delete(user=user, document_id=document.id)
            else:
                self.stdout.write(
                    f"{path}: document {document.id}, {document.chunk_count} chunks"
                )
        if failed:
            raise CommandError(f"{failed} of {len(files)} files failed")
