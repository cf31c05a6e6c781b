"""Validate Kubernetes manifests against the schemas bundled in the
`kubernetes-validate` package (PyPI), offline, strictly (unknown fields fail).

    /usr/bin/python3 integration/k8s_validate.py conf/daemonset.yaml [--version 1.30 ...]

Prints one line per (document, version) and exits 1 on any failure, including a
kind for which no schema exists (the package's CLI only warns about those).
Without --version it checks the oldest Kubernetes minor still in common use
(OLDEST) and the newest the package has.
"""
import argparse
import sys

import yaml

OLDEST = "1.29"


def documents(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def validate(path, versions):
    import kubernetes_validate
    from kubernetes_validate import utils

    failures = []
    for doc in documents(path):
        what = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
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
