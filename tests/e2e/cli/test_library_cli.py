"""``opsgate library status|reindex`` as an operator runs them (real subprocesses on a SQLite
file): what the library holds and how it recalls, the one-line refusal of vectors another model
made, and a reindex with the new model (an OpenAI-compatible endpoint: the local stub) that
shows its progress on stderr and ends with one line."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from core.library.embeddings import EmbeddedModel
from tests.support.library import library_file
from tests.support.openai_stub import embeddings_stub
from tests.support.processes import clean_env, command


def opsgate(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command(*args), cwd=cwd, env=clean_env(**env), capture_output=True,
                          text=True, timeout=120, check=False)


def library_env(tmp_path: Path) -> dict[str, str]:
    """The three past cases' database, and an empty runbooks folder."""
    (tmp_path / "runbooks").mkdir()
    return {"OPSGATE_DATABASE_URL": library_file(tmp_path),
            "OPSGATE_RUNBOOKS_DIR": str(tmp_path / "runbooks")}


def test_status_says_what_the_library_holds_and_how_it_recalls(tmp_path: Path) -> None:
    env = library_env(tmp_path)
    done = opsgate(tmp_path, "library", "status", **env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ("library: 3 documents, 6 passages with vectors (wordllama-l2-256 "
                           "(256 dimensions)); recall by words and meaning\n")
    off = opsgate(tmp_path, "library", "status", OPSGATE_EMBEDDINGS_MODEL="none", **env)
    assert off.stdout == ("library: 3 documents; OPSGATE_EMBEDDINGS_MODEL is none: the "
                          "librarian recalls by words only (full-text search)\n")


def test_another_model_is_refused_until_reindex_replaces_its_vectors(tmp_path: Path) -> None:
    env = library_env(tmp_path)
    with embeddings_stub(EmbeddedModel().embed) as (stub, server):
        env |= {"OPSGATE_EMBEDDINGS_MODEL": "stub-embed",
                "OPSGATE_EMBEDDINGS_BASE_URL": f"{server.base}/v1",
                "OPSGATE_EMBEDDINGS_API_KEY": "sk-test"}
        refused = opsgate(tmp_path, "library", "status", **env)
        assert refused.stdout == (
            "library: 3 documents; the library's vectors were made by wordllama-l2-256 (256 "
            "dimensions), not OPSGATE_EMBEDDINGS_MODEL=stub-embed: recall is by words only "
            "until `opsgate library reindex`\n")
        done = opsgate(tmp_path, "library", "reindex", "--batch", "2", **env)
        assert done.returncode == 0, done.stderr
        assert re.fullmatch(r"reindexed 3 documents \(6 passages\) with stub-embed \(256 "
                            r"dimensions\) in \d+\.\d s\n", done.stdout), done.stdout
        assert "reindex: 100%" in done.stderr and "3/3" in done.stderr
        assert "sk-test" not in done.stdout + done.stderr
        after = opsgate(tmp_path, "library", "status", **env)
        assert after.stdout == ("library: 3 documents, 6 passages with vectors (stub-embed "
                                "(256 dimensions)); recall by words and meaning\n")
    assert {request["model"] for request in stub.requests} == {"stub-embed"}


def test_help_says_what_reindex_does(tmp_path: Path) -> None:
    done = opsgate(tmp_path, "library", "reindex", "--help")
    assert done.returncode == 0
    for words in ("OPSGATE_EMBEDDINGS_MODEL", "pgvector", "--batch", "Safe to stop"):
        assert words in " ".join(done.stdout.split()), words
