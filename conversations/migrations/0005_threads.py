# Issue 11: conversations become trees of messages with a chosen branch.

import django.db.models.deletion
from django.db import migrations, models


def backfill_tree(apps, schema_editor):
    """Link each user message to the answer before it and pick each conversation's leaf.

    Before threads, history was linear by ``created_at`` (answers already pointed at
    their question; regenerating added answers to the last question only), so a user
    message follows the newest answer created before it, and the newest message is the
    current leaf. One conversation at a time keeps memory flat on large tables.
    """
    Conversation = apps.get_model("conversations", "Conversation")
    Message = apps.get_model("conversations", "Message")
    # PostgreSQL refuses the deferred ALTER TABLE (the new foreign key) at the end of
    # this migration while row updates leave deferred trigger events pending.
    immediate = schema_editor.connection.vendor == "postgresql"
    if immediate:
        schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    for conversation_id in Conversation.objects.values_list("id", flat=True).iterator():
        rows = Message.objects.filter(conversation_id=conversation_id).order_by(
            "created_at", "id"
        )
        last_answer = None
        last = None
        for message in rows.only("id", "role", "parent_id"):
            if message.role == "user":
                if last_answer is not None and message.parent_id is None:
                    Message.objects.filter(id=message.id).update(parent=last_answer)
            elif message.role == "assistant":
                last_answer = message.id
            last = message.id
        if last is not None:
            Conversation.objects.filter(id=conversation_id).update(current_leaf=last)
    if immediate:
        schema_editor.execute("SET CONSTRAINTS ALL DEFERRED")


class Migration(migrations.Migration):

    dependencies = [
        ("conversations", "0004_feedback"),
    ]

    operations = [
        migrations.AddField(
            model_name="conversation",
            name="current_leaf",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="conversations.message",
            ),
        ),
        migrations.RunPython(backfill_tree, migrations.RunPython.noop),
    ]
