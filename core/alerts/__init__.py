"""Alert intake: Prometheus Alertmanager's webhook notifications become cases, notes and
evidence. The notification as read (``model``), what one does (``intake``), the alert groups'
bookkeeping (``store``) and what an alert's words may be stored as (``text``)."""
