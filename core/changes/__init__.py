"""Recent changes: deploys and configuration changes POSTed to ``/changes`` by CI, Argo CD or
GitHub, for the investigator's ``recent_changes`` and the card. A change as stored (``model``),
the three bodies it arrives in (``formats``), where it is kept (``store``) and what a delivery
does, the catalog component included (``intake``)."""

from core.changes.intake import ChangeIntake, Recorded, component_of
from core.changes.model import Change, ChangeIdReused, InvalidChange
from core.changes.store import ChangeStore

__all__ = ["Change", "ChangeIdReused", "ChangeIntake", "ChangeStore", "InvalidChange",
           "Recorded", "component_of"]
