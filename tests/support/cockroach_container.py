"""The CockroachDB node ``make test-cockroach`` starts: which image, how it runs, how it is reached.

* Image: ``SHARDQ_TEST_COCKROACH_IMAGE``, either a line's name (``oldest``: the 23.1 line, the
  oldest shardq supports; ``newest``: the newest released line) or a whole image reference.
  Default: ``newest``. The ``latest-vX.Y`` tags are the newest patch of each line on Docker Hub:
  CockroachDB's release job pushes ``latest-${release_branch}`` for every production release
  (``build/teamcity/internal/release/process/publish-cockroach-release.sh``, "Tag docker image as
  latest-RELEASE_BRANCH"). The newest line is 26.2: v26.2.0 was released on 2026-04-27 and
  v26.2.2 on 2026-06-05, while 26.3 has only an alpha (cockroachdb/docs,
  ``src/current/_includes/releases/v26.2/v26.2.0.md``, ``v26.2.2.md``, ``releases/v26.3/``).
* Mode: a single insecure node, reached as ``root`` without TLS. The container is testcontainers'
  generic ``DockerContainer`` with the command and the readiness check written here, not its
  CockroachDB module: that module (``testcontainers/community/cockroachdb/__init__.py``, 4.15.0)
  decorates ``_connect`` with ``@wait_container_is_ready`` (line 76), which warns "deprecated" when
  the module is imported, and waits with ``wait_for_logs`` on a string (line 81), deprecated too
  (``core/waiting_utils.py`` lines 154 and 300); it also starts a *secure* node unless its password
  is cleared after construction (``password or environ.get(...)`` in ``__init__``, ``--insecure``
  only when ``_configure`` sees it empty). Here ``--insecure`` is simply the command.
* No ``COCKROACH_USER`` / ``COCKROACH_PASSWORD`` reaches the container, so the image's entrypoint
  (``build/deploy/cockroach.sh``) creates no user (``create_default_user`` returns when
  ``COCKROACH_USER`` is empty) and never adds ``WITH PASSWORD``, which an insecure node refuses;
  ``COCKROACH_DATABASE`` defaults to ``defaultdb``, which exists.
* Ready when ``GET /health?ready=1`` on the HTTP port answers 200: the node then accepts SQL
  (503 before). testcontainers polls it after ``docker start`` (``DockerContainer.start``,
  ``core/container.py`` line 282; ``HttpWaitStrategy._build_url`` line 355 of
  ``core/wait_strategies.py``). ``tests/project/test_cockroach_container.py`` checks that start path
  without Docker.
* Why not TLS: psycopg over TLS could hang on one result size with servers before
  cockroachdb#148222 (audit F10), and the 23.1 line predates that fix.
"""

from __future__ import annotations

import os
from typing import Any

#: Named lines for ``SHARDQ_TEST_COCKROACH_IMAGE`` (``make test-cockroach COCKROACH=oldest``); the
#: CI workflow's matrix (.github/workflows/ci.yml) runs the same two images.
COCKROACH_IMAGES = {
    "oldest": "cockroachdb/cockroach:latest-v23.1",
    "newest": "cockroachdb/cockroach:latest-v26.2",
}
IMAGE_VARIABLE = "SHARDQ_TEST_COCKROACH_IMAGE"
SQL_PORT = 26257
HTTP_PORT = 8080
#: The node's command: the entrypoint's single-node mode, no TLS, no password.
COMMAND = "start-single-node --insecure"
#: 200 once the node accepts SQL connections, 503 before.
READY_PATH = "/health?ready=1"


def cockroach_image(environ: Any = os.environ) -> str:
    """The image to run: a named line, a whole image reference, or the newest line."""
    chosen = (environ.get(IMAGE_VARIABLE) or "newest").strip()
    return COCKROACH_IMAGES.get(chosen, chosen)


def insecure_container(image: str) -> Any:
    """An insecure single-node CockroachDB container of ``image``, ready once the node accepts SQL
    (see the module documentation); start it with ``with insecure_container(image) as c:``."""
    # Imported here: conftest imports this module in every run, testcontainers only matters with Docker.
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.wait_strategies import HttpWaitStrategy

    return (
        DockerContainer(image)
        .with_exposed_ports(SQL_PORT, HTTP_PORT)
        .with_command(COMMAND)
        .waiting_for(HttpWaitStrategy(HTTP_PORT, READY_PATH))
    )


def root_url(host: str, port: int | str) -> str:
    """The URL the fixture connects with: root, no TLS (the node is insecure)."""
    return f"cockroachdb://root@{host}:{port}/defaultdb?sslmode=disable"
