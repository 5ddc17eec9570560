"""Tests of parkway.runner: parking, settling, resuming, the event log, the sweeper, the
store, agents, models, Code Mode and its sandbox (sandbox/)."""
