"""The recorded world's writes, for a world served ``writable``: a JSON merge patch
(``application/merge-patch+json``; a strategic merge patch is read the same way, which is what
it is for maps) of an object or a Deployment's ``scale`` subresource, kept unless the request
says ``dryRun=All`` — then the patched object is only answered, as the API server does. Every
change bumps the object's ``resourceVersion``, so a test can tell what was written."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from agent.world.kube_api import (
    _OBJECTS,
    Request,
    World,
    _json,
    _Refusal,
    _resource,
    _served,
    not_found,
)

PATCHES = ("application/merge-patch+json", "application/strategic-merge-patch+json")


def merged(target: Any, patch: Any) -> Any:
    """RFC 7386: ``patch`` applied to ``target`` (null removes a key)."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merged(result.get(key), value)
    return result


def scale_of(found: Mapping[str, Any]) -> dict[str, Any]:
    """A Deployment's ``autoscaling/v1`` Scale, as its subresource answers."""
    meta = found["metadata"]
    return {"kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {"name": meta["name"], "namespace": meta.get("namespace"),
                         "resourceVersion": meta.get("resourceVersion", "1")},
            "spec": {"replicas": found.get("spec", {}).get("replicas", 1)},
            "status": {"replicas": found.get("status", {}).get("replicas", 0)}}


def patch(world: World, request: Request) -> tuple[int, str, bytes]:
    """The answer to one PATCH: the object after the patch (kept unless a dry run)."""
    match = _OBJECTS.match(request.path.rstrip("/"))
    if match is None or match["name"] is None or match["sub"] == "log":
        raise _Refusal(405, "MethodNotAllowed", "this recorded world patches named objects only")
    if request.content_type.split(";")[0].strip() not in PATCHES:
        raise _Refusal(415, "UnsupportedMediaType",
                       f"the body of the request was in an unknown format ({request.content_type})"
                       f"; accepted: {', '.join(PATCHES)}")
    resource = _resource(match["group"] or "", match["version"] or match["core"], match["plural"])
    namespace, name = match["namespace"], match["name"]
    try:
        body = json.loads(request.body or b"{}")
    except ValueError as exc:
        raise _Refusal(400, "BadRequest", f"the patch is not JSON: {exc}") from exc
    index = next((i for i, o in enumerate(world.of_kind(resource.kind, None))
                  if o["metadata"]["name"] == name
                  and o["metadata"].get("namespace") == namespace), None)
    if index is None:
        raise not_found(resource, name)
    found = world.of_kind(resource.kind, None)[index]
    if match["sub"] == "scale":
        replicas = merged(scale_of(found), body)["spec"]["replicas"]
        changed = merged(found, {"spec": {"replicas": replicas}})
    else:
        changed = merged(found, body)
    if changed != found:
        changed["metadata"]["resourceVersion"] = str(int(world.resource_version()) + 1)
    if request.param("dryRun") != "All":
        world.objects[world.objects.index(found)] = changed
    return _json(scale_of(changed) if match["sub"] == "scale" else _served(changed, resource))

