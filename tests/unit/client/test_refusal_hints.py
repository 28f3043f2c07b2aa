"""A refused run's advice names the likely cause instead of always suggesting 'policy sync': it
keys on the failure code and the rule the enclave's ``failed`` event names, never on the
reason's text."""

from __future__ import annotations

import pytest

from sealbench.client.errors import KeyReleaseDeniedError
from sealbench.client.runs.launchers import EnclaveRunFailed
from sealbench.client.runs.outcome import translate_launch_error
from sealbench.contract.errors import KeyReleaseDenied
from sealbench.contract.inputs import Rule

_REFUSED = KeyReleaseDenied.exit_code, KeyReleaseDenied.code


@pytest.mark.parametrize(
    ("rule", "advice"),
    [
        (Rule.PRODUCTION_IMAGE, "debug image is refused by design"),
        (Rule.HARDWARE, "not confidential hardware"),
        (Rule.SECURE_BOOT, "not confidential hardware"),
        (Rule.ENDPOINT, "endpoints"),
        (Rule.NO_COMMAND, "command override"),
        (Rule.IMAGE, "not approved this image"),
    ],
)
def test_refusal_advice_names_the_cause(rule: Rule, advice: str) -> None:
    failed = EnclaveRunFailed(_REFUSED[0], "the dataset owner refused this workload", None,
                              code=_REFUSED[1], rule=rule)
    error = translate_launch_error(failed)
    assert isinstance(error, KeyReleaseDeniedError)
    assert advice in (error.hint or "")
    assert "policy sync" not in (error.hint or "") or "image" in advice
    # a lagging grant does not mask a cause of the run's own
    lagged = translate_launch_error(failed, lag="the model owner's grants lag")
    assert (lagged.hint == "the model owner's grants lag") == (rule is Rule.IMAGE)  # type: ignore[attr-defined]


def test_unexplained_refusal_keeps_the_generic_advice() -> None:
    reason = "the model owner refused this workload: permission denied"
    error = translate_launch_error(EnclaveRunFailed(*_REFUSED[:1], reason, None,
                                                    code=_REFUSED[1]))
    assert isinstance(error, KeyReleaseDeniedError)
    assert error.hint == KeyReleaseDeniedError.default_hint


@pytest.mark.parametrize("code", [None, "integrity"])
def test_the_reason_text_alone_gives_no_advice(code: str | None) -> None:
    """Prose naming a clause is not read: without the event's rule (a workload that died
    without its event, or a rule under another code) the generic advice stands."""
    reason = "refused: assertion.dbgstat == 'disabled-since-boot' is false"
    error = translate_launch_error(EnclaveRunFailed(
        KeyReleaseDenied.exit_code, reason, None, code=code,
        rule=None if code is None else Rule.PRODUCTION_IMAGE))
    assert isinstance(error, KeyReleaseDeniedError)
    assert error.hint == KeyReleaseDeniedError.default_hint
