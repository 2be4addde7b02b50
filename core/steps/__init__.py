"""The executor's side of a change: step adapters that touch the world (processes, HTTP,
kubectl, the traffic gateway) and the evidence the verifier reads. No bus, no database."""
