"""The event model: what an event is (schema, session key, time, sequence) and what a
session row holds (the aggregates), as users declare it in config -- read, checked and
compiled here, with no I/O beyond reading the schema file and importing Python aggregates."""
