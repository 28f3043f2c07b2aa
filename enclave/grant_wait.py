"""Waiting for IAM to apply a grant: a permission refusal right after ``policy sync`` is a state,
not a failure.

Google applies IAM changes "typically [in] 2 minutes, potentially 7 minutes or longer": a run
started just after an owner's sync may find its token exchange accepted (the pool's condition
holds) and KMS or storage still answering 403 ``PERMISSION_DENIED``. :class:`GrantWait` retries
exactly that refusal (:func:`~sealbench.platforms.errors.refused_after_exchange`), with exponential
backoff, for at most the run's window (``SEALBENCH_IAM_WAIT``, an *inert* operator input
clamped to :data:`~sealbench.contract.spec.MAX_IAM_WAIT_S`; see :mod:`sealbench.contract.inputs`).
Everything else fails at once: a token exchange the STS refuses (its reason names the
condition, the provider or the token), a missing key or object, an integrity failure.

While it waits it writes one ``waiting`` run event per try
(:class:`sealbench.contract.events.GrantWaiting`: the contract the client reads) and logs this line
for people, naming the owner and the service, never a key, a principal or a token::

    waiting for IAM to apply the grant: the model owner's key refused this workload; next try
    in 4 s (6 of 600 s waited)                                            (one line, wrapped here)

One :class:`GrantWait` serves a whole run: the window bounds the run's total wait, whichever
owner's grant lags. It counts the seconds it slept (the tries themselves, each bounded by its
client's timeout, come on top), so a fake ``sleep`` makes it deterministic in tests.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Literal, TypeVar

from sealbench.enclave.progress import grant_waiting
from sealbench.platforms.errors import KeyAccessDenied, StorageAccessDenied, refused_after_exchange

__all__ = ["FIRST_DELAY_S", "MAX_DELAY_S", "WAITING_MARK", "GrantWait"]

_log = logging.getLogger("sealbench.enclave")

#: The text that starts the progress line of each wait (the client's contract).
WAITING_MARK: Final = "waiting for IAM to apply the grant"
#: The first pause, doubled after each refusal up to :data:`MAX_DELAY_S`.
FIRST_DELAY_S: Final = 2.0
MAX_DELAY_S: Final = 30.0

T = TypeVar("T")
Owner = Literal["dataset", "model"]


@dataclass
class GrantWait:
    """Retries a permission refusal after a successful token exchange for at most ``window_s``
    seconds of waiting in all (0: never)."""

    window_s: float
    sleep: Callable[[float], None] = time.sleep
    waited_s: float = field(default=0.0, init=False)
    tries: int = field(default=0, init=False)
    _delay: float = field(default=FIRST_DELAY_S, init=False)

    def call(self, owner: Owner, fn: Callable[[], T]) -> T:
        """``fn()``; a refusal :func:`~sealbench.platforms.errors.refused_after_exchange` accepts is
        retried while the window lasts, then raised as is (:attr:`waited_s` says for how long);
        any other error is raised at once."""
        while True:
            try:
                return fn()
            except (KeyAccessDenied, StorageAccessDenied) as exc:
                left = self.window_s - self.waited_s
                if not refused_after_exchange(exc) or left <= 0:
                    raise
                delay = min(self._delay, left)
                self._delay = min(self._delay * 2, MAX_DELAY_S)
                service = "key" if isinstance(exc, KeyAccessDenied) else "storage"
                self.tries += 1
                grant_waiting(WAITING_MARK, owner, service, delay, self.waited_s, self.window_s)
                self.sleep(delay)
                self.waited_s += delay

    def outlasted(self) -> str:
        """What a refusal's message adds once the run waited: empty when it never did."""
        if not self.waited_s:
            return ""
        return (f" (still refused after waiting {self.waited_s:.0f} s for IAM to apply the "
                "grant: the owner's grant does not cover this run, or its sync is older than "
                "the wait; its owner runs 'sealbench policy sync')")
