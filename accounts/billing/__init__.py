"""The billing console (``/admin/billing/``, staff only): the pages (:mod:`.views`)
and their server-side SVG charts (:mod:`.charts`) over the gateway's usage records
(:mod:`gateway.billing.selectors`)."""
