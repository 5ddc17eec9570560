"""The built-in demo OAuth provider over real HTTP (fixtures in this folder's
conftest.py)."""
