"""A namespace's shared access keys, below every front end that checks them: the key model and SAS
tokens, signed and verified as the Azure SDKs sign them (`sas`), and a namespace's named keys, made,
removed and kept in its data directory (`keyring`). The namespace's configuration, its authorization
rules, the clients, the CLI, the emulator, the AMQP front end, the management API and the web
console take them from here. Plain Python, no Ray.
"""
