"""URLs of the user's settings (profile, password, preferences, API keys, account)."""

from django.urls import path

from accounts import views

urlpatterns = [
    path("", views.account_settings, name="account-settings"),
    path("preferences/", views.preferences_update, name="account-preferences"),
    path("theme/", views.theme_update, name="account-theme"),
    path("quota/", views.quota_panel, name="account-quota"),
    path("profile/", views.profile_update, name="account-profile"),
    path("password/", views.password_change, name="account-password"),
    path("delete/", views.account_delete, name="account-delete"),
    path("api-keys/<int:key_id>/revoke/", views.api_key_revoke, name="api-key-revoke"),
]
