package api_test

import (
	"net/http"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/apitype"
)

func TestSessionResources(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	s, err := h.client.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent:         anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agentID)},
		EnvironmentID: envID,
		Resources: []anthropic.BetaSessionNewParamsResourceUnion{{
			OfGitHubRepository: &anthropic.BetaManagedAgentsGitHubRepositoryResourceParams{
				URL:       "https://github.com/corralhq/corral.git",
				MountPath: anthropic.String("/workspace/src"),
				Checkout: anthropic.BetaManagedAgentsGitHubRepositoryResourceParamsCheckoutUnion{
					OfBranch: &anthropic.BetaManagedAgentsBranchCheckoutParam{Name: "main"},
				},
			},
		}},
	})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	repoID := s.Resources[0].ID

	seedFile(t, h.store, "file_abc")
	seedFile(t, h.store, "file_other")
	added, err := h.client.Beta.Sessions.Resources.Add(ctx, s.ID, anthropic.BetaSessionResourceAddParams{
		BetaManagedAgentsFileResourceParams: anthropic.BetaManagedAgentsFileResourceParams{FileID: "file_abc"},
	})
	if err != nil {
		t.Fatalf("add: %v", err)
	}
	if added.Type != "file" || added.FileID != "file_abc" || added.MountPath != "/mnt/session/uploads/file_abc" ||
		!apitype.HasPrefix(added.ID, apitype.PrefixResource) {
		t.Fatalf("added = %s", added.RawJSON())
	}
	_, err = h.client.Beta.Sessions.Resources.Add(ctx, s.ID, anthropic.BetaSessionResourceAddParams{
		BetaManagedAgentsFileResourceParams: anthropic.BetaManagedAgentsFileResourceParams{FileID: "file_other",
			MountPath: anthropic.String("/workspace/src")},
	})
	wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest) // the mount path is taken

	got, err := h.client.Beta.Sessions.Resources.Get(ctx, repoID, anthropic.BetaSessionResourceGetParams{SessionID: s.ID})
	if err != nil || got.Type != "github_repository" || got.URL != "https://github.com/corralhq/corral.git" ||
		got.MountPath != "/workspace/src" || got.Checkout.Name != "main" {
		t.Fatalf("get: %v %s", err, got.RawJSON())
	}
	up, err := h.client.Beta.Sessions.Resources.Update(ctx, repoID, anthropic.BetaSessionResourceUpdateParams{
		SessionID: s.ID, AuthorizationToken: "ghp_rotated",
	})
	if err != nil || up.ID != repoID {
		t.Fatalf("update: %v", err)
	}
	_, err = h.client.Beta.Sessions.Resources.Update(ctx, added.ID, anthropic.BetaSessionResourceUpdateParams{
		SessionID: s.ID, AuthorizationToken: "ghp_x",
	})
	wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest) // files take no token

	page, err := h.client.Beta.Sessions.Resources.List(ctx, s.ID, anthropic.BetaSessionResourceListParams{Limit: anthropic.Int(1)})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != repoID || page.NextPage == "" {
		t.Fatalf("list page 1: %v %s", err, page.RawJSON())
	}
	page, err = page.GetNextPage()
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != added.ID || page.NextPage != "" {
		t.Fatalf("list page 2: %v %s", err, page.RawJSON())
	}

	del, err := h.client.Beta.Sessions.Resources.Delete(ctx, added.ID, anthropic.BetaSessionResourceDeleteParams{SessionID: s.ID})
	if err != nil || del.ID != added.ID || del.Type != "session_resource_deleted" {
		t.Fatalf("delete: %v", err)
	}
	_, err = h.client.Beta.Sessions.Resources.Get(ctx, added.ID, anthropic.BetaSessionResourceGetParams{SessionID: s.ID})
	wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)
	sess, err := h.client.Beta.Sessions.Get(ctx, s.ID, anthropic.BetaSessionGetParams{})
	if err != nil || len(sess.Resources) != 1 {
		t.Fatalf("session resources after delete: %v %s", err, sess.RawJSON())
	}

	for _, body := range []string{
		`{"type":"github_repository","url":"https://github.com/a/b"}`, // only files can be added later
		`{"type":"file"}`,
		`{"type":"file","file_id":"f","mount_path":"relative/path"}`,
		`{"type":"file","file_id":"f","mount_path":"/a/../b"}`,
		`{"type":"memory_store","memory_store_id":"memstore_x"}`, // memory stores are attached at creation only
	} {
		status, _, b := h.do("POST", "/v1/sessions/"+s.ID+"/resources", body)
		if status != http.StatusBadRequest {
			t.Errorf("%s: %d %s", body, status, b)
		}
	}
}
