"""Validates Kubernetes objects (dicts, as read from YAML) offline against the API's schema, as
the models of Debian's python3-kubernetes describe it.

    from k8s_schema import validate
    validate(obj)          # raises SchemaError naming the object and the field path

Each object's apiVersion and kind must be served by an API group of the client (``apps/v1``
StatefulSet: ``AppsV1Api`` creates ``stateful_set``s), and its model is found by version and kind
(``V1StatefulSet``).  The dict is then walked against each model's ``openapi_types`` (type) and
``attribute_map`` (JSON name), recursively: ``list[...]``, ``dict(str, ...)``, ``str``, ``int``,
``float``, ``bool``, ``datetime`` and ``object`` (anything: int-or-string, raw JSON).  A field the
model does not have, a value of the wrong type and a required field left out are errors; which
fields are required the models' constructors say (a required one given None raises ValueError).
Resource quantities (``resources.limits``/``requests``, ``emptyDir.sizeLimit``) may be numbers,
as the API server accepts them.  The schema is the client's: python3-kubernetes 22 is Kubernetes
1.22's API (a field added since is reported unknown).
"""

from __future__ import annotations

import datetime
import re
from typing import Any

import kubernetes.client as k8s

_CONFIG = k8s.Configuration()
_CONFIG.client_side_validation = True  # the constructors check required fields
_LIST = re.compile(r"^list\[(.+)\]$")
_DICT = re.compile(r"^dict\(str, (.+)\)$")
_REQUIRED = re.compile(r"Invalid value for `(\w+)`, must not be `None`")
_QUANTITIES = {("V1ResourceRequirements", "limits"), ("V1ResourceRequirements", "requests"),
               ("V1EmptyDirVolumeSource", "size_limit")}


class SchemaError(ValueError):
    """An object that the Kubernetes API would refuse; the message names the object and field."""


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def model_for(api_version: str, kind: str, where: str) -> type:
    """The client's model class of apiVersion/kind, after checking that a client API group
    serves that kind at that version."""
    group, _, version = api_version.rpartition("/")
    api = "".join(part.capitalize() for part in (group.replace(".k8s.io", "") or "core").split(".")) \
        + version.capitalize() + "Api"
    kind_snake = _snake(kind)
    api_class = getattr(k8s, api, None)
    if api_class is None or not any(hasattr(api_class, f"create_{scope}{kind_snake}") for scope in ("namespaced_", "")):
        raise SchemaError(f"{where}: apiVersion {api_version!r} serves no kind {kind!r} in python3-kubernetes "
                          f"{k8s.__version__} (no {api}.create_..._{kind_snake})")
    model = getattr(k8s, version.capitalize() + kind, None)
    if model is None or not hasattr(model, "openapi_types"):
        raise SchemaError(f"{where}: no model {version.capitalize() + kind} for apiVersion {api_version!r} kind {kind!r}")
    return model


def _check(value: Any, type_name: str, path: str, where: str, quantity: bool = False) -> None:
    if value is None:
        return  # null: the field is left out (a required one is caught by its model's constructor)
    wrong = f"{where}: {path}: expected {type_name}, got {type(value).__name__} {value!r}"
    if m := _LIST.match(type_name):
        if not isinstance(value, list):
            raise SchemaError(wrong)
        for i, item in enumerate(value):
            _check(item, m.group(1), f"{path}[{i}]", where)
    elif m := _DICT.match(type_name):
        if not isinstance(value, dict):
            raise SchemaError(wrong)
        for key, item in value.items():
            if not isinstance(key, str):
                raise SchemaError(f"{where}: {path}: key {key!r} is not a string")
            _check(item, m.group(1), f"{path}.{key}", where, quantity)
    elif type_name == "str":
        if not (isinstance(value, str) or quantity and isinstance(value, (int, float)) and not isinstance(value, bool)):
            raise SchemaError(wrong)
    elif type_name == "int":
        if not isinstance(value, int) or isinstance(value, bool):
            raise SchemaError(wrong)
    elif type_name == "float":
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise SchemaError(wrong)
    elif type_name == "bool":
        if not isinstance(value, bool):
            raise SchemaError(wrong)
    elif type_name == "datetime":
        if not isinstance(value, (str, datetime.date)):
            raise SchemaError(wrong)
    elif type_name == "object":
        return  # int-or-string, raw JSON: anything
    else:
        model = getattr(k8s, type_name, None)
        if model is None or not hasattr(model, "openapi_types"):
            raise SchemaError(f"{where}: {path}: the schema names a type {type_name!r} that python3-kubernetes lacks")
        _check_model(value, model, path, where)


def _check_model(value: Any, model: type, path: str, where: str) -> None:
    if not isinstance(value, dict):
        raise SchemaError(f"{where}: {path or '(the object)'}: expected an object ({model.__name__}), got "
                          f"{type(value).__name__} {value!r}")
    attrs = {json_name: attr for attr, json_name in model.attribute_map.items()}
    prefix = path + "." if path else ""
    for key, item in value.items():
        if key not in attrs:
            raise SchemaError(f"{where}: {prefix}{key}: unknown field ({model.__name__} has "
                              f"{', '.join(sorted(attrs))})")
        attr = attrs[key]
        _check(item, model.openapi_types[attr], prefix + key, where, (model.__name__, attr) in _QUANTITIES)
    try:
        model(**{attrs[key]: item for key, item in value.items()}, local_vars_configuration=_CONFIG)
    except ValueError as err:
        missing = _REQUIRED.search(str(err))
        if missing:
            raise SchemaError(f"{where}: {prefix}{model.attribute_map[missing.group(1)]}: required field "
                              f"missing ({model.__name__})") from None
        raise SchemaError(f"{where}: {path or '(the object)'}: {err}") from None


def validate(obj: Any) -> None:
    """Raises SchemaError unless *obj* is an object the Kubernetes API accepts (by the schema)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("apiVersion"), str) or not isinstance(obj.get("kind"), str):
        raise SchemaError(f"not a Kubernetes object (no apiVersion and kind strings): {str(obj)[:80]}")
    where = f"{obj['kind']}/{(obj.get('metadata') or {}).get('name', '<no name>')}"
    if not (obj.get("metadata") or {}).get("name"):
        raise SchemaError(f"{where}: metadata.name: required field missing (every object here needs a name)")
    _check_model(obj, model_for(obj["apiVersion"], obj["kind"], where), "", where)
