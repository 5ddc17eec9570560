"""What runs inside the sandbox, on its own interpreter: ``bootstrap.py`` starts every
run, ``pw.py`` is the helper module programs get as ``pw``. The server never imports
them; it mounts this folder (read-only) into each sandbox."""
