"""The `llmrelay` command: serve, apply, migrate, rotate-secret, worker, codex."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import Callable, Collection
from functools import partial
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from llmrelay.settings import Settings, SettingsError, resolve_secret_key
from llmrelay.startup_checks import ALL_SETTINGS, Setting, enforce

app = typer.Typer(
    help="llmrelay: one OpenAI- and Anthropic-compatible endpoint in front of many LLM providers.",
    no_args_is_help=True,
    add_completion=False,
)


def _settings(uses: Collection[Setting] = ALL_SETTINGS) -> Settings:
    """The settings, checked (startup_checks.py) for what the command `uses`: production
    refuses weak ones here, before any database is touched or any port is bound."""
    from llmrelay.observability.logging import configure_logging

    try:
        settings = Settings()
        configure_logging(settings.log_level)  # development's warnings are log lines
        enforce(settings, uses)
    except (SettingsError, ValueError) as exc:
        _fail(str(exc))
    return settings


def _fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"llmrelay: {message}", err=True)
    raise typer.Exit(code)


@app.command()
def migrate() -> None:
    """Bring the database schema up to date, then exit."""
    from llmrelay.database_setup import migrate_database

    settings = _settings(uses=())  # touches no secret
    revision = asyncio.run(migrate_database(settings.database_url))
    typer.echo(f"database schema at revision {revision}")


@app.command()
def apply(
    file: Annotated[Path, typer.Argument(help="The declarative config (YAML).")],
) -> None:
    """Apply a declarative config file (idempotent upsert), then exit."""
    settings = _settings(uses={Setting.SECRET_KEY})  # seals provider credentials
    _apply_file(settings, file)


@app.command()
def serve(
    config: Annotated[
        Path | None, typer.Option("--config", help="Apply this config file before serving.")
    ] = None,
    demo: Annotated[
        bool,
        typer.Option("--demo", help="Seed the built-in mock provider, model 'demo' and a key."),
    ] = False,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8080,
    workers: Annotated[int, typer.Option(min=1, help="Worker processes.")] = 1,
    admin_listen: Annotated[
        str | None,
        typer.Option(
            "--admin-listen",
            metavar="HOST:PORT",
            help="Serve the admin API, console and /metrics on this second listener only "
            "(LLMRELAY_ADMIN_LISTEN).",
        ),
    ] = None,
) -> None:
    """Run the gateway (data plane, admin API, health and metrics)."""
    from llmrelay.server import run_server

    if admin_listen is not None:  # the serving processes read it from the environment
        os.environ["LLMRELAY_ADMIN_LISTEN"] = admin_listen
    settings = _settings()
    if settings.admin_address is not None and settings.admin_address[1] == port:
        _fail(f"the admin listener ({settings.admin_listen}) needs a port other than --port {port}")
    if workers == 1:  # one process: it serves the app, so import it now (see _in_child)
        import llmrelay.app  # noqa: F401
    _in_child(partial(_prepare, settings, config, demo, host, port))
    run_server(settings, host=host, port=port, workers=workers)


def _prepare(settings: Settings, config: Path | None, demo: bool, host: str, port: int) -> None:
    """What `serve` does to the database before it serves: migrate (SQLite), then --config
    and --demo."""
    from llmrelay.database_setup import prepare_for_serving

    try:
        resolve_secret_key(settings)  # create the development key once, before any worker
        asyncio.run(prepare_for_serving(settings.database_url))
    except Exception as exc:  # noqa: BLE001 - start-up failure: say why and stop
        _fail(f"cannot prepare the database: {exc}", code=1)
    if config is not None:
        _apply_file(settings, config)
    if demo:
        _seed_demo(settings, host, port)


def _in_child(work: Callable[[], None]) -> None:
    """Run `work` in a forked child and wait for it; its exit status becomes ours if it
    failed (its messages went to the same stdout and stderr).

    Why: the preparation imports what the serving process never uses again (Alembic, the
    config schema and loader, YAML, the admin services the apply goes through) and leaves
    its garbage in the heap (the apply's ORM session, two event loops' worth of engines);
    all of it would stay resident in the serving process for its whole life (several MiB:
    docs/performance.md, "Where the memory goes"). A fork costs a few milliseconds and no
    second interpreter start. With one worker the parent has imported the app before the
    fork (it serves it next anyway): the child inherits the modules both use (the ORM
    models, SQLAlchemy, the admin repositories) instead of importing them again, which cut
    its CPU from 0.40 to 0.09 s a start (docs/performance.md, "Start-up"). Without fork
    (not POSIX), or with the environment's LLMRELAY_PREPARE_IN_PROCESS=1, the work runs
    here."""
    fork = getattr(os, "fork", None)
    if fork is None or os.environ.get("LLMRELAY_PREPARE_IN_PROCESS") == "1":
        work()
        return
    sys.stdout.flush()
    sys.stderr.flush()
    pid = fork()
    if pid == 0:  # the child: never returns into the parent's code
        code = 1
        try:
            work()
            code = 0
        except typer.Exit as exc:
            code = exc.exit_code
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # noqa: BLE001 - report it as the parent would have
            import traceback

            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise typer.Exit(code if code > 0 else 1)


@app.command("rotate-secret")
def rotate_secret(
    previous_key_file: Annotated[
        Path | None,
        typer.Option(
            "--previous-key-file",
            help="A file with the previous secret key (one key a line). "
            "Default: LLMRELAY_PREVIOUS_SECRET_KEY. Never give a key on the command line.",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Report what would be re-sealed; write nothing.")
    ] = False,
) -> None:
    """Re-seal every stored secret under LLMRELAY_SECRET_KEY (one transaction), then exit."""
    from llmrelay.database_setup import rotate_secret as rotate_in_database
    from llmrelay.store.rotation import RotationError

    settings = _settings(uses={Setting.SECRET_KEY})
    previous: list[str] = []
    if previous_key_file is not None:
        try:
            text = previous_key_file.read_text()
        except OSError as exc:
            _fail(f"--previous-key-file: cannot read {previous_key_file}: {exc.strerror}")
        previous = [line.strip() for line in text.splitlines() if line.strip()]
        if not previous:
            _fail(f"--previous-key-file: {previous_key_file} holds no key")
    try:
        report = asyncio.run(rotate_in_database(settings, previous, dry_run=dry_run))
    except RotationError as exc:
        _fail(str(exc), code=1)
    except Exception as exc:  # noqa: BLE001 - process boundary: say why and stop
        _fail(f"cannot rotate: {exc}", code=1)
    for column in report.columns:
        typer.echo(
            f"  {column.column}: {column.resealed} to re-seal, "
            f"{column.current} already under the current key"
        )
    if dry_run:
        typer.echo(f"dry run: {report.resealed} value(s) would be re-sealed; nothing written")
    elif report.generation is None:
        typer.echo("nothing to re-seal: every value is under the current key")
    else:
        typer.echo(
            f"re-sealed {report.resealed} value(s) under the current key; "
            f"config generation {report.generation}"
        )


@app.command()
def backup(
    target: Annotated[Path, typer.Argument(help="Where to write the backup (a SQLite file).")],
    force: Annotated[bool, typer.Option("--force", help="Replace TARGET if it exists.")] = False,
) -> None:
    """Copy the SQLite database to TARGET while the gateway keeps serving, then check it."""
    from llmrelay.store.backup import BackupError
    from llmrelay.store.backup import backup as backup_database

    settings = _settings(uses=())
    database = _sqlite_file(settings, "backup")
    try:
        report = backup_database(database, target, overwrite=force)
    except BackupError as exc:
        _fail(str(exc), code=1)
    typer.echo(
        f"backed up {database} to {report.path}: {report.bytes} bytes, schema revision "
        f"{report.revision}, {report.records} request records, {report.seconds:.2f}s"
    )
    typer.echo(
        "keep LLMRELAY_SECRET_KEY with it: provider credentials in the backup are sealed "
        "with that key"
    )


@app.command()
def restore(
    source: Annotated[Path, typer.Argument(help="A backup made by `llmrelay backup`.")],
) -> None:
    """Replace the SQLite database with a checked backup (stop the gateway first)."""
    from llmrelay.store.backup import BackupError
    from llmrelay.store.backup import restore as restore_database

    settings = _settings(uses=())
    database = _sqlite_file(settings, "restore")
    try:
        report, kept = restore_database(source, database)
    except BackupError as exc:
        _fail(str(exc), code=1)
    if kept is not None:
        typer.echo(f"the database it replaced is kept as {kept}")
    typer.echo(
        f"restored {source} into {database}: schema revision {report.revision}, "
        f"{report.records} request records; `llmrelay serve` migrates it if it is older"
    )


def _sqlite_file(settings: Settings, command: str) -> Path:
    database = settings.sqlite_path
    if database is None:
        _fail(
            f"`llmrelay {command}` is for SQLite databases; on PostgreSQL use pg_dump and "
            "pg_restore (docs/operations.md, 'Backups')"
        )
    return database


@app.command()
def worker() -> None:
    """Run the durable background jobs only (no HTTP listener), beside `serve` replicas."""
    from llmrelay.database_setup import prepare_for_serving
    from llmrelay.stack import SchemaOutOfDate
    from llmrelay.worker import run_worker

    settings = _settings()
    try:
        resolve_secret_key(settings)
        asyncio.run(prepare_for_serving(settings.database_url))
    except Exception as exc:  # noqa: BLE001 - start-up failure: say why and stop
        _fail(f"cannot prepare the database: {exc}", code=1)
    try:
        asyncio.run(run_worker(settings))
    except SchemaOutOfDate as exc:
        _fail(str(exc), code=1)


codex = typer.Typer(
    help="Sign ChatGPT accounts in for openai_codex providers (docs/codex.md).",
    no_args_is_help=True,
)
app.add_typer(codex, name="codex")

_ProviderOption = Annotated[
    str, typer.Option("--provider", help="The openai_codex provider's slug.")
]
_TenantOption = Annotated[
    str, typer.Option("--tenant", help="The tenant that declares the provider.")
]


_ResourceOption = Annotated[
    str | None,
    typer.Option(
        "--resource",
        help="The provider resource the account is (login: default its own, or a new one "
        "named after its email; logout: a resource name, email or account id; default all).",
    ),
]


def _codex_target(
    provider: str, tenant: str, issuer: str | None, resource: str | None = None
) -> Any:
    from llmrelay.codex_login import Target

    settings = _settings(uses={Setting.SECRET_KEY})  # seals the tokens
    issuer = (issuer or settings.codex_issuer).rstrip("/")
    return Target(settings, provider, tenant, issuer, resource)


@codex.command("login")
def codex_login(
    provider: _ProviderOption,
    tenant: _TenantOption = "default",
    device: Annotated[
        bool, typer.Option("--device", help="Sign in with a device code (any browser, anywhere).")
    ] = False,
    browser: Annotated[
        bool, typer.Option("--browser", help="Sign in in a browser on this machine (default).")
    ] = False,
    port: Annotated[
        int, typer.Option("--port", help="The browser flow's loopback port (0: any free one).")
    ] = 1455,
    no_browser: Annotated[
        bool, typer.Option("--no-browser", help="Print the sign-in URL; open nothing.")
    ] = False,
    issuer: Annotated[
        str | None, typer.Option("--issuer", help="Default: LLMRELAY_CODEX_ISSUER.")
    ] = None,
    resource: _ResourceOption = None,
) -> None:
    """Sign a ChatGPT account in for an openai_codex provider (you bring the subscription,
    and answer for its terms of use)."""
    from llmrelay.codex_login import (
        LoginFailed,
        OAuthError,
        browser_login,
        check_provider,
        device_login,
    )

    if device and browser:
        _fail("choose --device or --browser, not both")
    if resource is not None and not re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,63}", resource):
        _fail("--resource must be a slug: lower-case letters, digits, '.', '_', '-'")
    target = _codex_target(provider, tenant, issuer, resource)

    def say(text: str) -> None:
        typer.echo(text)

    async def run() -> str:
        await check_provider(target)
        if device:
            return await device_login(target, say)
        return await browser_login(target, say, port=port, open_browser=not no_browser)

    try:
        who = asyncio.run(run())
    except (LoginFailed, OAuthError) as exc:
        _fail(str(exc), code=1)
    typer.echo(f"signed in for provider {provider!r}: {who}")


@codex.command("status")
def codex_status(provider: _ProviderOption, tenant: _TenantOption = "default") -> None:
    """The provider's signed-in account, its token's expiry and its usage limits."""
    from llmrelay.codex_login import LoginFailed, status

    try:
        typer.echo(asyncio.run(status(_codex_target(provider, tenant, None))))
    except LoginFailed as exc:
        _fail(str(exc), code=1)


@codex.command("logout")
def codex_logout(
    provider: _ProviderOption, tenant: _TenantOption = "default", resource: _ResourceOption = None
) -> None:
    """Forget the provider's signed-in accounts, or the one --resource names (their tokens
    are deleted here; the resources stay)."""
    from llmrelay.codex_login import LoginFailed, logout

    try:
        removed = asyncio.run(logout(_codex_target(provider, tenant, None, resource)))
    except LoginFailed as exc:
        _fail(str(exc), code=1)
    said = f"signed out ({removed} account(s))" if removed else "no account was signed in"
    typer.echo(f"{provider}: {said}")


def _apply_file(settings: Settings, file: Path) -> None:
    from llmrelay.config.loader import ConfigError, load_config
    from llmrelay.database_setup import apply_to_database

    try:
        parsed = load_config(file, os.environ)
        result = asyncio.run(apply_to_database(settings, parsed, source=str(file)))
    except ConfigError as exc:
        _fail(f"invalid config\n{exc}")
    for change in result.changes:
        typer.echo(f"  {change}")
    if not result.changed:
        typer.echo(f"{file}: no changes (config generation {result.generation})")
    else:
        count = len(result.changes)
        typer.echo(f"{file}: applied {count} change(s), config generation {result.generation}")
    for generated in result.generated_keys:
        typer.echo(
            f"new API key for project {generated.project!r}, key {generated.name!r} "
            f"(shown once, store it now): {generated.key}"
        )


def _seed_demo(settings: Settings, host: str, port: int) -> None:
    from llmrelay.config.demo import DEMO_MODEL, demo_config, demo_key
    from llmrelay.database_setup import apply_to_database

    db_path = settings.sqlite_path
    key_file = (
        db_path.with_name(db_path.name + ".demo-key") if db_path else Path(".llmrelay-demo-key")
    )
    key = demo_key(key_file)
    asyncio.run(apply_to_database(settings, demo_config(key), source="--demo"))
    shown_host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    body = f'{{"model": "{DEMO_MODEL}", "messages": [{{"role": "user", "content": "Hello!"}}]}}'
    typer.echo(
        f"\nDemo ready. Model: {DEMO_MODEL!r}. API key: {key}\n"
        f"  curl http://{shown_host}:{port}/v1/chat/completions \\\n"
        f"    -H 'Authorization: Bearer {key}' -H 'Content-Type: application/json' \\\n"
        f"    -d '{body}'\n"
    )


def private_files() -> None:
    """What this process creates is its user's alone: files 0600, folders 0700 (the SQLite
    database and its WAL, backups, the record spool and the generated keys hold credentials,
    keys and request records). The umask is only narrowed, never widened: an operator's
    stricter one stays; the systemd units set the same (UMask=0077), the image relies on it."""
    os.umask(os.umask(0o077) | 0o077)


def main() -> None:
    private_files()  # before anything is created; inherited by the serving worker processes
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
