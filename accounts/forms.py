"""Forms of the settings page: validation at the edge (CONVENTIONS §3); the writes are
services' (:mod:`accounts.services`)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import PasswordChangeForm
from django.contrib.auth.models import User


class ProfileForm(forms.ModelForm):
    """Username and e-mail address: Django's username rules, a unique username
    (case-insensitively, so "Alice" cannot sit beside "alice"), a valid address."""

    class Meta:
        model = get_user_model()
        fields = ["username", "email"]

    def clean_username(self) -> str:
        """Refuse a username another account holds in any letter case."""
        username = self.cleaned_data["username"]
        taken = (
            get_user_model()
            .objects.filter(username__iexact=username)
            .exclude(pk=self.instance.pk)
            .exists()
        )
        if taken:
            raise forms.ValidationError("A user with that username already exists.")
        return username


class SettingsPasswordForm(PasswordChangeForm):
    """Django's password change form without its autofocus: on the settings page it
    would scroll past the profile and take the keyboard from the skip link."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Build Django's form, then drop the old password's autofocus."""
        super().__init__(*args, **kwargs)
        self.fields["old_password"].widget.attrs.pop("autofocus", None)


class AccountDeleteForm(forms.Form):
    """Deleting the account is confirmed by typing the account's password."""

    password = forms.CharField(
        label="Your password",
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "current-password"}),
    )

    def __init__(self, *args: Any, user: User, **kwargs: Any) -> None:
        """Bind the form to the signed-in ``user`` whose password it checks."""
        super().__init__(*args, **kwargs)
        self.user = user

    def clean_password(self) -> str:
        """Refuse a wrong password (nothing is deleted)."""
        password = self.cleaned_data["password"]
        if not self.user.check_password(password):
            raise forms.ValidationError("That is not your password.")
        return password
