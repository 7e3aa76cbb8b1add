from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "gateway"

    def ready(self) -> None:
        from gateway import checks  # noqa: F401 - registers the system checks
        from gateway.selectors import plan_id_column
        from gateway.tooling import tooling_register
        from safety.backends import user_read_extend

        tooling_register()
        # the session's user is read with their subscribed plan (one query, not two)
        user_read_extend(plan_id_column())
