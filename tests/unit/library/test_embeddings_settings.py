"""Which embedding model the settings name, and where its key goes: the chat model's
OPENAI_API_KEY is sent only to the chat model's endpoint, never to another
OPSGATE_EMBEDDINGS_BASE_URL."""

from __future__ import annotations

import pytest

from core.library.embeddings import EmbeddedModel, EndpointModel, embedder_for
from core.settings import load_settings


def endpoint(monkeypatch: pytest.MonkeyPatch, **env: str) -> EndpointModel:
    for name, value in {"OPSGATE_EMBEDDINGS_MODEL": "text-embedding-3-small", **env}.items():
        monkeypatch.setenv(name, value)
    model = embedder_for(load_settings())
    assert isinstance(model, EndpointModel)
    return model


def test_the_default_is_the_embedded_model_and_none_is_words_only(monkeypatch):
    assert isinstance(embedder_for(load_settings()), EmbeddedModel)
    monkeypatch.setenv("OPSGATE_EMBEDDINGS_MODEL", "none")
    assert embedder_for(load_settings()) is None


def test_the_chat_models_key_goes_only_to_the_chat_models_endpoint(monkeypatch):
    chat = {"OPENAI_API_KEY": "sk-chat", "OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"}
    same = endpoint(monkeypatch, **chat)
    assert (same.where, same._client.api_key) == ("http://127.0.0.1:8000/v1", "sk-chat")
    other = endpoint(monkeypatch, OPSGATE_EMBEDDINGS_BASE_URL="http://127.0.0.1:11434/v1", **chat)
    assert other.where == "http://127.0.0.1:11434/v1"
    assert other._client.api_key != "sk-chat"
    own = endpoint(monkeypatch, OPSGATE_EMBEDDINGS_BASE_URL="http://127.0.0.1:11434/v1",
                   OPSGATE_EMBEDDINGS_API_KEY="sk-embed", **chat)
    assert own._client.api_key == "sk-embed"
