"""The CockroachDB node ``make test-cockroach`` starts: which image, how it runs, how it is reached.

* Image: ``SHARDQ_TEST_COCKROACH_IMAGE``, either a line's name (``oldest``: the 23.1 line, the
  oldest shardq supports; ``newest``: the newest released line) or a whole image reference.
  Default: ``newest``. The ``latest-vX.Y`` tags are the newest patch of each line on Docker Hub.
* Mode: a single insecure node, reached as ``root`` without TLS. testcontainers' module
  (``testcontainers.community.cockroachdb``, 4.15) adds ``--insecure`` to ``start-single-node``
  only when its ``password`` attribute is empty at start (``_configure``), but its constructor
  replaces an empty password by ``$COCKROACH_PASSWORD`` or its default ``"arthropod"``
  (``password or environ.get(...)``): passing ``password=""`` starts a *secure* node, which refuses
  the fixture's cleartext connection ("node is running secure mode, SSL connection required",
  ``pkg/sql/pgwire/server.go``). So the password is cleared after construction. It must also
  reach the image's entrypoint empty: ``build/deploy/cockroach.sh`` (``create_default_user``) adds
  ``WITH PASSWORD`` when ``COCKROACH_PASSWORD`` is set, which an insecure node refuses.
* Why not TLS: psycopg over TLS could hang on one result size with servers before
  cockroachdb#148222 (audit F10), and the 23.1 line predates that fix.
"""

from __future__ import annotations

import os
from typing import Any

#: Named lines for ``SHARDQ_TEST_COCKROACH_IMAGE`` (``make test-cockroach COCKROACH=oldest``).
COCKROACH_IMAGES = {
    "oldest": "cockroachdb/cockroach:latest-v23.1",
    "newest": "cockroachdb/cockroach:latest-v25.4",
}
IMAGE_VARIABLE = "SHARDQ_TEST_COCKROACH_IMAGE"
SQL_PORT = 26257


def cockroach_image(environ: Any = os.environ) -> str:
    """The image to run: a named line, a whole image reference, or the newest line."""
    chosen = (environ.get(IMAGE_VARIABLE) or "newest").strip()
    return COCKROACH_IMAGES.get(chosen, chosen)


def container_class() -> Any:
    try:
        # testcontainers >= 4.15 moved the module; the old path still works with a DeprecationWarning.
        from testcontainers.community.cockroachdb import CockroachDBContainer  # type: ignore
    except ImportError:
        from testcontainers.cockroachdb import CockroachDBContainer  # type: ignore
    return CockroachDBContainer


def insecure_container(image: str) -> Any:
    """A testcontainers CockroachDB container that starts an insecure single node (see the
    module documentation for why the password is cleared after construction)."""
    container = container_class()(image, dialect="cockroachdb+psycopg")
    container.password = ""
    return container


def root_url(host: str, port: int | str) -> str:
    """The URL the fixture connects with: root, no TLS (the node is insecure)."""
    return f"cockroachdb://root@{host}:{port}/defaultdb?sslmode=disable"
