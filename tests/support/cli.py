"""The command line as the tests run it."""

from __future__ import annotations

import sys
from pathlib import Path

SHARDQ = str(Path(sys.executable).with_name("shardq"))
