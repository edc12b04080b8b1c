"""Where workloads come from on a Kubernetes node: the kubelet's pod list and the YARN NodeManager.

Each source has `async refresh()` (fetch, validate, keep the last good answer) and `workloads()`
(a `SourceResult`: workloads without usage, a stale reason, the data's age, side tables).
"""
