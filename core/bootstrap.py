"""The composition root: builds every opsgate object from settings (tests build it with fakes)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine

from core.adapters.database import make_engine
from core.gateway import Gateway, build_gateway
from core.service import CaseService
from core.settings import Settings, load_settings


@dataclass
class App:
    """Everything a process of opsgate runs on."""

    settings: Settings
    engine: Engine
    cases: CaseService
    gateway: Gateway

    def close(self) -> None:
        self.gateway.close()
        self.engine.dispose()


def bootstrap(settings: Settings | None = None, *, engine: Engine | None = None) -> App:
    """Wire opsgate from ``settings`` (the environment by default)."""
    settings = settings or load_settings()
    engine = engine or make_engine(settings.database_url, pool_size=settings.db_pool_size)
    return App(settings=settings, engine=engine, cases=CaseService(engine, tenant=settings.tenant),
               gateway=build_gateway(settings, engine))
