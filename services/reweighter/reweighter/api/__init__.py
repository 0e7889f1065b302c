"""The transports (http/, grpc/) over the engine and group assembly, and what they share
(auth, metrics, the engine Protocol). Importing this package imports nothing: the wire models
below it are the client's, which must stay free of servers."""
