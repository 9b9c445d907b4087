"""Re-sealing every sealed value under the current secret key (`llmrelay rotate-secret`).

Runs inside the caller's transaction, in two passes: first every value of every registered
column (store/sealed.py) is read and opened, and only when all of them open are the new
values written, then the config generation moves so each replica rebuilds its snapshot
(whose credentials it opens again, now under the current key). A value sealed under a key
the Sealer was not given aborts the first pass with a message naming the key id and the
row: nothing is written. Values already under the current key are left as they are, so a
second run after a successful one changes nothing at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ColumnClause, TableClause, column, select, table, update
from sqlalchemy.ext.asyncio import AsyncSession

from llmrelay.store.bootstrap import bump_generation
from llmrelay.store.crypto import CredentialError, Sealer, UnknownKeyError, key_id_of
from llmrelay.store.sealed import SEALED_COLUMNS, SealedColumn


class RotationError(RuntimeError):
    """A sealed value cannot be re-sealed; the message names the row. Nothing was written."""


@dataclass
class ColumnReport:
    column: str
    resealed: int = 0
    current: int = 0


@dataclass
class RotationReport:
    columns: list[ColumnReport] = field(default_factory=list)
    #: The config generation after the rotation; None when nothing changed (or a dry run).
    generation: int | None = None

    @property
    def resealed(self) -> int:
        return sum(c.resealed for c in self.columns)


@dataclass(frozen=True)
class _Change:
    spec: SealedColumn
    row_id: Any
    old: str
    new: str


def _table(spec: SealedColumn) -> tuple[TableClause, ColumnClause[Any], ColumnClause[Any]]:
    names = [spec.id_column, spec.sealed_column]
    if spec.key_id_column is not None:
        names.append(spec.key_id_column)
    clause = table(spec.table, *(column(name) for name in names))
    return clause, clause.c[spec.id_column], clause.c[spec.sealed_column]


async def rotate(
    session: AsyncSession,
    sealer: Sealer,
    columns: Iterable[SealedColumn] = SEALED_COLUMNS,
    *,
    dry_run: bool = False,
) -> RotationReport:
    """Re-seal every value not under `sealer`'s current key; the caller commits."""
    connection = await session.connection()
    report = RotationReport()
    changes: list[_Change] = []
    for spec in columns:
        counts = ColumnReport(spec.name)
        report.columns.append(counts)
        _, id_col, sealed_col = _table(spec)
        # FOR UPDATE (PostgreSQL; SQLite has one writer anyway): a concurrent writer of
        # one of these rows waits until the rotation commits.
        rows = await connection.execute(
            select(id_col, sealed_col)
            .where(sealed_col.is_not(None))
            .order_by(id_col)
            .with_for_update()
        )
        for row_id, sealed in rows:
            new = _reseal(spec, sealer, row_id, sealed)
            if new is None:
                counts.current += 1
            else:
                counts.resealed += 1
                changes.append(_Change(spec, row_id, sealed, new))
    if dry_run or not changes:
        return report
    for change in changes:
        await _write(session, sealer, change)
    report.generation = await bump_generation(session)
    return report


def _reseal(spec: SealedColumn, sealer: Sealer, row_id: Any, sealed: str) -> str | None:
    where = f"{spec.name} of row {spec.id_column}={row_id}"
    try:
        return sealer.reseal(sealed, context=spec.context(str(row_id)))
    except UnknownKeyError as exc:
        raise RotationError(
            f"{where} was sealed with key {exc.key_id}, which is neither LLMRELAY_SECRET_KEY "
            f"(key {sealer.key_id}) nor a previous key given "
            f"({', '.join(sealer.key_ids[1:]) or 'none'}); nothing was changed"
        ) from exc
    except CredentialError as exc:
        key = _key_id_or_unknown(sealed)
        raise RotationError(
            f"{where} (key {key}) cannot be opened: {exc}; nothing was changed"
        ) from exc


def _key_id_or_unknown(sealed: str) -> str:
    try:
        return key_id_of(sealed)
    except CredentialError:
        return "unknown"


async def _write(session: AsyncSession, sealer: Sealer, change: _Change) -> None:
    """Compare-and-set: the row must still hold the value that was opened."""
    spec = change.spec
    clause, id_col, sealed_col = _table(spec)
    values: dict[str, str] = {spec.sealed_column: change.new}
    if spec.key_id_column is not None:
        values[spec.key_id_column] = sealer.key_id
    connection = await session.connection()
    result = await connection.execute(
        update(clause).where(id_col == change.row_id, sealed_col == change.old).values(values)
    )
    if result.rowcount != 1:
        raise RotationError(
            f"{spec.name} of row {spec.id_column}={change.row_id} changed while rotating; "
            "nothing was changed: run `llmrelay rotate-secret` again"
        )
