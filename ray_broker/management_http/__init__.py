"""The Service Bus management API (ATOM feeds over HTTP/1.1) that the Azure SDKs' administration
clients speak, served on the AMQP front end's port: telling a connection's protocol from its first
bytes (`sniff`), the port's accept loop (`listener`), the TLS certificate (`certificate`), the
HTTP/1.1 exchange (`http`, where a request to switch to AMQP over WebSocket leaves it for
`ray_broker.amqp.websocket`), request routing (`routes`), token checks (`authorization`), the
operations against the namespace's async client (`service`), and the XML: the ATOM envelope
(`atom`), ISO 8601 durations (`durations`), property codecs (`codecs`), entity descriptions
(`descriptions`) and rules (`rule_xml`). Plain Python, no Ray.
"""
