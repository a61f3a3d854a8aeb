"""`shardq workflow ID` (and `shardq workflow-cancel ID`): a workflow's state and each step's."""

from __future__ import annotations

import json

import click

from shardq.cli.group import cli, client_from


@cli.command("workflow")
@click.argument("workflow_id")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def workflow(ctx, workflow_id, as_json) -> None:
    """The state of workflow WORKFLOW_ID (running, succeeded, failed, cancelled, or unknown) and of
    each step (waiting, ready, running, succeeded, dead, cancelled) with its parents; a malformed
    id exits 2."""
    status = client_from(ctx).workflow_status(workflow_id)
    if as_json:
        click.echo(json.dumps(status.to_json(), indent=2))
        return
    click.echo(f"{status.id}: {status.state}" + (f" ({status.name})" if status.name else ""))
    for step in status.steps:
        after = f" after {', '.join(step.parents)}" if step.parents else ""
        waits = f", waiting on {step.waiting_on}" if step.state == "waiting" else ""
        kind = " on failure" if step.on_failure else ""
        click.echo(f"  {step.name}: {step.state}{waits}{kind}{after} — task {step.task} {step.task_id} on {step.queue}")


@cli.command("workflow-cancel")
@click.argument("workflow_id")
@click.pass_context
def workflow_cancel(ctx, workflow_id) -> None:
    """Cancel every step of workflow WORKFLOW_ID not finished yet (their tasks are deleted)."""
    click.echo(f"cancelled {client_from(ctx).cancel_workflow(workflow_id)} step(s)")
