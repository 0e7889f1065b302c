"""The wire: every message's HTTP, gRPC and client forms, derived from one definition.

Each message is a dataclass in `reweighter.types` whose fields are declared with `wire(...)`
(the field's documentation, its default, and the few facts a transport needs: non-empty lists,
answers that leave out a None, a field carried in the URL path). From that one definition:

- `wire/http.py` derives the pydantic models FastAPI parses and documents (`ReweightIn`,
  `MemberIn`, `ReweightOut`, ...), the conversions to and from the engine's types, and the
  JSON body the clients send;
- `wire/grpc.py` maps each message to and from its protobuf by field name (the generated
  stubs are `wire/_proto`, from proto/ by scripts/gen_proto.py);
- `wire/common.py` holds the rules both share (wire names); the `normalize` rule is the
  message's own (`EmbedRequest.texts` in `reweighter.types`).

Add a field to a message: declare it in the dataclass (`wire("what it is", default)`) and in
proto/reweighter/v1/reweighter.proto under the same name, then `python scripts/gen_proto.py`.
tests/wire/test_wire.py holds the proto, the dataclasses and the HTTP models to each other,
field by field, and every message to a round trip through each form.

This package sits below both `api` and `client` (the layer contract in pyproject.toml), so the
client reaches the wire without reaching a server module; it imports no torch and no FastAPI.
"""
