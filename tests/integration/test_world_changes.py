"""Changes under a long-running job that are not crashes -- a compacted or recreated topic,
partitions added, the gap changed, a second job on the same tables, a fast clock -- each
either exact against the oracle or refused at start with a message that names the way out."""

from __future__ import annotations

import pytest
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType

from leakproof import config
from leakproof.driver.job import Job
from leakproof.errors import OffsetError

from .helpers import KAFKA, Env

pytestmark = pytest.mark.integration


def set_topic_config(topic: str, **settings: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=f"{KAFKA[0]}:{KAFKA[1]}")
    try:
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                            configs={k.replace("_", "."): v
                                                     for k, v in settings.items()})])
    finally:
        admin.close()


def test_a_compacted_source_topic_is_refused_unless_its_loss_is_accepted(env: Env) -> None:
    set_topic_config(env.name, cleanup_policy="compact,delete")
    with pytest.raises(OffsetError, match=r"cleanup\.policy=compact,delete.*"
                                          r"kafka\.on_compacted_topic: accept"):
        Job(env.cfg).prepare()
    accepted = config.load(env.variant("accept", kafka={"on_compacted_topic": "accept"}))
    assert Job(accepted).prepare() == {0: 0, 1: 0, 2: 0, 3: 0}
