"""The synchronous client: namespace handles, senders and receivers."""
