"""Chaos tests: traffic through a namespace while its actors are SIGKILLed, checked against a ledger."""
