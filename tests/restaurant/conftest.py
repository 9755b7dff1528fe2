"""The restaurant pack's tests run in tenants that have the pack (tenants.packs)."""

import pytest

from tests.factories import with_packs


@pytest.fixture
def tenant(tenant):
    return with_packs(tenant, "restaurant")
