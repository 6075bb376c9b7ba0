"""``leakproof model accept``: record the configured model as the one the session rows are
written under, after the operator has seen what changed (``model.fingerprint``)."""

from __future__ import annotations

from leakproof.core.config import Config
from leakproof.core.errors import ConfigError
from leakproof.hbase.connection import ConnectionSlot, ensure_tables
from leakproof.hbase.state_store import HBaseLeaseStore
from leakproof.model.fingerprint import Change, beyond_force, changes, meaning, only_added


def accept(cfg: Config, force: bool = False) -> list[Change]:
    """Record ``cfg``'s model and session settings; returns what changed. Only added
    aggregates are taken without ``force``: any other change would mix two meanings in the
    existing rows. Not even with it a change the rows cannot be folded on from
    (``fingerprint.beyond_force``): that would fail every batch touching one of them."""
    slot = ConnectionSlot(cfg.hbase)
    slot.call("create tables", lambda c: ensure_tables(c, cfg.hbase))
    slot.reset()
    store = HBaseLeaseStore(cfg.hbase, cfg.kafka.topic, cfg.kafka.group_id)
    try:
        current = meaning(cfg.model, cfg.sessions)
        found = judge(store.recorded_model(), current, force)
        store.record_model(current)
        return found
    finally:
        store.close()


def judge(recorded: str | None, current: str, force: bool) -> list[Change]:
    """What recording ``current`` over ``recorded`` changes, or ConfigError naming why it
    may not be recorded and the way out."""
    found = [] if recorded is None else changes(recorded, current)
    stuck = beyond_force(found, current)
    if force and stuck:
        raise ConfigError(f"not recorded, even with --force: {'; '.join(stuck)}. Give the "
                          f"job new tables (a new hbase.table_prefix), reprocess from the "
                          f"start and compare with `leakproof sessions diff`, or restore the "
                          f"config")
    if found and not only_added(found) and not force:
        raise ConfigError(f"not recorded: {'; '.join(map(str, found))}. Only added "
                          f"aggregates are taken as they are; any other change mixes two "
                          f"meanings in the existing rows ("
                          + ("--force records it anyway)" if not stuck else
                             f"and --force cannot take it: {'; '.join(stuck)})"))
    return found
