"""The enclave's ``failed`` event (:func:`sealbench.enclave.progress.run_failed`): the failure's
exit code and code, its public reason on one line, and for a key-release refusal the rule of
the owners' condition its reason names; every failure the enclave can raise fits the event."""

from __future__ import annotations

import pytest

from sealbench.contract.errors import (
    FAILURE_CODES,
    AssetIntegrityError,
    EnclaveError,
    KeyReleaseDenied,
    error_for_code,
)
from sealbench.contract.events import (
    MAX_EVENT_LINE_CHARS,
    MAX_FAILURE_REASON_CHARS,
    RunFailed,
    parse_event,
)
from sealbench.contract.inputs import Rule
from sealbench.enclave import progress

_MOCK_STS = "unauthorized_client ... [sealbench mock diagnosis: {clause} is false]"


def _failed(error: EnclaveError, capsys: pytest.CaptureFixture[str]) -> RunFailed:
    progress.run_failed(error)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and len(lines[0]) <= MAX_EVENT_LINE_CHARS
    event = parse_event(lines[0])
    assert isinstance(event, RunFailed)
    return event


@pytest.mark.parametrize("code", FAILURE_CODES)
def test_every_failure_writes_its_event(code: str, capsys: pytest.CaptureFixture[str]) -> None:
    error = error_for_code(code)
    assert error is not None
    event = _failed(error("why it failed"), capsys)
    assert (event.exit_code, event.code, event.reason, event.rule) == (
        error.exit_code, code, "why it failed", None)


@pytest.mark.parametrize(
    ("clause", "rule"),
    [
        ("assertion.dbgstat == 'disabled-since-boot'", Rule.PRODUCTION_IMAGE),
        ("'STABLE' in assertion.submods.confidential_space.support_attributes",
         Rule.PRODUCTION_IMAGE),
        ("assertion.hwmodel in ['GCP_AMD_SEV']", Rule.HARDWARE),
        ("assertion.secboot == true", Rule.SECURE_BOOT),
        ("!has(assertion.submods.container.env_override.SEALBENCH_STS_URL)", Rule.ENDPOINT),
        ("size(assertion.submods.container.cmd_override) == 0", Rule.NO_COMMAND),
        ("assertion.submods.container.image_digest in ['sha256:aa']", Rule.IMAGE),
    ],
)
def test_a_refusal_names_the_rule_its_clause_enforces(
    clause: str, rule: Rule, capsys: pytest.CaptureFixture[str]
) -> None:
    reason = "the dataset owner refused this workload: " + _MOCK_STS.format(clause=clause)
    event = _failed(KeyReleaseDenied(reason), capsys)
    assert (event.code, event.rule, event.reason) == ("key_release_denied", rule, reason)


def test_a_refusal_naming_no_clause_and_other_failures_name_no_rule(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _failed(KeyReleaseDenied("permission denied"), capsys).rule is None
    assert _failed(AssetIntegrityError("dbgstat secboot hwmodel"), capsys).rule is None


def test_the_reason_is_one_printable_line_that_fits(capsys: pytest.CaptureFixture[str]) -> None:
    event = _failed(EnclaveError("two\nlines\tand a\x1b[31m colour\x9b"), capsys)
    assert event.reason == "two lines and a [31m colour"
    long = _failed(EnclaveError("x" * 10_000), capsys)
    assert long.reason == "x" * MAX_FAILURE_REASON_CHARS
    # quotes double when escaped: shortened until the line fits, never dropped
    quoted = _failed(EnclaveError('"' * 10_000), capsys)
    assert quoted.reason and set(quoted.reason) == {'"'}
    assert _failed(EnclaveError(""), capsys).reason == "EnclaveError"
