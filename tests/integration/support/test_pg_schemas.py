"""The test's PostgreSQL schema copied from the migrated template (``tests/support/pg_schemas``)
is the schema the migrations make: the same tables, columns, indexes, constraints, triggers,
functions and rows, at head, and the test's own."""

from __future__ import annotations

from sqlalchemy import Engine, text

from core.migrate import current_revision, head_revision, scratch_schema
from tests.support.pg_schemas import SchemaTemplate
from tests.support.servers import POSTGRES_URL

SHAPE = {
    "columns": "select table_name, column_name, data_type, is_nullable, "
               "regexp_replace(coalesce(column_default, ''), '\\w+_[0-9a-f]{12}\\.', '') "
               "from information_schema.columns where table_schema = current_schema()",
    "indexes": "select tablename, indexname, regexp_replace(indexdef, '\\w+_[0-9a-f]{12}\\.', '') "
               "from pg_indexes where schemaname = current_schema()",
    "constraints": "select conrelid::regclass::text, conname, pg_get_constraintdef(oid) "
                   "from pg_constraint where connamespace = current_schema()::regnamespace",
    "triggers": "select event_object_table, trigger_name, action_timing, event_manipulation "
                "from information_schema.triggers where trigger_schema = current_schema()",
    "functions": "select proname, md5(regexp_replace(prosrc, '\\w+_[0-9a-f]{12}\\.', '', 'g')) "
                 "from pg_proc where pronamespace = current_schema()::regnamespace",
}


def shape(engine: Engine) -> dict[str, set[tuple[object, ...]]]:
    """Each kind of object of the engine's schema, and each table's row count."""
    with engine.connect() as conn:
        found = {kind: {tuple(row) for row in conn.execute(text(sql))}
                 for kind, sql in SHAPE.items()}
        tables = sorted(row[0] for row in conn.execute(text(
            "select tablename from pg_tables where schemaname = current_schema()")))
        found["rows"] = {(table, conn.execute(text(f'select count(*) from "{table}"')).scalar())
                         for table in tables}
    return found


def test_a_copied_schema_is_the_migrated_schema_and_the_tests_own(postgres_admin) -> None:
    template = SchemaTemplate(POSTGRES_URL, prefix="copy")
    try:
        assert template.sql() is not None, "pg_dump could not write the template"
        with scratch_schema(POSTGRES_URL, prefix="migrated") as migrated, \
                template.schema() as first, template.schema() as second:
            assert current_revision(first) == head_revision()
            expected = shape(migrated)
            assert expected["columns"] and expected["indexes"] and expected["rows"]
            assert shape(first) == expected
            with first.begin() as conn:
                conn.execute(text("delete from alembic_version"))
            assert current_revision(first) is None
            assert current_revision(second) == head_revision(), "copies share nothing"
    finally:
        template.close()
