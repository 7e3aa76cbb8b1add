"""`manage.py export_feedback [--since DATE] [--format jsonl|csv] [--output FILE]`.

Writes the ratings users gave answers, with the question and the answer, for offline
analysis and fine-tuning data: one JSON object per line (``jsonl``, the default) or a
CSV with a header row; to stdout unless ``--output`` names a file.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
from typing import Any, TextIO

from django.core.management.base import BaseCommand, CommandError, CommandParser

from conversations import feedback_selectors, tool_selectors
from conversations.models import Feedback, Message

COLUMNS = [
    "updated_at",
    "created_at",
    "user",
    "conversation_id",
    "message_id",
    "rating",
    "reason",
    "comment",
    "pool",
    "model",
    "plan",
    "ttft_ms",
    "prompt_tokens",
    "completion_tokens",
    "question",
    "answer",
]


def _since(value: str | None) -> dt.datetime | None:
    """A date (``YYYY-MM-DD``, from 00:00 UTC) or an ISO datetime; CommandError else."""
    if not value:
        return None
    try:
        moment = dt.datetime.fromisoformat(value)
    except ValueError as exc:
        raise CommandError(
            f"--since {value!r} is not a date (YYYY-MM-DD) or an ISO datetime."
        ) from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


def feedback_row(feedback: Feedback) -> dict[str, Any]:
    """One exported record: the rating, what it was stored with, question and answer."""
    message = feedback.message
    return {
        "updated_at": feedback.updated_at.isoformat(),
        "created_at": feedback.created_at.isoformat(),
        "user": feedback.user.get_username(),
        "conversation_id": str(message.conversation_id),
        "message_id": str(message.id),
        "rating": feedback.rating,
        "reason": feedback.reason,
        "comment": feedback.comment,
        "pool": feedback.pool,
        "model": feedback.model,
        "plan": feedback.plan,
        "ttft_ms": feedback.ttft_ms,
        "prompt_tokens": feedback.prompt_tokens,
        "completion_tokens": feedback.completion_tokens,
        "question": _question(message),
        "answer": message.content,
    }


def _question(message: Message) -> str:
    """The text of the question an answer answers (above its tool chain, if any)."""
    parent = message.parent
    if parent is None or parent.role == Message.Role.USER:
        return parent.content if parent else ""
    question = tool_selectors.answer_question(answer=message)
    return question.content if question else ""


class _Raw:
    """The command's stdout without the newline Django's wrapper adds to writes."""

    def __init__(self, out: Any) -> None:
        self.out = out

    def write(self, text: str) -> None:
        self.out.write(text, ending="")


class Command(BaseCommand):
    help = "Export answer feedback (thumbs up/down) as JSON lines or CSV."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--since", help="Only feedback given or changed since this date (UTC)."
        )
        parser.add_argument("--format", choices=["jsonl", "csv"], default="jsonl")
        parser.add_argument("--output", help="Write to this file instead of stdout.")

    def handle(self, *args: Any, **opts: Any) -> None:
        rows = feedback_selectors.feedback_export(since=_since(opts["since"]))
        if opts["output"]:
            try:
                with open(opts["output"], "w", encoding="utf-8", newline="") as out:
                    count = self._write(rows, out, opts["format"])
            except OSError as exc:
                raise CommandError(f"Cannot write {opts['output']}: {exc}") from exc
            self.stderr.write(f"Wrote {count} feedback record(s) to {opts['output']}.")
        else:
            self._write(rows, _Raw(self.stdout), opts["format"])

    def _write(self, rows: Any, stream: TextIO | Any, fmt: str) -> int:
        count = 0
        if fmt == "csv":
            writer = csv.DictWriter(stream, fieldnames=COLUMNS)
            writer.writeheader()
        for feedback in rows.iterator(chunk_size=500):
            row = feedback_row(feedback)
            if fmt == "csv":
                writer.writerow(row)
            else:
                stream.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
        return count
