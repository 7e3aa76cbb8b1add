"""`manage.py create_api_key USERNAME [--name NAME]`: print a new API key once."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from gateway import services


class Command(BaseCommand):
    help = (
        "Create an API key for a user and print it (it is stored hashed: shown once)."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="a label for the key")

    def handle(self, *args: Any, **opts: Any) -> None:
        User = get_user_model()
        try:
            user = User.objects.get(**{User.USERNAME_FIELD: opts["username"]})
        except User.DoesNotExist as exc:
            raise CommandError(f"No user named {opts['username']!r}.") from exc
        key, raw = services.api_key_create(user=user, name=opts["name"])
        self.stderr.write(
            f"API key {key.prefix}… for {opts['username']} (shown once, store it now):"
        )
        self.stdout.write(raw)
