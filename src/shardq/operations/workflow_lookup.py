"""Plans of the dashboard's way from a task to its workflow (sql/common/workflow_lookup.sql)."""

from __future__ import annotations

import uuid
from typing import Any

from shardq.sql.plan import Call, Plan


def task_workflow(task_id: str) -> Plan[dict[str, Any] | None]:
    """``{"id", "step"}`` of the workflow whose step the task ``task_id`` is, or None (one read)."""
    row: dict[str, Any] | None = yield Call("workflow_step_of_task", {"id": uuid.UUID(task_id)}, rows="one")
    return {"id": str(row["workflow_id"]), "step": row["step"]} if row else None
