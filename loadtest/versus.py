"""``python -m loadtest.versus REF [--rounds 2]``: this checkout's burn-down against a git ref's.

Every hot-path change is judged against the code before it, in one run: this runs
``python -m loadtest --scenarios burn-down --no-peers`` with each code version in turn, in ABBA
order (``rounds`` × ref, this, this, ref), each run on its own embedded PostgreSQL with shardq's
raw-SQL bound beside it. A run's figure is shardq / raw bound (the paired median within the run),
which cancels most of what a shared machine adds; the verdict is the median of this / ref over the
rounds. Writes ``versus.md`` and ``versus.json`` to ``--out``.

The ref's code is checked out into a temporary worktree and imported through ``PYTHONPATH`` (its
SQL, migrations and CLI folders linked into the package when the ref keeps them at the top, as
older revisions did); the ``loadtest`` package itself is this checkout's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def ref_tree(ref: str, where: Path) -> Path:
    """A worktree of ``ref`` whose ``src/`` imports as shardq; returns that ``src``."""
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", "--force", str(where), ref],
        check=True,
        capture_output=True,
    )
    package = where / "src" / "shardq"
    for folder in ("sql", "migrations", "cli"):
        top = where / folder
        if top.is_dir() and not (package / folder).exists():
            (package / folder).symlink_to(top, target_is_directory=True)
    return where / "src"


def remove_tree(src: Path) -> None:
    """Remove the worktree :func:`ref_tree` made (given the ``src`` it returned)."""
    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(src.parent)], capture_output=True)


def burn(src: Path, out: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src), str(REPO)]))
    subprocess.run(
        [sys.executable, "-m", "loadtest", "--scenarios", "burn-down", "--no-peers", "--out", str(out)],
        cwd=REPO,
        env=env,
        check=True,
    )
    burn_down = json.loads((out / "results.json").read_text())["burn-down"]
    cpu = burn_down.get("cpu_us_per_task", {})
    return {
        "over_raw": burn_down["shardq_over_raw_paired"]["median"],
        "shardq": burn_down["rates"]["shardq"],
        "raw": burn_down["rates"]["raw-bound"],
        "cpu_shardq": cpu.get("shardq"),
        "cpu_raw": cpu.get("raw-bound"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.versus", description=__doc__.split("\n\n")[0])
    parser.add_argument("ref", help="the git ref to compare against (e.g. the commit before a change)")
    parser.add_argument("--rounds", type=int, default=2, help="ABBA rounds (each: ref, this, this, ref)")
    parser.add_argument("--out", type=Path, default=REPO / "loadtest" / "results")
    args = parser.parse_args(argv)
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="shardq-versus-") as tmp:
        ref_src = ref_tree(args.ref, Path(tmp) / "ref")
        try:
            for round_ in range(args.rounds):
                for side in ("ref", "this", "this", "ref"):
                    out = Path(tmp) / f"run{len(runs)}"
                    result = burn(ref_src if side == "ref" else REPO / "src", out)
                    result.update(side=side, round=round_ + 1)
                    print(
                        f"round {round_ + 1} {side}: shardq / raw {result['over_raw']:.3f} "
                        f"({result['shardq']:,.0f} vs {result['raw']:,.0f} tasks/s)",
                        flush=True,
                    )
                    runs.append(result)
        finally:
            remove_tree(ref_src)
    ratios = []
    for round_ in range(args.rounds):
        mine = [r["over_raw"] for r in runs if r["round"] == round_ + 1 and r["side"] == "this"]
        theirs = [r["over_raw"] for r in runs if r["round"] == round_ + 1 and r["side"] == "ref"]
        ratios.append(statistics.mean(mine) / statistics.mean(theirs))
    verdict = statistics.median(ratios)
    # CPU per task beyond the raw bound's in the same run: the steadier sign on a shared machine,
    # where a neighbour's load moves both rates of a run but little of what each task costs.
    beyond = {
        side: [
            r["cpu_shardq"] - r["cpu_raw"]
            for r in runs
            if r["side"] == side and r.get("cpu_shardq") is not None and r.get("cpu_raw") is not None
        ]
        for side in ("ref", "this")
    }
    beyond_median = {side: statistics.median(values) if values else None for side, values in beyond.items()}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "versus.json").write_text(
        json.dumps(
            {
                "ref": args.ref,
                "runs": runs,
                "ratios": ratios,
                "median": verdict,
                "cpu_beyond_raw": beyond,
                "cpu_beyond_raw_median": beyond_median,
            },
            indent=2,
        )
    )

    def cpu(value: float | None) -> str:
        return "–" if value is None else f"{value:.0f}"

    def tenths(value: float | None) -> str:
        return "–" if value is None else f"{value:.1f}"

    rows = "\n".join(
        f"| {r['round']} | {r['side']} | {r['over_raw']:.3f} | {r['shardq']:,.0f} | {r['raw']:,.0f} | "
        f"{cpu(r.get('cpu_shardq'))} / {cpu(r.get('cpu_raw'))} |"
        for r in runs
    )
    (args.out / "versus.md").write_text(
        f"# Burn-down: this checkout against `{args.ref}`\n\n"
        "Each run: `python -m loadtest --scenarios burn-down --no-peers` (4 worker processes, raw bound and "
        "shardq paired in ABBA order within the run); runs alternate ref, this, this, ref.\n\n"
        "| round | code | shardq / raw (paired median) | shardq tasks/s | raw tasks/s | CPU µs/task shardq / raw |\n"
        "|---|---|---|---|---|---|\n"
        f"{rows}\n\nthis / ref per round: {', '.join(f'{r:.3f}' for r in ratios)}; median **{verdict:.3f}**.\n"
        f"\nCPU µs per task beyond the raw bound's in the same run (shardq − raw), median: "
        f"ref {tenths(beyond_median['ref'])}, this {tenths(beyond_median['this'])}.\n"
    )
    print(f"this / {args.ref}: {', '.join(f'{r:.3f}' for r in ratios)}; median {verdict:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
