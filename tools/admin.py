from django.contrib import admin

from tools.models import McpServer, ToolSwitch


@admin.register(McpServer)
class McpServerAdmin(admin.ModelAdmin):
    list_display = ["name", "url", "enabled", "updated_at"]
    list_filter = ["enabled"]


@admin.register(ToolSwitch)
class ToolSwitchAdmin(admin.ModelAdmin):
    list_display = ["tool", "enabled", "off_for_plans"]
