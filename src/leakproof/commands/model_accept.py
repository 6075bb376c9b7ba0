"""``leakproof model accept``: record the configured model as the one the session rows are
written under, after the operator has seen what changed (``model.fingerprint``)."""

from __future__ import annotations

from leakproof.config import Config
from leakproof.errors import ConfigError
from leakproof.hbase.connection import ConnectionSlot, ensure_tables
from leakproof.hbase.state_store import HBaseLeaseStore
from leakproof.model.fingerprint import Change, changes, meaning, only_added


def accept(cfg: Config, force: bool = False) -> list[Change]:
    """Record ``cfg``'s model; returns what changed. Only added aggregates are taken
    without ``force``: any other change would mix two meanings in the existing rows."""
    slot = ConnectionSlot(cfg.hbase)
    slot.call("create tables", lambda c: ensure_tables(c, cfg.hbase))
    slot.reset()
    store = HBaseLeaseStore(cfg.hbase, cfg.kafka.topic, cfg.kafka.group_id)
    try:
        current = meaning(cfg.model)
        recorded = store.recorded_model()
        found = [] if recorded is None else changes(recorded, current)
        if found and not only_added(found) and not force:
            raise ConfigError(f"not recorded: {'; '.join(map(str, found))}. Only added "
                              f"aggregates are taken as they are; any other change mixes two "
                              f"meanings in the existing rows (--force records it anyway)")
        store.record_model(current)
        return found
    finally:
        store.close()
