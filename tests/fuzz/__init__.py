"""Property-based fuzz tests against a live namespace (hypothesis); `--long` runs 10,000+ cases."""
