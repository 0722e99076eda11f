"""The Kubernetes manifests, validated offline: built-in kinds against the Kubernetes schemas
that kubernetes-validate bundles, the Prometheus Operator's kinds against the schemas in
tests/deploy/schemas, and the PrometheusRule against the rules Prometheus is tested with."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped] # no stubs in dev deps
import kubernetes_validate
import pytest
import yaml
from deploy_tools import DEPLOY_DIR

KUBERNETES = DEPLOY_DIR / "kubernetes"
SCHEMAS = Path(__file__).resolve().parent / "schemas"
KUBERNETES_VERSION = "1.30.0"
"""The oldest Kubernetes the manifests must be valid for (bundled by kubernetes-validate)."""
CUSTOM = {"PrometheusRule": "prometheusrule.json", "ServiceMonitor": "servicemonitor.json"}


def manifests() -> dict[str, dict[str, Any]]:
    """Every document of deploy/kubernetes/*.yaml, by kind."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(KUBERNETES.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            assert document["kind"] not in found, f"two {document['kind']} manifests"
            found[document["kind"]] = document
    return found


def validate(document: dict[str, Any]) -> None:
    """Raise if ``document`` does not fit its kind's schema."""
    kind = document["kind"]
    if kind in CUSTOM:
        schema = json.loads((SCHEMAS / CUSTOM[kind]).read_text())
        jsonschema.Draft202012Validator.check_schema(schema)
        jsonschema.Draft202012Validator(schema).validate(document)
    else:
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_the_manifests_are_the_expected_kinds() -> None:
    assert set(manifests()) == {
        "Namespace",
        "Deployment",
        "PersistentVolumeClaim",
        "Service",
        "ServiceMonitor",
        "PrometheusRule",
    }


@pytest.mark.parametrize(
    "kind", sorted(["Namespace", "Deployment", "PersistentVolumeClaim", "Service", *CUSTOM])
)
def test_each_manifest_is_valid_for_its_schema(kind: str) -> None:
    validate(manifests()[kind])


@pytest.mark.parametrize(
    ("kind", "path", "value"),
    [
        ("Deployment", ["spec", "template", "spec", "containers", 0, "livenesProbe"], {}),
        ("Deployment", ["spec", "replicas"], "one"),
        ("Service", ["spec", "ports", 0, "port"], "http"),
        ("PrometheusRule", ["spec", "groups", 0, "rules", 0, "for"], "five minutes"),
        ("PrometheusRule", ["spec", "groups", 0, "rules", 0, "annotation"], {}),
        ("ServiceMonitor", ["spec", "endpoints", 0, "interval"], "often"),
    ],
)
def test_the_validators_refuse_a_broken_manifest(kind: str, path: list[Any], value: Any) -> None:
    document = copy.deepcopy(manifests()[kind])
    target = document
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value

    with pytest.raises((jsonschema.ValidationError, kubernetes_validate.ValidationError)):
        validate(document)


def test_the_prometheusrule_is_generated_from_the_tested_rules_file() -> None:
    check = subprocess.run(  # noqa: S603 - our interpreter and script
        [sys.executable, str(KUBERNETES / "generate.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr

    rules = yaml.safe_load((DEPLOY_DIR / "prometheus" / "rules" / "hopchain.rules.yml").read_text())
    assert manifests()["PrometheusRule"]["spec"] == rules


def test_probes_token_and_scraping_fit_together() -> None:
    found = manifests()
    deployment, service, monitor = found["Deployment"], found["Service"], found["ServiceMonitor"]
    pod = deployment["spec"]["template"]
    [container] = pod["spec"]["containers"]

    https = {"port": "http", "scheme": "HTTPS"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", **https}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", **https}
    env = {item["name"]: item for item in container["env"]}
    assert env["HOPCHAIN_DLQ_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "hopchain-dlq",
        "key": "token",
    }
    assert "value" not in env["HOPCHAIN_DLQ_TOKEN"]
    # Listening on every interface of the pod, so serving TLS: never the token in clear.
    assert env["HOPCHAIN_DLQ_HOST"]["value"] == "0.0.0.0"  # noqa: S104 - inside the pod
    volume, index = pod["spec"]["volumes"]
    mount, index_mount = container["volumeMounts"]
    assert (mount["name"], mount["readOnly"]) == (volume["name"], True)
    assert volume["secret"]["secretName"] == "hopchain-dlq-tls"
    # The index file on its own volume, the claim's: a restart resumes instead of rebuilding.
    claim = manifests()["PersistentVolumeClaim"]
    assert index["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert (index_mount["name"], index_mount.get("readOnly", False)) == (index["name"], False)
    path = env["HOPCHAIN_DLQ_INDEX_PATH"]["value"]
    assert path.startswith(index_mount["mountPath"] + "/")
    assert pod["spec"]["securityContext"]["fsGroup"] == pod["spec"]["securityContext"]["runAsGroup"]
    assert "limits" in container["resources"]
    for name, file in (("CERTFILE", "tls.crt"), ("KEYFILE", "tls.key")):
        assert env[f"HOPCHAIN_DLQ_TLS_{name}"]["value"] == f"{mount['mountPath']}/{file}"
    [port] = container["ports"]
    assert env["HOPCHAIN_DLQ_PORT"]["value"] == str(port["containerPort"])

    labels = pod["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["selector"].items() <= labels.items()
    [service_port] = service["spec"]["ports"]
    assert service_port["targetPort"] == port["name"]

    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert [endpoint["port"] for endpoint in monitor["spec"]["endpoints"]] == [service_port["name"]]
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    assert monitor["spec"]["endpoints"][0]["scheme"] == "https"
    # The operator names the job after this Service label: the value the alerts expect.
    assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == "hopchain-dlq"
    namespaces = {document["metadata"].get("namespace") for document in found.values()}
    assert namespaces == {None, found["Namespace"]["metadata"]["name"]}
