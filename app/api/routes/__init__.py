"""The API's routers. The paths' common beginnings are declared here, once: every route of the versioned API starts
with ``V1``, and a lock's own routes with ``LOCKS`` (the metrics derive theirs from the routes)."""

V1 = "/v1"
LOCKS = f"{V1}/locks"
