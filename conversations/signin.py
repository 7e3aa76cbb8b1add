"""The sign-in form: Django's, with the per-account lockout of
:mod:`gateway.ratelimits` beside the per-IP LOGIN_RATE of the login URL."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.forms import AuthenticationForm

from gateway import ratelimits


class LockoutAuthenticationForm(AuthenticationForm):
    """Django's sign-in form that refuses a locked account before checking its
    password, and counts each failure (:func:`gateway.ratelimits.login_failure_record`).

    Every answer is worded the same for an existing and an unknown username (no user
    enumeration): the lockout counts typed names, not accounts.
    """

    def clean(self) -> dict[str, Any]:
        """Raise ValidationError (the form's error) while the account is locked;
        otherwise check the password as Django does, counting a failure."""
        username = self.cleaned_data.get("username") or ""
        if username:
            locked = ratelimits.login_locked_for(username=username)
            if locked:
                raise forms.ValidationError(
                    ratelimits.login_lockout_message(locked), code="locked"
                )
        try:
            cleaned = super().clean()
        except forms.ValidationError:
            if username:
                ratelimits.login_failure_record(username=username)
            raise
        if username:
            ratelimits.login_failures_clear(username=username)
        return cleaned
