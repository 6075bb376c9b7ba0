"""The operator's commands besides ``run``: each a function the CLI calls with the parsed
config (produce, verify, lag, rewind, stop, the model check)."""
