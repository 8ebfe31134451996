"""Waiting on a job: the shared watch, what its status means, the verdict, the restart
budget, and the report of how the wait ended."""
