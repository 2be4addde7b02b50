"""The analyst's evidence: which metrics a case names (``catalog``), where their series come
from (``sources``: Prometheus ``query_range`` or recorded files), the explainable statistics that
turn a series into a finding (``stats``), one case's analysis (``findings``) and its evidence
rows (``store``, ``tables``)."""
