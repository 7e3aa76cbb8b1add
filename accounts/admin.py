"""Admin of user accounts: Django's user admin, re-registered so that every add,
change and delete is written to the audit log, password changes included (recorded as
changed, never the hash)."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.http import HttpRequest, HttpResponse

from audit.admin import AuditedAdminMixin
from audit.models import AuditLogEntry
from audit.services import REDACTED, audit_record
from chatsite.auth import request_user

User = get_user_model()


class AuditedUserAdmin(AuditedAdminMixin, UserAdmin):
    """Django's user admin, every add / change / delete audited, password changes
    too (recorded as changed, never the hash)."""

    def user_change_password(
        self, request: HttpRequest, id: str, form_url: str = ""
    ) -> HttpResponse:
        response = super().user_change_password(request, id, form_url)
        if request.method == "POST" and response.status_code == 302:
            user = User._default_manager.get(pk=id)
            audit_record(
                actor=request_user(request),
                action=AuditLogEntry.Verb.CHANGE,
                obj=user,
                before={"password": REDACTED},
                after={"password": f"{REDACTED} (changed)"},
            )
        return response


if admin.site.is_registered(User):
    admin.site.unregister(User)
admin.site.register(User, AuditedUserAdmin)
