"""The gRPC transport (grpc.aio): server.py binds the server (health, reflection, API key),
servicer.py implements the RPCs, convert.py maps protobuf to the engine's types and back."""

from .server import SERVICE_NAME, GrpcServer, create_grpc_server

__all__ = ["SERVICE_NAME", "GrpcServer", "create_grpc_server"]
