"""Ray actors of a ray_broker namespace: partitions (each with its store) and gateways."""
