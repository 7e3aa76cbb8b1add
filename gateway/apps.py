from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "gateway"

    def ready(self) -> None:
        from gateway import checks  # noqa: F401 - registers the system checks
        from gateway.tooling import tooling_register

        tooling_register()
