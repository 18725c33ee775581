// Package proxy holds the proxies outside every sandbox that use the credentials a sandbox must never see.
//
// Git is a session's git endpoint: the sandbox's egress proxy hands it the requests for
// http://corral.internal/git/<resource_id>/... (sandbox.Egress.Local), and it forwards git's smart-HTTP
// requests, and only those, to that resource's repository with the resource's authorization_token added. A
// repository cloned into the workspace has that URL as its origin, so git fetch, pull and push work inside the
// sandbox while the token stays here. Git also hands the token to the workspace Placer for the clone, which
// runs on the host (workspace.Tokens). Its Relay forwards the same requests for the API's git relay
// (api.GitRelay), through which `corral worker` clones and its sandboxes fetch and push with a sessions token:
// the token stays here for them too.
//
// Secrets handles environment_variable credentials: the sandbox gets each credential's secret_name set to an
// opaque placeholder, and the sandbox's egress proxy, outside it, replaces the placeholder with the secret in the
// requests to the credential's allowed hosts: it terminates their TLS with a certificate of the server's own CA
// (CA: the sandbox trusts its certificate, never sees its key) and verifies the real upstream itself. A
// placeholder sent anywhere else goes out as it is, and a secret an allowed host sends back is turned into its
// placeholder again before the sandbox reads the answer. Merge combines the sources into the one
// sandbox.PoolConfig.Egress.
//
// MCP is the MCP proxy, the brain's mcp.Client (mcp.go): it calls a session's MCP servers with the static_bearer
// or mcp_oauth credential of the session's vaults that matches each server, refreshes mcp_oauth tokens
// (mcp_oauth.go), validates credentials for the API (mcp_validate.go), and obeys the environment's networking.
package proxy
