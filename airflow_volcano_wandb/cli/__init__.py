"""The provider's command line (``doctor``): what it needs, checked against a cluster."""
