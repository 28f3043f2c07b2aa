"""The evaluation and aggregator images a benchmark pins, for a ``--tee`` backend: the mock's
digest derived from the enclave code, Docker's local image (refused as stale unless built from
this checkout), a real TEE's pushed image named explicitly."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from sealbench.client.backends import TeeBackend, check_tee
from sealbench.client.errors import ConfigError, NotAvailableError

__all__ = [
    "EvaluationImage",
    "aggregator_image",
    "docker_image_module",
    "evaluation_image",
]


@dataclass(frozen=True)
class EvaluationImage:
    reference: str
    digest: str


def evaluation_image(
    tee: str, reference: str | None = None, digest: str | None = None
) -> EvaluationImage:
    """The evaluation image a benchmark pins: explicit ``reference``/``digest``, else the image
    of the ``tee`` backend: for ``mock``, the digest derived from the enclave code it runs; for
    ``docker``, the local image ``sealbench-eval:latest`` (its image ID, which the Docker
    launcher attests), refused as stale unless it was built from the checkout found around the
    working directory or the installed code (not checked without a checkout);
    ``confidential-space`` needs the pushed image named explicitly."""
    if reference and digest:
        return EvaluationImage(reference, digest)
    if reference or digest:
        raise ConfigError("pass both --image-reference and --image-digest, or neither")
    backend = check_tee(tee)
    if backend == "docker":
        image_module = docker_image_module()
        engine = image_module.connect_engine()
        source = image_module.checkout_source()
        found = (
            image_module.local_image(engine)
            if source is None
            else image_module.fresh_local_image(engine, source)
        )
        return EvaluationImage(found.reference, found.digest)
    if backend != TeeBackend.MOCK:  # a real TEE runs the image pushed to a registry
        raise ConfigError(
            f"a benchmark for --tee {backend} names its pushed image explicitly",
            hint="pass --image-reference REPO@sha256:… and --image-digest sha256:… "
            "(see docs/image.md)",
        )
    from sealbench.mocktee.image import mock_image

    image = mock_image()
    return EvaluationImage(image.reference, image.digest)


def aggregator_image(tee: str) -> str:
    """The digest of the ``tee`` backend's aggregator image (issue 27; ``benchmark create
    --pool-in-tee``): for ``mock``, the digest derived from the enclave code and the
    aggregator's entry; for ``docker``, the local ``sealbench-aggregate:latest`` that
    ``sealbench image build`` makes beside the evaluation image, refused as stale as the
    evaluation image is; a real TEE's pushed aggregator is named with ``--aggregator-digest``."""
    backend = check_tee(tee)
    if backend == "docker":
        image_module = docker_image_module()
        engine = image_module.connect_engine()
        found = image_module.local_aggregator_image(engine)
        source = image_module.checkout_source()
        if source is not None:
            image_module.check_built_from(
                found.reference, found.labels, image_module.source_digest(source))
        return str(found.digest)
    if backend != TeeBackend.MOCK:
        raise ConfigError(
            f"a benchmark for --tee {backend} names its pushed aggregator image explicitly",
            hint="pass --aggregator-digest sha256:… (see docs/image.md)")
    from sealbench.mocktee.image import aggregator_image_digest

    return str(aggregator_image_digest())


def docker_image_module() -> ModuleType:
    """:mod:`sealbench.client.images.build` (it needs the Docker SDK of the ``docker``
    extra)."""
    try:
        import sealbench.client.images.build as image_module
    except ImportError as exc:
        raise NotAvailableError(
            f"the Docker backend needs the Docker SDK ({exc.name} is not installed)",
            hint="pip install 'sealbench[docker]'",
        ) from exc
    return image_module
