"""kafka-python's slow-step warning: a 1 s threshold through its client hook, and counted."""

from __future__ import annotations

import functools
import logging

import pytest

from leakproof.core.config import KafkaConfig
from leakproof.kafka import STALL_S, client_settings, stalls


def test_every_client_gets_the_threshold_and_stalls_are_counted_not_hidden(
        caplog: pytest.LogCaptureFixture) -> None:
    hook = client_settings(KafkaConfig(bootstrap_servers="127.0.0.1:9092", topic="t",
                                       group_id="g"))["kafka_client"]
    assert isinstance(hook, functools.partial)
    assert hook.keywords == {"slow_task_threshold_secs": STALL_S} and STALL_S == 1.0
    before = stalls()
    with caplog.at_level(logging.WARNING, logger="kafka.net.selector"):
        logging.getLogger("kafka.net.selector").warning(
            "Task %r ran for %.3fs (>%.3fs threshold). It is blocking the event loop -- "
            "likely a tight sync loop inside a coroutine.", "t", 1.2, 1.0)
        logging.getLogger("kafka.net.selector").warning("something else")
    assert stalls() == before + 1
    assert "blocking the event loop" in caplog.text  # still in the log
