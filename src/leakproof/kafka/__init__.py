"""Kafka adapters: partition metadata and log bounds (driver), range reader (executors)."""
