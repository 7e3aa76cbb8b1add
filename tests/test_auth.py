"""The signed-in user of a request (chatsite/auth.py)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import PermissionDenied
from django.test import RequestFactory
from django.utils.functional import SimpleLazyObject

from chatsite.auth import request_user

pytestmark = pytest.mark.django_db


def test_request_user_is_the_signed_in_user_even_behind_django_lazy_object(
    user: Any,
) -> None:
    request = RequestFactory().get("/")
    request.user = SimpleLazyObject(lambda: user)  # as AuthenticationMiddleware sets it
    assert request_user(request) == user


def test_request_user_refuses_an_anonymous_request_with_a_403() -> None:
    request = RequestFactory().get("/")
    request.user = AnonymousUser()
    with pytest.raises(PermissionDenied):
        request_user(request)
