"""``opsgate eval``: which model may drive opsgate. Every scenario of a folder runs through the
real agent graph, gateway and case service on a scratch SQLite database, with recorded series
and runbooks as evidence; rules (no LLM judge) grade what the model proposed, and a scorecard
compares models line by line (docs/eval.md).

``scenarios`` reads the scenario files, ``series`` their recorded metrics (and the verifier's
readings of them), ``grades`` the pure grading rules, ``contestants`` the models under test,
``run`` one scenario's run, ``scorecard`` the totals and their Markdown, ``cli`` the command."""
