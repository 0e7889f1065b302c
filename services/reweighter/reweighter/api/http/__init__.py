"""The HTTP transport (FastAPI): app.py builds the app (`create_app`), router.py holds the
routes, openrlhf.py the OpenRLHF route, middleware.py the API key and body-size limit,
connections.py the connection layer (deadlines, the bound, health probes); the wire models and
their conversions are reweighter.wire.http (below both this and the client).

Deliberately empty of imports: importing this package must not build a server.
"""
