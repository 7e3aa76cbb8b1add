"""URLs of the user's settings (API keys, quota, preferences)."""

from django.urls import path

from gateway import views

urlpatterns = [
    path("", views.account_settings, name="account-settings"),
    path("preferences/", views.preferences_update, name="account-preferences"),
    path("api-keys/<int:key_id>/revoke/", views.api_key_revoke, name="api-key-revoke"),
]
