"""``opsgate library status|reindex``: what the librarian holds and how it recalls (by words, by
meaning too), and embedding every indexed case and runbook again with the configured model
(``OPSGATE_EMBEDDINGS_MODEL``) after it changed or after pgvector was enabled. Reindexing shows a
progress bar on stderr and ends with one line: documents, passages, model, time."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from core.cli.app import opened_app, settings_of
from core.cli.command import Command, database_option

if TYPE_CHECKING:
    from core.library import Library


def library_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="library_action", metavar="ACTION", required=True)
    status = actions.add_parser(
        "status", help="what the library holds and whether it recalls by meaning",
        description="How many cases and runbooks are indexed, which model made the stored "
                    "vectors, and, when recall is by words only, why (one line).")
    database_option(status)
    again = actions.add_parser(
        "reindex", help="embed everything again with OPSGATE_EMBEDDINGS_MODEL",
        description="Embed every indexed document's passages (a case's title, findings, "
                    "resolution and verification; each runbook section, the runbooks folder "
                    "read first) with OPSGATE_EMBEDDINGS_MODEL, replacing the vectors another "
                    "model made; creates the vector store first if pgvector was enabled after "
                    "the upgrade. Safe to stop and run again. Progress on stderr.")
    again.add_argument("--batch", type=int, default=64, metavar="N",
                       help="documents embedded and written at a time (default 64)")
    database_option(again)


def run_library(args: argparse.Namespace) -> int:
    from core.library.runbooks import runbooks_folder

    with opened_app(settings_of(args), notes=sys.stderr) as app:
        if args.library_action == "status":
            print(status_line(app.library), flush=True)
            return 0
        app.library.index_runbooks(runbooks_folder(app.settings.runbooks_dir))
        return _reindex(app.library, args.batch)


def status_line(library: Library) -> str:
    """The library in one line: its size and how it recalls."""
    from core.db.database import connection
    from core.library import vectors

    problem = library.meaning.problem() or _unanswered(library)
    with connection(library.engine) as conn:
        documents = vectors.documents(conn)
        missing = vectors.missing_store(conn)
        passages = 0 if missing else vectors.passages(conn)
        models = [] if missing else vectors.stored_models(conn)
    held = f"library: {documents} documents"
    if problem:
        return f"{held}; {problem}"
    made = ", ".join(f"{model} ({dimension} dimensions)" for model, dimension in models)
    return (f"{held}, {passages} passages with vectors ({made or 'none yet'}); recall by words "
            "and meaning")


def _unanswered(library: Library) -> str | None:
    """Why the model does not answer now (it is asked to embed one word), or None."""
    meaning = library.meaning
    if meaning.of("status") is None and meaning.failed:
        return (f"the embedding model did not answer: {meaning.failed.rstrip('.')}; "
                "recall is by words only until it does")
    return None


def _reindex(library: Library, batch: int) -> int:
    from tqdm import tqdm

    started = time.monotonic()
    with tqdm(total=None, unit="doc", desc="reindex", file=sys.stderr,
              mininterval=1.0) as bar:
        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        reindexed = library.meaning.reindex(progress, batch=max(1, batch))
    print(reindexed.line(time.monotonic() - started), flush=True)
    return 0


COMMANDS = (
    Command(
        name="library",
        summary="the librarian's index: status, or reindex with the embedding model",
        description="The librarian indexes verified cases and runbooks and recalls them by "
                    "words (full-text search) and by meaning (vectors: pgvector or sqlite-vec). "
                    "`opsgate library status` says what it holds and how it recalls; `opsgate "
                    "library reindex` embeds everything again after OPSGATE_EMBEDDINGS_MODEL "
                    "changed (docs/evidence.md).",
        add_arguments=library_arguments,
        run=run_library,
    ),
)
