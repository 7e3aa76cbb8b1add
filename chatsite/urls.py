"""Root URL configuration."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/billing/", include("accounts.billing.urls")),  # before the admin's
    path("admin/", admin.site.urls),
    path("settings/", include("accounts.urls")),
    path("", include("conversations.urls")),
    path("", include("memory.urls")),
    path("", include("inference.urls")),
]

handler400 = "chatsite.http.bad_request"
handler403 = "chatsite.http.permission_denied"
handler404 = "chatsite.http.page_not_found"
handler500 = "chatsite.http.server_error"
