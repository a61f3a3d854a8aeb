"""Finding Java and the PostgreSQL JDBC driver, building the JDBC URL, starting a SparkSession.

Driver jar, first match wins (:func:`find_jdbc_driver`):

1. an explicit path (argument, or ``SHARDQ_JDBC_JAR``); a path that does not exist is an error,
   never silently replaced by another jar;
2. Debian's ``/usr/share/java/postgresql.jar`` (``apt-get install libpostgresql-jdbc-java``);
3. the newest ``org/postgresql/postgresql/<version>/postgresql-<version>.jar`` in the local Maven
   repository (``~/.m2/repository``, or ``MAVEN_REPO_LOCAL``);
4. ``spark.jars.packages`` (:data:`MAVEN_COORDINATE`) when Maven Central answers on TCP 443
   (Spark's Ivy then downloads it at session start);
5. otherwise :class:`shardq.errors.SparkSetupError`, naming these options.
"""

from __future__ import annotations

import importlib.resources
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from shardq.errors import InvalidInput, SparkSetupError
from shardq.sessions.dsn import Dsn

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DRIVER_CLASS = "org.postgresql.Driver"
DEBIAN_JAR = Path("/usr/share/java/postgresql.jar")
MAVEN_COORDINATE = "org.postgresql:postgresql:42.7.14"
MAVEN_HOST = "repo1.maven.org"
JAVA_MIN_MAJOR = 17  # Spark 4 runs on Java 17 and 21 only

SETUP_HINT = (
    "give the PostgreSQL JDBC driver jar with --jdbc-jar or SHARDQ_JDBC_JAR, "
    "or install Debian's libpostgresql-jdbc-java (/usr/share/java/postgresql.jar), "
    "or put org.postgresql:postgresql in the local Maven repository (~/.m2), "
    "or make Maven Central reachable for spark.jars.packages"
)


@dataclass(frozen=True)
class JdbcDriver:
    """Where the driver comes from: a ``jar`` on disk, or Maven ``packages`` for Spark's Ivy."""

    source: str
    jar: Path | None = None
    packages: str | None = None

    def spark_conf(self) -> dict[str, str]:
        return {"spark.jars": str(self.jar)} if self.jar else {"spark.jars.packages": self.packages or ""}


def _version_key(path: Path) -> tuple:
    return tuple(int(p) if p.isdigit() else -1 for p in re.split(r"[.\-]", path.parent.name))


def _maven_local_jar() -> Path | None:
    root = Path(os.environ.get("MAVEN_REPO_LOCAL") or Path.home() / ".m2" / "repository")
    found = sorted(root.glob("org/postgresql/postgresql/*/postgresql-*.jar"), key=_version_key)
    found = [p for p in found if p.name == f"postgresql-{p.parent.name}.jar"]
    return found[-1] if found else None


def maven_reachable(timeout: float = 2.0) -> bool:
    """True when Maven Central accepts a TCP connection (only asked when no jar is on disk)."""
    try:
        with socket.create_connection((MAVEN_HOST, 443), timeout=timeout):
            return True
    except OSError:
        return False


def find_jdbc_driver(
    explicit: str | os.PathLike | None = None,
    *,
    debian_jar: Path = DEBIAN_JAR,
    reachable: Callable[[], bool] = maven_reachable,
) -> JdbcDriver:
    """The PostgreSQL JDBC driver to give Spark, in the order of the module docstring."""
    configured = explicit or os.environ.get("SHARDQ_JDBC_JAR")
    if configured:
        path = Path(configured).expanduser()
        if not path.is_file():
            raise SparkSetupError(f"JDBC driver jar {str(path)!r} does not exist")
        return JdbcDriver("configured", jar=path.resolve())
    if debian_jar.is_file():
        return JdbcDriver("debian", jar=debian_jar.resolve())
    local = _maven_local_jar()
    if local is not None:
        return JdbcDriver("maven-local", jar=local)
    if reachable():
        return JdbcDriver("maven", packages=MAVEN_COORDINATE)
    raise SparkSetupError(f"no PostgreSQL JDBC driver found: {SETUP_HINT}")


def find_java() -> Path:
    """The ``java`` Spark will launch (``JAVA_HOME/bin/java``, else ``java`` on PATH), checked to
    be Java 17 or newer."""
    home = os.environ.get("JAVA_HOME")
    candidate = Path(home) / "bin" / "java" if home else None
    if candidate is None or not candidate.is_file():
        found = shutil.which("java")
        if found is None:
            where = f"JAVA_HOME={home} has no bin/java and " if home else ""
            raise SparkSetupError(
                f"Java not found ({where}no java on PATH): install a JDK {JAVA_MIN_MAJOR}+ "
                "(Debian: apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
            )
        candidate = Path(found)
    try:
        banner = subprocess.run(
            [str(candidate), "-version"], capture_output=True, text=True, timeout=30, check=False
        ).stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SparkSetupError(f"{candidate} -version failed: {exc}") from None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', banner)
    if match:
        major = int(match.group(1))
        if major == 1 and match.group(2):  # "1.8.0" style
            major = int(match.group(2))
        if major < JAVA_MIN_MAJOR:
            raise SparkSetupError(f"{candidate} is Java {major}; Spark 4 needs Java {JAVA_MIN_MAJOR} or 21")
    return candidate


def require_pyspark() -> None:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise SparkSetupError("pyspark is not installed: pip install 'shardq[spark]'") from None


@dataclass(frozen=True)
class JdbcTarget:
    """The JDBC URL and credentials for one shardq database. ``str()`` hides the password."""

    url: str
    user: str | None
    password: str | None

    def __repr__(self) -> str:
        return f"JdbcTarget(url={self.url!r}, user={self.user!r})"


# libpq keyword -> pgjdbc property, for the ones that matter to a writer.
_PASS_THROUGH = {
    "sslmode": "sslmode",
    "sslrootcert": "sslrootcert",
    "sslcert": "sslcert",
    "sslkey": "sslkey",
    "connect_timeout": "connectTimeout",
}


def jdbc_target(dsn: Dsn, *, application_name: str = "shardq-spark") -> JdbcTarget:
    """A ``jdbc:postgresql://`` URL for ``dsn`` with ``reWriteBatchedInserts=true`` (as a URL
    parameter: a Spark option of another spelling would be silently ignored).

    pgjdbc speaks TCP only, so a DSN that names a Unix socket directory is rejected."""
    params = dsn.params()
    host = params.get("host") or params.get("hostaddr") or "localhost"
    if host.startswith("/") or "," in host:
        raise InvalidInput(f"the Spark JDBC writer needs one TCP host in the DSN, not {host!r}")
    port = params.get("port") or "5432"
    database = params.get("dbname") or params.get("user") or "postgres"
    query = {"reWriteBatchedInserts": "true", "ApplicationName": application_name}
    for libpq_key, jdbc_key in _PASS_THROUGH.items():
        if params.get(libpq_key):
            query[jdbc_key] = params[libpq_key]
    host_part = f"[{host}]" if ":" in host else host
    text = "&".join(f"{k}={quote(v, safe='')}" for k, v in query.items())
    url = f"jdbc:postgresql://{host_part}:{port}/{quote(database, safe='')}?{text}"
    return JdbcTarget(url, params.get("user"), params.get("password"))


def spark_session(
    *,
    master: str = "local[2]",
    driver: JdbcDriver | None = None,
    app_name: str = "shardq",
    driver_memory: str = "1g",
    conf: dict[str, str] | None = None,
) -> SparkSession:
    """A local SparkSession set up for shardq (or the active one, which keeps its settings).

    Checks pyspark, Java and the JDBC driver first and says which is missing. Spark's web UI,
    console progress bars and start-up log lines are off (the driver logs errors only, unless
    ``conf``'s ``spark.driver.extraJavaOptions`` names another log4j configuration); the driver binds to 127.0.0.1; ``spark.sql.session.timeZone``
    is UTC. JVM-level settings (the jar, memory) only count for the first session of a process.
    """
    require_pyspark()
    find_java()
    driver = driver or find_jdbc_driver()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.memory": driver_memory,
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "8",
        "spark.default.parallelism": "4",
    }
    settings.update(driver.spark_conf())
    # Spark's start-up chatter off (log4j2.properties beside this module: errors only); a
    # log4j configuration of the caller's own, or JVM options, come after and win.
    quiet = importlib.resources.files("shardq.spark").joinpath("log4j2.properties")
    java_options = f"-Dlog4j2.configurationFile={quiet}"
    given = (conf or {}).get("spark.driver.extraJavaOptions")
    settings["spark.driver.extraJavaOptions"] = f"{java_options} {given}" if given else java_options
    settings.update({k: v for k, v in (conf or {}).items() if k != "spark.driver.extraJavaOptions"})
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except Exception as exc:
        raise SparkSetupError(
            f"Spark could not start: {str(exc).strip().splitlines()[0] if str(exc).strip() else exc!r}"
        ) from exc
    session.sparkContext.setLogLevel("ERROR")
    return session


def check_driver_loadable(spark: SparkSession) -> None:
    """Raise :class:`SparkSetupError` unless ``org.postgresql.Driver`` loads in ``spark``'s JVM.
    (Skipped for sessions without a local JVM, e.g. Spark Connect: the write reports it then.)"""
    try:
        jvm = spark.sparkContext._jvm
    except Exception:  # noqa: BLE001 - Spark Connect has no sparkContext
        return
    if jvm is None:
        return
    loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
    try:
        jvm.java.lang.Class.forName(DRIVER_CLASS, False, loader)
    except Exception:  # noqa: BLE001 - py4j raises its own error types
        raise SparkSetupError(
            f"{DRIVER_CLASS} is not on this SparkSession's classpath: start it with spark.jars=<driver jar> "
            f"(shardq.spark.spark_session does), or {SETUP_HINT}"
        ) from None
