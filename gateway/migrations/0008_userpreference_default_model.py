from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('gateway', '0007_evaluation'),
    ]

    operations = [
        migrations.AddField(
            model_name='userpreference',
            name='default_model',
            field=models.CharField(blank=True, default='', help_text='Pool name the chat uses when no model is chosen (empty: routing).', max_length=100),
        ),
    ]
