"""The SQL side of the core: table definitions (``tables``), engines and transactions
(``database``) and the case service's statements (``case_store``)."""
