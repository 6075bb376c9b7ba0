"""The operator's commands besides ``run`` (which is ``driver.job``): the work of each, as
functions ``leakproof.cli`` calls with the loaded config and prints the answers of.

- ``produce``: seeded events onto the topic through an idempotent producer, and the topic's
  creation (``produce``, ``topic create``);
- ``verify``: the session rows and dead letters checked against the oracle;
- ``lag``: how far the committed offsets are behind each partition's end (``offsets lag``);
- ``rewind``: a new offsets commit the next run resumes from (``offsets rewind``);
- ``stop``: a durable request to the running job to stop after its batch in flight;
- ``model_check``: the model against its schema and the topic's newest records;
- ``model_accept``: the model recorded as the one the session rows are written under;
- ``sessions_diff``: two table sets' session rows compared (``sessions diff``);
- ``dead_letters``: the dead letters listed and shown (``deadletters list``, ``show``);
- ``redrive``: dead letters sent back to their topic, each exactly once
  (``deadletters redrive``).

Imports: any floor below (``leakproof.floors``, checked by ``tests/unit/test_layers.py``) --
in fact the pure core, ``ports``, the adapters and ``driver`` (``lag``, ``rewind`` and
``verify`` reuse its rules) -- never ``cli``. Only ``produce`` imports kafka-python
itself; the others go through the adapters. The CLI imports a command's module only when
that command runs (and ``rewind`` to parse an offset list), so ``leakproof --help`` loads
none of them.
"""
