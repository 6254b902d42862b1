// JavaScript @azure/identity's ManagedIdentityCredential, as an application in the pod
// runs it. IDENTITY_ENDPOINT and IDENTITY_HEADER come from the environment (set by the
// test); NODE_PATH names the node_modules holding @azure/identity.
// Usage: node mi_client.cjs SCOPE [clientId|objectId|resourceId ID]
// Prints one JSON line: {"token", "expires_on"} or {"error_type", "message"}.
const { ManagedIdentityCredential } = require("@azure/identity");

async function main() {
  const [scope, kind, value] = process.argv.slice(2);
  const options = kind ? { [kind]: value } : {};
  try {
    const token = await new ManagedIdentityCredential(options).getToken(scope);
    const expiresOn = Math.floor(token.expiresOnTimestamp / 1000);
    console.log(JSON.stringify({ token: token.token, expires_on: expiresOn }));
  } catch (e) {
    // Every failure is reported, with its type.
    console.log(JSON.stringify({ error_type: e.name, message: String(e.message) }));
  }
}

main();
