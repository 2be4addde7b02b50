"""The service catalog, in Backstage's descriptor format: which components exist, who owns them
and who those people are (their Slack ids). The catalog as read and what it answers (``model``),
one descriptor read (``descriptors``), the entities checked together (``checks``), the mistakes
(``problems``) and the files, read once or kept current (``files``)."""

from core.catalog.files import CatalogSource, catalog_files, catalog_of, load_catalog
from core.catalog.model import EMPTY_CATALOG, Catalog, Component, Group, Link, User
from core.catalog.problems import CatalogError, CatalogProblem

__all__ = ["EMPTY_CATALOG", "Catalog", "CatalogError", "CatalogProblem", "CatalogSource",
           "Component", "Group", "Link", "User", "catalog_files", "catalog_of", "load_catalog"]
