"""The client: what a client does without I/O (core, flows, sender_flows, receiver_flows,
management), shared with `ray_broker.aio`, and the synchronous facade over it (namespace, sender,
receiver)."""
