"""Enable pgvector (embeddings of facts, chunks and the semantic cache: DESIGN §7)."""

from django.db import migrations
from pgvector.django import VectorExtension


class Migration(migrations.Migration):
    initial = True
    dependencies: list = []
    operations = [VectorExtension()]
