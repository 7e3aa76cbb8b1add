"""The account's own settings that no other app reads: the page's colour theme."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Appearance(models.Model):
    """How the site looks to one user (no row: the system's light or dark preference).

    ``theme``: "system" follows ``prefers-color-scheme``; "light" or "dark" is the choice
    of the top bar's toggle. templates/base.html renders it as ``<html data-theme>``
    (static/site.css), so a page never flashes the other theme first.
    """

    class Theme(models.TextChoices):
        SYSTEM = "system", "System"
        LIGHT = "light", "Light"
        DARK = "dark", "Dark"

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="appearance",
    )
    theme = models.CharField(max_length=10, choices=Theme.choices, default=Theme.SYSTEM)

    def __str__(self) -> str:
        return f"{self.theme} theme of {self.user}"
