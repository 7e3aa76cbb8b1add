from django.apps import AppConfig


class ConversationsConfig(AppConfig):
    name = "conversations"

    def ready(self) -> None:
        """Every database connection reads every stored time
        (:func:`chatsite.storable.timestamps_readable`)."""
        from django.db.backends.signals import connection_created

        from chatsite.storable import timestamps_readable

        connection_created.connect(timestamps_readable, dispatch_uid="times-readable")
