"""Embedding models for the librarian: text in, unit-length vectors out.

``embedder_for(settings)`` is the one way to get the configured model: the embedded default
(WordLlama's weights, installed with its package and loaded once per process; nothing is
downloaded), any OpenAI-compatible ``/embeddings`` endpoint, or None (``OPSGATE_EMBEDDINGS_MODEL=
none``: recall by words only). An endpoint that fails raises ``Unavailable``: the caller goes on
with words alone and says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from core.errors import Unavailable
from core.settings.evidence import EMBEDDED_MODEL, NO_EMBEDDINGS

if TYPE_CHECKING:
    from core.settings import Settings

BATCH = 64  # texts per request to an endpoint
MAX_CHARS = 8000  # of one text sent to be embedded (a runbook section is cut before this)


class Embedder(Protocol):
    """An embedding model: its ``model`` name is stored with every vector it made."""

    @property
    def model(self) -> str: ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit-length vector per text, in order."""
        ...


class EmbeddedModel:
    """WordLlama's l2_supercat token embeddings (256 dimensions), pooled and normalized; its
    weights and tokenizer ship inside the ``wordllama`` wheel."""

    model = EMBEDDED_MODEL

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        vectors = _wordllama().embed([text[:MAX_CHARS] for text in texts], norm=True)
        return [[float(x) for x in row] for row in vectors]


@lru_cache(maxsize=1)
def _wordllama() -> Any:
    import wordllama  # type: ignore[import-untyped]

    # The wheel holds the files: cache_dir names the package itself, and no download is allowed.
    return wordllama.WordLlama.load(config="l2_supercat", dim=256, disable_download=True,
                                    cache_dir=Path(wordllama.__file__).parent)


class EndpointModel:
    """A model served by an OpenAI-compatible ``/embeddings`` endpoint."""

    def __init__(self, model: str, *, base_url: str | None, api_key: str | None,
                 timeout_s: float, max_retries: int) -> None:
        from openai import OpenAI

        self.model = model
        self.where = base_url or "OpenAI"
        self._client = OpenAI(api_key=api_key or "not-needed", base_url=base_url,
                              timeout=timeout_s, max_retries=max_retries)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        from openai import OpenAIError

        vectors: list[list[float]] = []
        for start in range(0, len(texts), BATCH):
            batch = [text[:MAX_CHARS] or " " for text in texts[start:start + BATCH]]
            try:
                answer = self._client.embeddings.create(model=self.model, input=batch)
            except OpenAIError as exc:
                raise Unavailable(f"the embeddings endpoint ({self.where}, model {self.model}) "
                                  f"failed: {str(exc).splitlines()[0][:200]}") from exc
            vectors.extend(unit(item.embedding) for item in
                           sorted(answer.data, key=lambda item: item.index))
        return vectors


def unit(vector: Sequence[float]) -> list[float]:
    """``vector`` scaled to length 1 (cosine similarity is then a dot product)."""
    length = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [float(x) / length for x in vector]


def embedder_for(settings: Settings) -> Embedder | None:
    """The configured embedding model; None when embeddings are off."""
    name = settings.embeddings_model.strip()
    if name == NO_EMBEDDINGS:
        return None
    if name == EMBEDDED_MODEL:
        return EmbeddedModel()
    base_url: str | None = settings.embeddings_base_url
    if base_url:
        key = settings.embeddings_api_key
    else:  # the chat model's endpoint, with its key (a secret goes where it was meant for)
        base_url = settings.chat_base_url
        key = settings.embeddings_api_key or settings.chat_api_key
    return EndpointModel(name, base_url=base_url,
                         api_key=None if key is None else key.get_secret_value(),
                         timeout_s=settings.embeddings_timeout_s,
                         max_retries=settings.embeddings_max_retries)
