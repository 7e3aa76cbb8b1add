"""The inference tier: job protocol over Redis, the worker, engines.

This app imports no other app of ours (DESIGN §2, enforced by import-linter).
"""
