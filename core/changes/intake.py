"""What one delivery to ``/changes`` does: reads the body in its format, resolves the service
to a catalog component (by component name, else by Kubernetes namespace/name) and records the
change once. A service the catalog does not know is recorded without a component."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from core.catalog.model import Catalog
from core.changes.formats import NotRecorded, Received, parsed, read_change, source_of
from core.changes.model import Change
from core.changes.store import ChangeStore
from core.clock import Clock, utcnow


@dataclass(frozen=True)
class Recorded:
    """The change as stored, and whether this delivery recorded it (False: a retry)."""

    change: Change
    created: bool


class ChangeIntake:
    """Deliveries to one store, resolved in the catalog as it is when each arrives."""

    def __init__(self, store: ChangeStore, catalog: Callable[[], Catalog],
                 clock: Clock = utcnow) -> None:
        self.store = store
        self.catalog = catalog
        self.clock = clock

    def receive(self, body: bytes, *, github_event: str | None = None,
                declared: str | None = None) -> Recorded | NotRecorded:
        """One delivery: ``github_event`` is its X-GitHub-Event, ``declared`` its
        X-Opsgate-Source. ``InvalidChange`` for a body that cannot be read, ``ChangeIdReused``
        for a known id with other content."""
        document = parsed(body, source_of(github_event, declared, None))  # before its shape
        source = source_of(github_event, declared, document)
        read = read_change(source, document, self.clock(), github_event)
        if isinstance(read, NotRecorded):
            return read
        change, created = self.store.add(self._resolved(read))
        return Recorded(change, created)

    def _resolved(self, read: Received) -> Change:
        component = component_of(self.catalog(), read.names, read.change.namespace)
        return replace(read.change, component=component)


def component_of(catalog: Catalog, names: Iterable[str], namespace: str | None) -> str | None:
    """The catalog component the first of ``names`` that the catalog knows is: a component of
    that name (living in ``namespace`` when one is given), else the one component whose
    Kubernetes objects go by that name there. None when none is (or several are)."""
    for name in names:
        component = catalog.component(name)
        if component is not None and (namespace is None or component.lives_in(namespace)):
            return component.name
        found = catalog.by_kubernetes(namespace, name)
        if len(found) == 1:
            return found[0].name
    return None
