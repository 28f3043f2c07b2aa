"""The typed claim set of a Confidential Space attestation token (token-claims reference page,
cross-checked with real tokens) and the constants its rules use. Re-exported by
:mod:`sealbench.gcp.confidential_space`.

Unlike sealbench's own wire objects these models *ignore* unknown members instead of forbidding
them: the issuer is Google, which adds claims over time (``eat_profile`` appeared in 2025,
``attester_tcb`` with TDX, ``submods.nvidia_gpu`` with GPUs). Refusing them would turn every
launcher update into an outage, and accepting them costs nothing because the policy only
trusts the members modelled here. Scalars are strict (no ``"1"`` → ``1``, no ``0`` → ``False``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, StrictStr, field_validator

from sealbench.contract.spec import ServiceEndpoints

__all__ = [
    "CONFIDENTIAL_HWMODELS",
    "CONFIDENTIAL_SPACE_ISSUER",
    "CONFIDENTIAL_SPACE_JWKS_URL",
    "EXPERIMENTAL_SUPPORT_ATTRIBUTE",
    "GOOGLE_ENDPOINTS",
    "REQUIRED_DBGSTAT",
    "REQUIRED_GPU_CC_MODE",
    "REQUIRED_SUPPORT_ATTRIBUTE",
    "REQUIRED_SWNAME",
    "STS_AUDIENCE",
    "AttestationClaims",
    "ConfidentialSpaceSubmod",
    "ContainerSubmod",
    "GceSubmod",
    "ImageSignature",
    "NvidiaGpuSubmod",
    "Submods",
]

#: Google's attestation verifier (tokens carry it without a trailing slash).
CONFIDENTIAL_SPACE_ISSUER: Final = "https://confidentialcomputing.googleapis.com"
#: Where Google publishes the key set its Confidential Space verifier signs tokens with (as
#: ``jwks_uri`` in the issuer's OpenID discovery document): what a relying party that opens a
#: result checks its token against.
CONFIDENTIAL_SPACE_JWKS_URL: Final = (
    "https://www.googleapis.com/service_accounts/v1/metadata/jwk/"
    "signer@confidentialspace-sign.iam.gserviceaccount.com"
)
#: Google's own token destinations: what a production workload uses (its run spec's endpoint
#: overrides absent).
GOOGLE_ENDPOINTS: Final = ServiceEndpoints(
    "https://sts.googleapis.com/v1/token", "https://cloudkms.googleapis.com",
    "https://storage.googleapis.com",
)
#: The audience of the launcher's default token (what Google's STS accepts).
STS_AUDIENCE: Final = "https://sts.googleapis.com"
REQUIRED_SWNAME: Final = "CONFIDENTIAL_SPACE"
REQUIRED_DBGSTAT: Final = "disabled-since-boot"
REQUIRED_SUPPORT_ATTRIBUTE: Final = "STABLE"
#: Preview images (the confidential-GPU family) carry only this; accepted per benchmark opt-in,
#: and then only with the GPU in confidential-computing mode (``submods.nvidia_gpu.cc_mode``).
EXPERIMENTAL_SUPPORT_ATTRIBUTE: Final = "EXPERIMENTAL"
REQUIRED_GPU_CC_MODE: Final = "ON"
#: ``hwmodel`` values of confidential hardware that Confidential Space runs on (AMD SEV and
#: SEV-SNP, Intel TDX). ``GCP_SHIELDED_VM`` (no memory encryption) and anything unknown are
#: refused; ``GCP_AMD_SEV_ES`` is left out because Confidential Space does not offer it.
CONFIDENTIAL_HWMODELS: Final = frozenset({"GCP_AMD_SEV", "GCP_AMD_SEV_SNP", "GCP_INTEL_TDX"})


class _Claims(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class ImageSignature(_Claims):
    key_id: StrictStr
    signature: StrictStr
    signature_algorithm: StrictStr


class ContainerSubmod(_Claims):
    """``submods.container``: what the launcher ran."""

    image_reference: StrictStr
    image_digest: StrictStr
    image_id: StrictStr | None = None
    restart_policy: StrictStr | None = None
    args: tuple[StrictStr, ...] = ()
    env: Mapping[StrictStr, StrictStr] = {}
    env_override: Mapping[StrictStr, StrictStr] | None = None
    cmd_override: tuple[StrictStr, ...] | None = None
    image_signatures: tuple[ImageSignature, ...] = ()


class ConfidentialSpaceSubmod(_Claims):
    """``submods.confidential_space``; ``support_attributes`` is absent on debug images."""

    support_attributes: tuple[StrictStr, ...] | None = None
    monitoring_enabled: Mapping[StrictStr, StrictBool] | None = None


class GceSubmod(_Claims):
    """``submods.gce``: the VM (numbers are strings in the token)."""

    zone: StrictStr
    project_id: StrictStr
    project_number: StrictStr
    instance_name: StrictStr
    instance_id: StrictStr


class NvidiaGpuSubmod(_Claims):
    cc_mode: StrictStr


class Submods(_Claims):
    container: ContainerSubmod
    confidential_space: ConfidentialSpaceSubmod | None = None
    gce: GceSubmod | None = None
    nvidia_gpu: NvidiaGpuSubmod | None = None


class AttestationClaims(_Claims):
    """The verified payload of an attestation token."""

    iss: StrictStr
    aud: StrictStr
    sub: StrictStr
    iat: StrictInt
    nbf: StrictInt
    exp: StrictInt
    eat_nonce: tuple[StrictStr, ...] = ()
    eat_profile: StrictStr | None = None
    secboot: StrictBool
    oemid: StrictInt | None = None
    hwmodel: StrictStr
    swname: StrictStr
    swversion: tuple[StrictStr, ...]
    dbgstat: StrictStr
    attester_tcb: tuple[StrictStr, ...] | None = None
    google_service_accounts: tuple[StrictStr, ...] = ()
    submods: Submods

    @field_validator("eat_nonce", mode="before")
    @classmethod
    def _one_nonce_is_a_string(cls, value: object) -> object:
        # The launcher writes a single nonce as a string and several as an array.
        return (value,) if isinstance(value, str) else value
