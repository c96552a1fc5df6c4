"""Renders a kustomization of the small subset deploy/kubernetes uses, without kubectl.

    python3 tools/k8s_render.py deploy/kubernetes/examples/four-workers          # YAML to stdout
    python3 tools/k8s_render.py --check deploy/kubernetes/examples/four-workers  # and check

--check validates every object against the API schema (tools/k8s_schema.py) and checks that the
job can form (tools/k8s_job.py: each role's variables, the counts, the scheduler's Service).

Exit status: 0; 1 when --check finds an object the API would refuse or a job that cannot form;
2 for a kustomization this cannot render (outside the subset, a missing file or object) or a bad
command line.

The subset (anything else is an error naming the file and the field): ``resources`` (files and
folders holding a kustomization), ``namespace``, ``labels`` (``pairs``, ``includeTemplates``;
not ``includeSelectors``), ``images`` (``name``, ``newName``, ``newTag``, ``digest``),
``replicas`` (Deployment, StatefulSet), ``configMapGenerator`` / ``secretGenerator`` (``literals``
only; ``behavior`` create, merge or replace), ``generatorOptions.disableNameSuffixHash`` and
``patches`` (strategic merge, from ``path`` or ``patch``, aimed by the patch's kind and name or by
``target``).  A generated ConfigMap or Secret is named with kustomize's content hash suffix, and
the pod templates' references to it (envFrom, env valueFrom, volumes) follow the new name.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import sys
from typing import Any

import yaml

KEYS = {"apiVersion", "kind", "resources", "namespace", "labels", "images", "replicas", "configMapGenerator",
        "secretGenerator", "generatorOptions", "patches"}
MERGE_KEYS = {"containers": "name", "initContainers": "name", "env": "name", "volumes": "name",
              "imagePullSecrets": "name", "volumeMounts": "mountPath", "ports": "containerPort"}
WORKLOADS = ("Deployment", "StatefulSet", "Job", "DaemonSet", "ReplicaSet")


class RenderError(Exception):
    """A kustomization outside the subset, or one that names something missing."""


def _load_all(path: str) -> list[dict]:
    try:
        with open(path, encoding="utf-8") as f:
            return [d for d in yaml.safe_load_all(f) if d is not None]
    except (OSError, yaml.YAMLError) as err:
        raise RenderError(f"{path}: cannot read: {err}") from None


def _find(objects: list[dict], kind: str, name: str, where: str) -> dict:
    for obj in objects:
        if obj["kind"] == kind and obj["metadata"]["name"] == name:
            return obj
    raise RenderError(f"{where}: no {kind} named {name!r} in the resources")


def merge_patch(base: Any, patch: Any) -> Any:
    """A strategic merge patch, the part of it these manifests need: maps merge (a null deletes),
    lists of MERGE_KEYS merge item by item on their key (the patch's items first, in its order,
    then the others: kustomize's order), other lists are replaced."""
    if not (isinstance(base, dict) and isinstance(patch, dict)):
        return copy.deepcopy(patch)
    out = dict(base)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif key in MERGE_KEYS and isinstance(value, list) and isinstance(out.get(key), list):
            mk = MERGE_KEYS[key]  # as kustomize orders them: the patch's items, then the others
            if key == "ports" and any("port" in item for item in value):
                mk = "port"  # a Service's
            olds = {item.get(mk): item for item in out[key] if isinstance(item, dict)}
            merged = [merge_patch(olds.get(item.get(mk)), item) for item in value]
            merged += [item for item in out[key] if item.get(mk) not in {p.get(mk) for p in value}]
            out[key] = merged
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _generate(spec: dict, kind: str, where: str) -> dict:
    unknown = set(spec) - {"name", "literals", "behavior", "options", "type"}
    if unknown or "name" not in spec:
        raise RenderError(f"{where}: {kind} generator {spec.get('name')!r}: only name, literals, behavior "
                          f"(and type) are supported, got {sorted(unknown) or 'no name'}")
    data = {}
    for literal in spec.get("literals", []):
        key, eq, value = str(literal).partition("=")
        if not eq:
            raise RenderError(f"{where}: {kind} generator {spec['name']!r}: literal {literal!r} is not KEY=VALUE")
        data[key] = value
    obj = {"apiVersion": "v1", "kind": kind, "metadata": {"name": spec["name"]}}
    if kind == "Secret":
        obj["type"] = spec.get("type", "Opaque")
        data = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    obj["data"] = data
    return obj


def name_hash(obj: dict) -> str:
    """kustomize's suffix: the sha256 of {kind, name, data (, type)} as sorted JSON, its first 10
    hex digits with 0, 1, 3, a, e replaced by g, h, k, m, t.  kustomize 5 looks the name up under
    a key "metadata/name" that no object has, so the name it hashes is always empty: so here."""
    fields = {"kind": obj["kind"], "name": "", "data": obj.get("data", {})}
    if obj["kind"] == "Secret":
        fields["type"] = obj["type"]
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")  # as Go's encoder
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    return digest.translate(str.maketrans("013ae", "ghkmt"))


def split_image(image: str) -> tuple[str, str]:
    """``host:5000/a/b:tag`` -> (``host:5000/a/b``, ``:tag``); a digest (``@sha256:...``) likewise."""
    if "@" in image:
        name, digest = image.split("@", 1)
        return name, "@" + digest
    colon = image.rfind(":")
    return (image[:colon], image[colon:]) if colon > image.rfind("/") else (image, "")


def _pod_specs(obj: dict) -> list[dict]:
    spec = obj.get("spec", {})
    if obj["kind"] == "Pod":
        return [spec]
    return [spec["template"]["spec"]] if obj["kind"] in WORKLOADS and "spec" in spec.get("template", {}) else []


def _rename_references(objects: list[dict], renamed: dict[tuple[str, str], str]) -> None:
    def follow(ref: dict | None, kind: str, field: str = "name") -> None:
        if ref and (kind, ref.get(field)) in renamed:
            ref[field] = renamed[(kind, ref[field])]

    for obj in objects:
        for pod in _pod_specs(obj):
            for c in pod.get("containers", []) + pod.get("initContainers", []):
                for source in c.get("envFrom", []):
                    follow(source.get("configMapRef"), "ConfigMap")
                    follow(source.get("secretRef"), "Secret")
                for var in c.get("env", []):
                    follow(var.get("valueFrom", {}).get("configMapKeyRef"), "ConfigMap")
                    follow(var.get("valueFrom", {}).get("secretKeyRef"), "Secret")
            for volume in pod.get("volumes", []):
                follow(volume.get("configMap"), "ConfigMap")
                follow(volume.get("secret"), "Secret", "secretName")


def _build(folder: str) -> list[dict]:
    """The objects of one kustomization; generated ones carry "_hash" (whether to suffix)."""
    where = os.path.join(folder, "kustomization.yaml")
    docs = _load_all(where)
    k = docs[0] if docs else {}
    if unknown := set(k) - KEYS:
        raise RenderError(f"{where}: {', '.join(sorted(unknown))}: not in the subset tools/k8s_render.py renders")
    objects: list[dict] = []
    for res in k.get("resources", []):
        path = os.path.join(folder, res)
        objects += _build(path) if os.path.isdir(path) else _load_all(path)
    hashed = not k.get("generatorOptions", {}).get("disableNameSuffixHash", False)
    for key, kind in (("configMapGenerator", "ConfigMap"), ("secretGenerator", "Secret")):
        for spec in k.get(key, []):
            new, behavior = _generate(spec, kind, where), spec.get("behavior", "create")
            if behavior == "create":
                objects.append({**new, "_hash": hashed})
            elif behavior in ("merge", "replace"):
                old = _find(objects, kind, spec["name"], where)
                if behavior == "merge":
                    new["data"] = {**old.get("data", {}), **new["data"]}
                old.update({**new, "metadata": old["metadata"], "_hash": hashed})  # the metadata (labels) stays the base's
            else:
                raise RenderError(f"{where}: {kind} generator {spec['name']!r}: behavior {behavior!r} is not "
                                  "create, merge or replace")
    for p in k.get("patches", []):
        patch = _load_all(os.path.join(folder, p["path"]))[0] if "path" in p else yaml.safe_load(p["patch"])
        target = p.get("target", {})
        if set(p) - {"path", "patch", "target"} or set(target) - {"kind", "name"}:
            raise RenderError(f"{where}: patches: only path or patch and a target's kind and name are in the subset, "
                              f"got {p}")
        kind, name = target.get("kind", patch.get("kind")), target.get("name", patch.get("metadata", {}).get("name"))
        obj = _find(objects, kind, name, where)
        patch = {key: value for key, value in patch.items() if key not in ("apiVersion", "kind")}
        patch.get("metadata", {}).pop("name", None)
        obj.update(merge_patch(obj, patch))
    if "namespace" in k:
        for obj in objects:
            obj["metadata"]["namespace"] = k["namespace"]
    for group in k.get("labels", []):
        if group.get("includeSelectors"):
            raise RenderError(f"{where}: labels: includeSelectors is not in the subset (selectors stay as written)")
        for obj in objects:
            obj["metadata"].setdefault("labels", {}).update(group["pairs"])
            if group.get("includeTemplates") and "template" in obj.get("spec", {}):
                obj["spec"]["template"].setdefault("metadata", {}).setdefault("labels", {}).update(group["pairs"])
    for r in k.get("replicas", []):
        obj = next((o for o in objects if o["kind"] in ("Deployment", "StatefulSet")
                    and o["metadata"]["name"] == r["name"]), None)
        if obj is None:
            raise RenderError(f"{where}: replicas: no Deployment or StatefulSet named {r['name']!r}")
        obj["spec"]["replicas"] = int(r["count"])
    for image in k.get("images", []):
        for obj in objects:
            for pod in _pod_specs(obj):
                for c in pod.get("containers", []) + pod.get("initContainers", []):
                    name, suffix = split_image(c.get("image", ""))
                    if name == image["name"]:
                        suffix = ("@" + image["digest"] if "digest" in image
                                  else ":" + str(image["newTag"]) if "newTag" in image else suffix)
                        c["image"] = image.get("newName", name) + suffix
    return objects


def render(folder: str) -> list[dict]:
    """The objects `kubectl kustomize folder` gives, for a kustomization of the subset."""
    objects = _build(folder)
    renamed = {}
    for obj in objects:
        if obj.pop("_hash", False):
            name = obj["metadata"]["name"]
            obj["metadata"]["name"] = renamed[(obj["kind"], name)] = f"{name}-{name_hash(obj)}"
    _rename_references(objects, renamed)
    return objects


def main(argv: list[str]) -> int:
    check = "--check" in argv
    folders = [a for a in argv if a != "--check"]
    if len(folders) != 1:
        print("usage: k8s_render.py [--check] FOLDER (a kustomization)", file=sys.stderr)
        return 2
    try:
        objects = render(folders[0])
        if check:
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            from k8s_job import role_problems  # noqa: PLC0415 - only --check needs them
            from k8s_schema import validate  # noqa: PLC0415 - the kubernetes package
            for obj in objects:
                validate(obj)
            problems = role_problems(objects)
            for problem in problems:
                print(f"k8s_render: {folders[0]}: {problem}", file=sys.stderr)
            if problems:
                return 1
    except RenderError as err:
        print(f"k8s_render: {err}", file=sys.stderr)
        return 2
    except ValueError as err:  # k8s_schema.SchemaError
        print(f"k8s_render: {folders[0]}: {err}", file=sys.stderr)
        return 1
    except (KeyError, TypeError, AttributeError) as err:  # a field of the wrong shape
        print(f"k8s_render: {folders[0]}: a kustomization or manifest of an unexpected shape: "
              f"{type(err).__name__}: {err}", file=sys.stderr)
        return 2
    yaml.safe_dump_all(objects, sys.stdout, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
