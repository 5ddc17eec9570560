"""The connect card of an MCP server that needs OAuth, in a real browser: the card names
the server and its host, the user signs in through the provider's popup (the suite's
oidc-provider, issuing a token for that server), and the chat continues with the
server's answer for that user."""

from __future__ import annotations

import json
import shutil

import pytest
from playwright.sync_api import Browser, expect
from pydantic import SecretStr

from tests.helpers.browser import Tab, sign_in_at_provider
from tests.helpers.connect_rig import ACME_SECRET, TOKEN_KEY
from tests.helpers.mcp import SecureServerThread
from tests.helpers.oidc_peer import oidc_peer
from tests.helpers.support import agent_doc, call, free_port, server_thread, text


def test_an_mcp_sign_in_card_names_the_server_and_continues_the_chat(
    browser: Browser, redis_url: str
) -> None:
    """Sign in to an MCP server from its card: the card says which server (and host)
    asks; the popup is the provider's; once connected, the chat goes on and the server
    answers for the signed-in user."""
    if shutil.which("node") is None:
        pytest.skip("the `node` executable is not on PATH (the OpenID provider needs it)")
    port, mcp_port = free_port(), free_port()
    url = f"http://127.0.0.1:{mcp_port}/mcp"
    clients = [{"client_id": "parkway", "client_secret": ACME_SECRET,
                "redirect_uris": [f"http://127.0.0.1:{port}/connect/idp/callback"]}]  # fmt: skip
    with oidc_peer(clients, resources=[url]) as peer:
        providers = [{"name": "idp", "display_name": "Identity", "issuer": peer.issuer,
                      "client_id": "parkway", "client_secret": ACME_SECRET,
                      "scopes": ["openid", "profile", "offline_access"],
                      "allowed_scopes": ["mcp:tools"]}]  # fmt: skip
        agent = agent_doc(
            [
                [call("secure__sign_in")],
                [call("secure__whoami")],
                [text("Server said: {{last_tool_results}}")],
            ],
            tools=[],
        )
        agent["template"]["mcps"] = [
            {"name": "secure", "url": url, "auth": {"provider": "idp", "scopes": ["mcp:tools"]}}
        ]
        with (
            SecureServerThread(peer.issuer, port=mcp_port),
            server_thread(
                redis_url, agent, port=port, oauth_providers=json.dumps(providers),
                token_key=SecretStr(TOKEN_KEY),
            ) as server,
        ):  # fmt: skip
            tab = Tab.new_context(browser, server.base_url).open()
            tab.send("who am I on the secure server?")
            widget = tab.widget("connect")
            tab.expect_state(widget, "pending")
            expect(widget).to_contain_text("The MCP server secure (127.0.0.1) asks you to sign in")
            with tab.page.expect_popup() as opened:
                tab.act(widget, "connect")
            sign_in_at_provider(opened.value)
            tab.expect_state(widget, "connected")
            tab.expect_said("you are alice")
            tab.expect_ready()
            tab.assert_clean()
