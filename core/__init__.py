"""The core case service and everything around it that needs neither Slack nor the agent: the
pure domain, the database, the gateway, messaging, consumers, the REST API and the command."""
