"""On SQLite the librarian says why it recalls by words only, and names the requirement when the
interpreter's sqlite3 cannot load extensions (pyenv's default build): README's "Two commands"."""

from __future__ import annotations

from sqlalchemy import create_engine

from core.library import vectors


def test_a_python_that_cannot_load_extensions_is_named_with_the_way_out():
    engine = create_engine("sqlite://")  # a bare SQLite: sqlite-vec never loaded
    with engine.connect() as conn:
        said = vectors.missing_store(conn, can_load=lambda: False)
    assert said == vectors.NO_LOADABLE_SQLITE
    assert "--enable-loadable-sqlite-extensions" in said and "README" in said
    assert "words only" in said


def test_a_python_that_can_but_did_not_load_says_so_and_not_the_other():
    engine = create_engine("sqlite://")
    with engine.connect() as conn:
        said = vectors.missing_store(conn, can_load=lambda: True)
    assert said == vectors.NO_SQLITE_VEC and "pyenv" not in said


def test_this_interpreter_is_asked_not_assumed():
    import sqlite3
    assert vectors.sqlite_can_load_extensions() is hasattr(sqlite3.Connection,
                                                          "enable_load_extension")
