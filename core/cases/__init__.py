"""The case service, one module a job: the facade (``service.CaseService``), the unit of work
(``uow``), the command handlers (``handlers``), the gate (``gate``) and its approval rows and
standing (``approvals``), the timeline-row builder and views (``rows``), the reads (``queries``)
and the replies (``replies``)."""
