"""The Helm chart (helm/prefixgate/) linted and rendered by a real helm, and the rendered manifests checked.

helm is the pinned binary scripts/setup.sh installs (scripts/fetch_helm.sh: tools/helm/bin/helm; PREFIXGATE_HELM
overrides). Without it these tests fail, they do not skip. Each render is `helm template` with the chart's defaults or
with helm/prefixgate/examples/vllm-values.yaml (Kubernetes discovery, KV events, Redis, a ServiceMonitor; also without
its Redis), read with
yaml.safe_load_all; the configuration file of the rendered ConfigMap is checked by the real gateway's `--check`.
"""
import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from test_deploy_files import CHART, REPO, clean_env, require_gateway

HELM = Path(os.environ.get("PREFIXGATE_HELM", REPO / "tools" / "helm" / "bin" / "helm"))
VLLM_VALUES = CHART / "examples" / "vllm-values.yaml"
RELEASE, NAMESPACE = "gw", "llm"
CONFIG_DIR = "/etc/prefixgate"
ENDPOINTSLICE_RULE = {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                      "verbs": ["get", "list", "watch"]}
HELM_TIMEOUT_S = 60


def helm_bin():
    if not (HELM.is_file() and os.access(HELM, os.X_OK)):
        pytest.fail(f"helm not found at {HELM}: run scripts/setup.sh (or scripts/fetch_helm.sh), or set PREFIXGATE_HELM")
    return str(HELM)


def helm(*args):
    return subprocess.run([helm_bin(), *args], capture_output=True, text=True, timeout=HELM_TIMEOUT_S)


def values_args(variant):
    """default: the chart's values; vllm: the example (with the chart's Redis for state sync); vllm-no-redis: the
    example without it."""
    return {"default": [], "vllm": ["-f", str(VLLM_VALUES)],
            "vllm-no-redis": ["-f", str(VLLM_VALUES), "--set", "redis.deploy=false"]}[variant]


def render(variant="default", *sets, json_sets=()):
    """`helm template` of the chart as a list of manifests (dicts), with --set and --set-json values."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, *values_args(variant)]
    for s in sets:
        args += ["--set", s]
    for s in json_sets:
        args += ["--set-json", s]
    result = helm(*args)
    assert result.returncode == 0, f"helm template failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def render_error(*sets):
    """The error of a `helm template` with the defaults and these --set values, which must fail."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for s in sets:
        args += ["--set", s]
    result = helm(*args)
    assert result.returncode != 0, f"helm template accepted {sets}"
    return result.stderr


def of_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def gateway_deployment(docs):
    found = [d for d in of_kind(docs, "Deployment") if d["metadata"]["name"] == f"{RELEASE}-prefixgate"]
    assert len(found) == 1, [d["metadata"]["name"] for d in of_kind(docs, "Deployment")]
    return found[0]


def container(deployment):
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def rendered_config(docs):
    """The ConfigMap's data and the parsed prefixgate.yaml in it."""
    (configmap,) = of_kind(docs, "ConfigMap")
    return configmap["data"], yaml.safe_load(configmap["data"]["prefixgate.yaml"])


def port_of(hostport):
    return int(str(hostport).rsplit(":", 1)[1])


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def check_rendered(docs, folder, config=None):
    """Lays out the rendered ConfigMap in a folder (as the pod's mount does), with the mounted admin token, and runs
    `prefixgate --check` on it under the container's environment. `config` replaces prefixgate.yaml."""
    data, rendered = rendered_config(docs)
    config = config if config is not None else rendered
    folder = Path(folder)
    for name, text in data.items():
        (folder / name).write_text(text, encoding="utf-8")
    token_file = config.get("auth", {}).get("admin_token_file")
    if token_file:
        mounts = {m["mountPath"] for m in container(gateway_deployment(docs))["volumeMounts"]}
        assert str(Path(token_file).parent) in mounts, f"{token_file} is not in a mounted volume"
        (folder / "token").write_text("a-token\n")
        config["auth"]["admin_token_file"] = str(folder / "token")
    (folder / "prefixgate.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    env = {e["name"]: e["value"] for e in container(gateway_deployment(docs)).get("env", [])}
    return subprocess.run([require_gateway(), "--config", str(folder / "prefixgate.yaml"), "--check"],
                          env=clean_env(env), capture_output=True, text=True, timeout=60)


# ---------------------------------------------------------------------------------------------------------------
# lint and render
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", ["default", "vllm", "vllm-no-redis"])
def test_helm_lint(variant):
    """`helm lint --strict` passes with the default values and with the vLLM example (with and without Redis)."""
    result = helm("lint", "--strict", str(CHART), *values_args(variant))
    assert result.returncode == 0, f"helm lint failed:\n{result.stdout}{result.stderr}"
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


@pytest.mark.parametrize("variant", ["default", "vllm", "vllm-no-redis"])
def test_rendered_manifests_are_well_formed(variant):
    """Every rendered object has apiVersion, kind and a DNS-label name, and the expected objects are there."""
    docs = render(variant)
    for doc in docs:
        assert doc.get("apiVersion") and doc.get("kind"), doc
        name = doc["metadata"]["name"]
        assert len(name) <= 63 and name == name.lower(), name
    kinds = sorted(d["kind"] for d in docs)
    expected = {"default": ["ConfigMap", "Deployment", "Service", "ServiceAccount"],
                "vllm": ["ConfigMap", "Deployment", "Deployment", "Role", "RoleBinding", "Service", "Service",
                         "ServiceAccount", "ServiceMonitor"],
                "vllm-no-redis": ["ConfigMap", "Deployment", "Role", "RoleBinding", "Service", "ServiceAccount",
                                  "ServiceMonitor"]}[variant]
    assert kinds == expected


# ---------------------------------------------------------------------------------------------------------------
# the gateway's Deployment
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", ["default", "vllm"])
def test_probes_reach_healthz_and_readyz_on_the_health_listener(variant):
    """Liveness hits /healthz and readiness /readyz on the container port `health`, which is the port of the
    rendered config's health_listen bound on all addresses; the admin port is exposed only with metrics."""
    docs = render(variant)
    _, config = rendered_config(docs)
    c = container(gateway_deployment(docs))
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert config["health_listen"].rsplit(":", 1)[0] in ("0.0.0.0", "[::]")
    assert ports["health"] == port_of(config["health_listen"])
    assert ports["http"] == port_of(config["listen"])
    metrics = variant == "vllm"
    assert ("admin" in ports) == metrics
    assert config["admin_listen"].startswith("0.0.0.0:" if metrics else "127.0.0.1:")
    (service,) = [s for s in of_kind(docs, "Service") if s["metadata"]["name"] == f"{RELEASE}-prefixgate"]
    assert {p["name"]: p["targetPort"] for p in service["spec"]["ports"]} == (
        {"http": "http", "metrics": "admin"} if metrics else {"http": "http"})


@pytest.mark.parametrize("variant", ["default", "vllm"])
def test_config_map_is_mounted_and_rolls_the_pods(variant):
    """The ConfigMap is mounted as a folder at /etc/prefixgate, the container starts with its prefixgate.yaml, and the
    checksum/config annotation is the hash of exactly that file, so a configuration change rolls the pods."""
    docs = render(variant)
    (configmap,) = of_kind(docs, "ConfigMap")
    deployment = gateway_deployment(docs)
    c = container(deployment)
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    (mount,) = [m for m in c["volumeMounts"] if m["mountPath"] == CONFIG_DIR]
    assert "subPath" not in mount, "subPath mounts never receive ConfigMap updates"
    assert volumes[mount["name"]]["configMap"]["name"] == configmap["metadata"]["name"]
    assert c["args"] == ["--config", f"{CONFIG_DIR}/prefixgate.yaml"]
    text = configmap["data"]["prefixgate.yaml"].rstrip("\n")
    checksum = deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    assert checksum == hashlib.sha256(text.encode()).hexdigest()
    changed = gateway_deployment(render(variant, "config.threads=7"))
    assert changed["spec"]["template"]["metadata"]["annotations"]["checksum/config"] != checksum


@pytest.mark.parametrize("variant", ["default", "vllm"])
def test_containers_run_locked_down_with_resources(variant):
    """Every container of every Deployment (the gateway and the chart's Redis) runs as non-root on a read-only root
    file system, without privilege escalation and with ALL capabilities dropped, under requests and a memory limit."""
    docs = render(variant)
    deployments = of_kind(docs, "Deployment")
    assert len(deployments) == (2 if variant == "vllm" else 1)
    for deployment in deployments:
        pod = deployment["spec"]["template"]["spec"]
        for c in pod["containers"]:
            where = f"{deployment['metadata']['name']}/{c['name']}"
            security = c["securityContext"]
            assert pod["securityContext"].get("runAsNonRoot") or security.get("runAsNonRoot"), where
            assert security["readOnlyRootFilesystem"] is True, where
            assert security["allowPrivilegeEscalation"] is False, where
            assert security["capabilities"]["drop"] == ["ALL"], where
            assert "add" not in security["capabilities"], where
            assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"], where
            assert c["resources"]["limits"]["memory"], where


@pytest.mark.parametrize("variant", ["default", "vllm"])
def test_termination_grace_covers_prestop_and_drain(variant):
    """The grace period outlasts the preStop sleep plus the rendered config's shutdown_grace_ms (computed from both
    when unset), and the chart refuses an explicit one that does not."""
    docs = render(variant)
    _, config = rendered_config(docs)
    pod = gateway_deployment(docs)["spec"]["template"]["spec"]
    command = pod["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    needed_s = int(command[1]) + config["shutdown_grace_ms"] / 1000
    assert config["shutdown_grace_ms"] == (120000 if variant == "vllm" else 30000)
    assert pod["terminationGracePeriodSeconds"] > needed_s
    assert pod["terminationGracePeriodSeconds"] == needed_s + 5  # terminationGraceMarginSeconds
    if variant == "default":
        error = render_error("terminationGracePeriodSeconds=35")
        assert "terminationGracePeriodSeconds (35) must exceed" in error


def test_env_overrides_reach_the_container():
    """`env:` becomes the container's environment, names and string values as given, and a --set adds to it."""
    docs = render("vllm", "env.AIBRIX_PREFIX_CACHE_BLOCK_NUMBER=5000")
    env = container(gateway_deployment(docs))["env"]
    example = yaml.safe_load(VLLM_VALUES.read_text(encoding="utf-8"))["env"]
    assert {e["name"]: e["value"] for e in env} == dict(example, AIBRIX_PREFIX_CACHE_BLOCK_NUMBER="5000")
    assert all(isinstance(e["value"], str) for e in env)


# ---------------------------------------------------------------------------------------------------------------
# discovery and RBAC
# ---------------------------------------------------------------------------------------------------------------
def assert_binds_service_account(binding, role, docs, namespace):
    service_account = gateway_deployment(docs)["spec"]["template"]["spec"]["serviceAccountName"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": role["kind"],
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}]
    assert [s["metadata"]["name"] for s in of_kind(docs, "ServiceAccount")] == [service_account]


def test_kubernetes_discovery_gets_endpointslice_rbac_per_namespace():
    """With config.discovery.kubernetes the service account may get/list/watch EndpointSlices, nothing else, through
    a Role and RoleBinding in each watched namespace (the release's when none is given), and its token is mounted;
    the rendered discovery has no file keys left and no pods file."""
    docs = render("vllm")
    data, config = rendered_config(docs)
    assert set(config["discovery"]) == {"kubernetes"} and "pods.yaml" not in data
    assert config["discovery"]["kubernetes"]["namespaces"] == [NAMESPACE]
    (role,), (binding,) = of_kind(docs, "Role"), of_kind(docs, "RoleBinding")
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [ENDPOINTSLICE_RULE]
    assert_binds_service_account(binding, role, docs, NAMESPACE)
    assert not of_kind(docs, "ClusterRole") and not of_kind(docs, "ClusterRoleBinding")
    assert gateway_deployment(docs)["spec"]["template"]["spec"]["automountServiceAccountToken"] is True
    assert of_kind(docs, "ServiceAccount")[0]["automountServiceAccountToken"] is True

    docs = render("vllm", "config.discovery.kubernetes.namespaces={team-a,team-b}")
    assert sorted(r["metadata"]["namespace"] for r in of_kind(docs, "Role")) == ["team-a", "team-b"]
    for binding in of_kind(docs, "RoleBinding"):
        assert binding["subjects"][0]["namespace"] == NAMESPACE  # the gateway's own service account
    docs = render("vllm", "config.discovery.kubernetes.namespaces=null")
    assert rendered_config(docs)[1]["discovery"]["kubernetes"]["namespaces"] == [NAMESPACE]
    assert [r["metadata"]["namespace"] for r in of_kind(docs, "Role")] == [NAMESPACE]
    docs = render("default", json_sets=["config.discovery.kubernetes={}"])  # every key at its default
    assert rendered_config(docs)[1]["discovery"] == {"kubernetes": {"namespaces": [NAMESPACE]}}
    assert [r["metadata"]["namespace"] for r in of_kind(docs, "Role")] == [NAMESPACE]


def test_kubernetes_discovery_rbac_cluster_wide_when_configured():
    """rbac.clusterWide gives one ClusterRole (EndpointSlices get/list/watch only) and its binding instead of Roles."""
    docs = render("vllm", "rbac.clusterWide=true")
    (role,), (binding,) = of_kind(docs, "ClusterRole"), of_kind(docs, "ClusterRoleBinding")
    assert role["rules"] == [ENDPOINTSLICE_RULE]
    assert "namespace" not in role["metadata"]
    assert_binds_service_account(binding, role, docs, NAMESPACE)
    assert not of_kind(docs, "Role") and not of_kind(docs, "RoleBinding")
    assert not of_kind(render("vllm", "rbac.create=false"), "Role")


def test_file_discovery_gets_no_api_access():
    """With the default file discovery there is no RBAC and no service account token in the pods."""
    docs = render()
    _, config = rendered_config(docs)
    assert config["discovery"]["file"] == "pods.yaml"
    for kind in ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"):
        assert not of_kind(docs, kind), kind
    assert gateway_deployment(docs)["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    assert of_kind(docs, "ServiceAccount")[0]["automountServiceAccountToken"] is False


def test_default_render_passes_gateway_check(tmp_path):
    """The default render's ConfigMap (prefixgate.yaml and pods.yaml), under the container's env, passes the real
    gateway's `--check`; the same with a pod listed, and the check is not vacuous (an unknown key fails)."""
    result = check_rendered(render(), tmp_path)
    assert result.returncode == 0, f"prefixgate --check failed:\n{result.stdout}{result.stderr}"
    pod = "pods[0].name=engine-0,pods[0].address=10.0.0.11:8000,pods[0].models={m}"
    result = check_rendered(render("default", pod), tmp_path)
    assert result.returncode == 0, f"prefixgate --check failed:\n{result.stdout}{result.stderr}"
    result = check_rendered(render("default", "config.no_such_key=1"), tmp_path)
    assert result.returncode != 0 and "no_such_key" in result.stdout + result.stderr


def test_vllm_render_passes_gateway_check(tmp_path):
    """The vLLM example's rendered configuration (Kubernetes discovery, state sync through the chart's Redis) passes
    `--check`, and so do the same without its Redis and its file-discovery variant (the same file with
    discovery.file)."""
    result = check_rendered(render("vllm"), tmp_path)
    assert result.returncode == 0, f"prefixgate --check failed:\n{result.stdout}{result.stderr}"
    result = check_rendered(render("vllm-no-redis"), tmp_path)
    assert result.returncode == 0, f"prefixgate --check failed:\n{result.stdout}{result.stderr}"

    docs = render("vllm-no-redis")

    _, config = rendered_config(docs)
    kubernetes = config["discovery"]["kubernetes"]
    config["discovery"] = {"file": "pods.yaml"}
    pods = [{"name": f"vllm-{i}", "address": f"10.0.0.{10 + i}:8000", "models": ["llama-3-8b"],
             "kv_events": f"tcp://10.0.0.{10 + i}:{kubernetes['kv_events_port']}",
             "kv_replay": f"tcp://10.0.0.{10 + i}:{kubernetes['kv_replay_port']}"} for i in range(2)]
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump({"pods": pods}), encoding="utf-8")
    data, _ = rendered_config(docs)
    assert "pods.yaml" not in data  # so check_rendered keeps the file written above
    result = check_rendered(docs, tmp_path, config)
    assert result.returncode == 0, f"prefixgate --check failed:\n{result.stdout}{result.stderr}"


# ---------------------------------------------------------------------------------------------------------------
# Redis, ServiceMonitor, refusals
# ---------------------------------------------------------------------------------------------------------------
def test_redis_is_optional_and_wired_to_state_sync():
    """redis.deploy adds a Redis Deployment and Service that the gateway's state_sync.redis names and that select only
    the Redis pod; without it there is none, and an external URL in config.state_sync is kept as given."""
    assert rendered_config(render("vllm-no-redis"))[1]["state_sync"]["enabled"] is False
    docs = render("vllm")
    _, config = rendered_config(docs)
    (redis,) = [d for d in of_kind(docs, "Deployment") if d["metadata"]["name"].endswith("-redis")]
    (redis_service,) = [s for s in of_kind(docs, "Service") if s["metadata"]["name"].endswith("-redis")]
    (gateway_service,) = [s for s in of_kind(docs, "Service") if s is not redis_service]
    port = redis_service["spec"]["ports"][0]["port"]
    assert config["state_sync"] == {"enabled": True, "redis": f"redis://{redis_service['metadata']['name']}:{port}"}
    redis_labels = redis["spec"]["template"]["metadata"]["labels"]
    gateway_labels = gateway_deployment(docs)["spec"]["template"]["metadata"]["labels"]
    assert selects(redis_service["spec"]["selector"], redis_labels)
    assert not selects(redis_service["spec"]["selector"], gateway_labels)
    assert not selects(gateway_service["spec"]["selector"], redis_labels), "the API Service would reach Redis"
    assert not selects(gateway_deployment(docs)["spec"]["selector"]["matchLabels"], redis_labels)
    assert redis["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] == port

    docs = render("default", "config.state_sync.enabled=true", "config.state_sync.redis=redis://10.0.0.5:6379")
    assert rendered_config(docs)[1]["state_sync"] == {"enabled": True, "redis": "redis://10.0.0.5:6379"}
    assert len(of_kind(docs, "Deployment")) == 1 and len(of_kind(docs, "Service")) == 1


def test_service_monitor_is_optional_and_scrapes_with_the_token():
    """The vLLM example's ServiceMonitor selects the gateway's Service, scrapes /metrics on its `metrics` port and
    sends the admin token Secret the pods mount; the defaults render none."""
    assert not of_kind(render(), "ServiceMonitor")
    docs = render("vllm")
    (monitor,) = of_kind(docs, "ServiceMonitor")
    (service,) = [s for s in of_kind(docs, "Service") if s["metadata"]["name"] == f"{RELEASE}-prefixgate"]
    assert selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
    assert "metrics" in {p["name"] for p in service["spec"]["ports"]}
    volumes = {v["name"]: v for v in gateway_deployment(docs)["spec"]["template"]["spec"]["volumes"]}
    secret = volumes["admin-token"]["secret"]["secretName"]
    assert endpoint["authorization"] == {"type": "Bearer", "credentials": {"name": secret, "key": "token"}}
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_dashboard_lints_and_renders_only_when_enabled():
    """`dashboard.enabled` renders one more ConfigMap holding the dashboard file's JSON, labelled for Grafana's sidecar
    (the label and the namespace configurable) and passing `helm lint --strict`; the defaults render none."""
    assert [c["metadata"]["name"] for c in of_kind(render(), "ConfigMap")] == [f"{RELEASE}-prefixgate"]
    result = helm("lint", "--strict", str(CHART), "--set", "dashboard.enabled=true")
    assert result.returncode == 0, f"helm lint failed:\n{result.stdout}{result.stderr}"
    expected = json.loads((CHART / "dashboards" / "prefixgate.json").read_text(encoding="utf-8"))
    for variant in ("default", "vllm"):
        docs = render(variant, "dashboard.enabled=true")
        (dashboard,) = [c for c in of_kind(docs, "ConfigMap")
                        if c["metadata"]["name"] == f"{RELEASE}-prefixgate-dashboard"]
        assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert dashboard["metadata"]["namespace"] == NAMESPACE
        assert json.loads(dashboard["data"]["prefixgate.json"]) == expected
    docs = render("default", "dashboard.enabled=true", "dashboard.namespace=monitoring",
                  json_sets=['dashboard.labels={"grafana_dashboard": null, "dashboards": "llm"}',
                             'dashboard.annotations={"grafana_folder": "LLM"}'])
    (dashboard,) = [c for c in of_kind(docs, "ConfigMap") if c["metadata"]["name"].endswith("-dashboard")]
    assert dashboard["metadata"]["namespace"] == "monitoring"
    assert dashboard["metadata"]["labels"]["dashboards"] == "llm"
    assert "grafana_dashboard" not in dashboard["metadata"]["labels"]
    assert dashboard["metadata"]["annotations"] == {"grafana_folder": "LLM"}


@pytest.mark.parametrize("sets, message", [
    (["config.discovery.kubernetes.port_name=http", "pods[0].name=e0"], "pods: lists engines for file discovery"),
    (["metrics.enabled=true"], "metrics.enabled needs metrics.adminTokenSecret.name"),
    (["config.health_listen=127.0.0.1:8081"], "config.health_listen must be set and not loopback"),
    (["config.admin_listen=0.0.0.0:9090"], "config.admin_listen is not loopback but no admin token is set"),
], ids=["pods-with-kubernetes", "metrics-without-token", "loopback-health", "open-admin-without-token"])
def test_chart_refuses_unsafe_values(sets, message):
    """Values that would deploy a broken or exposed gateway stop `helm template` with a message naming the value."""
    assert message in render_error(*sets)


def test_chart_readme_documents_every_value():
    """Every value outside `config:` (documented in docs/configuration.md) is named in the chart's README, by its
    path or by a parent's path."""
    readme = (CHART / "README.md").read_text(encoding="utf-8")
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))

    def leaves(node, prefix):
        if isinstance(node, dict) and node:
            for key, child in node.items():
                yield from leaves(child, f"{prefix}.{key}" if prefix else key)
        else:
            yield prefix

    undocumented = []
    for path in leaves({k: v for k, v in values.items() if k != "config"}, ""):
        parts = path.split(".")
        if not any(f"| `{'.'.join(parts[:n])}` |" in readme for n in range(1, len(parts) + 1)):
            undocumented.append(path)
    assert not undocumented, f"values not in {CHART / 'README.md'}: {undocumented}"
