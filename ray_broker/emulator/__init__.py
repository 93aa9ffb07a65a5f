"""`ray-broker emulator`: Microsoft's Service Bus emulator, replaced.

Its parts, one job each:
    jsonc.py        JSON with `//` and `/* */` comments, errors at the line and column of the file
    durations.py    ISO 8601 durations as the emulator's schema writes them (PT1M, P1D)
    model.py        the typed records a Config.json becomes
    config_file.py  Config.json -> records: every property applied or refused, SQL compiled
    credentials.py  the emulator's published key and the connection strings that carry it
    preflight.py    every check made before anything starts (ports, host, data directory), and the plan
    applying.py     records -> a namespace's entities and rules (create or update, idempotent)
    host.py         the emulator's life: checks, its own local Ray, the namespace, serving, stopping
    signals.py      SIGINT and SIGTERM as the foreground process takes them

Everything but `host.py` is Ray-free (`applying.py` works through any namespace handle);
`ray_broker.cli.emulator` is the command.
"""
