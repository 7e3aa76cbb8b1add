"""Safety: moderation, prompt-injection checks, abuse limits, suspensions and appeals
(DESIGN §10; docs/safety.md). Staff actions on them are written to the audit log
(:mod:`audit`)."""
