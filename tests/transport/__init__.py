"""Tests of parkway.transport: the HTTP routes, the AI SDK wire (with the real `ai`
package), cassettes, OpenAPI, the CLI, serving and logs."""
