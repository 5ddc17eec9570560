"""The connect flow over HTTP against a real oidc-provider on loopback (the rig's fixtures
are in this folder's conftest.py)."""
