// A real, independent OAuth 2.0 / OpenID Connect provider on loopback for Parkway's tests.
//
// Built on the `oidc-provider` package (pinned in package.json), configured the way a
// careful production provider would be for confidential web clients: authorization code
// only, PKCE (S256) required for every client, the RFC 9207 `iss` authorization response
// parameter, refresh tokens rotated on every use with reuse detection, revocation and
// introspection. Our own plain HTML login and consent pages stand in for a real user.
//
// Usage:
//   node server.mjs --clients FILE [--port N] [--coop same-origin]
//                   [--access-token-ttl SECONDS] [--grant-only "SCOPE ..."]
//                   [--resource URL]... [--exit-on-stdin-close]
//
// --resource turns on RFC 8707 resource indicators for that resource server (an MCP
// server's canonical URL): a request naming it gets a JWT access token whose `aud` is
// that URL and whose scope is among RESOURCE_SCOPES, signed with the provider's key
// (published at /jwks); another resource is refused (invalid_target).
//
// On ready it prints one JSON line, {"issuer": "http://127.0.0.1:PORT", "port": PORT},
// then serves until SIGTERM or SIGINT (or stdin closing, with --exit-on-stdin-close).
//
// Test-only endpoints (not OAuth): GET /__test/stats, POST /__test/reset.
// Everything is in memory; nothing is fetched from the network at run time.

import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';

import Provider, { errors } from 'oidc-provider';

const HOST = '127.0.0.1';
const CLIENT_KEYS = new Set(['client_id', 'client_secret', 'redirect_uris']);
// Scopes the provider accepts and echoes in the token response. `repo` and `read:org`
// stand in for a resource API's scopes (GitHub-like); listing them in `scopes` makes
// oidc-provider treat them as grantable scopes of the userinfo-audience access token.
const SCOPES = ['openid', 'profile', 'email', 'offline_access', 'repo', 'read:org'];
const ROUTES = {
  authorization: '/auth',
  token: '/token',
  revocation: '/token/revocation',
  introspection: '/token/introspection',
};
const FORM_LIMIT_BYTES = 64 * 1024;
// The scopes a --resource server accepts.
const RESOURCE_SCOPES = 'mcp:tools';

function fail(message) {
  process.stderr.write(`oidc test provider: ${message}\n`);
  process.exit(2);
}

function parseOptions(argv) {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      strict: true,
      options: {
        port: { type: 'string', default: '0' },
        clients: { type: 'string' },
        coop: { type: 'string' },
        'access-token-ttl': { type: 'string', default: '3600' },
        'grant-only': { type: 'string' },
        resource: { type: 'string', multiple: true, default: [] },
        'exit-on-stdin-close': { type: 'boolean', default: false },
      },
    });
  } catch (err) {
    fail(err.message);
  }
  const { values } = parsed;
  const port = Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    fail(`--port must be an integer in 0..65535, got ${JSON.stringify(values.port)}`);
  }
  const accessTokenTtl = Number(values['access-token-ttl']);
  if (!Number.isInteger(accessTokenTtl) || accessTokenTtl < 1) {
    fail(`--access-token-ttl must be a positive integer (seconds), got ${JSON.stringify(values['access-token-ttl'])}`);
  }
  if (values.coop !== undefined && values.coop !== 'same-origin') {
    fail(`--coop accepts only "same-origin", got ${JSON.stringify(values.coop)}`);
  }
  if (values.clients === undefined) {
    fail('--clients FILE is required (a JSON array of {client_id, client_secret, redirect_uris})');
  }
  const grantOnly = values['grant-only'] === undefined
    ? null
    : new Set(values['grant-only'].split(/\s+/).filter(Boolean));
  return {
    port,
    accessTokenTtl,
    coop: values.coop === 'same-origin',
    clients: loadClients(values.clients),
    grantOnly,
    resources: values.resource,
    exitOnStdinClose: values['exit-on-stdin-close'],
  };
}

function loadClients(file) {
  let entries;
  try {
    entries = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    fail(`cannot read --clients ${file}: ${err.message}`);
  }
  if (!Array.isArray(entries) || entries.length === 0) {
    fail(`--clients ${file} must hold a non-empty JSON array`);
  }
  return entries.map((entry, index) => {
    const where = `--clients ${file} entry ${index}`;
    if (entry === null || typeof entry !== 'object') fail(`${where} is not an object`);
    const unknown = Object.keys(entry).filter((key) => !CLIENT_KEYS.has(key));
    if (unknown.length) fail(`${where} has unknown keys ${unknown.join(', ')}`);
    for (const key of ['client_id', 'client_secret']) {
      if (typeof entry[key] !== 'string' || !entry[key]) fail(`${where} needs a non-empty ${key}`);
    }
    const uris = entry.redirect_uris;
    if (!Array.isArray(uris) || !uris.length || !uris.every((uri) => typeof uri === 'string')) {
      fail(`${where} needs redirect_uris, a non-empty array of strings`);
    }
    return {
      client_id: entry.client_id,
      client_secret: entry.client_secret,
      redirect_uris: uris,
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      // oidc-provider accepts the secret in the Basic header or in the form body
      // (client_secret_post) for any client registered with either method.
      token_endpoint_auth_method: 'client_secret_basic',
    };
  });
}

// A signing key made at start: no dev keystore shared with the world, no network.
function signingKeys() {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const jwk = privateKey.export({ format: 'jwk' });
  return { keys: [{ ...jwk, kid: randomBytes(8).toString('hex'), use: 'sig', alg: 'RS256' }] };
}

function escapeHtml(value) {
  return String(value).replace(/[&<>"']/g, (ch) => `&#${ch.charCodeAt(0)};`);
}

function page(title, body) {
  return `<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>${escapeHtml(title)}</title></head>
<body>
<h1>${escapeHtml(title)}</h1>
${body}
</body>
</html>
`;
}

function loginPage(uid, clientId, message) {
  const notice = message ? `<p id="error">${escapeHtml(message)}</p>\n` : '';
  return page('Sign in', `${notice}<p>Sign in to continue to <span id="client">${escapeHtml(clientId)}</span>.</p>
<form id="login" method="post" action="/interaction/${escapeHtml(uid)}/login">
<label>Login <input name="login" autocomplete="username" autofocus></label>
<label>Password <input name="password" type="password" autocomplete="current-password"></label>
<button id="submit-login" type="submit">Sign in</button>
</form>
<form id="cancel" method="post" action="/interaction/${escapeHtml(uid)}/abort">
<button id="cancel-login" type="submit">Cancel</button>
</form>`);
}

function consentPage(uid, clientId, accountId, scopes) {
  const items = scopes.map((scope) => `<li>${escapeHtml(scope)}</li>`).join('');
  return page('Authorize access', `<p><span id="client">${escapeHtml(clientId)}</span> asks for access to
the account <span id="account">${escapeHtml(accountId)}</span>:</p>
<ul id="scopes">${items}</ul>
<form id="consent" method="post" action="/interaction/${escapeHtml(uid)}/confirm">
<button id="allow" type="submit">Allow</button>
</form>
<form id="abort" method="post" action="/interaction/${escapeHtml(uid)}/abort">
<button id="deny" type="submit">Deny</button>
</form>`);
}

async function readForm(ctx) {
  if (!ctx.is('application/x-www-form-urlencoded')) {
    ctx.throw(415, 'expected an application/x-www-form-urlencoded form');
  }
  const chunks = [];
  let size = 0;
  for await (const chunk of ctx.req) {
    size += chunk.length;
    if (size > FORM_LIMIT_BYTES) ctx.throw(413, 'form too large');
    chunks.push(chunk);
  }
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

function newStats() {
  return {
    token_requests: { authorization_code: 0, refresh_token: 0 },
    token_errors: {},
    revocation_requests: 0,
    introspection_requests: 0,
  };
}

function bump(table, key) {
  table[key] = (table[key] ?? 0) + 1;
}

function configure(options, issuer) {
  const { accessTokenTtl } = options;
  const provider = new Provider(issuer, {
    clients: options.clients,
    jwks: signingKeys(),
    cookies: {
      keys: [randomBytes(32).toString('hex')],
      // Plain http on loopback: browsers drop SameSite=None cookies that are not Secure,
      // so both cookie kinds are Lax (every step of the flow is a top-level navigation).
      long: { signed: true, httpOnly: true, sameSite: 'lax' },
      short: { signed: true, httpOnly: true, sameSite: 'lax' },
    },
    claims: {
      openid: ['sub'],
      profile: ['preferred_username'],
      email: ['email', 'email_verified'],
    },
    scopes: SCOPES,
    async findAccount(ctx, sub) {
      return {
        accountId: sub,
        async claims() {
          return { sub, preferred_username: sub, email: `${sub}@example.test`, email_verified: true };
        },
      };
    },
    features: {
      devInteractions: { enabled: false },
      resourceIndicators: {
        enabled: options.resources.length > 0,
        // no resource asked: the access token is for userinfo, as without the feature
        defaultResource: () => undefined,
        useGrantedResource: () => true,
        async getResourceServerInfo(ctx, resourceIndicator) {
          if (!options.resources.includes(resourceIndicator)) {
            throw new errors.InvalidTarget();
          }
          return {
            scope: RESOURCE_SCOPES,
            audience: resourceIndicator,
            accessTokenTTL: accessTokenTtl,
            accessTokenFormat: 'jwt',
            jwt: { sign: { alg: 'RS256' } },
          };
        },
      },
      revocation: { enabled: true },
      userinfo: { enabled: true },
      introspection: {
        enabled: true,
        // Any authenticated confidential client may introspect (the resource server role).
        async allowedPolicy(ctx, client, token) {
          return client.clientAuthMethod !== 'none' || token.clientId === client.clientId;
        },
      },
    },
    // PKCE for every client, not only public ones (RFC 9700 2.1.1), and only S256.
    pkce: { methods: ['S256'], required: () => true },
    responseTypes: ['code'],
    // The refresh token follows the granted scope: offline_access granted means one is
    // issued (the request middleware below keeps offline_access from being dropped).
    async issueRefreshToken(ctx, client, code) {
      return client.grantTypeAllowed('refresh_token') && code.scopes.has('offline_access');
    },
    // Every use rotates; presenting a rotated token again revokes the whole grant.
    rotateRefreshToken: true,
    ttl: {
      AccessToken: accessTokenTtl,
      AuthorizationCode: 60,
      IdToken: 3600,
      Interaction: 3600,
      Session: 14 * 24 * 3600,
      Grant: 14 * 24 * 3600,
      RefreshToken: 14 * 24 * 3600,
      ClientCredentials: 600,
      DeviceCode: 600,
      BackchannelAuthenticationRequest: 600,
    },
    routes: ROUTES,
    clientAuthMethods: ['client_secret_basic', 'client_secret_post'],
    interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
    clientBasedCORS: () => false,
    async renderError(ctx, out) {
      ctx.type = 'html';
      const rows = Object.entries(out)
        .map(([key, value]) => `<p><strong>${escapeHtml(key)}</strong>: <span id="${escapeHtml(key)}">${escapeHtml(value)}</span></p>`)
        .join('\n');
      ctx.body = page('Error', rows);
    },
  });
  provider.on('server_error', (ctx, err) => {
    process.stderr.write(`oidc test provider: server_error: ${err.stack ?? err}\n`);
  });
  return provider;
}

// Test-only counters, counted at the HTTP level: a request that fails is still counted.
function statsMiddleware() {
  let stats = newStats();
  return async (ctx, next) => {
    if (ctx.path === '/__test/stats' && ctx.method === 'GET') {
      ctx.set('Cache-Control', 'no-store');
      ctx.body = stats;
      return;
    }
    if (ctx.path === '/__test/reset' && ctx.method === 'POST') {
      stats = newStats();
      ctx.status = 204;
      return;
    }
    if (ctx.method !== 'POST') {
      await next();
      return;
    }
    const route = ctx.path;
    try {
      await next();
    } finally {
      if (route === ROUTES.token) {
        // oidc-provider parses the form body early (before client authentication), so
        // the grant type is known for every request with a readable body.
        const grantType = ctx.oidc?.body?.grant_type ?? ctx.oidc?.params?.grant_type;
        bump(stats.token_requests, typeof grantType === 'string' ? grantType : '(unreadable)');
        if (ctx.status >= 400) {
          bump(stats.token_errors, ctx.body?.error ?? `http_${ctx.status}`);
        }
      } else if (route === ROUTES.revocation) {
        stats.revocation_requests += 1;
      } else if (route === ROUTES.introspection) {
        stats.introspection_requests += 1;
      }
    }
  };
}

// COOP on every HTML page (login, consent, errors): reproduces a provider whose pages
// sever a popup from its opener, so `window.opener` is gone and `popup.closed` is true.
function coopMiddleware() {
  return async (ctx, next) => {
    await next();
    if (ctx.response.is('html')) {
      ctx.set('Cross-Origin-Opener-Policy', 'same-origin');
    }
  };
}

// oidc-provider drops `offline_access` from a request whose `prompt` lacks `consent`
// (OIDC Core 11). Our interactions always ask for consent in that case anyway, so a
// request without any `prompt` is treated as `prompt=consent`: clients need not send it.
function offlineAccessMiddleware() {
  return async (ctx, next) => {
    if (ctx.method === 'GET' && ctx.path === ROUTES.authorization) {
      const query = new URLSearchParams(ctx.querystring);
      const scopes = (query.get('scope') ?? '').split(' ');
      if (scopes.includes('offline_access') && !query.has('prompt')) {
        query.set('prompt', 'consent');
        ctx.querystring = query.toString();
      }
    }
    await next();
  };
}

function interactionMiddleware(provider, options) {
  const pattern = /^\/interaction\/([A-Za-z0-9_-]+)(?:\/(login|confirm|abort))?$/;
  return async (ctx, next) => {
    const match = pattern.exec(ctx.path);
    if (!match) {
      await next();
      return;
    }
    const [, uid, action] = match;
    ctx.set('Cache-Control', 'no-store');
    try {
      const details = await provider.interactionDetails(ctx.req, ctx.res);
      if (details.uid !== uid) {
        ctx.throw(400, 'this interaction is not the one in progress in this browser');
      }
      await handleInteraction(ctx, provider, options, details, action);
    } catch (err) {
      const status = err.statusCode ?? err.status ?? 500;
      if (status >= 500) {
        process.stderr.write(`oidc test provider: interaction failed: ${err.stack ?? err}\n`);
      }
      ctx.status = status;
      ctx.type = 'html';
      const text = err.error_description ?? err.message ?? 'interaction failed';
      ctx.body = page('Error', `<p><strong>${escapeHtml(err.error ?? 'error')}</strong>: <span id="error_description">${escapeHtml(text)}</span></p>`);
    }
  };
}

async function finish(ctx, provider, result, merge) {
  const returnTo = await provider.interactionResult(ctx.req, ctx.res, result, {
    mergeWithLastSubmission: merge,
  });
  ctx.status = 303;
  ctx.redirect(returnTo);
}

async function handleInteraction(ctx, provider, options, details, action) {
  const { uid, prompt, params, session } = details;
  const expectPost = action !== undefined;
  if (expectPost !== (ctx.method === 'POST') || (!expectPost && ctx.method !== 'GET')) {
    ctx.throw(405, `${ctx.method} is not allowed here`);
  }

  if (action === undefined) {
    ctx.type = 'html';
    if (prompt.name === 'login') {
      ctx.body = loginPage(uid, params.client_id);
    } else if (prompt.name === 'consent') {
      const scopes = prompt.details.missingOIDCScope ?? [];
      ctx.body = consentPage(uid, params.client_id, session?.accountId, scopes);
    } else {
      ctx.throw(501, `unsupported prompt ${prompt.name}`);
    }
    return;
  }

  if (action === 'abort') {
    await finish(ctx, provider, {
      error: 'access_denied',
      error_description: 'End-User aborted interaction',
    }, false);
    return;
  }

  if (action === 'login') {
    if (prompt.name !== 'login') ctx.throw(400, 'no sign-in is pending for this interaction');
    const form = await readForm(ctx);
    const login = (form.get('login') ?? '').trim();
    if (!login || !form.get('password')) {
      ctx.status = 400;
      ctx.type = 'html';
      ctx.body = loginPage(uid, params.client_id, 'Enter a login and a password.');
      return;
    }
    await finish(ctx, provider, { login: { accountId: login } }, false);
    return;
  }

  // action === 'confirm'
  if (prompt.name !== 'consent') ctx.throw(400, 'no consent is pending for this interaction');
  const grant = details.grantId
    ? await provider.Grant.find(details.grantId)
    : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
  const missing = prompt.details.missingOIDCScope ?? [];
  // --grant-only: the user grants less than was asked, the rest is recorded as rejected
  // so the consent prompt does not come back for it.
  const granted = options.grantOnly ? missing.filter((s) => options.grantOnly.has(s)) : missing;
  const rejected = missing.filter((s) => !granted.includes(s));
  if (granted.length) grant.addOIDCScope(granted.join(' '));
  if (rejected.length) grant.rejectOIDCScope(rejected.join(' '));
  if (prompt.details.missingOIDCClaims) grant.addOIDCClaims(prompt.details.missingOIDCClaims);
  for (const [indicator, scopes] of Object.entries(prompt.details.missingResourceScopes ?? {})) {
    grant.addResourceScope(indicator, scopes.join(' '));
  }
  const grantId = await grant.save();
  await finish(ctx, provider, { consent: { grantId } }, true);
}

async function main() {
  const options = parseOptions(process.argv.slice(2));
  const server = createServer();
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, HOST, resolve);
  });
  const { port } = server.address();
  const issuer = `http://${HOST}:${port}`;

  const provider = configure(options, issuer);
  provider.use(statsMiddleware());
  if (options.coop) provider.use(coopMiddleware());
  provider.use(offlineAccessMiddleware());
  provider.use(interactionMiddleware(provider, options));
  server.on('request', provider.callback());

  const stop = () => {
    server.close(() => process.exit(0));
    server.closeAllConnections();
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
  if (options.exitOnStdinClose) {
    // The harness holds our stdin: if it dies without stopping us, we do not linger.
    process.stdin.on('end', stop);
    process.stdin.on('error', stop);
    process.stdin.resume();
  }

  process.stdout.write(`{"issuer": ${JSON.stringify(issuer)}, "port": ${port}}\n`);
}

main().catch((err) => {
  process.stderr.write(`oidc test provider: ${err.stack ?? err}\n`);
  process.exit(1);
});
