"""What the tests share and is not a test: servers, rigs, doubles, the tools agent files
name, the Node packages the tests drive, and the vectors both implementations pass."""
