"""A Volcano job as this provider owns it: its name and owner labels, submission or
reattachment, the W&B key's Secret, what a finished job produced and cost, and cleanup."""
