"""URLs of the OpenAI-compatible API (Bearer API keys, no session or CSRF).

``chatsite.asgi`` routes every path of this URLconf, as included, to the API's own
Django handler: an endpoint added here is served by it without further changes.
"""

from django.urls import path

from conversations.openai import views

urlpatterns = [
    path("v1/chat/completions", views.chat_completions, name="api-chat-completions"),
    path("v1/models", views.models_list, name="api-models"),
    path("v1/embeddings", views.embeddings, name="api-embeddings"),
    path(
        "v1/moderation/events/<int:event_id>/appeal",
        views.moderation_appeal,
        name="api-moderation-appeal",
    ),
    path(
        "v1/moderation/completions/<str:completion_id>/appeal",
        views.completion_appeal,
        name="api-completion-appeal",
    ),
]
