"""The pure core, the bottom floor: what leakproof means, with no network, no JVM and no
Kafka, HBase or Spark client (``tests/unit/test_layers.py`` checks that nothing here imports
one), so every rule in it is a unit test with literals.

- ``config/``: the YAML file -> frozen, validated config, one module per section;
- ``errors``: the exception tree every layer raises from;
- ``events``: the web event and its Avro schema; ``frames``: registry frames;
  ``codec``: record bytes -> events, a bad record -> a decode error with its coordinates;
- ``offsets``: offset ranges (from inclusive, until exclusive), committed batches, gaps,
  log bounds; ``backpressure``: a batch's rate split by lag; ``retention``: the cut of
  ``sessions.retention_days``;
- ``sessions``: the session fold by id (state, apply, fences, the rows a range writes);
  ``gap_fold``: the fold of gap sessions (split, merge, late folds); ``session_cells``: a
  session as HBase cells and back; ``row_diff``: which cells a fold changed;
- ``open_index``: the open-session index rows; ``kept_rows``: rows kept between ranges;
  ``moved_keys``: the partitions-added rule; ``outbox``: summaries owed, held and sent;
  ``summaries``: a summary's record; ``rekey``: the re-keying stage's pure rules;
- ``lease``: the driver lease value; ``cell_clock``: each batch's cell timestamp;
  ``runs``: a run's state record; ``dead_letter``: a dead letter and its redrive mark;
  ``reports``: a task's report across ``collect``; ``logs``: the entry points' logging.

The user's model (``leakproof.model``: fields, aggregates, where-expressions) sits on this
floor too, in its own folder, because configs name its modules
(``fn: "leakproof.model.python_aggregate:Funnel"``).

Imports: only this floor (``leakproof.floors``).
"""
