"""A librarian's database for the tests of ``opsgate library`` and its docs: a migrated SQLite
file holding three verified past cases, embedded by the embedded model."""

from __future__ import annotations

from pathlib import Path

from core.db.database import make_engine
from core.library import Document, Library
from core.library.embeddings import EmbeddedModel
from core.migrate import upgrade_engine

TITLES = ("payment gateway timeouts, card charges failing", "disk full on the search cluster",
          "kube-dns name resolution failures")


def library_file(folder: Path) -> str:
    """The URL of ``folder``/opsgate.db holding the three cases of ``TITLES``."""
    path = folder / "opsgate.db"
    engine = make_engine(f"sqlite:///{path}")
    upgrade_engine(engine)
    library = Library(engine, EmbeddedModel())
    for n, title in enumerate(TITLES):
        library.index(Document(f"case:{n}", "case", title, [f"{title}\nverified: held"], {}))
    engine.dispose()
    return f"sqlite:///{path}"
