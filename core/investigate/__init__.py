"""The investigator's eyes: read-only looks at the services a case concerns (metrics, alerts,
Kubernetes objects, events and logs, recent changes), each narrowed to the case's scope."""
