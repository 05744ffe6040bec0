"""pytest plugin of the lab's smoke knob (``lab/probes/smoke.py``): under
``FLASHREPRO_LAB_SMOKE=1`` only the first :data:`KEEP` collected tests run, the rest are
deselected (each xdist worker collects the same list, so they agree). ``lab/probes/smoke.sh``
loads it through ``PYTEST_ADDOPTS=-p lab.probes.smoke_pytest``."""

from __future__ import annotations

import pytest

from lab.probes import smoke

KEEP = 2


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if smoke.enabled() and len(items) > KEEP:
        config.hook.pytest_deselected(items=items[KEEP:])
        del items[KEEP:]
