// Package proxy holds the proxies outside every sandbox that use the credentials a sandbox must never see.
//
// Git is a session's git endpoint: the sandbox's egress proxy hands it the requests for
// http://corral.internal/git/<resource_id>/... (sandbox.Egress.Local), and it forwards git's smart-HTTP
// requests, and only those, to that resource's repository with the resource's authorization_token added. A
// repository cloned into the workspace has that URL as its origin, so git fetch, pull and push work inside the
// sandbox while the token stays here. Git also hands the token to the workspace Placer for the clone, which
// runs on the host (workspace.Tokens).
package proxy
