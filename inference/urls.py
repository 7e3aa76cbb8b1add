"""URLs of the inference tier."""

from django.urls import path

from inference.views import metrics_view

urlpatterns = [
    path("metrics", metrics_view, name="metrics"),
]
