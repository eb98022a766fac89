"""The deployment kit (deploy/), checked with what this machine has.

* The systemd unit: ``systemd-analyze verify`` (Debian's ``systemd`` package, which
  ``make tools`` installs), on a copy whose programs point at this checkout's; any
  warning fails the test, and so does the set of hardening settings docs/deploy.md
  promises.
* The Containerfile: parsed; the final image runs as a non-root user with /data as a
  volume and a health check; the build context (.dockerignore) leaves out what git
  ignores; every RUN step runs as plain shell, the build stage in a
  scratch prefix, the user-making stage in a mount namespace whose /etc is a copy. The
  build stage makes the compiled build, in seconds: its pip runs setup.py and mypyc,
  whose C is the checkout's compile's, so setuptools finds the extension modules that
  compile made up to date (``reuse_compiled_build`` in tests/support/builds.py)
  instead of spending minutes of C compiler on them again.
* The Kubernetes manifests: parsed as YAML; the objects and the fields they need hang
  together (selectors, service names, probe ports, the drain's arguments and grace
  period); the config and the container's arguments are read by the server's own
  config checker.
* Every disquette configuration in deploy/ is read by the server's config checker.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from disquette.cli import cluster as cluster_cli
from disquette.config.cmdline import parse_command_line
from tests.support.builds import copy_checkout, reuse_compiled_build

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
VENV_BIN = Path(sys.executable).parent
HARDENING = {
    "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
    "PrivateTmp": "yes", "StateDirectory": "disquette", "LimitNOFILE": "65536",
    "User": "disquette",
}  # fmt: skip


def check_config(text: str, tmp_path: Path, *args: str) -> None:
    """The server's own checker reads ``text`` (and command-line ``args``) without error;
    paths the file names are made under ``tmp_path``."""
    text = re.sub(r"^dir (\S+)", lambda m: f"dir {tmp_path}{m[1]}", text, flags=re.M)
    for match in re.finditer(r"^dir (\S+)", text, flags=re.M):
        Path(match[1]).mkdir(parents=True, exist_ok=True)
    path = tmp_path / "disquette.conf"
    path.write_text(text)
    cwd = os.getcwd()
    try:
        parse_command_line(["disquette-server", str(path), *args]).load()
    finally:
        os.chdir(cwd)  # (dir changes the directory, as Disque's does)


# ---------------------------------------------------------------------------- systemd


def unit_settings(text: str) -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    return settings


def test_systemd_unit_verifies_and_is_hardened(tmp_path) -> None:
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: make tools installs Debian's systemd"
    text = (DEPLOY / "systemd" / "disquette.service").read_text()
    settings = unit_settings(text)
    for key, value in HARDENING.items():
        assert settings.get(key) == [value], key
    assert settings["CapabilityBoundingSet"] == [""]
    drain = shlex.split(settings["ExecStop"][0])
    assert drain[1:3] == ["cluster", "drain"]
    cluster_parser(drain[1:])  # (the drain's arguments are the CLI's)
    timeout = float(drain[drain.index("--timeout") + 1])
    assert timeout < float(settings["TimeoutStopSec"][0])
    local = tmp_path / "disquette.service"
    local.write_text(text.replace("/opt/disquette/bin", str(VENV_BIN)))
    result = subprocess.run([analyze, "verify", str(local)], capture_output=True, text=True,
                            timeout=120)  # fmt: skip
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr
    # The check can fail: a misspelt key is reported.
    local.write_text(local.read_text().replace("NoNewPrivileges", "NoNewPrivilege"))
    result = subprocess.run([analyze, "verify", str(local)], capture_output=True, text=True,
                            timeout=120)  # fmt: skip
    assert "Unknown key 'NoNewPrivilege'" in result.stderr


def test_systemd_config_is_accepted(tmp_path) -> None:
    check_config((DEPLOY / "systemd" / "disquette.conf").read_text(), tmp_path)


def cluster_parser(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cluster_cli.add_arguments(parser)
    return parser.parse_args(argv[1:])


# ------------------------------------------------------------------------- Containerfile


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    lines, current = [], ""
    for line in text.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            lines.append(current)
            current = ""
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def stages(text: str) -> list[list[tuple[str, str]]]:
    found: list[list[tuple[str, str]]] = []
    for instruction in instructions(text):
        if instruction[0] == "FROM":
            found.append([])
        found[-1].append(instruction)
    return found


def test_containerfile_final_image() -> None:
    build, final = stages((DEPLOY / "Containerfile").read_text())
    words = dict(final)
    assert words["USER"].split(":")[0] not in ("0", "root")
    assert words["VOLUME"] == '["/data"]' and words["WORKDIR"] == "/data"
    assert "/healthz" in words["HEALTHCHECK"] and "7711" in words["EXPOSE"].split()
    assert ("ARG", "DISQUETTE_BUILD=compiled") in build  # (the compiled build by default)
    # podman builds OCI images unless told otherwise, and drops HEALTHCHECK from them.
    for text in ((DEPLOY / "Containerfile").read_text(), (ROOT / "docs/deploy.md").read_text()):
        builds = re.findall(r"podman build .*", text)
        assert builds and all("--format docker" in line for line in builds), builds


def test_containerfile_context_leaves_out_what_git_ignores() -> None:
    """.dockerignore (which podman reads too) keeps the build context to the sources:
    every .gitignore pattern is there (anywhere in the tree where git's is), and so is
    .git. The plain-shell run below copies ``git ls-files`` for the context."""
    ignored = {
        line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }  # fmt: skip
    assert ".git" in ignored
    for line in (ROOT / ".gitignore").read_text().splitlines():
        pattern = line.strip().rstrip("/")
        if pattern and not pattern.startswith("#"):
            assert {pattern, f"**/{pattern}"} & ignored, pattern


def test_containerfile_config_is_accepted(tmp_path) -> None:
    check_config((DEPLOY / "container" / "disquette.conf").read_text(), tmp_path)


def run_steps(stage: list[tuple[str, str]], env: dict[str, str], cwd: Path, wrap=()) -> str:
    """Run the stage's RUN steps with its ARGs' defaults; what they printed."""
    printed = ""
    for instruction, arguments in stage:
        if instruction == "ARG":
            name, _, default = arguments.partition("=")
            env.setdefault(name, default)
        elif instruction == "RUN":
            command = [*wrap, arguments] if wrap else ["sh", "-ec", arguments]
            result = subprocess.run(command, env=env, cwd=cwd,
                                    capture_output=True, text=True, timeout=600)  # fmt: skip
            assert result.returncode == 0, f"{arguments}\n{result.stdout}\n{result.stderr}"
            printed += result.stdout
    return printed


@pytest.mark.skipif(os.geteuid() != 0, reason="the user-making step needs root (CI is)")
def test_containerfile_run_steps_as_plain_shell(tmp_path) -> None:
    build, final = stages((DEPLOY / "Containerfile").read_text())
    # COPY . /src: the checkout's files (as the build context holds them: .dockerignore).
    src = tmp_path / "src"
    copy_checkout(src)
    pins = reuse_compiled_build(src, tmp_path / "constraints.txt")
    assert pins is not None, "the checkout's compiled build is not made or not current: make it"
    prefix = tmp_path / "opt"
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PREFIX": str(prefix),
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", **pins}  # fmt: skip
    for key in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_CONFIG_FILE"):
        if key in os.environ:
            env[key] = os.environ[key]
    steps = [(i, a.replace("/src", str(src))) for i, a in build]
    output = run_steps(steps, env, tmp_path)
    assert "disquette: the compiled build" in output  # (the step checks it is the one asked)
    server = prefix / "bin" / "disquette-server"
    version = subprocess.run([str(server), "--version"], capture_output=True, text=True,
                             timeout=60, check=True).stdout  # fmt: skip
    assert "disquette" in version
    # The final stage's user: in a mount namespace where /etc is a copy (useradd replaces
    # the account files by renaming, so the copy must be the whole directory).
    etc = tmp_path / "etc"
    shutil.copytree("/etc", etc, symlinks=True, ignore_dangling_symlinks=True)
    data = tmp_path / "data"
    script = f'mount --bind {etc} /etc && exec sh -ec "$0"'
    run_steps(final, {"PATH": env["PATH"], "DATA": str(data)}, tmp_path,
              wrap=("unshare", "--mount", "sh", "-ec", script))  # fmt: skip
    assert "disquette:x:7711:7711:" in (etc / "passwd").read_text()
    assert "disquette" not in Path("/etc/passwd").read_text().split(":")[0]
    assert data.stat().st_uid == 7711 and oct(data.stat().st_mode)[-3:] == "750"


# ----------------------------------------------------------------------------- Kubernetes


def manifests() -> dict[str, dict]:
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "disquette.yaml").read_text()))
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in docs}


def test_kubernetes_objects_hang_together() -> None:
    objects = manifests()
    assert set(objects) == {
        "ConfigMap/disquette", "Service/disquette-peers", "Service/disquette",
        "StatefulSet/disquette", "PodDisruptionBudget/disquette",
    }  # fmt: skip
    for name, obj in objects.items():
        assert obj["apiVersion"] in ("v1", "apps/v1", "policy/v1"), name
    sts = objects["StatefulSet/disquette"]
    spec = sts["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    peers = objects[f"Service/{spec['serviceName']}"]
    assert peers["spec"]["clusterIP"] == "None" and peers["spec"]["publishNotReadyAddresses"]
    for service in ("Service/disquette", "Service/disquette-peers"):
        assert objects[service]["spec"]["selector"].items() <= labels.items()
    pdb = objects["PodDisruptionBudget/disquette"]["spec"]
    assert pdb["selector"]["matchLabels"].items() <= labels.items() and pdb["maxUnavailable"] == 1
    (container,) = spec["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"client": 7711, "http": 8711, "bus": 17711}
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["livenessProbe"]["tcpSocket"]["port"] in ports
    assert {"name": "data", "mountPath": "/data"} in container["volumeMounts"]
    assert spec["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[:3] == ["disquette", "cluster", "drain"]
    drain = cluster_parser(pre_stop[1:])
    assert drain.timeout < spec["template"]["spec"]["terminationGracePeriodSeconds"]
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env == {"POD_IP": "status.podIP"}
    assert container["args"][1:] == ["--cluster-announce-ip", "$(POD_IP)"]
    seeds = objects["ConfigMap/disquette"]["data"]["disquette.conf"]
    assert f"cluster-seeds {spec['serviceName']}.default.svc.cluster.local:7711" in seeds


def test_kubernetes_config_and_arguments_are_accepted(tmp_path) -> None:
    objects = manifests()
    (container,) = objects["StatefulSet/disquette"]["spec"]["template"]["spec"]["containers"]
    args = [a.replace("$(POD_IP)", "10.42.0.7") for a in container["args"][1:]]
    check_config(objects["ConfigMap/disquette"]["data"]["disquette.conf"], tmp_path, *args)
