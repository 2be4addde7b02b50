"""The seed's walkthrough over REST: ``POST /gate/eval``, ``/adapter/exec`` and ``/verify/run``
run the loop's gatekeeper, executor and verifier on one case now, through each consumer's own
one-step function, as the caller's principal, once per Idempotency-Key (``once``)."""
