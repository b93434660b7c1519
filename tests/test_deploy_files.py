"""Static checks of the deployment files in deploy/ (and docs/operations.md).

Docker and Kubernetes do not run where these tests run, so nothing here starts a
container.  What can be checked is checked: the YAML parses and has the keys that make
it work, every hub flag and PUB0SUB_HUB_* setting a file uses is one the hub accepts
today (so the files break loudly when the CLI changes), the systemd unit passes
``systemd-analyze verify`` when that tool exists, the Dockerfile copies only paths that
exist, and the entrypoint script builds a bootstrap address from a (stubbed) status reply.

PyYAML is not a dependency of the project, so YAML is read with a small parser for the
block-style subset these files use; it raises on anything outside it (anchors, flow
mappings, tabs...), so a file that drifts outside the subset fails here rather than
being half-read.  If PyYAML happens to be installed it is used instead.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
DOCKERFILE = DEPLOY / "docker" / "Dockerfile"
ENTRYPOINT = DEPLOY / "docker" / "entrypoint.sh"
COMPOSE = DEPLOY / "compose" / "docker-compose.yml"
COMPOSE_ENV = DEPLOY / "compose" / ".env.example"
K8S = DEPLOY / "kubernetes"
UNIT = DEPLOY / "systemd" / "pub0sub-hub@.service"
UNIT_ENV = DEPLOY / "systemd" / "example.env"
OPERATIONS = ROOT / "docs" / "operations.md"

# --------------------------------------------------------------------------------------
# A small YAML reader (block mappings and sequences, scalars, flow lists of scalars, `|`)
# --------------------------------------------------------------------------------------


class YamlSubsetError(ValueError):
    pass


_KEY = re.compile(r"""^(?P<key>"[^"]*"|'[^']*'|[^\s"'#\-\[{][^:#]*?|-[^\s:#][^:#]*?)\s*:(?:\s+(?P<rest>.*)|$)""")
_INT = re.compile(r"^[-+]?\d+$")
_FLOAT = re.compile(r"^[-+]?(\d+\.\d*|\.\d+)([eE][-+]?\d+)?$")


def _strip_comment(text: str) -> str:
    quote = None
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "\"'" and (i == 0 or text[i - 1] in " [,"):
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1] in " \t"):
            return text[:i].rstrip()
    return text.rstrip()


def _scalar(text: str, where: str) -> Any:
    text = _strip_comment(text).strip()
    if not text:
        return None
    if text[0] in "&*!?|>{%@`":
        raise YamlSubsetError(f"{where}: unsupported YAML construct {text!r}")
    if text.startswith("["):
        if not text.endswith("]"):
            raise YamlSubsetError(f"{where}: unterminated flow sequence {text!r}")
        inner = text[1:-1].strip()
        if not inner:
            return []
        items = re.findall(r"""\s*("(?:[^"\\]|\\.)*"|'[^']*'|[^,]+)\s*(?:,|$)""", inner)
        return [_scalar(item, where) for item in items]
    if text.startswith('"'):
        if not text.endswith('"') or len(text) < 2:
            raise YamlSubsetError(f"{where}: unterminated string {text!r}")
        return json.loads(text)
    if text.startswith("'"):
        if not text.endswith("'") or len(text) < 2:
            raise YamlSubsetError(f"{where}: unterminated string {text!r}")
        return text[1:-1].replace("''", "'")
    if text in ("true", "false"):
        return text == "true"
    if text in ("null", "~"):
        return None
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        return float(text)
    return text


def _starts_mapping(text: str) -> bool:
    """``key: ...`` (a quoted scalar containing ': ' is not a key unless the quotes end before the colon)."""
    if text.startswith(("'", '"')):
        return re.match(r"""^("[^"]*"|'[^']*')\s*:(\s|$)""", text) is not None
    return _KEY.match(text) is not None


class _Reader:
    def __init__(self, text: str, name: str) -> None:
        self.lines = text.split("\n")
        self.name = name
        self.i = 0

    def where(self) -> str:
        return f"{self.name}:{self.i + 1}"

    def peek(self) -> tuple[int, str] | None:
        while self.i < len(self.lines):
            raw = self.lines[self.i]
            stripped = raw.strip()
            if not stripped or stripped.startswith("#"):
                self.i += 1
                continue
            lead = raw[: len(raw) - len(raw.lstrip())]
            if "\t" in lead:
                raise YamlSubsetError(f"{self.where()}: tab in indentation")
            return len(lead), stripped
        return None

    def node(self, indent: int) -> Any:
        head = self.peek()
        if head is None:
            return None
        if head[1] == "-" or head[1].startswith("- "):
            return self.sequence(head[0])
        return self.mapping(head[0])

    def sequence(self, indent: int) -> list[Any]:
        items: list[Any] = []
        while (head := self.peek()) is not None and head[0] == indent and (head[1] == "-" or head[1].startswith("- ")):
            content = head[1][1:].lstrip()
            if not content:
                self.i += 1
                nxt = self.peek()
                items.append(self.node(nxt[0]) if nxt is not None and nxt[0] > indent else None)
            elif _starts_mapping(content):
                column = indent + (len(head[1]) - len(content))
                self.lines[self.i] = " " * column + content  # the item's mapping starts at its first key
                items.append(self.mapping(column))
            else:
                items.append(_scalar(content, self.where()))
                self.i += 1
        head = self.peek()
        if head is not None and head[0] > indent:
            raise YamlSubsetError(f"{self.where()}: unexpected indentation")
        return items

    def mapping(self, indent: int) -> dict[str, Any]:
        result: dict[str, Any] = {}
        while (head := self.peek()) is not None and head[0] >= indent:
            if head[0] > indent:
                raise YamlSubsetError(f"{self.where()}: unexpected indentation")
            if head[1].startswith("- ") or head[1] == "-":
                break
            match = _KEY.match(head[1])
            if match is None:
                raise YamlSubsetError(f"{self.where()}: expected `key: value`, got {head[1]!r}")
            key = match["key"].strip()
            if key[0] in "\"'":
                key = _scalar(key, self.where())
            if key in result:
                raise YamlSubsetError(f"{self.where()}: duplicate key {key!r}")
            rest = _strip_comment(match["rest"] or "")
            self.i += 1
            if rest in ("|", "|-", "|+"):
                result[key] = self.literal(indent, rest)
            elif rest:
                result[key] = _scalar(rest, self.where())
            else:
                nxt = self.peek()
                if nxt is not None and (nxt[0] > indent or (nxt[0] == indent and nxt[1].startswith("- "))):
                    result[key] = self.node(nxt[0])
                else:
                    result[key] = None
        return result

    def literal(self, indent: int, style: str) -> str:
        body: list[str] = []
        while self.i < len(self.lines):
            raw = self.lines[self.i]
            if raw.strip() and len(raw) - len(raw.lstrip()) <= indent:
                break
            body.append(raw)
            self.i += 1
        while body and not body[-1].strip():
            body.pop()
        width = min((len(x) - len(x.lstrip()) for x in body if x.strip()), default=0)
        text = "\n".join(x[width:] for x in body)
        return text if style == "|-" else text + "\n"


def yaml_documents(path: Path) -> list[Any]:
    text = path.read_text()
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError:
        pass
    else:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    docs: list[Any] = []
    chunk: list[str] = []
    start = 0
    for n, line in enumerate([*text.split("\n"), "---"]):
        if line.rstrip() == "---":
            reader = _Reader("\n".join(chunk), f"{path.name}:+{start}")
            doc = reader.node(0)
            if reader.peek() is not None:
                raise YamlSubsetError(f"{reader.where()}: text after the document")
            if doc is not None:
                docs.append(doc)
            chunk, start = [], n + 1
        else:
            chunk.append(line)
    return docs


def test_yaml_reader_on_known_input() -> None:
    doc = yaml_documents_from_text(
        "a: 1\nb:\n  - x\n  - k: v\n    j: 'q'\nc: |\n  line 1\n  line 2\nd: [\"p\", q]\ne: None  # c\n"
    )
    assert doc == {"a": 1, "b": ["x", {"k": "v", "j": "q"}], "c": "line 1\nline 2\n", "d": ["p", "q"], "e": "None"}
    for bad in ("a: 1\n  b: 2\n", "a: &x 1\n", "a: {b: 1}\n", "a: 1\na: 2\n", "\ta: 1\n"):
        with pytest.raises(YamlSubsetError):
            yaml_documents_from_text(bad)


def yaml_documents_from_text(text: str) -> Any:
    reader = _Reader(text, "<text>")
    doc = reader.node(0)
    if reader.peek() is not None:
        raise YamlSubsetError(f"{reader.where()}: text after the document")
    return doc


# --------------------------------------------------------------------------------------
# What the hub accepts today
# --------------------------------------------------------------------------------------


@cache
def hub_help() -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "hub", "--help"], capture_output=True, text=True, cwd=ROOT, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@cache
def hub_flags() -> frozenset[str]:
    return frozenset(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", hub_help()))


def setting_known(name: str) -> bool:
    """Whether the hub accepts the environment variable ``name`` (its value aside)."""
    from hub.config import load_config

    try:
        load_config(env={name: "1"})
    except ValueError as exc:
        return "unknown" not in str(exc)
    return True


def env_file(path: Path, *, include_commented: bool = False) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if include_commented and re.match(r"^#[A-Z][A-Z0-9_]*=", line):
            line = line[1:]
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep, f"{path.name}: not KEY=value: {line!r}"
        values[key.strip()] = value.strip()
    return values


# --------------------------------------------------------------------------------------
# Kubernetes
# --------------------------------------------------------------------------------------


@cache
def k8s_objects() -> dict[tuple[str, str], dict[str, Any]]:
    objects: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml_documents(path):
            key = (doc["kind"], doc["metadata"]["name"])
            assert key not in objects, f"{path.name}: {key} defined twice"
            assert "apiVersion" in doc, f"{path.name}: {key} has no apiVersion"
            objects[key] = doc
    return objects


def statefulset() -> dict[str, Any]:
    return k8s_objects()[("StatefulSet", "pub0sub-hub")]


def hub_container() -> dict[str, Any]:
    containers = statefulset()["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def test_kustomization_lists_every_manifest() -> None:
    (kustomization,) = yaml_documents(K8S / "kustomization.yaml")
    listed = set(kustomization["resources"])
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present


def test_statefulset_shape() -> None:
    sts = statefulset()
    spec = sts["spec"]
    assert spec["replicas"] == 3
    assert spec["podManagementPolicy"] in ("Parallel", "OrderedReady")
    headless = k8s_objects()[("Service", spec["serviceName"])]
    assert headless["spec"]["clusterIP"] == "None"
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    pod = spec["template"]["spec"]
    assert isinstance(pod["terminationGracePeriodSeconds"], int) and pod["terminationGracePeriodSeconds"] >= 30
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    claims = {c["metadata"]["name"] for c in spec["volumeClaimTemplates"]}
    container = hub_container()
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert claims & mounts.keys(), "no volumeClaimTemplate is mounted"
    assert "/var/lib/pub0sub" in {mounts[c] for c in claims & mounts.keys()}, "the data dir is not on a claim"
    volumes = {v["name"] for v in pod.get("volumes", [])}
    assert set(mounts) <= volumes | claims, "a volumeMount names no volume"
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= container["resources"][kind].keys()


def test_probes_run_pub0sub_status() -> None:
    container = hub_container()
    for probe in ("readinessProbe", "livenessProbe"):
        command = container[probe]["exec"]["command"]
        assert command[:2] == ["pub0sub", "status"], command
        assert command[command.index("--hub") + 1] == "127.0.0.1:7420"
        timeout = float(command[command.index("--timeout") + 1])
        assert timeout < container[probe]["timeoutSeconds"], f"{probe}: the command outlives the probe"


def test_services_select_the_hub_pods() -> None:
    objects = k8s_objects()
    labels = statefulset()["spec"]["template"]["metadata"]["labels"]
    ports = {p["name"]: p["containerPort"] for p in hub_container()["ports"]}
    assert ports == {"client": 7420, "mesh": 7421}
    services = [o for (kind, _), o in objects.items() if kind == "Service"]
    assert len(services) == 2
    for svc in services:
        assert svc["spec"]["selector"].items() <= labels.items()
        for port in svc["spec"]["ports"]:
            assert port["targetPort"] in ports
    client = objects[("Service", "pub0sub")]
    assert client["spec"]["sessionAffinity"] == "ClientIP"
    assert [p["port"] for p in client["spec"]["ports"]] == [7420]


def test_seeds_name_the_statefulset_pods() -> None:
    sts = statefulset()
    env = {e["name"]: e for e in hub_container()["env"]}
    seeds = env["PUB0SUB_SEEDS"]["value"].split(",")
    expected = [
        f"{sts['metadata']['name']}-{n}.{sts['spec']['serviceName']}:7420" for n in range(sts["spec"]["replicas"])
    ]
    assert seeds == expected
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"


def k8s_hub_toml() -> dict[str, Any]:
    config = k8s_objects()[("ConfigMap", "pub0sub-hub")]
    return tomllib.loads(config["data"]["hub.toml"])


def test_configmap_is_mounted_where_the_hub_reads_it() -> None:
    args = hub_container()["args"]
    path = Path(args[args.index("--config") + 1])
    mount = next(m for m in hub_container()["volumeMounts"] if m["mountPath"] == str(path.parent))
    volume = next(v for v in statefulset()["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"])
    config = k8s_objects()[("ConfigMap", volume["configMap"]["name"])]
    assert path.name in config["data"]
    assert set(k8s_hub_toml()) == {"hub"}


# --------------------------------------------------------------------------------------
# Compose
# --------------------------------------------------------------------------------------


def compose() -> dict[str, Any]:
    (doc,) = yaml_documents(COMPOSE)
    return doc


def test_compose_three_hubs_with_own_volumes_on_loopback() -> None:
    doc = compose()
    services = doc["services"]
    assert sorted(services) == ["hub-a", "hub-b", "hub-c"]
    data_volumes = []
    for name, svc in services.items():
        assert svc["hostname"] == name, "the entrypoint recognises itself in PUB0SUB_SEEDS by hostname"
        for port in svc["ports"]:
            assert str(port).startswith("127.0.0.1:"), f"{name}: {port} is published beyond loopback"
            assert str(port).endswith(":7420")
        (volume,) = [v for v in svc["volumes"] if v.endswith(":/var/lib/pub0sub")]
        data_volumes.append(volume.split(":")[0])
        assert svc["environment"]["PUB0SUB_HUB_NAME"] == name
        assert svc["restart"] in ("unless-stopped", "always", "on-failure")
    assert len(set(data_volumes)) == 3, "hubs share a data volume"
    assert set(data_volumes) <= set(doc["volumes"]), "a data volume is not a named volume"
    host_ports = [p.split(":")[1] for s in services.values() for p in s["ports"]]
    assert len(set(host_ports)) == len(host_ports)


def test_compose_bootstrap_needs_no_peer_id() -> None:
    services = compose()["services"]
    seeds = {name: svc["environment"]["PUB0SUB_SEEDS"].split(",") for name, svc in services.items()}
    for name, listed in seeds.items():
        assert listed[0] == "hub-a:7420", f"{name}: hub-a must be first (it alone may start alone)"
        assert {s.split(":")[0] for s in listed} <= set(services)


def test_compose_builds_from_the_repo_root() -> None:
    build = compose()["services"]["hub-a"]["build"]
    context = (COMPOSE.parent / build["context"]).resolve()
    assert context == ROOT
    assert (context / build["dockerfile"]).resolve() == DOCKERFILE


def test_compose_env_example_matches_the_compose_file() -> None:
    used = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", COMPOSE.read_text()))
    documented = set(env_file(COMPOSE_ENV))
    assert used == documented


# --------------------------------------------------------------------------------------
# Flags and settings the files use exist in the hub
# --------------------------------------------------------------------------------------


def _hub_command_flags(text: str) -> set[str]:
    """``--flags`` on lines that run ``pub0sub hub`` (continuation lines included)."""
    flags: set[str] = set()
    joined = re.sub(r"\\\n", " ", text)
    for line in joined.splitlines():
        for match in re.finditer(r"pub0sub hub\b(.*)", line):
            flags.update(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", match.group(1)))
    return flags


def test_every_hub_flag_used_exists() -> None:
    used: dict[str, set[str]] = {}
    for path in [UNIT, ENTRYPOINT, DOCKERFILE, COMPOSE, OPERATIONS, *K8S.glob("*.yaml")]:
        for flag in _hub_command_flags(path.read_text()):
            used.setdefault(flag, set()).add(path.name)
    for arg in hub_container()["args"]:
        if arg.startswith("--"):
            used.setdefault(arg, set()).add("statefulset.yaml")
    for key in k8s_hub_toml()["hub"]:
        used.setdefault("--" + key.replace("_", "-"), set()).add("configmap.yaml hub.toml")
    assert used, "no hub flags found: the scan is broken"
    missing = {flag: sorted(files) for flag, files in used.items() if flag not in hub_flags()}
    assert not missing, f"not in `python -m hub --help`: {missing}"


def _settings_set() -> dict[str, set[str]]:
    names: dict[str, set[str]] = {}

    def add(name: str, where: str) -> None:
        if name.startswith("PUB0SUB_HUB_"):
            names.setdefault(name, set()).add(where)

    for name in env_file(UNIT_ENV, include_commented=True):
        add(name, UNIT_ENV.name)
    for match in re.finditer(r"^Environment=(\w+)=", UNIT.read_text(), re.M):
        add(match[1], UNIT.name)
    for svc in compose()["services"].values():
        for name in svc["environment"]:
            add(name, COMPOSE.name)
    for entry in hub_container()["env"]:
        add(entry["name"], "statefulset.yaml")
    for match in re.finditer(r"(?m)^\s*(?:ENV\s+)?(PUB0SUB_HUB_\w+)=", DOCKERFILE.read_text()):
        add(match[1], DOCKERFILE.name)
    for line in ENTRYPOINT.read_text().splitlines():
        if not line.lstrip().startswith("#"):
            for match in re.finditer(r"\b(PUB0SUB_HUB_[A-Z0-9_]+)=", line):
                add(match[1], ENTRYPOINT.name)
    return names


def test_every_hub_setting_used_exists() -> None:
    names = _settings_set()
    assert "PUB0SUB_HUB_BOOTSTRAP" in names and "PUB0SUB_HUB_LISTEN" in names, "the scan is broken"
    unknown = {name: sorted(files) for name, files in names.items() if not setting_known(name)}
    assert not unknown, f"the hub rejects these settings: {unknown}"


def test_systemd_example_env_is_a_valid_configuration() -> None:
    from hub.config import load_config

    env = {k: v for k, v in env_file(UNIT_ENV, include_commented=True).items() if k.startswith("PUB0SUB_HUB_")}
    load_config(env={**env, "PUB0SUB_HUB_NAME": "a", "PUB0SUB_HUB_DATA_DIR": "/var/lib/pub0sub/a"})


def test_k8s_hub_toml_is_a_valid_configuration(tmp_path: Path) -> None:
    from hub.config import load_config

    config = k8s_objects()[("ConfigMap", "pub0sub-hub")]
    path = tmp_path / "hub.toml"
    path.write_text(config["data"]["hub.toml"])
    load_config(file=path, env={})


# --------------------------------------------------------------------------------------
# systemd
# --------------------------------------------------------------------------------------


def unit_sections() -> dict[str, dict[str, list[str]]]:
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    for raw in UNIT.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        assert current is not None, f"key outside a section: {line!r}"
        key, sep, value = line.partition("=")
        assert sep, f"not Key=Value: {line!r}"
        current.setdefault(key, []).append(value)
    return sections


def test_systemd_unit_keys() -> None:
    s = unit_sections()
    assert {"Unit", "Service", "Install"} <= s.keys()
    svc = s["Service"]
    assert svc["User"] == ["pub0sub"] and svc["Group"] == ["pub0sub"]
    assert svc["EnvironmentFile"] == ["/etc/pub0sub/%i.env"]
    assert svc["StateDirectory"] == ["pub0sub/%i"]
    assert "PUB0SUB_HUB_DATA_DIR=%S/pub0sub/%i" in svc["Environment"], "the data dir must be the StateDirectory"
    assert "%S/pub0sub/%i" in svc["ReadWritePaths"]
    assert svc["Restart"] == ["on-failure"]
    for key, value in {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "PrivateTmp": "yes"}.items():
        assert svc[key] == [value], key
    assert int(svc["LimitNOFILE"][0]) >= 65536
    assert svc["ExecStart"][0].split()[:2] == ["/opt/pub0sub/bin/pub0sub", "hub"]
    assert s["Install"]["WantedBy"] == ["multi-user.target"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_analyze_verify(tmp_path: Path) -> None:
    # verify wants the ExecStart binary to exist: point it at this checkout's pub0sub.
    pub0sub = Path(sys.executable).parent / "pub0sub"
    if not pub0sub.exists():
        pytest.skip("no pub0sub script next to the test interpreter")
    unit = tmp_path / UNIT.name
    unit.write_text(UNIT.read_text().replace("/opt/pub0sub/bin/pub0sub", str(pub0sub)))
    proc = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(tmp_path / "pub0sub-hub@a.service")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # Unknown keys are only warnings (exit 0): any output at all is a failure here.
    assert proc.returncode == 0 and not proc.stderr.strip() and not proc.stdout.strip(), proc.stderr + proc.stdout


# --------------------------------------------------------------------------------------
# Docker
# --------------------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile_copies_only_existing_paths() -> None:
    copies = [rest for word, rest in dockerfile_instructions() if word in ("COPY", "ADD")]
    assert copies
    for rest in copies:
        if rest.startswith("--from="):
            continue
        *sources, _dest = rest.split()
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: not in the build context (repo root)"


def test_dockerfile_copies_what_the_install_needs() -> None:
    copied = {
        s for w, r in dockerfile_instructions() if w == "COPY" and not r.startswith("--from") for s in r.split()[:-1]
    }
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert {"pyproject.toml", pyproject["project"]["readme"]} <= copied
    for pattern in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]:
        assert pattern.rstrip("*") in copied, f"package {pattern} is not copied"
    assert "mesh" in pyproject["project"]["optional-dependencies"]
    assert any(w == "RUN" and 'pip install ".[mesh]"' in r for w, r in dockerfile_instructions())


def test_dockerfile_runtime_stage() -> None:
    steps = dockerfile_instructions()
    stages = [i for i, (w, _) in enumerate(steps) if w == "FROM"]
    assert all(steps[i][1].split()[0] == "python:3.11-slim" for i in stages)
    final = steps[stages[-1] :]
    final_text = "\n".join(f"{w} {r}" for w, r in final)
    assert "build-essential" not in final_text and "gcc" not in final_text and "-dev" not in final_text
    words = {w: r for w, r in final}
    assert words["USER"].split(":")[0] not in ("root", "0")
    assert "7420" in words["EXPOSE"].split() and "7421" in words["EXPOSE"].split()
    assert "/var/lib/pub0sub" in words["VOLUME"]
    health = json.loads(words["HEALTHCHECK"].split("CMD", 1)[1].strip())
    assert health[:4] == ["pub0sub", "status", "--hub", "127.0.0.1:7420"]
    entrypoint = json.loads(words["ENTRYPOINT"])
    copied_to = {r.split()[-1]: r.split()[-2] for w, r in final if w == "COPY" and not r.startswith("--from")}
    assert (ROOT / copied_to[entrypoint[0]]).resolve() == ENTRYPOINT
    env_line = " ".join(r for w, r in final if w == "ENV")
    assert "PUB0SUB_HUB_DATA_DIR=/var/lib/pub0sub" in env_line and "PUB0SUB_HUB_LISTEN=0.0.0.0:7420" in env_line


# --------------------------------------------------------------------------------------
# The entrypoint script
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("shell", ["sh", "dash", "bash"])
def test_entrypoint_syntax(shell: str) -> None:
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} not installed")
    proc = subprocess.run([shell, "-n", str(ENTRYPOINT)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert ENTRYPOINT.read_text().startswith("#!/bin/sh\n")
    assert re.search(r"(?m)^set -eu$", ENTRYPOINT.read_text())
    assert os.access(ENTRYPOINT, os.X_OK)


STUB = """#!/bin/sh
# A stand-in for pub0sub: `status` answers for the hubs in STUB_UP, `hub` prints what it got.
if [ "$1" = status ]; then
    case " $STUB_UP " in *" $3 "*) ;; *) echo "no hub at $3" >&2; exit 1;; esac
    printf '%s' '{"hub_id":"ab","mesh":{"listen_addrs":["/ip4/0.0.0.0/tcp/7521/p2p/12D3KooWPeer"]}}'
    exit 0
fi
echo "ARGS $*"
env | grep '^PUB0SUB_HUB_' | sort
"""


def run_entrypoint(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    stub = tmp_path / "bin" / "pub0sub"
    stub.parent.mkdir(exist_ok=True)
    stub.write_text(STUB)
    stub.chmod(0o755)
    base = {k: v for k, v in os.environ.items() if not k.startswith("PUB0SUB")}
    base["PATH"] = f"{stub.parent}{os.pathsep}{base['PATH']}"
    return subprocess.run(
        ["sh", str(ENTRYPOINT), *args], env={**base, **env}, capture_output=True, text=True, timeout=60, check=False
    )


def test_entrypoint_builds_bootstrap_from_a_seed(tmp_path: Path) -> None:
    proc = run_entrypoint(
        tmp_path,
        {
            "HOSTNAME": "hub-b",
            "POD_IP": "10.1.2.3",
            "PUB0SUB_SEEDS": "127.0.0.1:7420,127.0.0.2:7420",
            "STUB_UP": "127.0.0.1:7420",
            "PUB0SUB_HUB_NAME": "",  # empty = unset, as compose passes an unset ${VAR:-}
        },
        "--name",
        "x",
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "ARGS hub --log-level INFO --name x"
    # The seed's 0.0.0.0 is replaced by the address we reached it at; its port and id are kept.
    assert "PUB0SUB_HUB_BOOTSTRAP=/ip4/127.0.0.1/tcp/7521/p2p/12D3KooWPeer" in lines
    assert "PUB0SUB_HUB_MESH_LISTEN=/ip4/10.1.2.3/tcp/7421" in lines
    assert not any(line.startswith("PUB0SUB_HUB_NAME") for line in lines)


def test_entrypoint_first_hub_starts_alone_and_others_wait(tmp_path: Path) -> None:
    first = run_entrypoint(
        tmp_path, {"HOSTNAME": "localhost", "POD_IP": "10.0.0.1", "PUB0SUB_SEEDS": "localhost:7420 127.0.0.2:7420"}
    )
    assert first.returncode == 0, first.stderr
    assert not any(line.startswith("PUB0SUB_HUB_BOOTSTRAP") for line in first.stdout.splitlines())
    other = run_entrypoint(
        tmp_path,
        {"HOSTNAME": "hub-b", "POD_IP": "10.0.0.2", "PUB0SUB_SEEDS": "127.0.0.1:7420", "PUB0SUB_SEED_WAIT": "1"},
    )
    assert other.returncode == 1 and "no seed answered" in other.stderr


def test_entrypoint_respects_explicit_settings(tmp_path: Path) -> None:
    proc = run_entrypoint(
        tmp_path,
        {
            "HOSTNAME": "hub-b",
            "PUB0SUB_SEEDS": "127.0.0.1:7420",
            "PUB0SUB_HUB_BOOTSTRAP": "/ip4/10.9.9.9/tcp/7421/p2p/12D3KooWX",
            "PUB0SUB_HUB_MESH_LISTEN": "/ip4/10.0.0.5/tcp/7421",
            "PUB0SUB_LOG_LEVEL": "DEBUG",
        },
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "ARGS hub --log-level DEBUG"
    assert "PUB0SUB_HUB_BOOTSTRAP=/ip4/10.9.9.9/tcp/7421/p2p/12D3KooWX" in lines
    assert "PUB0SUB_HUB_MESH_LISTEN=/ip4/10.0.0.5/tcp/7421" in lines
    off = run_entrypoint(tmp_path, {"PUB0SUB_MESH": "off", "PUB0SUB_SEEDS": "127.0.0.1:7420"})
    assert off.returncode == 0, off.stderr
    assert [x for x in off.stdout.splitlines() if x.startswith("PUB0SUB_HUB_")] == []


# --------------------------------------------------------------------------------------
# The cluster secret (docs/security.md, "Mesh admission")
# --------------------------------------------------------------------------------------


def test_every_deploy_file_runs_the_mesh_with_a_mounted_cluster_secret() -> None:
    # Compose: one secret from ./cluster.secret, mounted into every hub, named by the setting.
    doc = compose()
    (name,) = doc["secrets"]
    assert doc["secrets"][name]["file"] == "./cluster.secret"
    for service, svc in doc["services"].items():
        (mounted,) = svc["secrets"]
        assert mounted["source"] == name, service
        assert svc["environment"]["PUB0SUB_HUB_CLUSTER_SECRET_FILE"] == f"/run/secrets/{mounted['target']}", service
    # Kubernetes: hub.toml names a file in the mount of the Secret the kustomization generates.
    path = Path(k8s_hub_toml()["hub"]["cluster-secret-file"])
    mount = next(m for m in hub_container()["volumeMounts"] if m["mountPath"] == str(path.parent))
    assert mount["readOnly"] is True
    volume = next(v for v in statefulset()["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"])
    (kustomization,) = yaml_documents(K8S / "kustomization.yaml")
    (generated,) = kustomization["secretGenerator"]
    assert volume["secret"]["secretName"] == generated["name"] and generated["files"] == [path.name]
    assert generated["options"]["disableNameSuffixHash"] is True, "a rotation must not roll every pod"
    # systemd: the example sets it, and the unit reloads it without a restart.
    assert env_file(UNIT_ENV)["PUB0SUB_HUB_CLUSTER_SECRET_FILE"] == "/etc/pub0sub/cluster.secret"
    assert "ExecReload=/bin/kill -HUP $MAINPID" in UNIT.read_text()
    # Never committed: the secrets the compose file and the kustomization read are git-ignored.
    for directory in (COMPOSE.parent, K8S):
        ignored = subprocess.run(["git", "check-ignore", "-q", str(directory / "cluster.secret")], cwd=ROOT)
        assert ignored.returncode == 0, f"{directory}/cluster.secret is not git-ignored"
