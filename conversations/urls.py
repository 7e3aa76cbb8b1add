"""URLs of the chat UI and its JSON/SSE endpoints."""

from django.contrib.auth import views as auth_views
from django.urls import include, path
from django_ratelimit.decorators import ratelimit

from conversations import (
    sse,
    views,
    views_conversation,
    views_moderation,
    views_search,
    views_tools,
)
from conversations.signin import LockoutAuthenticationForm

urlpatterns = [
    path("", views.chat_home, name="chat-home"),
    path(
        "signup/",
        ratelimit(
            key="ip",
            rate="gateway.ratelimits.login_rate",
            method="POST",
            group="signup",
        )(views.signup),
        name="signup",
    ),
    path(
        "login/",
        ratelimit(
            key="ip", rate="gateway.ratelimits.login_rate", method="POST", group="login"
        )(
            auth_views.LoginView.as_view(
                redirect_authenticated_user=True,
                authentication_form=LockoutAuthenticationForm,
            )
        ),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path(
        "moderation/events/<int:event_id>/appeal/",
        views_moderation.moderation_appeal,
        name="moderation-appeal",
    ),
    path(
        "moderation/answers/<uuid:message_id>/appeal/",
        views_moderation.answer_appeal,
        name="moderation-answer-appeal",
    ),
    path("c/messages/", views.message_send, name="message-send-new"),
    path("c/tools/", views_tools.tool_choice, name="tool-choice"),
    path(
        "c/<uuid:conversation_id>/",
        views.conversation_detail,
        name="conversation-detail",
    ),
    path("c/<uuid:conversation_id>/messages/", views.message_send, name="message-send"),
    path(
        "c/<uuid:conversation_id>/regenerate/",
        views.message_regenerate,
        name="message-regenerate",
    ),
    path(
        "c/<uuid:conversation_id>/thread/",
        views.conversation_thread,
        name="conversation-thread",
    ),
    path(
        "c/<uuid:conversation_id>/messages/<uuid:message_id>/regenerate/",
        views.message_regenerate,
        name="message-regenerate-one",
    ),
    path(
        "c/<uuid:conversation_id>/messages/<uuid:message_id>/continue/",
        views.message_continue,
        name="message-continue",
    ),
    path(
        "c/<uuid:conversation_id>/messages/<uuid:message_id>/edit/",
        views.message_edit,
        name="message-edit",
    ),
    path(
        "c/<uuid:conversation_id>/messages/<uuid:message_id>/switch/",
        views.message_switch,
        name="message-switch",
    ),
    path(
        "c/<uuid:conversation_id>/rename/",
        views_conversation.conversation_rename,
        name="conversation-rename",
    ),
    path(
        "c/<uuid:conversation_id>/documents/",
        views_conversation.conversation_documents,
        name="conversation-documents",
    ),
    path(
        "c/<uuid:conversation_id>/title/",
        views_conversation.conversation_title,
        name="conversation-title",
    ),
    path(
        "c/<uuid:conversation_id>/delete/",
        views_conversation.conversation_delete,
        name="conversation-delete",
    ),
    path(
        "c/<uuid:conversation_id>/messages/<uuid:message_id>/stream/",
        sse.message_stream,
        name="message-stream",
    ),
    path(
        "c/<uuid:conversation_id>/messages/<uuid:message_id>/stop/",
        views.message_stop,
        name="message-stop",
    ),
    path(
        "c/<uuid:conversation_id>/messages/<uuid:message_id>/feedback/",
        views.message_feedback,
        name="message-feedback",
    ),
    # search, export and import (conversations/views_search.py)
    path("search/", views_search.search_page, name="conversation-search"),
    path(
        "c/<uuid:conversation_id>/export/",
        views_search.conversation_export,
        name="conversation-export",
    ),
    path("export/", views_search.conversations_export, name="conversations-export"),
    path(
        "import/",
        views_search.conversations_import_page,
        name="conversations-import",
    ),
    # the OpenAI-compatible API (Bearer API keys, no session or CSRF)
    path("", include("conversations.openai.urls")),
]
