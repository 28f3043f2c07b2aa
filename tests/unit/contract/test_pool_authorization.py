"""The aggregator's check of a pool authorization (issue 40), attack by attack: what a registry
operator, an authority or anyone between them could hand the aggregator instead of an
authorization whose debits are on the log. Each is refused with a reason naming what failed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sealbench.contract.pool import PoolAnchor, PoolInputs
from sealbench.contract.pool_authorization import (
    AuthorizationError,
    PoolAuthorization,
    authorization_note_text,
    verify_authorization,
)
from sealbench.crypto.note import SignerKey, sign_note
from tests.pool_ledger import Ledger, witness_key
from tests.unit.contract.test_pool import POOL_RECIPIENT_KEY, _input, _inputs

RHO = 0.02


def _ledger(**kw: Any) -> Ledger:
    return Ledger(POOL_RECIPIENT_KEY, **kw)


def _authorized(ledger: Ledger, n: int = 3, **kw: Any) -> PoolAuthorization:
    ledger.append("dataset.register", {"filler": True})  # the log has a history before it
    return ledger.authorize(_inputs(*(_input(i) for i in range(1, n + 1))), rho=RHO, **kw)


def _with_inputs(auth: PoolAuthorization, **changes: Any) -> PoolAuthorization:
    doc = json.loads(auth.inputs.to_bytes())
    doc.update(changes)
    return auth.model_copy(update={"inputs": PoolInputs.model_validate(doc)})


def test_genuine_authorization_holds() -> None:
    ledger = _ledger()
    auth = _authorized(ledger)
    verified = verify_authorization(auth, ledger.anchor)
    assert verified.digest == auth.inputs.digest()
    assert verified.checkpoint.size == len(ledger.events)


def test_forged_signature_by_another_key_refused() -> None:
    """The registry operator, or the authority, signing with a key of its own."""
    ledger = _ledger()
    auth = _authorized(ledger)
    forger = SignerKey.generate(ledger.log.name)  # same name, another key
    text = authorization_note_text(auth.inputs.pool_id, auth.inputs.digest())
    forged = auth.model_copy(update={
        "signature": sign_note(text, [forger]).to_bytes().decode()})
    with pytest.raises(AuthorizationError, match="not signed by the benchmark's log key"):
        verify_authorization(forged, ledger.anchor)


def test_authority_subset_of_inputs_refused() -> None:
    """The authority drops a site (or adds one) from what the registry signed."""
    ledger = _ledger()
    auth = _authorized(ledger, n=3)
    subset = _with_inputs(auth, inputs=[i.model_dump(mode="json")
                                        for i in auth.inputs.inputs[:2]])
    with pytest.raises(AuthorizationError, match="another pool or inputs document"):
        verify_authorization(subset, ledger.anchor)


def test_signature_of_another_authorization_refused() -> None:
    """A genuine signature replayed over another pool's document."""
    ledger = _ledger()
    first = _authorized(ledger)
    second = ledger.authorize(_inputs(_input(4), _input(5)).model_copy(
        update={"pool_id": "pool-2"}), rho=RHO)
    mixed = second.model_copy(update={"signature": first.signature})
    with pytest.raises(AuthorizationError, match="another pool or inputs document"):
        verify_authorization(mixed, ledger.anchor)


def test_tampered_inclusion_proof_refused() -> None:
    ledger = _ledger()
    auth = _authorized(ledger)
    debit = auth.debit_events[0]
    bad = debit.model_copy(update={"proof": ("00" * 32, *debit.proof[1:])})
    with pytest.raises(AuthorizationError, match="not in the checkpoint's log"):
        verify_authorization(auth.model_copy(update={"debit_events": (bad,
                                                      *auth.debit_events[1:])}),
                             ledger.anchor)


def test_debit_never_logged_refused() -> None:
    """An operator's own debit event that the signed checkpoint does not hold (an event edited
    after the fact changes its leaf)."""
    ledger = _ledger()
    auth = _authorized(ledger)
    debit = auth.debit_events[0]
    edited = json.loads(debit.payload)
    edited["spent_rho"] = 0.0
    fake = debit.model_copy(update={"payload": json.dumps(edited, sort_keys=True,
                                                          separators=(",", ":"))})
    with pytest.raises(AuthorizationError, match="not in the checkpoint's log"):
        verify_authorization(auth.model_copy(update={"debit_events": (fake,
                                                      *auth.debit_events[1:])}),
                             ledger.anchor)


def test_stale_checkpoint_that_predates_the_debits_refused() -> None:
    ledger = _ledger()
    auth = _authorized(ledger)
    early = auth.model_copy(update={"checkpoint": ledger.checkpoint(size=1)})
    with pytest.raises(AuthorizationError, match="not in the checkpoint's log"):
        verify_authorization(early, ledger.anchor)


def test_checkpoint_of_another_log_refused() -> None:
    ledger, other = _ledger(), _ledger()
    auth = _authorized(ledger)
    _authorized(other)
    with pytest.raises(AuthorizationError, match="checkpoint is not signed"):
        verify_authorization(auth.model_copy(update={"checkpoint": other.checkpoint()}),
                             ledger.anchor)


def test_debit_cheaper_than_the_release_refused() -> None:
    ledger = _ledger()
    ledger.append("dataset.register", {"filler": True})
    auth = ledger.authorize(_inputs(_input(1), _input(2)), rho=RHO / 10)
    relabelled = _with_inputs(auth, rho=RHO)  # the document claims the full cost
    with pytest.raises(AuthorizationError):
        verify_authorization(relabelled, ledger.anchor)


def test_overspent_ledger_refused() -> None:
    ledger = _ledger(budget_rho=RHO / 2)
    auth = _authorized(ledger)
    with pytest.raises(AuthorizationError, match="overspends its ledger"):
        verify_authorization(auth, ledger.anchor)


def test_debits_for_another_authorization_refused() -> None:
    ledger = _ledger()
    first = _authorized(ledger)
    second = ledger.authorize(_inputs(_input(1), _input(2), _input(3)).model_copy(
        update={"pool_id": "pool-2"}), rho=RHO)
    # the first pool's debits, genuinely logged and proven in the current checkpoint
    borrowed = second.model_copy(update={"debit_events": tuple(
        ledger.proven(ledger.events[e.seq - 1]) for e in first.debit_events)})
    with pytest.raises(AuthorizationError, match="not the ones the authorization names"):
        verify_authorization(borrowed, ledger.anchor)


def test_one_site_pool_refused() -> None:
    """A pool of one site is exactly that site's own release."""
    ledger = _ledger()
    auth = _authorized(ledger, n=1)
    with pytest.raises(AuthorizationError, match="at least 2 sites"):
        verify_authorization(auth, ledger.anchor)
    with pytest.raises(AuthorizationError, match="at least 4 sites"):
        verify_authorization(_authorized(_ledger(), n=3), _ledger().anchor, min_sites=4)


def test_unwitnessed_checkpoint_refused_where_witnesses_are_named() -> None:
    w1, w2 = witness_key("witness.example/w1"), witness_key("witness.example/w2")
    ledger = _ledger(witnesses=(w1, w2), quorum=2)
    with pytest.raises(AuthorizationError, match="carries 0 of the 2 witness cosignatures"):
        verify_authorization(_authorized(ledger, cosigners=()), ledger.anchor)
    with pytest.raises(AuthorizationError, match="carries 1 of the 2"):
        verify_authorization(_authorized(ledger, cosigners=(w1,)), ledger.anchor)
    verify_authorization(_authorized(ledger, cosigners=(w1, w2)), ledger.anchor)


def test_cosignature_by_a_witness_the_benchmark_does_not_name_does_not_count() -> None:
    w1 = witness_key("witness.example/w1")
    stranger = witness_key("witness.example/w1")  # same name, the operator's own key
    ledger = _ledger(witnesses=(w1,), quorum=1)
    with pytest.raises(AuthorizationError, match="carries 0 of the 1"):
        verify_authorization(_authorized(ledger, cosigners=(stranger,)), ledger.anchor)


def test_anchor_without_the_witnesses_is_another_identity() -> None:
    """Dropping the witnesses from the spec changes the uid the sites granted (so no key)."""
    w1 = witness_key("witness.example/w1")
    ledger = _ledger(witnesses=(w1,), quorum=1)
    lax = PoolAnchor(recipient_key=POOL_RECIPIENT_KEY, log_key=ledger.anchor.log_key)
    assert lax.digest() != ledger.anchor.digest()


# -- Laplace parts (issue 41): the debit costs the release's whole PrivacyLoss -------------------


def test_laplace_release_authorization_holds() -> None:
    ledger = _ledger()
    ledger.append("dataset.register", {"filler": True})
    auth = ledger.authorize(_inputs(_input(1), _input(2)), rho=None, laplace=(0.5,))
    verified = verify_authorization(auth, ledger.anchor)
    assert verified.inputs.loss.laplace == (0.5,) and not verified.inputs.exact


def test_debit_without_the_releases_laplace_part_refused() -> None:
    """An operator debits only the Gaussian breakdown of a split release and claims the
    Laplace headline is paid for too."""
    ledger = _ledger()
    ledger.append("dataset.register", {"filler": True})
    auth = ledger.authorize(_inputs(_input(1), _input(2)), rho=RHO)
    relabelled = _with_inputs(auth, laplace=[0.5])  # the document claims the whole cost
    with pytest.raises(AuthorizationError):
        verify_authorization(relabelled, ledger.anchor)


def test_debit_of_a_cheaper_laplace_epsilon_refused() -> None:
    ledger = _ledger()
    ledger.append("dataset.register", {"filler": True})
    auth = ledger.authorize(_inputs(_input(1), _input(2)), rho=None, laplace=(0.05,))
    relabelled = _with_inputs(auth, laplace=[0.5])
    with pytest.raises(AuthorizationError):
        verify_authorization(relabelled, ledger.anchor)


def test_laplace_spend_over_the_budget_refused() -> None:
    """The Gaussian spend alone fits; with the Laplace part it does not."""
    ledger = _ledger(budget_rho=RHO * 1.01)
    ledger.append("dataset.register", {"filler": True})
    auth = ledger.authorize(_inputs(_input(1), _input(2)), rho=RHO, laplace=(0.5,))
    with pytest.raises(AuthorizationError, match="overspends its ledger"):
        verify_authorization(auth, ledger.anchor)


def test_inputs_without_laplace_serialise_as_before() -> None:
    """An authorization signed before issue 41 keeps its digest: no ``laplace`` key."""
    ledger = _ledger()
    auth = _authorized(ledger)
    assert b'"laplace"' not in auth.inputs.to_bytes()
