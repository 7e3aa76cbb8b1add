"""Billing reads and writes of the gateway: usage and money per day, model, user and
pool (:mod:`.selectors`, read by the billing console and ``manage.py usage_report``)
and the staff writes behind the plan commands (:mod:`.services`). The console's pages
are :mod:`accounts.billing`."""
