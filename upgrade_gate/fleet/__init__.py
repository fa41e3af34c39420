"""Fleet stage: Kubernetes executor and the canary change window (the only user of `kubernetes`)."""
