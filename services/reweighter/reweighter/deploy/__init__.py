"""The reweighter on orchestrators that run Python replicas themselves: `reweighter.deploy.ray`
is the Ray Serve application (docs/deploy.md, "Ray Serve"). Nothing here is imported by the
service or the clients; importing this package imports nothing heavy."""
