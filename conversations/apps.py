from django.apps import AppConfig


class ConversationsConfig(AppConfig):
    name = "conversations"

    def ready(self) -> None:
        """Every database connection reads every stored time
        (:func:`chatsite.storable.timestamps_readable`); the session's user is read
        with what a chat turn reads about them (one query, not two)."""
        from django.db.backends.signals import connection_created

        from chatsite.storable import timestamps_readable
        from conversations.turn_selectors import turn_reads_columns
        from safety.backends import user_read_extend

        connection_created.connect(timestamps_readable, dispatch_uid="times-readable")
        for column in turn_reads_columns():
            user_read_extend(column)
