"""The gRPC transport (grpc.aio): server.py binds the server (`create_grpc_server`: health,
reflection, API key), servicer.py implements the RPCs, guard.py bounds them; protobuf maps to
the engine's types and back in reweighter.wire.grpc (below both this and the client).

Deliberately empty of imports: importing this package must not import the server.
"""
