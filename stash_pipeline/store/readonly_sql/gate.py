"""What a query may name on PostgreSQL, read from PostgreSQL's own parser (pglast, libpg_query).

This is the narrow front door, not the lock: isolation is the database's (a login role that owns
nothing and may read only the caller views, a READ ONLY transaction, a statement timeout). The
gate keeps a query to one SELECT over the caller views with ordinary functions, so it cannot read
the catalogs (``pg_catalog``, ``information_schema``, ``pg_stat_activity`` shows other sessions'
queries), call functions that run other SQL or change settings (``query_to_xml``, ``set_config``)
or sleep (``pg_sleep``). SQLite gets the same rules from its authorizer (``sqlite.py``).
"""

from __future__ import annotations

from collections.abc import Iterator

from pglast import ast, parse_sql
from pglast.parser import ParseError

from stash_pipeline.store.readonly_sql.errors import SqlRefused
from stash_pipeline.store.readonly_sql.functions import POSTGRES_FUNCTIONS
from stash_pipeline.store.readonly_sql.views import VIEW_NAMES

SCHEMA = "stash_sql"
_WRITES = (ast.InsertStmt, ast.UpdateStmt, ast.DeleteStmt, ast.MergeStmt)


def check_select(sql: str) -> None:
    """Raise SqlRefused unless ``sql`` is one SELECT over the caller views."""
    try:
        statements = parse_sql(sql)
    except ParseError as error:
        raise SqlRefused(f"syntax error: {error}") from None
    if len(statements) != 1:
        raise SqlRefused(f"send exactly one statement, not {len(statements)}")
    statement = statements[0].stmt
    if not isinstance(statement, ast.SelectStmt):
        raise SqlRefused(f"only SELECT is allowed, not {type(statement).__name__}")
    ctes = {node.ctename for node in _walk(statement) if isinstance(node, ast.CommonTableExpr)}
    for node in _walk(statement):
        if isinstance(node, _WRITES):
            raise SqlRefused("only SELECT is allowed: the query writes")
        if isinstance(node, ast.SelectStmt):
            if node.intoClause is not None:
                raise SqlRefused("SELECT INTO creates a table; only reading is allowed")
            if node.lockingClause:
                raise SqlRefused("FOR UPDATE/SHARE locks rows; only reading is allowed")
        elif isinstance(node, ast.RangeVar):
            _check_relation(node, ctes)
        elif isinstance(node, ast.FuncCall):
            _check_function(node)


def _check_relation(node: ast.RangeVar, ctes: set[str]) -> None:
    name = node.relname
    if node.catalogname is None and node.schemaname in (None, SCHEMA) and name in VIEW_NAMES:
        return
    if node.catalogname is None and node.schemaname is None and name in ctes:
        return
    qualified = ".".join(p for p in (node.catalogname, node.schemaname, name) if p)
    raise SqlRefused(f"no table {qualified}: a query reads only {', '.join(VIEW_NAMES)}")


def _check_function(node: ast.FuncCall) -> None:
    parts = [getattr(part, "sval", "") for part in node.funcname]
    name = parts[-1].lower()
    schema_ok = len(parts) == 1 or (len(parts) == 2 and parts[0] == "pg_catalog")
    if not schema_ok or name not in POSTGRES_FUNCTIONS:
        raise SqlRefused(f"function {'.'.join(parts)} is not allowed in the SQL endpoint")


def _walk(node: object) -> Iterator[ast.Node]:
    if isinstance(node, ast.Node):
        yield node
        for field in node:
            yield from _walk(getattr(node, field))
    elif isinstance(node, (tuple, list)):
        for item in node:
            yield from _walk(item)
