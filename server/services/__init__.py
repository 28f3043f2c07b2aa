"""The registry's domain logic: every query and rule lives here, routers only call in. Services
take a session, the acting principal and ``now``, raise :mod:`sealbench.server.errors` and
append the audit event of each change in the same transaction."""
