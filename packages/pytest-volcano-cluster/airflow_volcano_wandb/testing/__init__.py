"""Test support: a local Kubernetes + Volcano cluster run as plain processes, and its pytest plugin.

See ``docs/local-cluster.md``. Nothing here is imported by the provider at runtime.
"""
