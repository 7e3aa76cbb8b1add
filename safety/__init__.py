"""Safety: moderation, abuse limits and audit (DESIGN §10; docs/safety.md)."""
