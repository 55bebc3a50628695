"""Static checks of the deployment files: the container image (docker/) and the Helm chart's values (helm/prefixgate/).

No Docker engine runs on the development machine, so the image is checked by reading docker/Dockerfile: stages,
paths, that it builds only through scripts/setup.sh and scripts/build.sh, that its runtime packages cover what the
locally built binaries link, that its HEALTHCHECK script answers against a real gateway, and that the configuration
it ships passes the real gateway's `--check`. The chart is rendered by a real helm in test_helm_chart.py; here its
values are cross-checked against the gateway (env names, `--check`). Tests that need the gateway binary
(PREFIXGATE_BIN, default <repo>/build/prefixgate) are skipped with a reason when it has not been built.
"""
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "prefixgate"
TEMPLATES = CHART / "templates"
DOCKERFILE = REPO / "docker" / "Dockerfile"
GATEWAY_BIN = Path(os.environ.get("PREFIXGATE_BIN", REPO / "build" / "prefixgate"))
ENGINE_SIM_BIN = REPO / "build" / "loadtest" / "prefixgate-engine-sim"

VOCABULARY_SOURCE = "tools/tiktoken/node_modules/tiktoken/encoders/cl100k_base.json"
VOCABULARY_DEST = "/usr/share/prefixgate/cl100k_base.json"
CONFIG_DIR = "/etc/prefixgate"
# Settings the environment may carry in from the caller's shell; removed so that only the chart's `env:` applies.
ENV_PREFIXES = ("AIBRIX_", "ROUTING_ALGORITHM", "REDIS_")


# ---------------------------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------------------------
def load_yaml(path):
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


@pytest.fixture(scope="module")
def chart():
    return load_yaml(CHART / "Chart.yaml")


@pytest.fixture(scope="module")
def values():
    return load_yaml(CHART / "values.yaml")


def templates():
    files = sorted(p for p in TEMPLATES.iterdir() if p.is_file())
    assert files, f"no templates in {TEMPLATES}"
    return files


def require_gateway():
    if not (GATEWAY_BIN.is_file() and os.access(GATEWAY_BIN, os.X_OK)):
        pytest.skip(f"gateway binary {GATEWAY_BIN} not built (run scripts/build.sh or set PREFIXGATE_BIN)")
    return str(GATEWAY_BIN)


def clean_env(extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
    env.update({str(k): str(v) for k, v in (extra or {}).items()})
    return env


def gateway_check(config, pods, folder, env=None):
    """Writes config and pods the way the chart's ConfigMap lays them out and runs `prefixgate --check` on them."""
    config = yaml.safe_load(yaml.safe_dump(config))  # a copy
    pods_name = Path(config.get("discovery", {}).get("file") or "pods.yaml").name
    config.setdefault("discovery", {})["file"] = pods_name  # relative: resolved against the config's folder
    config_path = Path(folder) / "prefixgate.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    (Path(folder) / pods_name).write_text(yaml.safe_dump({"pods": pods or []}, sort_keys=False), encoding="utf-8")
    return subprocess.run([require_gateway(), "--config", str(config_path), "--check"], env=clean_env(env),
                          capture_output=True, text=True, timeout=60)


def get_path(mapping, dotted):
    node = mapping
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None, False
        node = node[part]
    return node, True


def dockerfile_stages():
    """The Dockerfile as stages: [{"image", "name", "instructions": [(KEYWORD, args)]}], continuations joined."""
    lines, pending = [], ""
    for raw in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue  # comments (also inside a continued instruction, as Docker does) and blank lines
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    assert not pending, "Dockerfile ends inside a continued line"
    stages = []
    for line in lines:
        keyword, _, args = line.partition(" ")
        keyword, args = keyword.upper(), args.strip()
        if keyword == "FROM":
            parts = args.split()
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            stages.append({"image": parts[0], "name": name, "instructions": []})
        else:
            assert stages, f"instruction before FROM: {line}"
            stages[-1]["instructions"].append((keyword, args))
    return stages


def copies(stage):
    """(from, sources, destination) of each COPY in a stage."""
    out = []
    for keyword, args in stage["instructions"]:
        if keyword != "COPY":
            continue
        words = shlex.split(args)
        source_stage = None
        while words and words[0].startswith("--"):
            flag = words.pop(0)
            if flag.startswith("--from="):
                source_stage = flag.split("=", 1)[1]
        assert len(words) >= 2, f"COPY needs a source and a destination: {args}"
        out.append((source_stage, words[:-1], words[-1]))
    return out


def runtime_packages(stage):
    """The packages the stage's `apt-get install` commands name."""
    packages = set()
    for keyword, args in stage["instructions"]:
        if keyword != "RUN":
            continue
        for command in re.split(r"&&|;|\|\|", args):
            words = command.split()
            if "apt-get" in words and "install" in words:
                packages.update(w for w in words[words.index("install") + 1:] if not w.startswith("-"))
    return packages


# ---------------------------------------------------------------------------------------------------------------
# Helm chart: metadata and values
# ---------------------------------------------------------------------------------------------------------------
def test_chart_yaml_has_required_fields(chart):
    """Chart.yaml parses and declares a Helm 3 (apiVersion v2) application chart named prefixgate, 0.2.0 (app 0.1.0)."""
    assert chart["apiVersion"] == "v2"
    assert chart["name"] == "prefixgate" == CHART.name
    assert chart["version"] == "0.2.0"
    assert chart["appVersion"] == "0.1.0" and isinstance(chart["appVersion"], str)
    assert chart.get("type", "application") == "application"
    assert chart.get("description")


def test_values_yaml_has_required_fields(values):
    """values.yaml parses and has every key the templates are built around, with the documented defaults."""
    assert set(values["image"]) >= {"repository", "tag", "pullPolicy"}
    assert values["image"]["repository"]
    assert values["replicaCount"] == 2
    assert isinstance(values["resources"], dict) and values["resources"].get("requests")
    assert isinstance(values["config"], dict) and values["config"]
    assert isinstance(values["pods"], list)
    for pod in values["pods"]:
        assert set(pod) >= {"name", "address", "models"}, pod
    assert isinstance(values["env"], dict)
    assert values["env"].get("AIBRIX_PREFIX_CACHE_BLOCK_SIZE") == "128"
    assert values["env"].get("AIBRIX_PREFIX_CACHE_STANDARD_DEVIATION_FACTOR") == "2"
    for name, value in values["env"].items():
        assert isinstance(value, str), f"env.{name} must be a string (Kubernetes env values are strings)"
    assert values["service"]["type"] == "ClusterIP"
    assert values["service"]["port"] == 8080
    assert values["service"]["adminPort"] == 9090
    assert values["config"]["admin_listen"] == "127.0.0.1:9090"
    assert values["config"]["health_listen"] == "0.0.0.0:8081"
    assert values["metrics"]["enabled"] is False
    assert values["metrics"]["adminTokenSecret"] == {"name": "", "key": "token"}
    assert isinstance(values["serviceAccount"]["create"], bool)


def test_gateway_check_rejects_a_broken_chart_config(values, tmp_path):
    """`--check` of the chart's `config:` is not vacuous: with an unknown key, or under a bad `env:` value, it fails
    naming them (test_helm_chart.py checks the rendered configuration the same way)."""
    broken = dict(values["config"], no_such_key=1)
    result = gateway_check(broken, values["pods"], tmp_path, env=values["env"])
    assert result.returncode != 0 and "no_such_key" in result.stdout + result.stderr
    bad_env = dict(values["env"], AIBRIX_PREFIX_CACHE_BLOCK_SIZE="not-a-number")
    result = gateway_check(values["config"], values["pods"], tmp_path, env=bad_env)
    assert result.returncode != 0 and "AIBRIX_PREFIX_CACHE_BLOCK_SIZE" in result.stdout + result.stderr


def test_env_names_are_honoured_and_agree_with_config(values):
    """Every AIBrix-style variable in `env:` is one the gateway reads (a misspelt one would be silently ignored),
    and its default equals the `config:` value it overrides (else editing `config:` would seem to do nothing)."""
    help_text = subprocess.run([require_gateway(), "--help"], capture_output=True, text=True, timeout=30).stdout
    known = {}
    for line in help_text.split("Environment variables", 1)[-1].splitlines():
        m = re.match(r"\s*([A-Z][A-Z0-9_]+)\s+([a-z_][a-z0-9_.]*)\s*$", line)
        if m:
            known[m.group(1)] = m.group(2)
    assert known, f"no environment variables found in `prefixgate --help`:\n{help_text}"
    for name, value in values["env"].items():
        if not name.startswith(ENV_PREFIXES):
            continue
        assert name in known, f"env.{name} is not read by the gateway (it reads: {', '.join(sorted(known))})"
        if name.startswith("REDIS_"):
            continue  # these two make up state_sync.redis together
        configured, present = get_path(values["config"], known[name])
        if not present:
            continue
        if isinstance(configured, bool):
            assert value.lower() in (("true", "1") if configured else ("false", "0")), (name, value, configured)
        elif isinstance(configured, (int, float)):
            assert float(value) == float(configured), f"env.{name}={value} but config.{known[name]}={configured}"
        else:
            assert value == str(configured), f"env.{name}={value} but config.{known[name]}={configured}"


# ---------------------------------------------------------------------------------------------------------------
# Helm chart: templates (test_helm_chart.py lints and renders them with a real helm)
# ---------------------------------------------------------------------------------------------------------------
def test_template_values_references_exist(values):
    """Every .Values.a.b path the templates read exists in values.yaml (a typo would render as empty)."""
    missing = []
    for path in templates():
        for ref in re.findall(r"\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)", path.read_text(encoding="utf-8")):
            _, present = get_path(values, ref.lstrip("."))
            if not present:
                missing.append(f"{path.name}: .Values{ref}")
    assert not missing, "not in values.yaml: " + ", ".join(sorted(set(missing)))


# ---------------------------------------------------------------------------------------------------------------
# Dockerfile
# ---------------------------------------------------------------------------------------------------------------
def test_dockerfile_stages():
    """The Dockerfile builds on debian:12 and ships on debian:12-slim (a multi-stage build)."""
    stages = dockerfile_stages()
    assert len(stages) >= 2
    assert stages[0]["image"] == "debian:12" and stages[0]["name"]
    assert stages[-1]["image"] == "debian:12-slim"


def test_dockerfile_builds_with_the_repository_scripts():
    """The build stage installs with scripts/setup.sh and builds both binaries with `scripts/build.sh release`, and
    never runs CMake, Ninja or a compiler itself, so the image cannot drift from the developers' and CI's build; the
    options it adds through PREFIXGATE_CMAKE_ARGS are options of CMakeLists.txt, and build.sh's release flavour
    builds in build/, where the runtime stage takes the binaries from."""
    build = dockerfile_stages()[0]
    runs = [args for keyword, args in build["instructions"] if keyword == "RUN"]
    setup = next(i for i, r in enumerate(runs) if "scripts/setup.sh" in r)
    build_run = next(i for i, r in enumerate(runs) if "scripts/build.sh" in r)
    assert setup < build_run
    assert re.search(r"scripts/build\.sh release prefixgate prefixgate-engine-sim\b", runs[build_run])
    for run in runs:
        for command in re.split(r"&&|;|\|\|", run):
            words = shlex.split(command)
            while words and re.match(r"--|[A-Za-z_][A-Za-z0-9_]*=", words[0]):
                words.pop(0)  # RUN's --mount flags, VAR=value prefixes
            assert not words or words[0] not in ("cmake", "ninja", "make", "c++", "g++", "clang++"), (
                f"the build stage runs {words[0]} outside scripts/build.sh: {command.strip()}")
    cmake_args = re.search(r'PREFIXGATE_CMAKE_ARGS="([^"]*)"', runs[build_run])
    assert cmake_args, "the image's CMake options must go through PREFIXGATE_CMAKE_ARGS"
    cmakelists = (REPO / "CMakeLists.txt").read_text(encoding="utf-8")
    for option in re.findall(r"-D([A-Z_]+)=", cmake_args.group(1)):
        assert re.search(rf"\b{option}\b", cmakelists), f"-D{option} is not an option of CMakeLists.txt"
    build_sh = (REPO / "scripts" / "build.sh").read_text(encoding="utf-8")
    assert re.search(r"^\s*release\) dir=build;", build_sh, re.M), "scripts/build.sh release no longer builds in build/"
    assert '"${PREFIXGATE_CMAKE_ARGS:-}"' in build_sh and '"${extra[@]}"' in build_sh
    assert "PREFIXGATE_SETUP_NO_HELM" in (REPO / "scripts" / "setup.sh").read_text(encoding="utf-8")
    assert re.search(r"add_executable\(prefixgate\s", cmakelists)
    assert "add_executable(prefixgate-engine-sim" in (REPO / "loadtest" / "CMakeLists.txt").read_text(encoding="utf-8")


def test_dockerfile_copies_both_binaries():
    """The runtime stage takes prefixgate and prefixgate-engine-sim from the build stage's release build folder
    (where CMake puts them) into /usr/local/bin."""
    stages = dockerfile_stages()
    build_name = stages[0]["name"]
    found = {dest: (src_stage, sources) for src_stage, sources, dest in copies(stages[-1])}
    for binary, built_at in (("prefixgate", "build/prefixgate"),
                             ("prefixgate-engine-sim", "build/loadtest/prefixgate-engine-sim")):
        dest = f"/usr/local/bin/{binary}"
        assert dest in found, f"{dest} is not copied into the image"
        src_stage, sources = found[dest]
        assert src_stage == build_name and len(sources) == 1 and sources[0].endswith("/" + built_at), found[dest]


def test_dockerfile_copies_the_vocabulary():
    """The cl100k vocabulary fetched by scripts/fetch_tiktoken.sh is copied to /usr/share/prefixgate/cl100k_base.json,
    the path the gateway's tiktoken tokenizer looks in by default."""
    stages = dockerfile_stages()
    found = {dest: (src_stage, sources) for src_stage, sources, dest in copies(stages[-1])}
    assert VOCABULARY_DEST in found, f"{VOCABULARY_DEST} is not copied into the image"
    src_stage, sources = found[VOCABULARY_DEST]
    assert src_stage == stages[0]["name"] and sources[0].endswith("/" + VOCABULARY_SOURCE)
    fetch = (REPO / "scripts" / "fetch_tiktoken.sh").read_text(encoding="utf-8")
    assert 'project="$root/tools/tiktoken"' in fetch, "scripts/fetch_tiktoken.sh installs elsewhere"
    assert "$project/node_modules/tiktoken/encoders/cl100k_base.json" in fetch, "the vocabulary moved"
    gateway_sources = "\n".join(p.read_text(encoding="utf-8", errors="replace")
                                for p in (REPO / "src").rglob("*.cpp"))
    assert f'"{VOCABULARY_DEST}"' in gateway_sources, "the gateway no longer looks for the vocabulary there"


def test_dockerfile_runtime_configuration():
    """The image ships conf/prefixgate.yaml at /etc/prefixgate/prefixgate.yaml with the pods file it names, runs as a
    non-root user, exposes 8080 and 9090 and starts `prefixgate --config /etc/prefixgate/prefixgate.yaml`."""
    runtime = dockerfile_stages()[-1]
    found = {dest: (src_stage, sources) for src_stage, sources, dest in copies(runtime)}
    assert found.get(f"{CONFIG_DIR}/prefixgate.yaml") == (None, ["conf/prefixgate.yaml"])
    pods_name = load_yaml(REPO / "conf" / "prefixgate.yaml")["discovery"]["file"]
    pods_entry = found.get(f"{CONFIG_DIR}/{pods_name}")
    assert pods_entry and pods_entry[0] is None and (REPO / pods_entry[1][0]).is_file()
    instructions = dict((k, a) for k, a in runtime["instructions"] if k in ("USER", "EXPOSE", "ENTRYPOINT", "CMD"))
    user = instructions.get("USER", "root").split(":")[0]
    assert user not in ("root", "0"), "the image must not run as root"
    assert set(instructions["EXPOSE"].split()) == {"8080", "9090"}
    assert instructions["ENTRYPOINT"] == '["prefixgate"]'
    assert instructions["CMD"] == f'["--config", "{CONFIG_DIR}/prefixgate.yaml"]'


def with_dependencies(packages):
    """The packages and everything they depend on (Depends, Pre-Depends), from this machine's dpkg database."""
    seen, todo = set(), list(packages)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Depends}, ${Pre-Depends}", name], capture_output=True,
                             text=True)
        for alternative in out.stdout.replace("|", ",").split(","):
            dependency = alternative.strip().split(" ", 1)[0].split(":", 1)[0]
            if dependency:
                todo.append(dependency)
    return seen


def test_dockerfile_runtime_packages_cover_linked_libraries():
    """Every shared library the locally built binaries load (ldd) comes from a package the runtime stage installs
    or from the packages debian:12-slim already has, so the image's binaries find all their libraries."""
    if not shutil.which("ldd") or not shutil.which("dpkg-query"):
        pytest.skip("ldd or dpkg-query not available")
    binaries = [b for b in (GATEWAY_BIN, ENGINE_SIM_BIN) if b.is_file()]
    if not binaries:
        pytest.skip(f"no built binaries ({GATEWAY_BIN}, {ENGINE_SIM_BIN})")
    installed = runtime_packages(dockerfile_stages()[-1])
    assert installed, "the runtime stage installs no packages"
    installed = with_dependencies(installed)   # apt installs what they depend on, e.g. libzmq5's libsodium23
    in_base_image = {"libc6", "libstdc++6", "libgcc-s1"}
    # A sanitizer build (scripts/build.sh asan) links the sanitizer runtimes; the image never ships that build.
    sanitizer_runtimes = {"libasan8", "libubsan1", "liblsan0", "libtsan2"}
    missing = {}
    for binary in binaries:
        out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, timeout=30).stdout
        assert "not found" not in out, out
        for library in re.findall(r"=>\s+(/\S+)", out):
            candidates = {library, os.path.realpath(library)}
            candidates |= {c.replace("/usr/lib/", "/lib/", 1) for c in candidates if c.startswith("/usr/lib/")}
            candidates |= {"/usr" + c for c in candidates if c.startswith("/lib/")}
            owner = None
            for candidate in sorted(candidates):
                search = subprocess.run(["dpkg-query", "-S", candidate], capture_output=True, text=True)
                if search.returncode == 0:
                    owner = search.stdout.split(":", 1)[0].strip()
                    break
            assert owner, f"no Debian package owns {library}"
            if owner not in installed | in_base_image | sanitizer_runtimes:
                missing.setdefault(owner, set()).add(f"{binary.name}: {library}")
    assert not missing, f"runtime stage lacks packages: {missing}"


def test_docker_default_config_passes_gateway_check(tmp_path):
    """The configuration the image ships (conf/prefixgate.yaml plus the pods file copied next to it) passes the
    gateway's `--check`, so `docker run prefixgate` starts."""
    runtime = dockerfile_stages()[-1]
    for _, sources, dest in copies(runtime):
        if dest.startswith(CONFIG_DIR + "/"):
            shutil.copy(REPO / sources[0], tmp_path / dest[len(CONFIG_DIR) + 1:])
    result = subprocess.run([require_gateway(), "--config", str(tmp_path / "prefixgate.yaml"), "--check"],
                            env=clean_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"prefixgate --check failed:\n{result.stdout}{result.stderr}"


def test_dockerfile_healthcheck_probes_a_real_gateway(sims, gateway_factory, tmp_path):
    """The image's HEALTHCHECK runs docker/healthcheck.sh (copied in as the command it names) against the admin
    listener of the configuration the image ships; run here against a real gateway (with an admin token, which the
    probes do not need), it succeeds on the admin port and fails on the API port (404) and on a closed port."""
    runtime = dockerfile_stages()[-1]
    (healthcheck,) = [args for keyword, args in runtime["instructions"] if keyword == "HEALTHCHECK"]
    command = json.loads(healthcheck.split("CMD", 1)[1])
    found = {dest: sources for _, sources, dest in copies(runtime)}
    assert found.get(f"/usr/local/bin/{command[0]}") == ["docker/healthcheck.sh"]
    admin_listen = load_yaml(REPO / "conf" / "prefixgate.yaml")["admin_listen"]
    assert command[1:] == [admin_listen], "HEALTHCHECK must probe the shipped admin_listen"
    script = REPO / "docker" / "healthcheck.sh"
    (tmp_path / "admin-token").write_text("a-token\n")
    gateway = gateway_factory(sims[:1], config={"auth": {"admin_token_file": "admin-token"}})

    def probe(port):
        return subprocess.run([str(script), f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=30)

    assert probe(gateway.admin_port).returncode == 0
    assert probe(gateway.port).returncode != 0
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        closed_port = unused.getsockname()[1]
    assert probe(closed_port).returncode != 0
