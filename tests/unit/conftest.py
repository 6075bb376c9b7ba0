"""Fixtures of the pure tests."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from leakproof.core import codec, native


def native_or_skip() -> Any:
    """``leakproof_native``; a skip where it cannot be built (no cargo), a failure where it
    should have been (``make venv`` builds it wherever cargo is)."""
    module = native.module()
    if module is None:
        if shutil.which("cargo") is not None:
            pytest.fail("cargo is here but leakproof_native is not installed: make native")
        pytest.skip("leakproof_native is not installed (no cargo): the pure path runs")
    return module


@pytest.fixture(params=["native", "pure"])
def read_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
              ) -> Iterator[str]:
    """Each test of a module that uses it, once on each read path (``core.native``): the
    decoder's rules and the record reader's must hold on both."""
    native.module.cache_clear()
    codec._default_decoder.cache_clear()
    if request.param == "pure":
        monkeypatch.setenv(native.ENV, "0")
    else:
        monkeypatch.delenv(native.ENV, raising=False)
        native_or_skip()
    yield request.param
    native.module.cache_clear()
    codec._default_decoder.cache_clear()
