"""The HTTP transport (FastAPI): app.py builds the app (`create_app`), router.py holds the
routes, openrlhf.py the OpenRLHF route, schemas.py the wire models and their conversions,
middleware.py the API key and body-size limit.

Deliberately empty of imports: the wire models (`schemas`) are imported by the torch-free,
FastAPI-free client, so importing this package must not build a server.
"""
