package api

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/corralhq/corral/internal/skills"
)

// route is an endpoint of the API: its ServeMux pattern, its handler and the access it grants (auth.go).
type route struct {
	pattern string
	h       handlerFunc
	access  access
}

// workBase is the path of a self-hosted environment's work queue: its routes, and only they, have queue accesses.
const workBase = "/v1/environments/{environment_id}/work"

// routeTable is every route of the API. Each names its access; handle refuses one that names none.
func (s *Server) routeTable() []route {
	health := func(w http.ResponseWriter, r *http.Request) error {
		return writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}
	skillUpload := accessAPIKey.upload(func() int64 { return skills.MaxTotalBytes + multipartOverhead })
	gitAccess := accessSessionGit.upload(func() int64 {
		if s.gitRelay == nil {
			return s.maxBody
		}
		n, _ := s.gitRelay.Limits()
		return n
	})
	return []route{
		{"GET /{$}", health, accessPublic},
		{"GET /healthz", health, accessPublic},

		{"GET /v1/models", s.modelList, accessAPIKey},
		{"GET /v1/models/{model_id}", s.modelGet, accessAPIKey},

		{"POST /v1/agents", s.agentCreate, accessAPIKey},
		{"GET /v1/agents", s.agentList, accessAPIKey},
		{"GET /v1/agents/{agent_id}", s.agentGet, accessAPIKey},
		{"POST /v1/agents/{agent_id}", s.agentUpdate, accessAPIKey},
		{"POST /v1/agents/{agent_id}/archive", s.agentArchive, accessAPIKey},
		{"GET /v1/agents/{agent_id}/versions", s.agentVersionList, accessAPIKey},

		{"POST /v1/environments", s.envCreate, accessAPIKey},
		{"GET /v1/environments", s.envList, accessAPIKey},
		{"GET /v1/environments/{environment_id}", s.envGet, accessSession},
		{"POST /v1/environments/{environment_id}", s.envUpdate, accessAPIKey},
		{"DELETE /v1/environments/{environment_id}", s.envDelete, accessAPIKey},
		{"POST /v1/environments/{environment_id}/archive", s.envArchive, accessAPIKey},
		{"POST /v1/environments/{environment_id}/keys", s.envKeyCreate, accessAPIKey},
		{"GET /v1/environments/{environment_id}/keys", s.envKeyList, accessAPIKey},
		{"DELETE /v1/environments/{environment_id}/keys/{key_id}", s.envKeyRevoke, accessAPIKey},

		{"GET " + workBase + "/poll", s.workPoll, accessTake},
		{"POST " + workBase + "/{work_id}/ack", s.workAck, accessTake},
		{"POST " + workBase + "/{work_id}/heartbeat", s.workHeartbeat, accessHold},
		{"POST " + workBase + "/{work_id}/stop", s.workStop, accessHold},
		{"GET " + workBase + "/{work_id}", s.workGet, accessOperate},
		{"POST " + workBase + "/{work_id}", s.workUpdate, accessOperate},
		{"GET " + workBase, s.workList, accessQueue},
		{"GET " + workBase + "/stats", s.workStats, accessQueue},

		{"POST /v1/sessions", s.sessionCreate, accessAPIKey},
		{"GET /v1/sessions", s.sessionList, accessAPIKey},
		{"GET /v1/sessions/{session_id}", s.sessionGet, accessSession},
		{"POST /v1/sessions/{session_id}", s.sessionUpdate, accessAPIKey},
		{"DELETE /v1/sessions/{session_id}", s.sessionDelete, accessAPIKey},
		{"POST /v1/sessions/{session_id}/archive", s.sessionArchive, accessAPIKey},

		{"GET /v1/sessions/{session_id}/events", s.eventList, accessSession},
		{"POST /v1/sessions/{session_id}/events", s.eventSend, accessSession},
		{"GET /v1/sessions/{session_id}/events/stream", s.eventStream, accessSession},

		{"GET /v1/sessions/{session_id}/threads", s.threadList, accessSession},
		{"GET /v1/sessions/{session_id}/threads/{thread_id}", s.threadGet, accessSession},
		{"POST /v1/sessions/{session_id}/threads/{thread_id}/archive", s.threadArchive, accessAPIKey},
		{"GET /v1/sessions/{session_id}/threads/{thread_id}/events", s.threadEvents, accessSession},
		{"GET /v1/sessions/{session_id}/threads/{thread_id}/stream", s.threadStream, accessSession},

		{"GET /v1/sessions/{session_id}/resources", s.resourceList, accessAPIKey},
		{"POST /v1/sessions/{session_id}/resources", s.resourceAdd, accessAPIKey},
		{"GET /v1/sessions/{session_id}/resources/{resource_id}", s.resourceGet, accessAPIKey},
		{"POST /v1/sessions/{session_id}/resources/{resource_id}", s.resourceUpdate, accessAPIKey},
		{"DELETE /v1/sessions/{session_id}/resources/{resource_id}", s.resourceDelete, accessAPIKey},
		{"GET /v1/sessions/{session_id}/resources/{resource_id}/git/{op...}", s.resourceGit, gitAccess},
		{"POST /v1/sessions/{session_id}/resources/{resource_id}/git/{op...}", s.resourceGit, gitAccess},

		{"POST /v1/vaults", s.vaultCreate, accessAPIKey},
		{"GET /v1/vaults", s.vaultList, accessAPIKey},
		{"GET /v1/vaults/{vault_id}", s.vaultGet, accessAPIKey},
		{"POST /v1/vaults/{vault_id}", s.vaultUpdate, accessAPIKey},
		{"DELETE /v1/vaults/{vault_id}", s.vaultDelete, accessAPIKey},
		{"POST /v1/vaults/{vault_id}/archive", s.vaultArchive, accessAPIKey},

		{"POST /v1/vaults/{vault_id}/credentials", s.credentialCreate, accessAPIKey},
		{"GET /v1/vaults/{vault_id}/credentials", s.credentialList, accessAPIKey},
		{"GET /v1/vaults/{vault_id}/credentials/{credential_id}", s.credentialGet, accessAPIKey},
		{"POST /v1/vaults/{vault_id}/credentials/{credential_id}", s.credentialUpdate, accessAPIKey},
		{"DELETE /v1/vaults/{vault_id}/credentials/{credential_id}", s.credentialDelete, accessAPIKey},
		{"POST /v1/vaults/{vault_id}/credentials/{credential_id}/archive", s.credentialArchive, accessAPIKey},
		{"POST /v1/vaults/{vault_id}/credentials/{credential_id}/mcp_oauth_validate", s.credentialValidate, accessAPIKey},

		{"POST /v1/memory_stores", s.memoryStoreCreate, accessAPIKey},
		{"GET /v1/memory_stores", s.memoryStoreList, accessAPIKey},
		{"GET /v1/memory_stores/{memory_store_id}", s.memoryStoreGet, accessAPIKey},
		{"POST /v1/memory_stores/{memory_store_id}", s.memoryStoreUpdate, accessAPIKey},
		{"DELETE /v1/memory_stores/{memory_store_id}", s.memoryStoreDelete, accessAPIKey},
		{"POST /v1/memory_stores/{memory_store_id}/archive", s.memoryStoreArchive, accessAPIKey},
		{"POST /v1/memory_stores/{memory_store_id}/memories", s.memoryCreate, accessSessionMemoryWrite},
		{"GET /v1/memory_stores/{memory_store_id}/memories", s.memoryList, accessSessionMemory},
		{"GET /v1/memory_stores/{memory_store_id}/memories/{memory_id}", s.memoryGet, accessSessionMemory},
		{"POST /v1/memory_stores/{memory_store_id}/memories/{memory_id}", s.memoryUpdate, accessSessionMemoryWrite},
		{"DELETE /v1/memory_stores/{memory_store_id}/memories/{memory_id}", s.memoryDelete, accessSessionMemoryWrite},
		{"GET /v1/memory_stores/{memory_store_id}/memory_versions", s.memoryVersionList, accessAPIKey},
		{"GET /v1/memory_stores/{memory_store_id}/memory_versions/{memory_version_id}", s.memoryVersionGet, accessAPIKey},
		{"POST /v1/memory_stores/{memory_store_id}/memory_versions/{memory_version_id}/redact", s.memoryVersionRedact, accessAPIKey},

		{"POST /v1/dreams", s.dreamCreate, accessAPIKey},
		{"GET /v1/dreams", s.dreamList, accessAPIKey},
		{"GET /v1/dreams/{dream_id}", s.dreamGet, accessAPIKey},
		{"POST /v1/dreams/{dream_id}/archive", s.dreamArchive, accessAPIKey},
		{"POST /v1/dreams/{dream_id}/cancel", s.dreamCancel, accessAPIKey},

		{"POST /v1/deployments", s.deploymentCreate, accessAPIKey},
		{"GET /v1/deployments", s.deploymentList, accessAPIKey},
		{"GET /v1/deployments/{deployment_id}", s.deploymentGet, accessAPIKey},
		{"POST /v1/deployments/{deployment_id}", s.deploymentUpdate, accessAPIKey},
		{"POST /v1/deployments/{deployment_id}/archive", s.deploymentSetStatus("deployment.archived", archiveDeployment), accessAPIKey},
		{"POST /v1/deployments/{deployment_id}/pause", s.deploymentSetStatus("deployment.paused", pauseDeployment), accessAPIKey},
		{"POST /v1/deployments/{deployment_id}/unpause", s.deploymentSetStatus("deployment.unpaused", unpauseDeployment), accessAPIKey},
		{"POST /v1/deployments/{deployment_id}/run", s.deploymentRun, accessAPIKey},
		{"GET /v1/deployment_runs", s.deploymentRunList, accessAPIKey},
		{"GET /v1/deployment_runs/{deployment_run_id}", s.deploymentRunGet, accessAPIKey},

		{"POST /v1/organizations/workspaces", s.workspaceCreate, accessAdmin},
		{"GET /v1/organizations/workspaces", s.workspaceList, accessAdmin},
		{"GET /v1/organizations/workspaces/{workspace_id}", s.workspaceGet, accessAdmin},
		{"POST /v1/organizations/workspaces/{workspace_id}", s.workspaceUpdate, accessAdmin},
		{"POST /v1/organizations/workspaces/{workspace_id}/archive", s.workspaceArchive, accessAdmin},
		{"POST /v1/organizations/api_keys", s.apiKeyCreate, accessAdmin},
		{"GET /v1/organizations/api_keys", s.apiKeyList, accessAdmin},
		{"GET /v1/organizations/api_keys/{api_key_id}", s.apiKeyGet, accessAdmin},
		{"POST /v1/organizations/api_keys/{api_key_id}", s.apiKeyUpdate, accessAdmin},

		{"POST /v1/organizations/webhooks", s.webhookCreate, accessAPIKey},
		{"GET /v1/organizations/webhooks", s.webhookList, accessAPIKey},
		{"GET /v1/organizations/webhooks/{webhook_endpoint_id}", s.webhookGet, accessAPIKey},
		{"POST /v1/organizations/webhooks/{webhook_endpoint_id}", s.webhookUpdate, accessAPIKey},
		{"DELETE /v1/organizations/webhooks/{webhook_endpoint_id}", s.webhookDelete, accessAPIKey},
		{"POST /v1/organizations/webhooks/{webhook_endpoint_id}/regenerate_signing_secret", s.webhookRegenerate, accessAPIKey},
		{"GET /v1/organizations/webhooks/{webhook_endpoint_id}/deliveries", s.webhookDeliveryList, accessAPIKey},

		{"POST /v1/tunnels", s.tunnelCreate, accessAPIKey},
		{"GET /v1/tunnels", s.tunnelList, accessAPIKey},
		{"GET /v1/tunnels/{tunnel_id}", s.tunnelGet, accessAPIKey},
		{"POST /v1/tunnels/{tunnel_id}/archive", s.tunnelArchive, accessAPIKey},
		{"POST /v1/tunnels/{tunnel_id}/reveal_token", s.tunnelRevealToken, accessAPIKey},
		{"POST /v1/tunnels/{tunnel_id}/rotate_token", s.tunnelRotateToken, accessAPIKey},
		{"POST /v1/tunnels/{tunnel_id}/certificates", s.tunnelCertificateCreate, accessAPIKey},
		{"GET /v1/tunnels/{tunnel_id}/certificates", s.tunnelCertificateList, accessAPIKey},
		{"GET /v1/tunnels/{tunnel_id}/certificates/{certificate_id}", s.tunnelCertificateGet, accessAPIKey},
		{"POST /v1/tunnels/{tunnel_id}/certificates/{certificate_id}/archive", s.tunnelCertificateArchive, accessAPIKey},

		{"POST /v1/files", s.fileUpload, accessSessionOutput.upload(s.fileUploadLimit)},
		{"GET /v1/files", s.fileList, accessAPIKey},
		{"GET /v1/files/{file_id}", s.fileGet, accessSessionFile},
		{"GET /v1/files/{file_id}/content", s.fileContent, accessSessionFile},
		{"DELETE /v1/files/{file_id}", s.fileDelete, accessAPIKey},

		{"POST /v1/skills", s.skillCreate, skillUpload},
		{"GET /v1/skills", s.skillList, accessAPIKey},
		{"GET /v1/skills/{skill_id}", s.skillGet, accessAPIKey},
		{"DELETE /v1/skills/{skill_id}", s.skillDelete, accessAPIKey},
		{"POST /v1/skills/{skill_id}/versions", s.skillVersionCreate, skillUpload},
		{"GET /v1/skills/{skill_id}/versions", s.skillVersionList, accessSessionSkill},
		{"GET /v1/skills/{skill_id}/versions/{version}", s.skillVersionGet, accessSessionSkill},
		{"DELETE /v1/skills/{skill_id}/versions/{version}", s.skillVersionDelete, accessAPIKey},
		{"GET /v1/skills/{skill_id}/versions/{version}/content", s.skillVersionContent, accessSessionSkill},
	}
}

// routes registers the route table.
func (s *Server) routes() {
	for _, rt := range s.routeTable() {
		s.handle(rt)
	}
}

// handle registers a route. One that declares no access, or an access that does not match its path
// (checkRoute), is a programming error, and panics.
func (s *Server) handle(rt route) {
	if err := checkRoute(rt); err != nil {
		panic("api: " + err.Error())
	}
	s.mux.Handle(rt.pattern, s.serve(rt.access, rt.h))
}

// checkRoute checks that a route's access matches its path family: the health checks are public and nothing
// else is; the work queue's routes, and only they, have queue accesses (the only ones environment keys reach);
// an environment key is scoped by the path's environment, so a route that takes one names it; a sessions token
// is scoped by the path's environment, work item or session, so a route that takes one names one of them or
// checks the token further.
func checkRoute(rt route) error {
	a := rt.access
	_, p, _ := strings.Cut(rt.pattern, " ")
	names := func(wildcards ...string) bool {
		return slices.ContainsFunc(wildcards, func(w string) bool { return strings.Contains(p, "{"+w+"}") })
	}
	queue := p == workBase || strings.HasPrefix(p, workBase+"/")
	switch {
	case a.name == "":
		return fmt.Errorf("route %s declares no access", rt.pattern)
	case a.public != (p == "/{$}" || p == "/healthz"):
		return fmt.Errorf("route %s: access %s, but only the health checks are public", rt.pattern, a.name)
	case a.public:
		return nil
	case a.accept == 0:
		return fmt.Errorf("route %s: access %s accepts no credential", rt.pattern, a.name)
	case a.queue != queue:
		return fmt.Errorf("route %s: access %s, but the work queue's routes and only they take queue accesses", rt.pattern, a.name)
	case a.accept&kindEnvKey != 0 && (!a.queue || !names("environment_id")):
		return fmt.Errorf("route %s: access %s takes environment keys outside an environment's work queue", rt.pattern, a.name)
	case a.accept&kindToken != 0 && a.tokenScope == nil && !names("environment_id", "work_id", "session_id"):
		return fmt.Errorf("route %s: access %s takes sessions tokens that nothing in its path scopes", rt.pattern, a.name)
	}
	return nil
}
