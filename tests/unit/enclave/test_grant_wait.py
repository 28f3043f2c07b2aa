"""A permission refusal right after a sync is a state, not a failure (issue 29): a KMS or storage
403 after a successful token exchange is retried with backoff within the run's window and shown
as "waiting for IAM to apply the grant"; a refused token exchange (the condition, the STS's
reason) fails at once; the window is an inert operator input the enclave clamps."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from google.api_core import exceptions as gexc

from sealbench.contract.errors import KeyReleaseDenied
from sealbench.contract.inputs import ENV_INPUTS, InputClass
from sealbench.contract.spec import MAX_IAM_WAIT_S, RunSpec, RunSpecError
from sealbench.crypto.envelope import KeyWrapper
from sealbench.enclave.grant_wait import MAX_DELAY_S, WAITING_MARK, GrantWait
from sealbench.enclave.run import run_enclave
from sealbench.platforms.errors import (
    CredentialError,
    KeyAccessDenied,
    KeyNotFound,
    StorageAccessDenied,
    refused_after_exchange,
)


def _denied(key: str = "projects/p/locations/global/keyRings/r/cryptoKeys/k") -> KeyAccessDenied:
    return KeyAccessDenied(key_name=key, operation="decrypt", identity=None)


class Flaky:
    """Raises ``errors`` in turn, then answers."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "released"


def test_a_refusal_within_the_window_is_retried_with_backoff() -> None:
    slept: list[float] = []
    wait = GrantWait(600, slept.append)
    fn = Flaky(*[_denied() for _ in range(6)])
    assert wait.call("model", fn) == "released"
    assert slept == [2, 4, 8, 16, MAX_DELAY_S, MAX_DELAY_S]
    assert wait.waited_s == sum(slept) and fn.calls == 7


def test_the_window_bounds_the_total_wait_then_the_refusal_stands() -> None:
    slept: list[float] = []
    wait = GrantWait(10, slept.append)
    with pytest.raises(KeyAccessDenied):
        wait.call("model", Flaky(*[_denied() for _ in range(10)]))
    assert slept == [2, 4, 4]  # the last pause is trimmed to the window
    assert "still refused after waiting 10 s" in wait.outlasted()


def test_the_window_is_shared_by_the_whole_run() -> None:
    slept: list[float] = []
    wait = GrantWait(6, slept.append)
    assert wait.call("dataset", Flaky(_denied(), _denied())) == "released"  # 2 + 4
    with pytest.raises(StorageAccessDenied):
        wait.call("model", Flaky(StorageAccessDenied("permission denied")))
    assert slept == [2, 4]


def test_no_window_no_wait() -> None:
    slept: list[float] = []
    with pytest.raises(KeyAccessDenied):
        GrantWait(0, slept.append).call("model", Flaky(_denied()))
    assert slept == [] and GrantWait(0).outlasted() == ""


@pytest.mark.parametrize("error", [
    CredentialError("cannot obtain a credential: ('Error code invalid_grant: The given credential "
                    "was rejected by the attribute condition.',)"),
    KeyNotFound(key_name="projects/p/locations/global/keyRings/r/cryptoKeys/k"),
], ids=["sts-refused-the-exchange", "key-not-found"])
def test_anything_but_a_refusal_after_the_exchange_fails_at_once(error: Exception) -> None:
    slept: list[float] = []
    with pytest.raises(type(error)):
        GrantWait(600, slept.append).call("model", Flaky(error))
    assert slept == []


def test_only_a_403_counts_as_a_grant_not_yet_applied() -> None:
    def caused(code: type[Exception]) -> KeyAccessDenied:
        exc = _denied()
        exc.__cause__ = code("no")
        return exc

    assert refused_after_exchange(caused(gexc.PermissionDenied))
    assert refused_after_exchange(caused(gexc.Forbidden))
    assert not refused_after_exchange(caused(gexc.Unauthenticated))  # 401: no valid token
    assert not refused_after_exchange(CredentialError("invalid_target"))


def test_the_progress_line_says_waiting_and_names_no_secret(
    caplog: pytest.LogCaptureFixture,
) -> None:
    key = "projects/secret-project/locations/global/keyRings/r/cryptoKeys/k"
    with caplog.at_level(logging.INFO, logger="sealbench.enclave"):
        GrantWait(60, lambda _s: None).call("model", Flaky(_denied(key)))
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith(f"{WAITING_MARK}: the model owner's key refused this workload")
    assert "secret-project" not in line


# -- the window is an operator input: inert, clamped ---------------------------------------------


def test_the_window_is_an_inert_input_clamped_by_the_enclave(world: Any) -> None:
    entry = ENV_INPUTS["SEALBENCH_IAM_WAIT"]
    assert entry.klass is InputClass.INERT and str(MAX_IAM_WAIT_S) in entry.enforced
    assert world.with_spec(iam_wait_s="999999").iam_wait_seconds == MAX_IAM_WAIT_S
    assert world.with_spec(iam_wait_s="120").iam_wait_seconds == 120
    assert world.spec.iam_wait_seconds == 0  # absent: no wait
    assert ENV_INPUTS["SEALBENCH_CPU_FALLBACK"].klass is InputClass.INERT


@pytest.mark.parametrize("value", ["-1", "1e9", "10 ", "9999999", "0x10"])
def test_a_malformed_window_is_refused(world: Any, value: str) -> None:
    environ = world.spec.to_environ() | {"SEALBENCH_IAM_WAIT": value}
    with pytest.raises(RunSpecError, match="SEALBENCH_IAM_WAIT"):
        RunSpec.from_environ(environ)


def test_the_spec_round_trips_both_inputs(world: Any) -> None:
    spec = world.with_spec(iam_wait_s="600", allow_cpu_fallback="true")
    assert RunSpec.from_environ(spec.to_environ()) == spec
    assert "SEALBENCH_IAM_WAIT" not in world.spec.to_environ()


# -- a whole run ----------------------------------------------------------------------------------


class LaggingKey:
    """A KMS key whose grant IAM applies only after ``refusals`` refused calls."""

    def __init__(self, inner: KeyWrapper, refusals: int) -> None:
        self._inner = inner
        self.refusals = refusals

    @property
    def key_name(self) -> str:
        return self._inner.key_name

    def wrap(self, plaintext: bytes, aad: bytes) -> bytes:
        return self._inner.wrap(plaintext, aad)

    def unwrap(self, ciphertext: bytes, aad: bytes) -> bytes:
        if self.refusals:
            self.refusals -= 1
            raise _denied(self._inner.key_name)
        return self._inner.unwrap(ciphertext, aad)


def _run(world: Any, spec: RunSpec, slept: list[float]) -> Any:
    return run_enclave(spec.to_environ(), world.attester(spec),
                       access=lambda _run: world.access, sleep=slept.append)


def test_a_run_right_after_a_sync_waits_for_the_grant_and_succeeds(
    world: Any, caplog: pytest.LogCaptureFixture
) -> None:
    key = world.spec.model.kms_key
    world.access.wrappers[key] = LaggingKey(world.access.wrappers[key], refusals=3)
    slept: list[float] = []
    with caplog.at_level(logging.INFO, logger="sealbench.enclave"):
        report = _run(world, world.with_spec(iam_wait_s="600"), slept)
    assert report.published is not None and slept == [2, 4, 8]
    waiting = [r.getMessage() for r in caplog.records if WAITING_MARK in r.getMessage()]
    assert len(waiting) == 3 and all("the model owner's key" in w for w in waiting)


def test_a_grant_that_never_comes_fails_after_the_window_saying_so(world: Any) -> None:
    key = world.spec.model.kms_key
    world.access.wrappers[key] = LaggingKey(world.access.wrappers[key], refusals=1000)
    slept: list[float] = []
    with pytest.raises(KeyReleaseDenied, match="still refused after waiting 60 s"):
        _run(world, world.with_spec(iam_wait_s="60"), slept)
    assert sum(slept) == 60


def test_without_a_window_the_refusal_fails_at_once(world: Any) -> None:
    key = world.spec.model.kms_key
    world.access.wrappers[key] = LaggingKey(world.access.wrappers[key], refusals=1)
    slept: list[float] = []
    with pytest.raises(KeyReleaseDenied) as info:
        _run(world, world.spec, slept)
    assert slept == [] and "waiting" not in str(info.value)


def test_a_refused_exchange_is_never_waited_for(world: Any) -> None:
    class RefusedExchange(LaggingKey):
        def unwrap(self, ciphertext: bytes, aad: bytes) -> bytes:
            raise CredentialError("cannot obtain a credential to decrypt: Error code "
                                  "invalid_grant: The given credential was rejected by the "
                                  "attribute condition.")

    key = world.spec.model.kms_key
    world.access.wrappers[key] = RefusedExchange(world.access.wrappers[key], 0)
    slept: list[float] = []
    with pytest.raises(KeyReleaseDenied, match="rejected by the attribute condition"):
        _run(world, world.with_spec(iam_wait_s="900"), slept)
    assert slept == []


def test_an_operator_cannot_stretch_the_wait_past_the_hard_maximum(world: Any) -> None:
    """The window is the operator's input: a run spec asking for days waits at most
    MAX_IAM_WAIT_S in all, then fails (a few dozen refused calls to the owner's key at most)."""
    key = world.spec.model.kms_key
    lagging = LaggingKey(world.access.wrappers[key], refusals=10_000)
    world.access.wrappers[key] = lagging
    slept: list[float] = []
    with pytest.raises(KeyReleaseDenied, match=f"after waiting {MAX_IAM_WAIT_S} s"):
        _run(world, world.with_spec(iam_wait_s="999999"), slept)
    assert sum(slept) == MAX_IAM_WAIT_S
    assert 10_000 - lagging.refusals == len(slept) + 1 < 40


def test_the_client_reads_the_enclave_s_waiting_events(capsys: pytest.CaptureFixture[str]) -> None:
    """The contract between GrantWait and the client's ``waiting`` progress: one typed
    ``waiting`` event per try on the enclave's output, each field as the client reads it
    (:func:`sealbench.contract.events.parse_event`), and nothing else."""
    from sealbench.contract.events import GrantWaiting, parse_event

    GrantWait(600, lambda _s: None).call(
        "dataset", Flaky(StorageAccessDenied("denied"), _denied(), _denied()))
    events = [parse_event(line) for line in capsys.readouterr().out.splitlines()]
    waits = [(e.owner, e.service, e.next_try_s, e.waited_s, e.window_s)
             for e in events if isinstance(e, GrantWaiting)]
    assert waits == [("dataset", "storage", 2, 0, 600), ("dataset", "key", 4, 2, 600),
                     ("dataset", "key", 8, 6, 600)]
