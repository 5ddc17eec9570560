"""Tests of parkway.widgets_api: connections, OAuth providers, the connect flow
(connect/), the demo provider (demo_provider/) and the build-kit overlay."""
