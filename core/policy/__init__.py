"""The approval policy in Cedar: the rules (``rules``), what a click is judged on and Cedar's
answer (``judge``), and the files of ``OPSGATE_POLICY`` (``files``)."""
