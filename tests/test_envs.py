"""Conda environment files agree with requirements.lock, and every rule's env exists."""

import re

import pytest
import yaml

from conftest import ROOT

# measures nothing and times nothing: runs beside another test (tests/conftest.py)
pytestmark = pytest.mark.shared


def lock_versions() -> dict[str, str]:
    out = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;]+)", line)
        if m:
            out[m.group(1).lower().replace("_", "-")] = m.group(2)
    return out


def pins(env: dict) -> list[tuple[str, str, str]]:
    """(name, version, where) for every pinned package: conda `name=ver` / `name==ver`, pip
    `name==ver`."""
    found = []
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            for spec in dep.get("pip", []):
                m = re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)$", spec)
                assert m, f"unpinned pip requirement {spec!r}"
                found.append((m.group(1), m.group(2), "pip"))
        else:
            m = re.match(r"^([A-Za-z0-9_.\-]+)\s*={1,2}\s*(\S+)$", dep)
            if m:
                found.append((m.group(1), m.group(2), "conda"))
    return found


def test_env_pins_match_the_lock():
    lock = lock_versions()
    py = re.search(r"--python-version (\d+\.\d+)", (ROOT / "requirements.lock").read_text()).group(1)
    envs = sorted((ROOT / "envs").glob("*.yaml"))
    assert envs
    for path in envs:
        env = yaml.safe_load(path.read_text())
        for name, version, where in pins(env):
            key = name.lower().replace("_", "-")
            if key == "python":
                assert version == py, f"{path.name}: python {version}, lock is for {py}"
                continue
            assert key in lock, f"{path.name}: {name} ({where}) is not in requirements.lock"
            assert lock[key] == version, f"{path.name}: {name}=={version}, lock has {lock[key]}"


def test_every_rule_env_exists_with_a_post_deploy_script():
    used = set()
    for smk in (ROOT / "rules").glob("*.smk"):
        used |= set(re.findall(r'conda:\s*\n\s*"\.\./(envs/[^"]+)"', smk.read_text()))
    assert "envs/workflow.yaml" in used
    for rel in used:
        env = ROOT / rel
        assert env.is_file(), rel
        deploy = env.with_name(env.stem + ".post-deploy.sh")
        assert deploy.is_file(), f"{deploy.name} missing: the env would lack our package"
