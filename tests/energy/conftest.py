"""The energy pack's tests run in a tenant that has the pack (tenants.packs): `tenant` is the energy demo tenant."""

import pytest

from tests.factories import with_packs


@pytest.fixture
def tenant(tenant):
    return with_packs(tenant, "energy")
