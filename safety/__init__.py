"""Safety: moderation, abuse limits and audit (DESIGN §10). Policy lands with its issue."""
