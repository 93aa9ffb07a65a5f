"""The azure-servicebus SDK's own live tests run against a ray_broker namespace (runner.py)."""
