"""Memory: the context sent to the model each turn (DESIGN §9)."""
