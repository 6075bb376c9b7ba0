"""Fixtures of the pure tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from leakproof.core import codec, native


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
        if native.module() is None:
            pytest.skip("leakproof_native is not installed (no cargo): the pure path runs")
    yield request.param
    native.module.cache_clear()
    codec._default_decoder.cache_clear()
