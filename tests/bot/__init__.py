"""Tests of the Slack bot (issue 6)."""
