"""The GitHub Actions workflow (.github/workflows/ci.yml), read as data: what must stay true of it
for CI to keep proving what the docs say it proves (docs/cockroachdb.md, "What has run, what has
been checked, what is unproven")."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cockroach_container import COCKROACH_IMAGES, COMMAND, HTTP_PORT, SQL_PORT

yaml = pytest.importorskip("yaml", reason="PyYAML (the dev extra) reads the workflow")

WORKFLOW = Path(__file__).resolve().parents[2] / ".github" / "workflows" / "ci.yml"


@pytest.fixture(scope="module")
def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def _runs(job: dict) -> list[str]:
    return [step["run"] for step in job["steps"] if "run" in step]


def _ran(job: dict, command: str) -> bool:
    return any(command in run for run in _runs(job))


def test_the_suite_job_runs_ci_run_on_python_3_11(workflow):
    suite = workflow["jobs"]["suite"]
    assert suite["runs-on"].startswith("ubuntu")
    pythons = [
        step["with"]["python-version"]
        for step in suite["steps"]
        if step.get("uses", "").startswith("actions/setup-python")
    ]
    assert pythons == ["3.11"]
    assert _ran(suite, "bash .ci/run")


def test_the_matrix_runs_both_lines_the_test_fixture_names(workflow):
    # The same images as `make test-cockroach COCKROACH=oldest|newest`, so CI proves those lines.
    matrix = workflow["jobs"]["cockroachdb"]["strategy"]["matrix"]["include"]
    assert {entry["line"]: entry["image"] for entry in matrix} == COCKROACH_IMAGES
    assert workflow["jobs"]["cockroachdb"]["strategy"]["fail-fast"] is False


def test_the_service_is_the_insecure_node_of_the_matrix_image(workflow):
    job = workflow["jobs"]["cockroachdb"]
    service = job["services"]["cockroach"]
    assert service["image"] == "${{ matrix.image }}"
    assert service["command"] == COMMAND
    assert set(service["ports"]) == {f"{SQL_PORT}:{SQL_PORT}", f"{HTTP_PORT}:{HTTP_PORT}"}
    # Started before the node serves SQL: a step waits on the readiness endpoint first.
    assert f"localhost:{HTTP_PORT}/health?ready=1" in _runs(job)[0]


def test_the_cockroach_job_runs_the_suite_then_migrate_doctor_and_the_demo(workflow):
    job = workflow["jobs"]["cockroachdb"]
    url = f"postgresql://root@localhost:{SQL_PORT}/defaultdb?sslmode=disable"
    assert job["env"]["SHARDQ_TEST_COCKROACH_URL"] == url
    assert job["env"]["SHARDQ_DSN"] == f"cockroachdb://root@localhost:{SQL_PORT}/defaultdb?sslmode=disable"
    runs = _runs(job)
    order = [
        next(i for i, run in enumerate(runs) if command in run)
        for command in ("make test-cockroach", "shardq migrate", "shardq doctor", "make demo")
    ]
    assert order == sorted(order)
    assert f"SHARDQ_TEST_COCKROACH_URL={url} make test-cockroach" in runs[order[0]]
