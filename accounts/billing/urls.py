"""URLs of the billing console, mounted under ``/admin/billing/`` (chatsite/urls.py)."""

from django.urls import path

from accounts.billing import views

urlpatterns = [
    path("", views.console, name="billing-console"),
    path("<slug:table>.csv", views.export, name="billing-export"),
]
