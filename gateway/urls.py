"""URLs of the user's settings (API keys, quota)."""

from django.urls import path

from gateway import views

urlpatterns = [
    path("", views.account_settings, name="account-settings"),
    path("api-keys/<int:key_id>/revoke/", views.api_key_revoke, name="api-key-revoke"),
]
