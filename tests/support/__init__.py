"""What the tests share (no tests here): cases and plans, local servers standing in for peers,
the running bot and opsgate processes. One module per stand-in; see each module's docstring."""
