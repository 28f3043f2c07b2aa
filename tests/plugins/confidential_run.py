"""One confidential evaluation of an installed benchmark plug-in, end to end on the mock TEE, as
a hospital and a model owner do it (run with the interpreter that has the plug-in)::

    python tests/plugins/confidential_run.py --plugin NAME --model FILE --root DIR
        [--cases 6] [--seed 0] [--tee mock|docker --image REF]

In-process mock cloud (STS, KMS, storage); the hospital writes the plug-in's demo data,
prepares it with the plug-in, seals it; the model owner seals the model; both owners' key
release policies grant exactly this workload (image digest, data, model, recipient) and pin the
plug-in's version; the enclave runs as a child process (``--tee mock``, this interpreter) or in
the given evaluation image (``--tee docker``); the hospital downloads, verifies and opens the
result. Prints one JSON line: the plug-in pin, the image digest attested, the public summary,
the number of per-case results and the enclave's step timings.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(prog="confidential_run.py")
    parser.add_argument("--plugin", required=True)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--cases", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tee", choices=("mock", "docker"), default="mock")
    parser.add_argument("--image", help="the evaluation image (--tee docker)")
    args = parser.parse_args()

    from google.auth.transport.requests import AuthorizedSession
    from google.oauth2.credentials import Credentials

    from sealbench.benchmarks.registry import PluginRegistry
    from sealbench.benchmarks.release import LocalExact
    from sealbench.client.assets.store import seal_dataset, seal_model
    from sealbench.client.runs.result_open import download_result, open_result
    from sealbench.contract.spec import AssetLocation, RunSpec
    from sealbench.contract.workload import WorkloadIdentity
    from sealbench.crypto.sealing import (
        generate_recipient_key,
        public_key_digest,
        public_key_to_raw,
    )
    from sealbench.gcp.confidential_space import principal_set
    from sealbench.gcp.gcs import GcsBlobStore, make_storage_client
    from sealbench.gcp.kms import KmsKeyWrapper, make_kms_client
    from sealbench.gcp.policy import AssetPolicy, PoolProvider
    from sealbench.gcp.policy_writer import PolicyWriter
    from sealbench.mocktee.provision import provision_owner
    from sealbench.mocktee.server import MockCloud

    plugin = PluginRegistry().get(args.plugin)
    pin = str(plugin.ref)
    root: Path = args.root
    plugin.write_demo_dataset(root / "raw", args.cases, seed=args.seed)
    prepared = root / "prepared"
    plugin.prepare(root / "raw", prepared)

    with MockCloud(root / "state") as cloud:
        ep = cloud.endpoints
        owners = {}
        for name, number in (("hospital", "200000000002"), ("modelco", "300000000003")):
            owner = provision_owner(ep, email=f"{name}@example.org", project_id=name,
                                    project_number=number, bucket=f"{name}-bucket")
            creds = Credentials(owner.access_token)  # type: ignore[no-untyped-call]
            store = GcsBlobStore(make_storage_client(name, creds, ep.storage), owner.bucket)
            wrapper = KmsKeyWrapper(owner.key_name, make_kms_client(creds, ep.kms))
            owners[name] = (owner, creds, store, wrapper,
                            PoolProvider(number, f"{name}-pool", "attestation"))
        h, hcreds, hstore, hwrap, hpool = owners["hospital"]
        m, mcreds, mstore, mwrap, mpool = owners["modelco"]
        data = seal_dataset(prepared, asset_id="ds-plugin", key_wrapper=hwrap, store=hstore,
                            prefix="ds/")
        model = seal_model(args.model, asset_id="model-plugin", key_wrapper=mwrap, store=mstore,
                           prefix="m/")
        if args.tee == "docker":
            import docker

            from sealbench.mocktee.docker_launcher import DockerLauncher

            launcher = DockerLauncher(docker.from_env(timeout=900), cloud.launcher(), args.image)
            result_dir = root / "results"
            result_dir.mkdir()
            result_uri = result_dir.as_uri()
        else:
            from sealbench.mocktee.image import enclave_image_digest
            from sealbench.mocktee.process_launcher import MockProcessLauncher

            launcher = MockProcessLauncher(cloud.launcher(), image_digest=enclave_image_digest(),
                                           python=sys.executable, workdir_root=root / "runs")
            result_uri = f"gs://{h.bucket}/results/run-1"
        image = launcher.image_digest
        recipient = generate_recipient_key()
        workload = WorkloadIdentity(image, data.digest, model.digest,
                                    public_key_digest(recipient.public_key()), "1", pin)
        for owner, creds, pool, include in ((h, hcreds, hpool, True), (m, mcreds, mpool, False)):
            PolicyWriter.from_credentials(
                creds, iam_url=ep.iam, kms_url=ep.kms, storage_url=ep.storage
            ).sync(AssetPolicy(
                provider=pool, key_name=owner.key_name, bucket=owner.bucket,
                workloads=frozenset({workload}), include_data=include,
                issuer_uri=ep.issuer + "/",
                endpoints=ep.service_endpoints()))
        session = AuthorizedSession(hcreds)  # type: ignore[no-untyped-call]
        url = f"{ep.storage}/storage/v1/b/{h.bucket}/iam"
        policy = session.get(url, timeout=30).json()
        member = principal_set(hpool.project_number, hpool.pool_id, workload.uid())
        policy["bindings"] = [*policy.get("bindings", []),
                              {"role": "roles/storage.objectCreator", "members": [member]}]
        session.put(url, json=policy, timeout=30).raise_for_status()
        spec = RunSpec(
            run_id="run-1", benchmark_id="1", metrics_version=pin,
            dataset=AssetLocation(asset_id="ds-plugin", uri=f"gs://{h.bucket}/ds",
                                  kms_key=h.key_name, pool_provider=hpool.name),
            model=AssetLocation(asset_id="model-plugin", uri=f"gs://{m.bucket}/m",
                                kms_key=m.key_name, pool_provider=mpool.name),
            result_uri=result_uri,
            recipient_public_key=base64.b64encode(
                public_key_to_raw(recipient.public_key())).decode(),
            data_digest=data.digest, model_digest=model.digest,
            recipient_digest=public_key_digest(recipient.public_key()),
            sts_url=ep.sts_token_url, kms_endpoint=ep.kms, storage_endpoint=ep.storage,
        )
        lines: list[str] = []
        launched = launcher.launch(spec, on_output=lines.append, timeout=600)
        if args.tee == "docker":
            from sealbench.platforms.storage import open_storage_uri

            store, prefix = open_storage_uri(result_uri)
            objects = download_result(store, prefix)
        else:
            objects = download_result(hstore, "results/run-1/")
        opened = open_result(objects, recipient, jwks=None)
    steps: dict[str, float] = {}
    from sealbench.client.runs.outcome import step_timings

    for line in lines:
        steps = step_timings(line) or steps  # the enclave's "done" event
    print(json.dumps({
        "pin": pin, "image_digest": image, "attested_image": opened.claims.image_digest,
        "attested_pin": opened.claims.env_override.get("SEALBENCH_METRICS_VERSION"),
        "summary": json.loads(objects.summary), "results": len(opened.cases),
        "failed": sum(c.failed for c in opened.cases),
        # the hospital's own exact figures of the sealed cases (what the release is noise on)
        "exact": opened.benchmark.summarise(opened.cases, LocalExact()).to_json(),
        "wall_s": launched.wall_seconds, "steps": steps}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
