"""Admin: the per-category moderation policies (editable), the moderation events
(read-only list for review, with the actions confirm / dismiss / suspend user / lift
suspension; the offending text is shown escaped, never as HTML) and suspensions.

Every change staff make here goes to the audit log (:mod:`audit`): ModelAdmins mix in
:class:`audit.admin.AuditedAdminMixin`, the actions call audited services.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest
from django.utils import timezone
from django.utils.text import Truncator

from audit.admin import AuditedAdminMixin
from chatsite.auth import request_user
from safety import appeals, suspensions
from safety.models import (
    Appeal,
    CategoryPolicy,
    HardNegative,
    ModerationEvent,
    Suspension,
)

TEXT_PREVIEW_CHARS = 120


def _suspensions_lift(
    model_admin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet
) -> None:
    """Lift the suspensions of the users of ``queryset``'s rows (events or
    suspensions: anything with a ``user``), each user once, audited by the service."""
    users = {row.user_id: row.user for row in queryset.select_related("user")}
    lifted = sum(
        len(suspensions.suspension_lift(user=u, actor=request_user(request)))
        for u in users.values()
    )
    model_admin.message_user(
        request, f"{lifted} suspension(s) lifted.", messages.SUCCESS
    )


@admin.register(CategoryPolicy)
class CategoryPolicyAdmin(AuditedAdminMixin, admin.ModelAdmin):
    list_display = ("category", "action", "threshold", "description", "updated_at")
    list_editable = ("action", "threshold")
    readonly_fields = ("description", "updated_at")
    fields = ("category", "description", "action", "threshold", "updated_at")

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        # A category without a row falls back to its shipped policy: set the action
        # to "off" to ignore a category, never delete it.
        return False


@admin.register(ModerationEvent)
class ModerationEventAdmin(AuditedAdminMixin, admin.ModelAdmin):
    list_display = (
        "created_at",
        "user",
        "surface",
        "direction",
        "category",
        "score_display",
        "action",
        "abuse",
        "status",
        "text_preview",
        "backend",
    )
    list_filter = (
        "category",
        "surface",
        "direction",
        "status",
        "action",
        ("created_at", admin.DateFieldListFilter),
    )
    list_select_related = ("user",)
    search_fields = ("user__username", "text")
    date_hierarchy = "created_at"
    actions = ("confirm_events", "dismiss_events", "suspend_users", "lift_suspensions")
    readonly_fields = (
        "created_at",
        "user",
        "surface",
        "direction",
        "category",
        "score",
        "scores",
        "action",
        "status",
        "text",
        "conversation_id",
        "message_id",
        "job_id",
        "backend",
        "abuse",
    )

    @admin.display(description="score", ordering="score")
    def score_display(self, obj: ModerationEvent) -> str:
        return f"{obj.score:.2f}"

    @admin.display(description="text")
    def text_preview(self, obj: ModerationEvent) -> str:
        # a plain str: the admin escapes it (never mark_safe user text)
        return Truncator(obj.text).chars(TEXT_PREVIEW_CHARS)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_moderate_permission(self, request: HttpRequest) -> bool:
        """Staff who may review events (the model's change permission) may run the
        actions; the event itself stays read-only."""
        return request.user.has_perm("safety.change_moderationevent")

    @admin.action(description="Confirm selected events", permissions=["moderate"])
    def confirm_events(self, request: HttpRequest, queryset: QuerySet) -> None:
        changed = suspensions.event_review(
            events=queryset,
            status=ModerationEvent.Status.CONFIRMED,
            actor=request_user(request),
        )
        self.message_user(request, f"{changed} event(s) confirmed.", messages.SUCCESS)

    @admin.action(description="Dismiss selected events", permissions=["moderate"])
    def dismiss_events(self, request: HttpRequest, queryset: QuerySet) -> None:
        changed = suspensions.event_review(
            events=queryset,
            status=ModerationEvent.Status.DISMISSED,
            actor=request_user(request),
        )
        self.message_user(request, f"{changed} event(s) dismissed.", messages.SUCCESS)

    @admin.action(
        description="Suspend the users of selected events (SAFETY_ADMIN_SUSPEND_S)",
        permissions=["moderate"],
    )
    def suspend_users(self, request: HttpRequest, queryset: QuerySet) -> None:
        until = timezone.now() + timedelta(seconds=settings.SAFETY_ADMIN_SUSPEND_S)
        by_user: dict[int, list[ModerationEvent]] = {}
        for event in queryset.select_related("user"):
            by_user.setdefault(event.user_id, []).append(event)
        for events in by_user.values():
            named = ", ".join(
                sorted({e.get_category_display().lower() for e in events})
            )
            suspensions.suspension_create(
                user=events[0].user,
                until=until,
                reason=f"Content policy violations reviewed by staff ({named}).",
                actor=request_user(request),
            )
        self.message_user(
            request,
            f"{len(by_user)} user(s) suspended until {until:%Y-%m-%d %H:%M} UTC.",
            messages.SUCCESS,
        )

    @admin.action(
        description="Lift the suspensions of selected events' users",
        permissions=["moderate"],
    )
    def lift_suspensions(self, request: HttpRequest, queryset: QuerySet) -> None:
        _suspensions_lift(self, request, queryset)


@admin.register(Suspension)
class SuspensionAdmin(AuditedAdminMixin[Suspension], admin.ModelAdmin):
    list_display = (
        "user",
        "until",
        "active",
        "reason",
        "cause",
        "created_by",
        "created_at",
    )
    list_filter = (("until", admin.DateFieldListFilter), "lifted_at")
    list_select_related = ("user", "created_by")
    search_fields = ("user__username", "reason")
    autocomplete_fields = ("user",)
    fields = (
        "user",
        "until",
        "reason",
        "cause",
        "created_by",
        "lifted_at",
        "lifted_by",
    )
    readonly_fields = ("cause", "created_by", "lifted_at", "lifted_by")
    actions = ("lift",)

    @admin.display(boolean=True, description="in force")
    def active(self, obj: Suspension) -> bool:
        return obj.lifted_at is None and obj.until > timezone.now()

    def save_model(
        self,
        request: HttpRequest,
        obj: Suspension,
        form: ModelForm[Suspension],
        change: bool,
    ) -> None:
        if not change:
            obj.created_by = request_user(request)
        super().save_model(request, obj, form, change)

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        # lift a suspension instead: its record stays
        return False

    @admin.action(description="Lift selected suspensions", permissions=["change"])
    def lift(self, request: HttpRequest, queryset: QuerySet) -> None:
        _suspensions_lift(self, request, queryset)


@admin.register(Appeal)
class AppealAdmin(AuditedAdminMixin[Appeal], admin.ModelAdmin):
    """The appeals queue: a user's "this was a mistake" about a moderation event.

    Actions: uphold (a false positive: points removed, a suspension it caused lifted,
    the text kept as a hard negative) or reject (the event is confirmed).
    """

    list_display = (
        "created_at",
        "user",
        "status",
        "event_category",
        "event_score",
        "event_text",
        "comment",
    )
    list_filter = ("status", ("created_at", admin.DateFieldListFilter))
    list_select_related = ("user", "event")
    search_fields = ("user__username", "event__text", "comment")
    actions = ("uphold", "reject")
    readonly_fields = (
        "event",
        "user",
        "comment",
        "status",
        "created_at",
        "decided_at",
        "decided_by",
    )

    @admin.display(description="category")
    def event_category(self, obj: Appeal) -> str:
        return obj.event.get_category_display()

    @admin.display(description="score")
    def event_score(self, obj: Appeal) -> str:
        return f"{obj.event.score:.2f}"

    @admin.display(description="text")
    def event_text(self, obj: Appeal) -> str:
        return Truncator(obj.event.text).chars(TEXT_PREVIEW_CHARS)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_decide_permission(self, request: HttpRequest) -> bool:
        """Staff who may review moderation events may decide appeals."""
        return request.user.has_perm("safety.change_moderationevent")

    @admin.action(
        description="Uphold: a false positive (remove points, lift suspension, "
        "keep as hard negative)",
        permissions=["decide"],
    )
    def uphold(self, request: HttpRequest, queryset: QuerySet) -> None:
        decided = appeals.appeal_decide(
            appeals=queryset, upheld=True, actor=request_user(request)
        )
        self.message_user(request, f"{decided} appeal(s) upheld.", messages.SUCCESS)

    @admin.action(description="Reject: the block stands", permissions=["decide"])
    def reject(self, request: HttpRequest, queryset: QuerySet) -> None:
        decided = appeals.appeal_decide(
            appeals=queryset, upheld=False, actor=request_user(request)
        )
        self.message_user(request, f"{decided} appeal(s) rejected.", messages.SUCCESS)


@admin.register(HardNegative)
class HardNegativeAdmin(admin.ModelAdmin):
    """Texts staff judged harmless after a block: benign training examples that
    ``manage.py moderation_train`` reads."""

    list_display = ("created_at", "category", "text_preview")
    list_filter = ("category",)
    search_fields = ("text",)
    readonly_fields = ("text", "category", "event", "created_at")

    @admin.display(description="text")
    def text_preview(self, obj: HardNegative) -> str:
        return Truncator(obj.text).chars(TEXT_PREVIEW_CHARS)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
