"""PATCH bodies as the API server applies them (test double).

- `application/merge-patch+json`: RFC 7386 JSON merge patch. Objects merge recursively, `null`
  deletes a key, any other value (lists included) replaces.
- `application/strategic-merge-patch+json`: Kubernetes strategic merge patch for the built-in types
  used here. Like a merge patch, except that lists declared with a patch strategy of "merge" merge
  their items by the patch merge key (containers/volumes/env by `name`, volumeMounts by `mountPath`,
  ownerReferences by `uid`, conditions by `type`), and lists of primitives declared as sets
  (`finalizers`) take the union. The `$patch: delete` / `$patch: replace` directives are honoured for
  maps and list items. `spec.taints` and `tolerations` carry no patch strategy in the API types (they
  are atomic), so a strategic patch replaces them whole - exactly why taint edits must be
  read-modify-write with a resourceVersion precondition.
- `application/json-patch+json`: RFC 6902 (`add`, `remove`, `replace`, `test`, `move`, `copy`).
`application/apply-patch+yaml` (server-side apply) is not implemented: 415 Unsupported Media Type.
"""

from __future__ import annotations

import copy
from typing import Any

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"

# list field name -> merge key, for lists whose API type declares patchStrategy=merge
_MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "ports": "containerPort",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ownerReferences": "uid",
    "conditions": "type",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
}
_SET_LISTS = frozenset({"finalizers"})


class PatchError(ValueError):
    """The patch cannot be applied (the server answers 422 or 400)."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Kubernetes strategic merge patch (subset: see the module docstring)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue  # $setElementOrder / $retainKeys: ordering hints, not needed here
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and key in _MERGE_KEYS:
            result[key] = _merge_list(result.get(key) or [], value, _MERGE_KEYS[key])
        elif isinstance(value, list) and key in _SET_LISTS:
            merged = list(result.get(key) or [])
            merged.extend(v for v in value if v not in merged)
            result[key] = merged
        elif isinstance(value, dict):
            merged_value = strategic_merge_patch(result.get(key), value)
            if merged_value is None:
                result.pop(key, None)
            else:
                result[key] = merged_value
        else:
            result[key] = copy.deepcopy(value)
    return result


def _merge_list(current: list[Any], patch: list[Any], key: str) -> list[Any]:
    out = [copy.deepcopy(item) for item in current]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise PatchError(f"map in list is missing the patch merge key {key!r}")
        idx = next((i for i, cur in enumerate(out) if isinstance(cur, dict) and cur.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
            continue
        if idx is None:
            out.append({k: v for k, v in item.items() if not k.startswith("$")})
        else:
            out[idx] = strategic_merge_patch(out[idx], item)
    return out


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str]) -> tuple[Any, str]:
    cur = doc
    for part in parts[:-1]:
        if isinstance(cur, list):
            cur = cur[int(part)]
        elif isinstance(cur, dict) and part in cur:
            cur = cur[part]
        else:
            raise PatchError(f"path element {part!r} does not exist")
    return cur, parts[-1]


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902."""
    if not isinstance(ops, list):
        raise PatchError("a JSON patch is a list of operations")
    doc = copy.deepcopy(target)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"invalid JSON patch operation {op!r}")
        kind, parts = op["op"], _pointer(op["path"])
        try:
            if kind in ("add", "replace", "test", "remove"):
                parent, last = _parent(doc, parts)
                if kind == "test":
                    current = parent[int(last)] if isinstance(parent, list) else parent.get(last)
                    if current != op.get("value"):
                        raise PatchError(f"test failed at {op['path']}")
                elif kind == "remove":
                    del parent[int(last) if isinstance(parent, list) else last]
                elif isinstance(parent, list):
                    index = len(parent) if last == "-" else int(last)
                    if kind == "add":
                        parent.insert(index, copy.deepcopy(op["value"]))
                    else:
                        parent[index] = copy.deepcopy(op["value"])
                else:
                    if kind == "replace" and last not in parent:
                        raise PatchError(f"replace of missing path {op['path']}")
                    parent[last] = copy.deepcopy(op["value"])
            elif kind in ("move", "copy"):
                src_parent, src_last = _parent(doc, _pointer(op["from"]))
                value = src_parent[int(src_last)] if isinstance(src_parent, list) else src_parent[src_last]
                if kind == "move" and isinstance(src_parent, list):
                    del src_parent[int(src_last)]
                elif kind == "move":
                    del src_parent[src_last]
                doc = json_patch(doc, [{"op": "add", "path": op["path"], "value": value}])
            else:
                raise PatchError(f"unknown JSON patch op {kind!r}")
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            if isinstance(exc, PatchError):
                raise
            raise PatchError(f"cannot apply {kind} at {op['path']}: {exc}") from exc
    return doc


def apply_patch(content_type: str, target: dict[str, Any], body: Any) -> dict[str, Any]:
    """Apply a PATCH body by its content type; raises PatchError or LookupError (unsupported type)."""
    kind = content_type.split(";")[0].strip().lower()
    if kind == MERGE:
        result = merge_patch(target, body)
    elif kind == STRATEGIC:
        result = strategic_merge_patch(target, body)
    elif kind == JSON_PATCH:
        result = json_patch(target, body)
    else:
        raise LookupError(kind)
    if not isinstance(result, dict):
        raise PatchError("the patch did not leave an object")
    return result
