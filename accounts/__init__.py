"""Accounts: the pages of a user's account and of the accounts' usage (DESIGN §2).

- :mod:`.views`, :mod:`.urls` (``/settings/``): the settings page (profile, password,
  preferences, API keys, account deletion) and the "Tokens left" panel;
- :mod:`.forms`: the settings page's forms (validation at the edge);
- :mod:`.services`: preferences, profile and account deletion;
- :mod:`.billing`: the staff's billing console (``/admin/billing/``).

The data stays the gateway's (plans, quotas, API keys, usage records, preferences,
in :mod:`gateway.models`): this app reads and writes it; it holds no model.
"""
