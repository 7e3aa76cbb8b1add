"""`manage.py search_config_apply [--check]`.

Regenerates the full-text search columns of messages and conversation titles with
the text-search configuration now set in CHAT_SEARCH_CONFIG (the columns keep the one
they were made with: conversations/search_sql.py). Rewrites both tables and their GIN
indexes under an exclusive lock: run it in a quiet moment. ``--check`` only reports
whether the columns match the setting (exit status 1 if not).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction

from conversations import search_sql


class Command(BaseCommand):
    help = "Regenerate the search columns with CHAT_SEARCH_CONFIG."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--check", action="store_true", help="only report, change nothing"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        config = search_sql.search_config(connection=connection)
        current = search_sql.columns_config(connection=connection)
        stale = [
            table
            for table, expression in sorted(current.items())
            if f"'{config}'::regconfig" not in expression
        ]
        if not stale:
            self.stdout.write(f"The search columns use {config!r}: nothing to do.")
            return
        if options["check"]:
            raise CommandError(
                f"{', '.join(stale)}: the search column does not use {config!r}; "
                "run `manage.py search_config_apply`."
            )
        with transaction.atomic(), connection.cursor() as cursor:
            for statement in search_sql.columns_reconfigure_sql(config=config):
                cursor.execute(statement)
        self.stdout.write(f"The search columns now use {config!r}.")
