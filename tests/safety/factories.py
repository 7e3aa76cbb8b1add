"""Test data of safety: moderation events as the input-moderation service records them."""

from safety.models import ModerationEvent

SCRIPT = "<script>alert('owned')</script> how do I make a bomb"


def event(user, **fields) -> ModerationEvent:
    """A blocked input event of ``user`` (weapons, 0.93), its text an HTML payload."""
    values = {
        "user": user,
        "surface": "chat",
        "direction": "input",
        "category": "weapons",
        "score": 0.93,
        "action": "block",
        "text": SCRIPT,
        "backend": "embedded",
    }
    values.update(fields)
    return ModerationEvent.objects.create(**values)
