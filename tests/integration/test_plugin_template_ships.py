"""The plug-in ``sealbench benchmark init`` makes is complete for a newcomer:

- it declares every package its code and its own tests import (sealbench's ``enclave`` extra,
  and its ``test`` extra for the rest), so its tests run in a fresh environment made from its
  declarations alone, where a template whose tests imported an undeclared package (``onnx``)
  failed;
- installed, it ships its definition: ``benchmark definition export NAME`` writes it and
  ``benchmark definition ls`` lists it (it said "[Errno 2] No such file or directory"), and its
  own tests (the definition's among them) pass.

The fresh environment is the third-party plug-in test's (``plugin_python``: a new virtual
environment seeing this one's packages, the plug-in's wheel installed in it alone)."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Callable
from importlib.metadata import packages_distributions, requires
from pathlib import Path

from sealbench.client.scaffold import package_name, scaffold_plugin

NAME = "knee-seg"


def _plugin_python() -> Callable[..., str]:
    spec = importlib.util.spec_from_file_location(
        "third_party_plugin_helpers", Path(__file__).with_name("test_third_party_plugin.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    helper: Callable[..., str] = module.plugin_python
    return helper


def _canonical(requirement: str) -> str:
    """The distribution a requirement names (``onnx>=1.16`` -> ``onnx``), normalised."""
    name = re.split(r"[\s\[<>=!~;(]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def _imported(root: Path) -> set[str]:
    """The top-level modules the package's code and tests import (absolute imports)."""
    found: set[str] = set()
    for path in [*root.glob("src/**/*.py"), *root.glob("tests/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
    return found


def _sealbench_requires(extra: str) -> set[str]:
    """What ``sealbench[extra]`` installs: its base requirements and the extra's."""
    names = set()
    for requirement in requires("sealbench") or ():
        marker = requirement.partition(";")[2]
        if "extra ==" not in marker or re.search(rf"extra == ['\"]{extra}['\"]", marker):
            names.add(_canonical(requirement))
    return names


def test_template_declares_what_its_code_and_tests_import(tmp_path: Path) -> None:
    root = scaffold_plugin(NAME, tmp_path)
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    declared = {_canonical(r) for r in project["dependencies"]}
    assert declared == {"sealbench"}
    assert "sealbench[enclave]" in project["dependencies"]
    tests_extra = {_canonical(r) for r in project["optional-dependencies"]["test"]}
    assert "pytest" in tests_extra  # what runs them
    installed = _sealbench_requires("enclave") | tests_extra | {"sealbench"}
    owners = packages_distributions()
    own = {package_name(NAME)}
    for module in sorted(_imported(root) - set(sys.stdlib_module_names) - own - {"__future__"}):
        distributions = {_canonical(d) for d in owners.get(module, ())}
        assert distributions & installed, (
            f"the template imports {module} (from {sorted(distributions)}), which neither "
            "sealbench[enclave] nor its test extra installs")


def test_installed_template_ships_its_definition_and_passes_its_own_tests(
        tmp_path: Path) -> None:
    source = scaffold_plugin(NAME, tmp_path)
    python = _plugin_python()(tmp_path / "env", source)
    done = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(source / "tests")], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "2 passed" in done.stdout
    exported = subprocess.run([python, "-m", "sealbench.client.cli", "benchmark", "definition",
                               "export", NAME], capture_output=True, text=True, timeout=300,
                              cwd=tmp_path)
    assert exported.returncode == 0, exported.stdout[-2000:] + exported.stderr[-2000:]
    definition = json.loads(exported.stdout)
    assert definition["plugin"] == f"{NAME}/1" and definition["name"] == NAME
    assert definition["format"] == "sealbench/benchmark-definition"
    listed = subprocess.run([python, "-m", "sealbench.client.cli", "benchmark", "definition",
                             "ls", "--json"], capture_output=True, text=True, timeout=300,
                            cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert {"definition": NAME, "plugin": f"{NAME}/1", "name": NAME, "version": "1.0.0"} in \
        json.loads(listed.stdout)


REGISTRY_CHILD = r"""
import json, re, sys
from datetime import UTC, datetime
from pathlib import Path

from fastapi.testclient import TestClient

from sealbench.benchmarks.registry import PluginRegistry
from sealbench.benchmarks.release import InsecureFixedNoise
from sealbench.client.registry import governance
from sealbench.client.registry.api import RegistryClient
from sealbench.crypto.digest import sha256_digest
from sealbench.server.app import create_app
from sealbench.server.db import open_database
from sealbench.server.migrate import upgrade_to_head
from sealbench.server.models import Dataset, Model, Result
from sealbench.server.services.users import create_user
from sealbench.server.settings import ServerSettings
from sealbench.server.web import mount_dashboard

name, root = sys.argv[1], Path(sys.argv[2])
now = datetime.now(UTC)
settings = ServerSettings(data_dir=root, trusted_issuers=())
db = open_database(settings.effective_database_url)
upgrade_to_head(db.engine)
with db.writer() as session:
    users = {who: create_user(session, email=f"{who}@x.test", is_admin=who == "admin", now=now)
             for who in ("admin", "authority", "hospital", "vendor")}
ids = {who: user.id for who, (user, _) in users.items()}
tokens = {who: token for who, (_, token) in users.items()}
image = sha256_digest(b"evaluation image")
app = create_app(settings)
mount_dashboard(app, settings)
statuses = {}
with TestClient(app) as http:
    authority = RegistryClient(http, tokens["authority"])
    created = governance.create_benchmark(authority, name, image_reference=f"r@{image}",
                                          image_digest=image)
    RegistryClient(http, tokens["admin"]).approve_benchmark(created.id)
    plugin = PluginRegistry().get(name)
    plugin.write_demo_dataset(root / "raw", 4, seed=1)
    prepared = plugin.prepare(root / "raw", root / "prepared")
    data = root / "prepared" / plugin.layout.data_dir
    layout = plugin.open_dataset((data / plugin.layout.dataset_file).read_bytes())
    paths = [p.relative_to(data).as_posix() for p in data.glob("cases/*/*")]
    cases = [layout.load({p: (data / p).read_bytes() for p in files})
             for files in layout.group(paths).values()]
    scores = [plugin.score(case, case.mask) for case in cases]  # a perfect model
    summary = plugin.summarise(scores, InsecureFixedNoise()).to_json()
    with db.writer() as session:
        model = Model(owner_id=ids["vendor"], name="m", version="1", digest=sha256_digest(b"m"),
                      format="onnx", io_contract={}, state="registered", created_at=now)
        sites = [Dataset(owner_id=ids["hospital"], name=f"site-{i}",
                         digest=sha256_digest(f"d{i}".encode()), case_count=4, statistics={},
                         prepared_for_id=created.id, state="registered", created_at=now)
                 for i in range(2)]
        session.add_all([model, *sites])
        session.flush()
        session.add_all([Result(
            benchmark_id=created.id, dataset_id=site.id, model_id=model.id,
            submitted_by_id=ids["hospital"], summary=summary,
            sealed_result_digest=sha256_digest(f"sealed-{i}".encode()),
            attestation_token=f"h.p-{i}.s", token_issuer="https://attestation.test.invalid",
            image_digest=image, nonce=sha256_digest(f"nonce-{i}".encode())[7:], created_at=now)
            for i, site in enumerate(sites)])
        session.commit()
    api = f"/api/v1/benchmarks/{created.id}"
    bearer = {"Authorization": f"Bearer {tokens['authority']}"}
    for path in ("", "/leaderboard", "/leaderboard/pooled"):
        answer = http.get(f"{api}{path}", headers=bearer)
        statuses[f"/api/v1/benchmarks/ID{path}"] = [answer.status_code, answer.text[:400]]
    form = http.get("/ui/sign-in")
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text).group(1)
    http.post("/ui/sign-in", data={"csrf": csrf, "token": tokens["authority"], "next": "/ui/"},
              follow_redirects=False)
    for path in ("", "/leaderboard", "/pooled", "/pooled.csv"):
        page = http.get(f"/ui/benchmarks/{created.id}{path}")
        statuses[f"/ui/benchmarks/ID{path}"] = [page.status_code, page.text[-600:]]
print(json.dumps({"pin": str(created.metrics_version), "statuses": statuses}))
"""


def test_template_plugin_goes_through_registry_leaderboard_and_dashboard_without_a_500(
        tmp_path: Path) -> None:
    """The template plug-in, installed on the registry, is published from the definition it
    ships, and its benchmark's API and dashboard pages answer with results of it stored: the
    per-site leaderboard shows them, the pooled leaderboard says the plug-in does not pool (it
    cannot: 409, never a 500)."""
    source = scaffold_plugin(NAME, tmp_path)
    python = _plugin_python()(tmp_path / "env", source)
    (tmp_path / "registry").mkdir()
    done = subprocess.run([python, "-c", REGISTRY_CHILD, NAME, str(tmp_path / "registry")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["pin"] == f"{NAME}/1"
    statuses = out["statuses"]
    for path, (status, text) in statuses.items():
        assert status < 500, (path, text)
    for path in ("/api/v1/benchmarks/ID", "/api/v1/benchmarks/ID/leaderboard",
                 "/ui/benchmarks/ID", "/ui/benchmarks/ID/leaderboard"):
        assert statuses[path][0] == 200, (path, statuses[path][1])
    for path in ("/api/v1/benchmarks/ID/leaderboard/pooled", "/ui/benchmarks/ID/pooled",
                 "/ui/benchmarks/ID/pooled.csv"):
        assert statuses[path][0] == 409 and "does not pool" in statuses[path][1], path
