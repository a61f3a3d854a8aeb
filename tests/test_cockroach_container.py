"""The CockroachDB test node, checked without Docker: the command line testcontainers builds for it,
the environment its entrypoint sees, the image chosen and the URL the fixture connects with."""

from __future__ import annotations

import pytest

from shardq.dsn import Dsn

from .cockroach_container import COCKROACH_IMAGES, cockroach_image, insecure_container, root_url

pytest.importorskip("testcontainers")


class _NoDocker:
    """Stands in for testcontainers' DockerClient, which the container's constructor opens."""

    def __init__(self, **kwargs):
        pass


@pytest.fixture
def configured(monkeypatch):
    """The container as testcontainers configures it at start (its own ``_configure``), built
    without a Docker engine."""
    from testcontainers.core import container as core

    monkeypatch.setattr(core, "DockerClient", _NoDocker)
    monkeypatch.delenv("COCKROACH_PASSWORD", raising=False)

    def build(image: str = COCKROACH_IMAGES["oldest"]):
        container = insecure_container(image)
        container._configure()
        return container

    return build


def test_the_node_starts_insecure_without_a_password(configured):
    container = configured()
    command = container._command.split()
    assert command[0] == "start-single-node"
    assert "--insecure" in command
    assert not any(arg.startswith("--password") for arg in command)
    # The image's entrypoint adds WITH PASSWORD when this is set, which an insecure node refuses.
    assert container.env["COCKROACH_PASSWORD"] == ""


def test_a_password_in_the_environment_does_not_make_the_node_secure(configured, monkeypatch):
    monkeypatch.setenv("COCKROACH_PASSWORD", "from-the-shell")
    container = configured()
    assert "--insecure" in container._command.split()
    assert container.env["COCKROACH_PASSWORD"] == ""


def test_the_module_as_shipped_would_start_a_secure_node_with_an_empty_password(configured):
    # Why insecure_container clears the password after construction: testcontainers replaces ""
    # by its default, and the node then starts secure (the fixture could never connect).
    from .cockroach_container import container_class

    plain = container_class()(COCKROACH_IMAGES["oldest"], password="")
    plain._configure()
    assert "--insecure" not in plain._command.split()


def test_the_fixture_url_is_root_without_tls_on_the_cockroachdb_engine():
    url = root_url("localhost", 32768)
    assert url == "cockroachdb://root@localhost:32768/defaultdb?sslmode=disable"
    dsn = Dsn.parse(url)
    assert dsn.named_engine is not None and dsn.named_engine.name == "cockroachdb"
    assert "sslmode=disable" in dsn.conninfo and "user=root" in dsn.conninfo


@pytest.mark.parametrize(("given", "image"), [
    (None, COCKROACH_IMAGES["newest"]),
    ("oldest", "cockroachdb/cockroach:latest-v23.1"),
    ("newest", COCKROACH_IMAGES["newest"]),
    ("cockroachdb/cockroach:latest-v24.1", "cockroachdb/cockroach:latest-v24.1"),
])
def test_one_variable_chooses_the_image(given, image):
    environ = {} if given is None else {"SHARDQ_TEST_COCKROACH_IMAGE": given}
    assert cockroach_image(environ) == image


def test_the_chosen_image_is_the_one_started(configured):
    assert configured(COCKROACH_IMAGES["newest"]).image.endswith(COCKROACH_IMAGES["newest"])
