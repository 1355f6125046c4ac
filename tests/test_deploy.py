"""deploy/ stays consistent with the CLI: every mlms command line in the docker compose file
and the Kubernetes manifests parses with the real click commands (flags, choices, MLMS_*
variables), its URLs parse, and every framework has an agent. The stack itself cannot run
here (no docker daemon, no cluster), so this is what can be checked."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
import yaml

from mlms.cli.main import cli
from mlms.frameworks import TABLE
from mlms.registry.factory import parse_registry_url
from mlms.store.factory import store_from_url
from mlms.store.s3 import S3Store

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
#: MLMS_* variables that configure mlms itself rather than mirror a flag.
NOT_FLAGS = {"MLMS_HOME"}


@dataclass
class Invocation:
    where: str  # file and service/container, for messages
    args: list[str]  # after the `mlms` entry point
    env: dict[str, str]


def _compose() -> dict:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def _compose_value(value: str) -> str:
    """``${NAME:-default}`` -> default, as compose does with NAME unset."""
    return re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", str(value))


def compose_invocations() -> list[Invocation]:
    found = []
    for name, service in _compose()["services"].items():
        if str(service.get("image", "")).startswith("mlms"):
            env = service.get("environment") or {}
            found.append(
                Invocation(
                    f"docker-compose.yml service {name}",
                    [_compose_value(a) for a in service["command"]],
                    {k: _compose_value(v) for k, v in env.items()},
                )
            )
    return found


def _k8s_documents() -> list[dict]:
    docs = []
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        docs += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return docs


def k8s_invocations() -> list[Invocation]:
    docs = _k8s_documents()
    maps = {
        doc["metadata"]["name"]: {**doc.get("data", {}), **doc.get("stringData", {})}
        for doc in docs
        if doc["kind"] in ("ConfigMap", "Secret")
    }
    found = []
    for doc in docs:
        if doc["kind"] not in ("Deployment", "StatefulSet"):
            continue
        pod = doc["spec"]["template"]["spec"]
        for container in pod.get("initContainers", []) + pod["containers"]:
            if not container["image"].startswith("mlms"):
                continue
            env = {}
            for source in container.get("envFrom", []):
                ref = source.get("configMapRef") or source.get("secretRef")
                env.update(maps[ref["name"]])  # a missing map fails here, naming it
            for variable in container.get("env", []):
                env[variable["name"]] = _env_value(variable, maps)
            args = [_expand(arg, env) for arg in container["args"]]
            found.append(Invocation(f"k8s {doc['metadata']['name']}", args, env))
    return found


def _env_value(variable: dict, maps: dict[str, dict[str, str]]) -> str:
    if "value" in variable:
        return variable["value"]
    ref = variable["valueFrom"].get("configMapKeyRef")
    if ref:
        return maps[ref["name"]][ref["key"]]  # a missing map or key fails here, naming it
    return "10.0.0.7"  # a downward-API value (the pod IP) stands in as an address


def _expand(arg: str, env: dict[str, str]) -> str:
    """Kubernetes expands ``$(VAR)`` in args from the container's own variables."""
    return re.sub(r"\$\((\w+)\)", lambda match: env[match.group(1)], arg)


INVOCATIONS = compose_invocations() + k8s_invocations()


def _parse(run: Invocation, monkeypatch: pytest.MonkeyPatch) -> dict:
    """The parameters click gives the command, with only the deployment's variables set."""
    command = cli.get_command(click.Context(cli), run.args[0])
    assert command is not None, f"{run.where}: 'mlms {run.args[0]}' is not an mlms command"
    envvars = {p.envvar for p in command.params if isinstance(p, click.Option) and p.envvar}
    for name in run.env:
        if name.startswith("MLMS_") and name not in NOT_FLAGS:
            assert name in envvars, f"{run.where}: mlms {run.args[0]} has no flag read from {name}"
    with monkeypatch.context() as patch:
        for name in [n for n in os.environ if n.startswith("MLMS_")]:
            patch.delenv(name)
        for name, value in run.env.items():
            patch.setenv(name, str(value))
        try:
            return command.make_context(f"mlms {run.args[0]}", list(run.args[1:])).params
        except click.UsageError as exc:
            pytest.fail(f"{run.where}: {exc.format_message()}")


@pytest.mark.parametrize("run", INVOCATIONS, ids=[i.where for i in INVOCATIONS])
def test_command_lines_parse_with_the_cli(run: Invocation, monkeypatch) -> None:
    params = _parse(run, monkeypatch)
    store = store_from_url(params["store"])
    assert isinstance(store, S3Store), f"{run.where}: not on the fleet's S3 store"
    if run.args[0] == "assets":  # a one-shot build into the store, before the agents
        return
    parse_registry_url(params["registry"])
    assert params["registry"].startswith("etcd://"), f"{run.where}: not on the fleet's etcd"
    assert params["otlp_endpoint"], f"{run.where}: spans not sent to Jaeger"
    if run.args[0] == "agent":
        assert params["advertise"], f"{run.where}: an agent in a container must --advertise"
        listen_port = params["listen"].rsplit(":", 1)[1]
        assert params["advertise"].rsplit(":", 1)[1] == listen_port, run.where


@pytest.mark.parametrize("source", ["compose", "k8s"])
def test_every_framework_has_one_agent_and_there_is_a_server(source: str, monkeypatch) -> None:
    runs = compose_invocations() if source == "compose" else k8s_invocations()
    agents = [_parse(run, monkeypatch) for run in runs if run.args[0] == "agent"]
    assert sorted(a["framework"] for a in agents if a["gpus"] is None) == sorted(TABLE)
    # And torch on GPUs: one agent process per GPU of the host (`--gpus all`).
    assert [a["framework"] for a in agents if a["gpus"] is not None] == ["torch"]
    assert [a["gpus"] for a in agents if a["gpus"] is not None] == ["all"]
    assert sum(run.args[0] == "server" for run in runs) == 1


def test_the_gpu_agents_get_the_hosts_gpus_and_a_port_each(monkeypatch) -> None:
    """GPU k's worker serves on --listen's port + k: the pod declares a port per GPU it asks
    for; compose hands the service every GPU of the host, in a profile of its own (a host
    without the NVIDIA runtime starts the rest)."""
    service = _compose()["services"]["agent-torch-gpu"]
    assert service["profiles"] == ["gpu"]
    [devices] = service["deploy"]["resources"]["reservations"]["devices"]
    assert devices["driver"] == "nvidia" and devices["count"] == "all"
    [gpu] = [
        d for d in _k8s_documents() if d.get("metadata", {}).get("name") == "mlms-agent-torch-gpu"
    ]
    [container] = gpu["spec"]["template"]["spec"]["containers"]
    count = int(container["resources"]["limits"]["nvidia.com/gpu"])
    [run] = [r for r in k8s_invocations() if r.where == "k8s mlms-agent-torch-gpu"]
    first = int(_parse(run, monkeypatch)["listen"].rsplit(":", 1)[1])
    ports = sorted(port["containerPort"] for port in container["ports"])
    assert ports == list(range(first, first + count))


def test_compose_services_and_image() -> None:
    services = _compose()["services"]
    assert {"etcd", "minio", "jaeger", "server"} <= set(services)
    assert services["jaeger"]["image"].startswith("jaegertracing/jaeger:2.")  # Jaeger v2
    for name, service in services.items():
        if str(service.get("image", "")).startswith("mlms"):
            needs = {"minio"} if service["command"][0] == "assets" else {"etcd", "minio"}
            assert needs <= set(service["depends_on"]), name
            assert "build" in service, f"{name}: compose would pull an 'mlms' image, not build it"
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["mlms"]' in dockerfile  # so compose commands are mlms arguments


@pytest.mark.parametrize("source", ["compose", "k8s"])
def test_the_mxnet_assets_are_built_from_an_image_with_torch(source: str) -> None:
    """Every asset is exported from torch weights and the MXNet image has no torch: the
    deployment builds the MXNet assets into the shared store before that agent starts."""
    runs = compose_invocations() if source == "compose" else k8s_invocations()
    builds = [run for run in runs if run.args[0] == "assets"]
    assert [run.args[1:2] for run in builds] == [["--framework=mxnet"]]
    if source == "compose":
        services = _compose()["services"]
        assert services["assets-mxnet"]["image"] == "mlms:latest"  # EXTRAS includes torch
        needs = services["agent-mxnet"]["depends_on"]
        assert needs["assets-mxnet"] == {"condition": "service_completed_successfully"}
    else:
        [mxnet] = [
            d for d in _k8s_documents() if d.get("metadata", {}).get("name") == "mlms-agent-mxnet"
        ]
        [init] = mxnet["spec"]["template"]["spec"]["initContainers"]
        assert init["image"] == "mlms:latest"


def test_kustomization_lists_every_manifest() -> None:
    listed = set(yaml.safe_load((DEPLOY / "k8s" / "kustomization.yaml").read_text())["resources"])
    present = {p.name for p in (DEPLOY / "k8s").glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present


SERVING = [run for run in INVOCATIONS if run.args[0] in ("server", "agent")]


@pytest.mark.parametrize("run", SERVING, ids=[i.where for i in SERVING])
def test_every_port_serves_tls_from_mounted_secrets(run: Invocation, monkeypatch) -> None:
    """Servers and agents listen on every interface, so they serve TLS with certificates
    mounted from secrets (compose secrets under /run/secrets, a Kubernetes Secret volume),
    and the server wants tokens."""
    params = _parse(run, monkeypatch)
    assert not params["insecure"], run.where
    for flag in ("tls_ca", "tls_cert", "tls_key"):
        assert str(params[flag]).startswith(("/run/secrets/", "/etc/mlms/tls/")), (run.where, flag)
    if run.args[0] == "server":
        assert params["auth"] is not False, run.where
    if run.where.startswith("k8s") and run.args[0] == "server":
        assert params["agent_tls_name"] == "mlms-agent"  # pods are dialled by IP


def test_the_certificates_are_secrets_outside_the_repository() -> None:
    compose = _compose()
    files = {s["file"] for s in compose["secrets"].values()}
    assert files and all(f.startswith("./pki/") for f in files)
    kustomization = yaml.safe_load((DEPLOY / "k8s" / "kustomization.yaml").read_text())
    generated = {f for g in kustomization["secretGenerator"] for f in g["files"]}
    assert generated and all(f.startswith("pki/") for f in generated)
    ignored = (DEPLOY.parent / ".gitignore").read_text().splitlines()
    assert {"deploy/pki/", "deploy/k8s/pki/"} <= set(ignored)
