"""The AMQP 1.0 front end's pure parts, so the Azure Service Bus SDKs reach a namespace: connection
strings (`connection_string`), link addresses (`paths`), message mapping (`mapping`, needs
python-qpid-proton: the `amqp` extra), subscription rules on the wire (`rule_mapping`), `$management`
(`management`), the connection engine (`connection`), the byte streams it is served through
(`streams`) and AMQP over WebSocket (`websocket`, needs wsproto: the `amqp` extra). The SAS keys and
tokens it checks are the namespace's, in `ray_broker.keys`; the management API served on the same
port is `ray_broker.management_http`; the Ray actor that serves a port is `actors/amqp_frontend.py`.
"""
