"""Validate Kubernetes manifests against the schemas bundled in the
`kubernetes-validate` package (PyPI), offline, strictly (unknown fields fail).

    /usr/bin/python3 integration/lab/k8s_validate.py conf/daemonset.yaml [--version 1.30 ...]

Prints one line per (document, version) and exits 1 on any failure, including a
kind for which no schema exists (the package's CLI only warns about those).
Without --version it checks the oldest Kubernetes minor still in common use
(OLDEST) and the newest the package has.

A custom resource has no schema in the package: a ServiceMonitor (Prometheus
Operator) is checked once, whatever the version, against SERVICE_MONITOR below,
a part of its CRD's schema.
"""
import argparse
import sys

import yaml

OLDEST = "1.29"

# The ServiceMonitor's schema, copied from the openAPIV3Schema of its CRD in
# prometheus-operator v0.84.1 (example/prometheus-operator-crd/
# monitoring.coreos.com_servicemonitors.yaml), cut to the fields ebpf-masq's
# manifests use: what it requires (the object: spec; spec: selector and
# endpoints; a matchExpressions item: key and operator) and the types, patterns
# and enums of those fields. Stricter than the CRD on one point: a field not
# copied here is refused (additionalProperties false), as a misspelt field is
# refused by the API server's strict field validation; a field the manifests
# start using must be copied here from the CRD. apiVersion, kind and
# metadata.name are required by the API server (every object), not by the CRD.
_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
_RELABELING = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "action": {"type": "string", "enum": [
            "replace", "Replace", "keep", "Keep", "drop", "Drop", "hashmod", "HashMod", "labelmap", "LabelMap",
            "labeldrop", "LabelDrop", "labelkeep", "LabelKeep", "lowercase", "Lowercase", "uppercase", "Uppercase",
            "keepequal", "KeepEqual", "dropequal", "DropEqual"]},
        "sourceLabels": {"type": "array", "items": {"type": "string", "pattern": "^[a-zA-Z_][a-zA-Z0-9_]*$"}},
        "targetLabel": {"type": "string"},
        "regex": {"type": "string"},
        "replacement": {"type": "string"},
        "separator": {"type": "string"},
    },
}
_DURATION = {"type": "string",
             "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"}
SERVICE_MONITOR = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string", "minLength": 1}, "namespace": {"type": "string"},
                           "labels": _STRINGS, "annotations": _STRINGS},
        },
        "spec": {
            "type": "object",
            "required": ["endpoints", "selector"],
            "additionalProperties": False,
            "properties": {
                "jobLabel": {"type": "string"},
                "namespaceSelector": {
                    "type": "object", "additionalProperties": False,
                    "properties": {"any": {"type": "boolean"}, "matchNames": {"type": "array", "items": {"type": "string"}}},
                },
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "matchLabels": _STRINGS,
                        "matchExpressions": {"type": "array", "items": {
                            "type": "object", "required": ["key", "operator"], "additionalProperties": False,
                            "properties": {"key": {"type": "string"}, "operator": {"type": "string"},
                                           "values": {"type": "array", "items": {"type": "string"}}}}},
                    },
                },
                "endpoints": {"type": "array", "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "port": {"type": "string"},
                        "path": {"type": "string"},
                        "scheme": {"type": "string", "enum": ["http", "https"]},
                        "interval": _DURATION,
                        "scrapeTimeout": _DURATION,
                        "honorLabels": {"type": "boolean"},
                        "relabelings": {"type": "array", "items": _RELABELING},
                        "metricRelabelings": {"type": "array", "items": _RELABELING},
                    },
                }},
            },
        },
    },
}
CUSTOM = {("monitoring.coreos.com/v1", "ServiceMonitor"):
          (SERVICE_MONITOR, "its CRD (prometheus-operator v0.84.1, the fields used)")}


def documents(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def validate(path, versions):
    import kubernetes_validate
    from kubernetes_validate import utils

    failures = []
    for doc in documents(path):
        what = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        custom = CUSTOM.get((doc.get("apiVersion"), doc.get("kind")))
        if custom:
            import jsonschema
            schema, against = custom
            errors = list(jsonschema.Draft202012Validator(schema).iter_errors(doc))
            failures += [f"{what} against {against}: {'.'.join(map(str, e.path))}: {e.message}" for e in errors]
            if not errors:
                print(f"ok   {what} against {against}")
            continue
        for v in versions:
            try:
                got = kubernetes_validate.validate(doc, v, strict=True)
                print(f"ok   {what} against {got}")
            except utils.ValidationError as e:
                at = ".".join(str(p) for p in e.path)
                failures.append(f"{what} against {e.version}: {at}: {e.message}")
            except utils.SchemaNotFoundError as e:
                failures.append(f"{what}: {e.message}")
    for f in failures:
        print(f"FAIL {f}")
    return not failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("manifest")
    ap.add_argument("--version", action="append", help="Kubernetes minor version (repeatable)")
    a = ap.parse_args()
    from kubernetes_validate import utils
    versions = a.version or [OLDEST, utils.latest_version()]
    sys.exit(0 if validate(a.manifest, versions) else 1)


if __name__ == "__main__":
    main()
