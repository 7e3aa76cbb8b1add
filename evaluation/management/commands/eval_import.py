"""`manage.py eval_import FILE [--name NAME] [--description TEXT] [--replace]`.

Imports an evaluation set from a JSONL file (one case per line; see
:func:`evaluation.importing.eval_cases_parse`). All or nothing: a bad line
imports nothing and the command exits 1 naming the bad lines. The set's name defaults
to the file's name without ``.jsonl`` (``evaluation/sets/basic.jsonl`` →
``basic``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from chatsite.errors import DomainError
from evaluation import importing


class Command(BaseCommand):
    help = "Import an evaluation set from a JSONL file."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="JSONL file, one case per line.")
        parser.add_argument("--name", help="Set name (default: the file's stem).")
        parser.add_argument("--description", default="")
        parser.add_argument(
            "--replace",
            action="store_true",
            help="Update an existing set's cases by name.",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        path = Path(opts["file"])
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"Cannot read {path}: {exc}") from exc
        name = opts["name"] or path.name.removesuffix(".jsonl")
        try:
            eval_set, count = importing.eval_set_import(
                name=name,
                lines=text.splitlines(),
                description=opts["description"],
                replace=opts["replace"],
            )
        except DomainError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(f"Imported {count} case(s) into eval set {eval_set.name!r}.")
