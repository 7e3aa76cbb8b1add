"""`manage.py seed_demo`: create the demo login printed by `make run` (idempotent)."""

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

DEMO_USERNAME = "demo"
DEMO_PASSWORD = "demo"


class Command(BaseCommand):
    help = "Create the demo user (demo/demo) if it does not exist."

    def handle(self, *args: Any, **opts: Any) -> None:
        User = get_user_model()
        user, created = User.objects.get_or_create(username=DEMO_USERNAME)
        if created:
            user.set_password(DEMO_PASSWORD)
            user.save()
        self.stdout.write(f"demo login: {DEMO_USERNAME} / {DEMO_PASSWORD}")
