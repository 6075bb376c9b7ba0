"""Checks for the whole suite."""

from __future__ import annotations

import pytest


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--dist loadgroup`` every test marked ``xdist_group`` must carry its group in
    its node id, or xdist runs the group's tests on several workers at once (two YARN or
    standalone-cluster jobs fighting over the same cores) without a word."""
    if not config.getoption("loadgroup", default=False):
        return
    lost = [item.nodeid for item in items
            if item.get_closest_marker("xdist_group") and "@" not in item.nodeid]
    if lost:
        raise pytest.UsageError(f"xdist_group marks are ignored by this pytest/pytest-xdist "
                                f"pair (see pyproject.toml): {lost[:3]}")
