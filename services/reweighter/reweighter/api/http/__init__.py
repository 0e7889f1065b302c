"""The HTTP transport (FastAPI): app.py builds the app (`create_app`), router.py holds the
routes, openrlhf.py the OpenRLHF route, admission.py the one admission step (key, tenant,
deadline, size, pace), dispatch.py the one dispatcher of the /v1 routes, errors.py the one error
writer, connections.py the connection layer (deadlines, the bound, health probes); the wire
models and their conversions are reweighter.wire.http (below both this and the client).

Deliberately empty of imports: importing this package must not build a server.
"""
