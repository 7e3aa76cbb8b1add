"""The billing console (issue 12): operators' reads of usage and money
(:mod:`.selectors`), the staff writes behind the commands (:mod:`.services`), the
server-side SVG charts (:mod:`.charts`) and the admin pages (:mod:`.views`, mounted at
``/admin/billing/``)."""
