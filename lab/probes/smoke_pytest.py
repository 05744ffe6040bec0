"""pytest plugin of the lab's smoke knob (``lab/probes/smoke.py``): under
``FLASHREPRO_LAB_SMOKE=1`` only the first :data:`KEEP` tests left after ``-m``/``-k`` run, the
rest are deselected (each xdist worker collects the same list, so they agree). ``lab/probes/smoke.sh``
loads it through ``PYTEST_ADDOPTS=-p lab.probes.smoke_pytest``."""

from __future__ import annotations

import pytest

from lab.probes import smoke

KEEP = 2


@pytest.hookimpl(trylast=True)  # after -m/-k deselection: keep the first tests that would run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if smoke.enabled() and len(items) > KEEP:
        config.hook.pytest_deselected(items=items[KEEP:])
        del items[KEEP:]
