"""What the verifier reads to judge a plan's ``verify`` block, and one reading's judgement.

The accepted shapes are ``core/domain/verify.py``'s (anything else is a "cannot verify: …"
reading, never an exception). One reading at time ``at`` of a change that finished at ``since``:
a metric check with ``for_s`` is judged only once its window after the change has passed, on the
worst value over the window ending at ``at`` (Prometheus: ``max_over_time((q)[Ns:])`` evaluated
at ``at``); before that it is *pending*, with its value at ``at`` as the reading. A check without
``for_s``, and a probe, is judged on its reading at ``at``. A block holds when every check holds;
the first check that does not is the reason.

Sources: ``PrometheusSource`` (the HTTP query API: a query is checked by
``core/domain/promql.py`` before it is sent, and carries Prometheus' own ``timeout``) and
``StaticSource``, a stand-in table used only where one is configured (``OPSGATE_STATIC_METRICS``;
``opsgate demo`` sets its own, which reacts to the approved change). Its readings are labelled
(``STAND_IN``). Neither configured: no source, and the ``plan_ready`` guard refuses a metric
check (``NO_METRICS_SOURCE``).

Modules: ``sources`` (what a metrics source answers, and its errors), ``prometheus`` and
``stand_in`` (the two sources), ``configured`` (the source the settings name), ``scope`` (a
reading's moment, and a source scoped to a case and to the change), ``outcome`` (what one
reading says), ``probes`` (an HTTP probe check), ``reading`` (one reading of a whole block).
"""
