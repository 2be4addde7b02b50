"""``opsgate catalog check|list|show``: the service catalog (OPSGATE_CATALOG) as opsgate reads
it: whether it loads, its components, and one component's owners, Kubernetes objects and links.
A catalog with problems prints one line per problem on stderr and exits 2, never a traceback."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from core.cli.command import EXIT_BAD_SETTINGS, CliError, Command

if TYPE_CHECKING:
    from core.catalog import Catalog, Component

_PATH_HELP = "a Backstage catalog-info.yaml file, or a folder of *.yaml files (default: " \
             "$OPSGATE_CATALOG)"


def catalog_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="catalog_action", metavar="ACTION", required=True)
    checked = actions.add_parser(
        "check", help="read the catalog and say what is wrong, or how much it holds",
        description="Read every file of the catalog: one line per problem (file, entity, "
                    "field, what is expected) and exit 2, or its size and version.")
    checked.add_argument("path", metavar="PATH", nargs="?", type=Path, help=_PATH_HELP)
    listed = actions.add_parser(
        "list", help="one line per component", description="Every component: name, owner, "
                                                            "lifecycle, system, Kubernetes "
                                                            "namespace/id.")
    listed.add_argument("--path", metavar="PATH", type=Path, help=_PATH_HELP)
    shown = actions.add_parser(
        "show", help="one component: owners, Kubernetes, links",
        description="One component in sentences: its lifecycle and system, its owning group "
                    "and the people in it (Slack ids), its Kubernetes objects and its links.")
    shown.add_argument("name", metavar="NAME", help="the component's metadata.name")
    shown.add_argument("--path", metavar="PATH", type=Path, help=_PATH_HELP)


def run_catalog(args: argparse.Namespace) -> int:
    from core.catalog import CatalogError, load_catalog

    path = args.path or _configured_path()
    try:
        catalog = load_catalog(path)
    except CatalogError as error:
        for problem in error.problems:
            print(problem, file=sys.stderr, flush=True)
        return EXIT_BAD_SETTINGS
    if args.catalog_action == "check":
        said = f"catalog {path}: {_size(catalog)} (version {catalog.version[:12]})"
        print(said + _ignored(catalog), flush=True)
    elif args.catalog_action == "list":
        print(_table(catalog) or f"catalog {path}: no components", flush=True)
    else:
        print(_described(catalog, args.name), flush=True)
    return 0


def _configured_path() -> Path:
    from core.settings import load_settings

    path = load_settings().catalog
    if path is None:
        raise CliError("OPSGATE_CATALOG is unset: name the catalog, a Backstage "
                       "catalog-info.yaml file or a folder of *.yaml files (Component, Group, "
                       "User), e.g. OPSGATE_CATALOG=./catalog or `opsgate catalog check "
                       "./catalog`", exit_code=EXIT_BAD_SETTINGS)
    return path


def _size(catalog: Catalog) -> str:
    counts = [(len(catalog.components), "component"), (len(catalog.groups), "group"),
              (len(catalog.users), "user")]
    return ", ".join(f"{n} {word}{'' if n == 1 else 's'}" for n, word in counts)


def _ignored(catalog: Catalog) -> str:
    if not catalog.ignored:
        return ""
    what = "entity of another kind" if catalog.ignored == 1 else "entities of other kinds"
    return f"; {catalog.ignored} {what} (System, API, Resource…) ignored"


def _table(catalog: Catalog) -> str:
    if not catalog.components:
        return ""
    header = ("NAME", "OWNER", "LIFECYCLE", "SYSTEM", "KUBERNETES")
    lines = [header] + [(c.name, c.owner, c.lifecycle, c.system or "-",
                         f"{c.kubernetes_namespace or '*'}/{c.workload}")
                        for c in catalog.components.values()]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
                     .rstrip() for line in lines)


def _described(catalog: Catalog, name: str) -> str:
    component = catalog.component(name)
    if component is None:
        known = ", ".join(catalog.components) or "none"
        raise CliError(f"no component named {name} in the catalog (known: {known})",
                       exit_code=EXIT_BAD_SETTINGS)
    return "\n".join(filter(None, (_owned(catalog, component), component.description,
                                   _kubernetes(component), _links(component))))


def _owned(catalog: Catalog, component: Component) -> str:
    system = f", system {component.system}" if component.system else ""
    people = ", ".join(user.called for user in catalog.users_in(component.owner))
    owners = f": {people}." if people else ", which has no members in the catalog."
    return f"{component.name} ({component.lifecycle}{system}) is owned by {component.owner}" \
           f"{owners}"


def _kubernetes(component: Component) -> str:
    where = f"in namespace {component.kubernetes_namespace}" if component.kubernetes_namespace \
        else "in any namespace"
    selector = ",".join(f"{key}={value}" for key, value in component.kubernetes_selector)
    labels = f" (selector {selector})" if selector else ""
    return f"Kubernetes: deployment {component.workload} {where}{labels}."


def _links(component: Component) -> str:
    links = ", ".join(f"{link.title} {link.url}" for link in component.links)
    return f"Links: {links}" if links else "Links: none."


COMMANDS = (
    Command(
        name="catalog",
        summary="check, list or show the service catalog (OPSGATE_CATALOG)",
        description="The service catalog in Backstage's descriptor format: Components (owner, "
                    "lifecycle, Kubernetes annotations, links), Groups and Users (Slack ids). "
                    "`opsgate catalog check [PATH]` reads it and names every problem; "
                    "`opsgate catalog list` shows its components; `opsgate catalog show NAME` "
                    "says who owns one and where it runs.",
        add_arguments=catalog_arguments,
        run=run_catalog,
    ),
)
