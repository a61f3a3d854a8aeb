"""The click group behind ``shardq``: global options, exit codes and error printing.

Exit codes: 0 success, 2 bad usage or bad input (click's usage errors and
:class:`shardq.errors.InvalidInput`), 1 runtime failure. Errors print one line on stderr; with
``--debug`` the traceback too. Commands are wiring only: parse, call one library function, print."""

from __future__ import annotations

import sys
import traceback

import click

from shardq.errors import InvalidInput, ShardqError


class ShardqGroup(click.Group):
    """Turns every exception into one line on stderr and the documented exit code."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except InvalidInput as exc:
            self._fail(ctx, exc, 2)
        except ShardqError as exc:
            self._fail(ctx, exc, 1)
        except KeyboardInterrupt:
            click.echo("shardq: interrupted", err=True)
            ctx.exit(130)
        except Exception as exc:  # noqa: BLE001 - anything unforeseen still gets one line, not a traceback
            self._fail(ctx, exc, 1, prefix="internal error: ")

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        """As click's, except that usage errors (unknown option, bad value, missing argument) also
        print one line on stderr instead of click's usage block; the exit code stays 2."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except _NO_ARGS_IS_HELP as exc:  # bare `shardq` or `shardq dead`: the help, as click shows it
            exc.show()
            sys.exit(exc.exit_code)
        except click.UsageError as exc:
            where = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            click.echo(f"shardq: {_first_line(exc.format_message())}{where}", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            click.echo(f"shardq: {_first_line(exc.format_message())}", err=True)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("shardq: aborted", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)

    @staticmethod
    def _fail(ctx: click.Context, exc: BaseException, code: int, prefix: str = "") -> None:
        debug = bool((ctx.obj or {}).get("debug")) if isinstance(ctx.obj, dict) else False
        if debug:
            traceback.print_exception(exc, file=sys.stderr)
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        click.echo(f"shardq: {prefix}{message}", err=True)
        ctx.exit(code)


_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


def _first_line(text: str) -> str:
    text = text.strip()
    return text.splitlines()[0] if text else "invalid usage"


@click.group(cls=ShardqGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--dsn",
    envvar="SHARDQ_DSN",
    default=None,
    metavar="URL",
    help="Database URL (postgresql:// or cockroachdb://). Default: $SHARDQ_DSN, else the embedded PostgreSQL.",
)
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.option("--log-json", is_flag=True, help="Log one JSON object per line.")
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="warning",
    show_default=True,
    help="info: retries, dead letters, reaper runs; debug: every task event.",
)
@click.pass_context
def cli(ctx: click.Context, dsn: str | None, debug: bool, log_json: bool, log_level: str) -> None:
    """shardq: a task queue stored in SQL tables."""
    from shardq.cli.logs import configure_logging

    configure_logging(debug=debug, json_lines=log_json, level=log_level)
    ctx.obj = {"dsn": dsn, "debug": debug}


def client_from(ctx: click.Context):
    """The library client for this invocation (connects lazily)."""
    from shardq.client import Client

    obj = ctx.find_root().obj
    if "client" not in obj:
        obj["client"] = Client(obj["dsn"], application_name="shardq-cli")
        ctx.call_on_close(obj["client"].close)
    return obj["client"]


def dsn_from(ctx: click.Context):
    from shardq.sessions.dsn import resolve_dsn

    return resolve_dsn(ctx.find_root().obj["dsn"])
