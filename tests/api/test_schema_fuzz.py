"""schemathesis over the REST API's OpenAPI schema, with a key of the tenant: generated requests never get a 500, and
every documented answer matches its schema. (Driven through Hypothesis directly: schemathesis' pytest plugin does not
run under this pytest.)"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

from api.models import KeyScope

pytestmark = pytest.mark.django_db


@pytest.fixture
def _keep_the_test_connection():
    """As Django's test client does: a request must not close the connection holding the test's transaction
    (schemathesis calls the WSGI application directly)."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


def test_generated_requests_never_break_the_api(published, tenant_admin, make_key, _keep_the_test_connection):
    from config.wsgi import application

    _key, secret = make_key(tenant_admin, scopes=list(KeyScope.values))
    schema = schemathesis.openapi.from_wsgi("/api/v1/schema/", application)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.path for op in operations} >= {"/api/v1/agents/", "/api/v1/conversations/{id}/messages/"}
    checks = [not_a_server_error, response_schema_conformance, content_type_conformance]
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def call(case):
            case.call_and_validate(headers={"Authorization": f"Bearer {secret}"}, checks=checks)

        call()
