"""MedPerf's registry server, run from its own repository for ``server_bench.py`` to measure
side by side with ours (issue 42). Not a test (pytest collects nothing here).

MedPerf (https://github.com/mlcommons/medperf) is a Django REST Framework app served by
gunicorn. What this module needs, once::

    git clone https://github.com/mlcommons/medperf /opt/medperf      # or any checkout
    python3 -m venv /opt/medperf-venv
    /opt/medperf-venv/bin/pip install -r /opt/medperf/server/requirements.txt

then ``server_bench.py --medperf /opt/medperf --medperf-python /opt/medperf-venv/bin/python``.

For each run it copies the checkout's ``server/`` into a temporary folder, configures it from
MedPerf's own local SQLite profile (``.env.local.local-auth.sqlite``) with ``DEBUG=False`` and
the database in that folder, applies its migrations (``manage.py migrate``), seeds through its
ORM as many benchmarks, datasets and models as ours gets (each benchmark with its MLCubes and
reference model, as MedPerf requires), signs a token for the seeded user with MedPerf's own test
key (``mock_tokens/private_key.pem.test``, the key its local profile verifies), and starts
``gunicorn medperf.wsgi:application`` with the workers asked for. The requests are MedPerf's
equivalents of ours: ``GET /api/v0/benchmarks/?limit=N&offset=R``, ``GET
/api/v0/benchmarks/<id>/`` and ``POST /api/v0/datasets/`` (a new dataset, as ours).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

_SEED = r"""
import json, os, sys, time
import django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "medperf.settings")
django.setup()
import jwt
from django.contrib.auth import get_user_model
from django.db import transaction
from benchmark.models import Benchmark
from dataset.models import Dataset
from mlcube.models import MlCube
from model.models import Model

n, key_file = int(sys.argv[1]), sys.argv[2]
User = get_user_model()
with transaction.atomic():
    user = User.objects.create_user(username="load", email="load@example.com")
    prep = MlCube.objects.create(name="prep", container_config={"image": "prep"},
                                 image_hash="h", owner=user)
    evaluator = MlCube.objects.create(name="eval", container_config={"image": "eval"},
                                      image_hash="h", owner=user)
    for i in range(n):
        cube = MlCube.objects.create(name=f"model-cube-{i}", container_config={"image": "m"},
                                     image_hash="h", owner=user)
        model = Model.objects.create(name=f"model-{i}", owner=user, type="CONTAINER",
                                     container=cube)
        Benchmark.objects.create(
            name=f"bench-{i}", description="seeded", owner=user,
            demo_dataset_tarball_url="https://example.invalid/demo.tar.gz",
            demo_dataset_tarball_hash="h", demo_dataset_generated_uid=f"g{i}",
            data_preparation_mlcube=prep, reference_model=model,
            data_evaluator_mlcube=evaluator)
        Dataset.objects.create(name=f"site-{i}", owner=user, input_data_hash="h",
                               generated_uid=f"site-{i}", split_seed=0,
                               data_preparation_mlcube=prep, submitted_as_prepared=True)
claims = {"https://medperf.org/email": "load@example.com", "iss": "https://localhost:8000/",
          "sub": "load", "aud": "https://localhost-localdev/", "iat": int(time.time()),
          "exp": int(time.time()) + 10**8}
print(json.dumps({"token": jwt.encode(claims, open(key_file, "rb").read(), algorithm="RS256"),
                  "prep": prep.id}))
"""


class MedPerfRegistry:
    """MedPerf's server on a loopback port, seeded with ``seed`` of each asset (see the
    module's docstring); the same interface as server_bench's registries."""

    name = "medperf"

    def __init__(self, checkout: Path, python: str, seed: int, workers: int, port: int) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="sealbench-bench-medperf-"))
        server = self.base / "server"
        shutil.copytree(checkout / "server", server)
        profile = server / ".env.local.local-auth.sqlite"
        if not profile.is_file():
            raise SystemExit(f"no MedPerf server profile at {profile}: is {checkout} a "
                             "checkout of github.com/mlcommons/medperf?")
        shutil.copy(profile, server / ".env")
        # the environment wins over .env (django-environ's read_env sets defaults only)
        self.env = {**os.environ, "DEBUG": "False",
                    "DATABASE_URL": f"sqlite:///{self.base / 'medperf.sqlite3'}"}
        self.env.pop("PYTHONPATH", None)
        self.proc: subprocess.Popen[bytes] | None = None
        subprocess.run([python, "manage.py", "migrate", "--noinput"], cwd=server, env=self.env,
                       check=True, capture_output=True)
        t = time.perf_counter()
        seeded = subprocess.run(
            [python, "-c", _SEED, str(seed), str(checkout / "mock_tokens" /
                                                  "private_key.pem.test")],
            cwd=server, env=self.env, check=True, capture_output=True, text=True)
        found = json.loads(seeded.stdout.strip().splitlines()[-1])
        self.token: str = found["token"]
        self.prep_cube: int = found["prep"]
        print(f"[sqlite/medperf] seeded {seed} benchmarks/datasets/models "
              f"in {time.perf_counter() - t:.1f}s", flush=True)
        self.url = f"http://127.0.0.1:{port}"
        gunicorn = str(Path(python).with_name("gunicorn"))
        self.log = self.base / "gunicorn.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [gunicorn, "medperf.wsgi:application", "--bind", f"127.0.0.1:{port}",
                 "--workers", str(workers), "--log-level", "warning"],
                cwd=server, env=self.env, stdout=out, stderr=subprocess.STDOUT)

    def paths(self) -> dict[str, Any]:
        """What the load generator sends for each case (see server_bench's ``_python_load``)."""
        return {"list": "/api/v0/benchmarks/?limit={size}&offset={offset}",
                "one": "/api/v0/benchmarks/{id}/", "post": "/api/v0/datasets/",
                "post_body": {"input_data_hash": "h", "split_seed": 0,
                              "data_preparation_mlcube": self.prep_cube,
                              "submitted_as_prepared": True},
                "uid_field": "generated_uid",
                # its local profile redirects plain HTTP to HTTPS unless a proxy says it
                # terminated TLS, as the proxy in front of a deployment does
                "headers": {"X-Forwarded-Proto": "https"}}

    def close(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        shutil.rmtree(self.base, ignore_errors=True)
