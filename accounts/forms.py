"""Forms of the settings page: validation at the edge (CONVENTIONS §3); the writes are
services' (:mod:`accounts.services`)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth import get_user_model, password_validation
from django.contrib.auth.forms import PasswordChangeForm
from django.contrib.auth.models import User


class ProfileForm(forms.ModelForm):
    """Username and e-mail address: Django's username rules, a unique username
    (case-insensitively, so "Alice" cannot sit beside "alice"), a valid address."""

    class Meta:
        model = get_user_model()
        fields = ["username", "email"]
        labels = {"username": "Username", "email": "Email address"}
        help_texts = {
            "username": "Up to 150 letters, digits and @ . + - _ (you sign in with it)."
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Django's form with labels as the page shows them: no trailing colon."""
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)

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
    """Django's password change form without its autofocus (on the settings page it
    would scroll past the profile and take the keyboard from the skip link), with plain
    labels and one sentence for the rules of ``AUTH_PASSWORD_VALIDATORS`` instead of
    Django's list; a password that breaks one is still refused with its message."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Build Django's form, then drop the old password's autofocus and word it."""
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
        self.fields["old_password"].widget.attrs.pop("autofocus", None)
        self.fields["old_password"].label = "Current password"
        self.fields["new_password1"].label = "New password"
        self.fields["new_password1"].help_text = password_rules()
        self.fields["new_password2"].label = "New password again"
        self.fields["new_password2"].help_text = ""


def password_rules() -> str:
    """The rules of the configured password validators (``AUTH_PASSWORD_VALIDATORS``)
    in one sentence, e.g. "At least 8 characters; not a common password, not only
    digits, and not like your username or e-mail address." ("" with no validators)."""
    rules: list[str] = []
    length = ""
    for validator in password_validation.get_default_password_validators():
        if isinstance(validator, password_validation.MinimumLengthValidator):
            length = f"At least {validator.min_length} characters"
        elif isinstance(validator, password_validation.CommonPasswordValidator):
            rules.append("not a common password")
        elif isinstance(validator, password_validation.NumericPasswordValidator):
            rules.append("not only digits")
        elif isinstance(
            validator, password_validation.UserAttributeSimilarityValidator
        ):
            rules.append("not like your username or e-mail address")
        else:
            rules.append(str(validator.get_help_text()).rstrip(".").lower())
    if not rules:
        return f"{length}." if length else ""
    listed = (
        rules[0] if len(rules) == 1 else ", ".join(rules[:-1]) + " and " + rules[-1]
    )
    if length:
        return f"{length}; {listed}."
    return listed[0].upper() + listed[1:] + "."


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
