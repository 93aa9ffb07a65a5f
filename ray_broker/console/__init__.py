"""The web console (`ray-broker console -n NAME`): a namespace's entities, partitions and messages
in a browser, and the operator's actions on them.

- `auth`: who may use it (the namespace's auth token or a shared access key with Manage); pure.
- `views`: the JSON documents the pages show, made from the client's records; pure.
- `operations`: what each page asks of the namespace, through the public client (`rb.Namespace`).
- `server`: the HTTP server (aiohttp): the JSON API and the page in `static/` (plain HTML, CSS and
  JavaScript of our own; nothing is fetched from the internet).
"""
