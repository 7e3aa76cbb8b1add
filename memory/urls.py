"""URLs of the Documents and Memory pages."""

from django.urls import path

from memory import views

urlpatterns = [
    path("documents/", views.document_list, name="document-list"),
    path("documents/upload/", views.document_upload, name="document-upload"),
    path("documents/<int:document_id>/", views.document_detail, name="document-detail"),
    path(
        "documents/<int:document_id>/delete/",
        views.document_delete,
        name="document-delete",
    ),
    path("memory/", views.memory_page, name="memory-page"),
    path("memory/add/", views.fact_add, name="fact-add"),
    path("memory/toggle/", views.memory_toggle, name="memory-toggle"),
    path("memory/<int:fact_id>/edit/", views.fact_edit, name="fact-edit"),
    path("memory/<int:fact_id>/delete/", views.fact_delete, name="fact-delete"),
]
