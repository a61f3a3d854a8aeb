#!/usr/bin/env bash
# What shardq's Spark job and the web dashboard's browser tests need from the system, installed with
# apt when missing (as root or with sudo): Java 17+ and the PostgreSQL JDBC driver
# (/usr/share/java/postgresql.jar), and Chromium (/usr/bin/chromium, driven by Playwright; not on Ubuntu,
# whose Chromium is a snap). Skips whatever is already there, or set JAVA_HOME / SHARDQ_JDBC_JAR /
# SHARDQ_TEST_CHROMIUM to use your own.
set -euo pipefail

java_major() {
    local java="${JAVA_HOME:+$JAVA_HOME/bin/}java"
    command -v "$java" >/dev/null 2>&1 || { echo 0; return; }
    "$java" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1
}

packages=()
if [ "$(java_major)" -lt 17 ]; then packages+=(openjdk-17-jre-headless); fi
if [ -z "${SHARDQ_JDBC_JAR:-}" ] && [ ! -f /usr/share/java/postgresql.jar ]; then
    packages+=(libpostgresql-jdbc-java)
fi
if [ -z "${SHARDQ_TEST_CHROMIUM:-}" ] && [ ! -x /usr/bin/chromium ]; then
    # Ubuntu has no `chromium` deb (its Chromium is a snap; `chromium-browser` only installs the snap),
    # so apt would fail the whole install there: say so and let the browser tests skip instead.
    # (GitHub's Ubuntu runners already have /usr/bin/chromium.)
    distro="$(. /etc/os-release 2>/dev/null && echo " ${ID:-} ${ID_LIKE:-} " || true)"
    if [[ "$distro" == *" ubuntu "* ]]; then
        echo "system-deps.sh: Ubuntu packages Chromium as a snap only; the browser tests skip unless SHARDQ_TEST_CHROMIUM names a Chromium or Chrome binary" >&2
    else
        packages+=(chromium)
    fi
fi
if [ "${#packages[@]}" -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ]; then sudo=""; elif command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
        echo "system-deps.sh: please install ${packages[*]} (apt), or set JAVA_HOME / SHARDQ_JDBC_JAR / SHARDQ_TEST_CHROMIUM" >&2
        exit 1
    fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${packages[@]}"
fi
