"""The gRPC transport (grpc.aio): server.py binds the server (`create_grpc_server`: health,
reflection, API key), servicer.py implements the RPCs, convert.py maps protobuf to the engine's
types and back.

Deliberately empty of imports: the client imports `convert` and the generated protobuf, so
importing this package must not import the server.
"""
