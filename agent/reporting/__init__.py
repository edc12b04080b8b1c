"""Reporting what the node holds back to the cluster (node annotations)."""
