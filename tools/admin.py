from django.contrib import admin
from django.db import models

from tools.models import McpServer, ToolSwitch


@admin.register(McpServer)
class McpServerAdmin(admin.ModelAdmin):
    list_display = ["name", "url", "enabled", "updated_at"]
    list_filter = ["enabled"]
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}


@admin.register(ToolSwitch)
class ToolSwitchAdmin(admin.ModelAdmin):
    list_display = ["tool", "enabled", "off_for_plans"]
