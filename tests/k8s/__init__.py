"""A Kubernetes API server test double (in-process, stdlib HTTP) with simulated controllers and kubelets.

Modules: `store` (objects, resourceVersion, Status errors), `selectors`, `patch` (merge / strategic /
JSON patch), `admission` (schema check, validation, defaulting), `apiserver` (HTTP routing, fault
injection, RBAC), `scheduler`, `kubelet` (Job controller, pod GC, containers as local processes),
`mpi` (the MPI operator), `status` (condition and pod-phase helpers), `cluster` (`ClusterDouble`:
all of it plus node preloading; `rbac_rules`), `fixtures` (pytest fixtures `kube_cluster`,
`kube_client`; use `pytest_plugins = ["tests.k8s.fixtures"]`).
"""
