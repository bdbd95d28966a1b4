// A real OpenID provider for the single sign-on tests: npm's oidc-provider with one static
// client, its built-in login form (devInteractions: any password), consent already given, and
// accounts (their claims, groups included) read from ACCOUNTS_FILE at every use, so a test
// changes a user's groups, or removes them, by rewriting that file.
//
//   ACCOUNTS_FILE=accounts.json CLIENT_ID=platform CLIENT_SECRET=… \
//   REDIRECT_URIS=http://localhost:8000/oidc/callback/ node provider.mjs
//
// It listens on a free port of 127.0.0.1 and prints `ready <issuer>` once it answers.
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';

import Provider from 'oidc-provider';

const { ACCOUNTS_FILE, CLIENT_ID, CLIENT_SECRET, REDIRECT_URIS } = process.env;
const SCOPES = 'openid email profile groups';

function accounts() {
  return JSON.parse(readFileSync(ACCOUNTS_FILE, 'utf8'));
}

const server = createServer();
server.listen(0, '127.0.0.1', () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  const signing = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;
  const provider = new Provider(issuer, {
    clients: [{
      client_id: CLIENT_ID,
      client_secret: CLIENT_SECRET,
      redirect_uris: REDIRECT_URIS.split(','),
      grant_types: ['authorization_code'],
      response_types: ['code'],
    }],
    claims: {
      openid: ['sub'],
      email: ['email', 'email_verified'],
      profile: ['preferred_username', 'name', 'given_name', 'family_name'],
      groups: ['groups'],
    },
    scopes: SCOPES.split(' '),
    jwks: { keys: [{ ...signing.export({ format: 'jwk' }), alg: 'RS256', use: 'sig' }] },
    cookies: { keys: [randomBytes(32).toString('hex')] },
    features: { devInteractions: { enabled: true } },
    async findAccount(ctx, id) {
      const account = accounts()[id];
      if (!account) {
        return undefined;
      }
      return { accountId: id, async claims() { return { sub: id, ...account }; } };
    },
    // The platform is a first-party client: no consent page, its scopes granted once signed in.
    async loadExistingGrant(ctx) {
      const grantId = ctx.oidc.result?.consent?.grantId
        || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
      const grant = (grantId && await ctx.oidc.provider.Grant.find(grantId))
        || new ctx.oidc.provider.Grant({
          clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId,
        });
      grant.addOIDCScope(SCOPES);
      await grant.save();
      return grant;
    },
  });
  server.on('request', provider.callback());
  console.log(`ready ${issuer}`);
});

process.on('SIGTERM', () => server.close(() => process.exit(0)));
