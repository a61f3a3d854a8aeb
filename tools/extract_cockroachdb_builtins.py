"""Re-extract tests/conformance/cockroachdb_builtins.txt from a checkout of cockroachdb/cockroach.

The registry is a set of Go map literals keyed by function name (``regularBuiltins`` in
pkg/sql/sem/builtins/builtins.go, ``pgBuiltins`` in pg_builtins.go, ``aggregates``,
``windows``, ``generators``, …). Each entry starts on a line indented by one tab with either a
string key (``\t"now": …``) or a named constant (``\ttree.FollowerReadTimestampFunctionName: …``),
whose value is looked up in pkg/sql/sem. Geo builtins are left out (shardq has no spatial data).

    python tools/extract_cockroachdb_builtins.py --checkout ../cockroach          # check the allowlist
    python tools/extract_cockroachdb_builtins.py --checkout ../cockroach --all    # print the registry

Without ``--all`` it checks that every name in the allowlist is still a key of the registry at
that checkout and exits 1 naming any that is not.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REGISTRY_FILES = (
    "builtins.go",
    "pg_builtins.go",
    "aggregate_builtins.go",
    "window_builtins.go",
    "generator_builtins.go",
    "math_builtins.go",
    "trigram_builtins.go",
    "tsearch_builtins.go",
    "fingerprint_builtins.go",
    "replication_builtins.go",
    "pgcrypto_builtins.go",
)
ALLOWLIST = Path(__file__).resolve().parents[1] / "tests" / "conformance" / "cockroachdb_builtins.txt"
_KEY = re.compile(r'^\t(?:"(?P<name>[a-z0-9_.]+)"|(?:\w+\.)?(?P<const>[A-Z]\w*Name)):\s', re.MULTILINE)
_CONST = re.compile(r'\b(?P<const>[A-Z]\w*Name)\s*=\s*"(?P<name>[a-z0-9_.]+)"')


def registry(checkout: Path) -> dict[str, str]:
    """Every registered builtin name, with the file (relative to the checkout) that registers it."""
    sem = checkout / "pkg" / "sql" / "sem"
    constants = {m["const"]: m["name"] for path in sem.rglob("*.go") for m in _CONST.finditer(path.read_text())}
    names: dict[str, str] = {}
    for file in REGISTRY_FILES:
        path = sem / "builtins" / file
        if not path.exists():
            continue
        for match in _KEY.finditer(path.read_text()):
            name = match["name"] or constants.get(match["const"] or "")
            if name:
                names.setdefault(name, str(path.relative_to(checkout)))
    return names


def allowlist() -> dict[str, str]:
    rows = [line.split("\t") for line in ALLOWLIST.read_text().splitlines() if line and not line.startswith("#")]
    return {row[0]: row[1] for row in rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", type=Path, required=True, help="a checkout of cockroachdb/cockroach")
    parser.add_argument("--all", action="store_true", help="print the whole registry as allowlist rows")
    args = parser.parse_args()
    found = registry(args.checkout)
    if args.all:
        for name in sorted(found):
            print(f"{name}\t{found[name]}")
        return 0
    missing = sorted(set(allowlist()) - set(found))
    for name in missing:
        print(f"{name}: not a key of the registry at {args.checkout}", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
