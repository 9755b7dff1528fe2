"""Plan selectors."""

from __future__ import annotations

import uuid
from typing import Any

from plans.models import StepRecord


def record_for_tenant(*, tenant: Any, record_id: uuid.UUID) -> StepRecord | None:
    """The tenant's step record with this recordId, or None (another tenant's record is never found)."""
    return StepRecord.objects.filter(tenant=tenant, recordId=record_id).select_related("step").first()
