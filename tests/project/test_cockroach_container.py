"""The CockroachDB test node, checked without Docker: what testcontainers would ask Docker to run,
what it polls before the fixture connects, and the URL the fixture connects with.

The fixture (``tests/conftest.py``, ``cockroach_root``) runs ``with insecure_container(image) as c:``.
These tests drive that same ``DockerContainer.start`` with a stand-in for testcontainers' Docker
client, so they exercise the internals of the pinned testcontainers (``>=4.15,<4.16`` in
pyproject.toml) that the fixture relies on, as of 4.15.0 (the public repository's
``src/testcontainers/core/container.py``, unchanged at its newest commit, c958e40c):

* ``start`` calls ``self._configure()`` (line 250), then ``docker_client.create(self.image,
  command=self._command, environment=self.env, ports=self.ports, …)`` (lines 263-266), then
  ``docker_client.start`` (line 278), then ``self._wait_strategy.wait_until_ready(self)`` (line 282);
* ``HttpWaitStrategy`` (``core/wait_strategies.py`` line 155) polls
  ``f"{protocol}://{host}:{port}{self._path}"`` (``_build_url``, line 355) on the mapped port.

A release that changes any of these (for instance one that starts the container without waiting,
or builds the command elsewhere) fails here before it can make ``make test-cockroach`` connect to a
node that is not ready or not insecure. The CockroachDB module of testcontainers is not used (the
module documentation of ``tests/support/cockroach_container.py`` says why), and importing it is checked not
to happen, because its import alone emits a DeprecationWarning.
"""

from __future__ import annotations

import sys
import warnings

import pytest

from shardq.sessions.dsn import Dsn
from tests.support.cockroach_container import (
    COCKROACH_IMAGES,
    HTTP_PORT,
    SQL_PORT,
    cockroach_image,
    insecure_container,
    root_url,
)

pytestmark = pytest.mark.recorded

pytest.importorskip("testcontainers")

#: Host ports the stand-in Docker maps the node's ports to.
MAPPED = {SQL_PORT: 40001, HTTP_PORT: 40002}


class _Container:
    """A started container as the Docker SDK returns it, as far as testcontainers reads it."""

    id = "c0ffee"
    short_id = "c0ffee"
    status = "running"

    def __init__(self):
        self.removed = False

    def reload(self):
        pass

    def remove(self, **kwargs):
        self.removed = True


class _Docker:
    """Stands in for testcontainers' DockerClient (``core/docker_client.py``): records what
    ``DockerContainer.start`` asks of it."""

    def __init__(self, **kwargs):
        self.created: dict = {}
        self.started = None
        self.client = self  # DockerContainer.stop closes get_docker_client().client

    def create(self, image, **kwargs):
        self.created = {"image": image, **kwargs}
        return _Container()

    def start(self, container):
        self.started = container

    def get_connection_mode(self):
        from testcontainers.core.config import ConnectionMode

        return ConnectionMode.docker_host

    def host(self):
        return "localhost"

    def port(self, container_id, port):
        return MAPPED[int(port)]

    def close(self):
        pass


@pytest.fixture
def started(monkeypatch):
    """The fixture's container after ``with insecure_container(image) as container:`` entered,
    with the stand-in Docker and every URL the readiness check polled."""
    from testcontainers.core import container as core
    from testcontainers.core.wait_strategies import HttpWaitStrategy

    monkeypatch.setattr(core, "DockerClient", _Docker)
    monkeypatch.setattr(core.Reaper, "get_instance", classmethod(lambda cls: None))  # no Ryuk container
    polled: list[str] = []

    def answer(self, url, headers, ssl_context):
        polled.append(url)
        return True

    monkeypatch.setattr(HttpWaitStrategy, "_try_http_request", answer)
    # What a user's shell may hold must not reach the node (the entrypoint would add WITH PASSWORD).
    monkeypatch.setenv("COCKROACH_PASSWORD", "from-the-shell")
    monkeypatch.setenv("COCKROACH_USER", "someone")

    def start(image: str = COCKROACH_IMAGES["oldest"]):
        container = insecure_container(image)
        container.__enter__()
        return container, container.get_docker_client(), polled

    return start


def test_docker_is_asked_for_an_insecure_single_node(started):
    _, docker, _ = started()
    command = docker.created["command"].split()
    assert command[:1] == ["start-single-node"]
    assert "--insecure" in command
    assert not any(arg.startswith(("--password", "--certs-dir")) for arg in command)


def test_the_entrypoint_sees_no_user_and_no_password(started):
    # build/deploy/cockroach.sh creates a user only when COCKROACH_USER is set, and adds WITH PASSWORD
    # when COCKROACH_PASSWORD is set, which an insecure node refuses.
    _, docker, _ = started()
    environment = docker.created["environment"]
    assert environment.get("COCKROACH_PASSWORD", "") == ""
    assert environment.get("COCKROACH_USER", "") == ""


def test_both_ports_are_published(started):
    _, docker, _ = started()
    assert set(docker.created["ports"]) == {str(SQL_PORT), str(HTTP_PORT)}  # exposed, each to a random host port


def test_start_waits_until_the_node_accepts_sql(started):
    container, docker, polled = started()
    assert docker.started is container.get_wrapped_container()
    # The readiness endpoint, on the host port Docker mapped the HTTP port to; polled after start.
    assert polled == [f"http://localhost:{MAPPED[HTTP_PORT]}/health?ready=1"]


def test_the_fixture_url_reaches_the_mapped_sql_port_as_root(started):
    container, _, _ = started()
    url = root_url(container.get_container_host_ip(), container.get_exposed_port(SQL_PORT))
    assert url == f"cockroachdb://root@localhost:{MAPPED[SQL_PORT]}/defaultdb?sslmode=disable"


def test_leaving_the_block_removes_the_container(started):
    container, _, _ = started()
    wrapped = container.get_wrapped_container()
    container.__exit__(None, None, None)
    assert wrapped.removed


def test_starting_a_node_warns_nothing(started):
    # make test must end without warnings (issue 51): the deprecated wait helpers and testcontainers'
    # CockroachDB module are not used.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        started()
    assert "testcontainers.community.cockroachdb" not in sys.modules
    assert "testcontainers.cockroachdb" not in sys.modules


def test_the_fixture_url_is_root_without_tls_on_the_cockroachdb_engine():
    url = root_url("localhost", 32768)
    assert url == "cockroachdb://root@localhost:32768/defaultdb?sslmode=disable"
    dsn = Dsn.parse(url)
    assert dsn.named_engine is not None and dsn.named_engine.name == "cockroachdb"
    assert "sslmode=disable" in dsn.conninfo and "user=root" in dsn.conninfo


@pytest.mark.parametrize(
    ("given", "image"),
    [
        (None, COCKROACH_IMAGES["newest"]),
        ("oldest", "cockroachdb/cockroach:latest-v23.1"),
        ("newest", "cockroachdb/cockroach:latest-v26.2"),
        ("cockroachdb/cockroach:latest-v24.1", "cockroachdb/cockroach:latest-v24.1"),
    ],
)
def test_one_variable_chooses_the_image(given, image):
    environ = {} if given is None else {"SHARDQ_TEST_COCKROACH_IMAGE": given}
    assert cockroach_image(environ) == image


def test_the_chosen_image_is_the_one_started(started):
    _, docker, _ = started(COCKROACH_IMAGES["newest"])
    assert docker.created["image"].endswith(COCKROACH_IMAGES["newest"])
