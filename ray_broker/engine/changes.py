"""What a replicated store records: the write statements of each committed unit of work.

A leader ships its partition to followers as `Change`s: the write statements of one committed
outermost unit of work, with their parameters, in order. Nothing is recomputed on a follower:
every value (times, lock tokens, ids, sequence numbers) is a bound parameter or derived in SQL
from the identical prior state, so running the statements in order leaves the follower with the
leader's rows.

The `Recorder` stands in for the connection of a replicated store (`Store(..., replicated=True)`):
it runs every statement on the connection and keeps those that write (`statement_kind`). It
follows the store's units of work as a `Participant`, so what a rolled-back savepoint or
transaction wrote is dropped from the record with it.
"""
from __future__ import annotations

import sqlite3
from functools import lru_cache
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

from ..errors import InvalidArgumentError, InvalidOperationError

READ, ROW_WRITE, WRITE = "read", "row write", "write"
"""The kinds of statement (see `statement_kind`)."""

_READS = ("SELECT", "PRAGMA", "EXPLAIN")
_ROW_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")

Parameters = list[Any] | dict[str, Any]
"""A statement's parameters as recorded: positional ones as a list, named ones as a dict."""


@lru_cache(maxsize=4096)
def statement_kind(sql: str) -> str:
    """How the recorder treats a statement, by how its text begins (after white space, in any case):

    - READ, never recorded: SELECT, PRAGMA, EXPLAIN. PRAGMAs set up a connection or check a
      database; the schema's version moves only through the migrations every store runs as it
      opens.
    - ROW_WRITE, recorded when it changed rows: INSERT, UPDATE, DELETE, REPLACE without RETURNING
      (whose changed rows the connection has counted once it returns). One that changed none has
      no effect, so a housekeeping round that finds nothing to do ships nothing.
    - WRITE, always recorded: everything else (a RETURNING write, whose rows are counted only once
      read, schema statements, a statement opening with WITH or a comment). A read recorded by
      mistake changes nothing on a follower, where a missed write would part the copies.

    Example:
        >>> [statement_kind(s) for s in ("select 1", " UPDATE t SET x = 1", "DELETE FROM t RETURNING x")]
        ['read', 'row write', 'write']
    """
    head = sql.lstrip()[:7].upper()
    if head.startswith(_READS):
        return READ
    if head.startswith(_ROW_WRITES) and "RETURNING" not in sql.upper():
        return ROW_WRITE
    return WRITE


def _plain(parameters: Sequence[Any] | Mapping[str, Any]) -> Parameters:
    """A copy of a statement's parameters as plain data (a list, or a dict of named ones)."""
    return dict(parameters) if isinstance(parameters, Mapping) else list(parameters)


class Statement(NamedTuple):
    """One recorded write: its SQL text and parameters; `many` for an `executemany`, whose
    parameters are then the list of its rows' parameters."""

    sql: str
    parameters: Parameters | list[Parameters]
    many: bool = False


class Change(NamedTuple):
    """The writes of one committed unit of work on a leader, in order.

    `epoch` is the leader's epoch when it committed them and `position` their place in the
    store's sequence of changes (1, 2, ...: one more than the change before).
    """

    epoch: int
    position: int
    statements: list[Statement]

    def encode(self) -> list[Any]:
        """The change as plain data (lists, str, bytes, numbers, None), as msgpack packs it.

        Example:
            >>> Change(1, 7, [Statement("DELETE FROM dedup WHERE expires_at <= :now", {"now": 2.5})]).encode()
            [1, 7, [['DELETE FROM dedup WHERE expires_at <= :now', {'now': 2.5}, False]]]
        """
        return [self.epoch, self.position, [list(s) for s in self.statements]]

    @classmethod
    def decode(cls, fields: Sequence[Any]) -> Change:
        """The change `encode` gave `fields` for; `InvalidArgumentError` for anything else."""
        try:
            epoch, position, statements = fields
            if not (type(epoch) is int and type(position) is int and epoch >= 0 and position >= 1):
                raise ValueError("epoch and position")
            return cls(epoch, position, [_statement(s) for s in statements])
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(
                f"not an encoded change ({exc}): a change encodes as [epoch >= 0, position >= 1, "
                "[[sql, parameters, many], ...]]; encode it with Change.encode") from None


def _statement(fields: Sequence[Any]) -> Statement:
    """One statement of an encoded change, checked."""
    sql, parameters, many = fields
    if not (isinstance(sql, str) and isinstance(parameters, (list, dict)) and isinstance(many, bool)):
        raise ValueError(f"statement {list(fields)!r}")
    return Statement(sql, parameters, many)


class Recorder:
    """The connection of a replicated store: runs every statement on `db` and keeps the writes
    (`statement_kind`) with a copy of their parameters, until the store takes them at its commit.

    Anything else (cursors, `in_transaction`, trace callbacks) is the connection's own. A write
    outside a unit of work is refused: it would commit without a change to ship.
    """

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self._statements: list[Statement] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)

    def execute(self, sql: str, parameters: Sequence[Any] | Mapping[str, Any] = ()) -> sqlite3.Cursor:
        """Run one statement; record it if it writes."""
        kind = statement_kind(sql)
        if kind == READ:
            return self._db.execute(sql, parameters)
        before = self._changed_rows(sql)
        cursor = self._db.execute(sql, parameters)
        if kind == WRITE or self._db.total_changes != before:
            self._statements.append(Statement(sql, _plain(parameters)))
        return cursor

    def executemany(self, sql: str, rows: Iterable[Sequence[Any] | Mapping[str, Any]]) -> sqlite3.Cursor:
        """Run one statement for each row of parameters; record it (with every row) if it writes."""
        kind = statement_kind(sql)
        if kind == READ:
            return self._db.executemany(sql, rows)
        before = self._changed_rows(sql)
        plain = [_plain(row) for row in rows]
        cursor = self._db.executemany(sql, plain)
        if kind == WRITE or self._db.total_changes != before:
            self._statements.append(Statement(sql, plain, True))
        return cursor

    def _changed_rows(self, sql: str) -> int:
        """The rows the connection has changed so far, once sure that `sql` runs in a unit of work."""
        if not self._db.in_transaction:
            raise InvalidOperationError(f"a replicated store writes only inside a unit of work (Store.transaction()), "
                                        f"so that every write ships to its followers; {sql[:60]!r} ran outside one")
        return self._db.total_changes

    def take(self) -> list[Statement]:
        """The statements recorded so far, which the recorder then forgets."""
        taken, self._statements = self._statements, []
        return taken

    def savepoint(self) -> int:
        """A mark of the statements recorded so far, to roll back to."""
        return len(self._statements)

    def rollback(self, mark: int) -> None:
        """Forget the statements recorded since `mark` (their unit of work rolled back)."""
        del self._statements[mark:]

    def commit(self) -> None:
        """Nothing to do: the store took the statements before its commit."""
