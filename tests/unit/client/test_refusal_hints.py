"""A refused run's advice names the likely cause instead of always suggesting 'policy sync'."""

from __future__ import annotations

import pytest

from sealbench.client.errors import KeyReleaseDeniedError
from sealbench.client.runs.launchers import EnclaveRunFailed
from sealbench.client.runs.single import translate_launch_error
from sealbench.contract.errors import KeyReleaseDenied

_DIAGNOSIS = "unauthorized_client ... [sealbench mock diagnosis: {clause} is false]"


@pytest.mark.parametrize(
    ("clause", "advice"),
    [
        ("assertion.dbgstat == 'disabled-since-boot'", "debug image is refused by design"),
        ("assertion.hwmodel in ['GCP_AMD_SEV']", "not confidential hardware"),
        ("assertion.secboot == true", "not confidential hardware"),
        ("!has(assertion.submods.container.env_override.SEALBENCH_STS_URL)", "endpoints"),
        ("size(assertion.submods.container.cmd_override) == 0", "command override"),
        ("assertion.submods.container.image_digest in ['sha256:aa']", "not approved this image"),
    ],
)
def test_refusal_advice_names_the_cause(clause: str, advice: str) -> None:
    reason = "the dataset owner refused this workload: " + _DIAGNOSIS.format(clause=clause)
    error = translate_launch_error(EnclaveRunFailed(KeyReleaseDenied.exit_code, reason, None))
    assert isinstance(error, KeyReleaseDeniedError)
    assert advice in (error.hint or "")
    assert "policy sync" not in (error.hint or "") or "image" in advice


def test_unexplained_refusal_keeps_the_generic_advice() -> None:
    reason = "the model owner refused this workload: permission denied"
    error = translate_launch_error(EnclaveRunFailed(KeyReleaseDenied.exit_code, reason, None))
    assert isinstance(error, KeyReleaseDeniedError)
    assert error.hint == KeyReleaseDeniedError.default_hint
