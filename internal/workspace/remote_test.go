package workspace_test

import (
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/sandboxtest"
	"github.com/corralhq/corral/internal/workspace"
)

// TestResourcesThroughRemote: with Config.Remote (corral worker's git relay) a repository resource is cloned from
// the URL Remote gives, with its authorization in git's environment only (a real private git server over TLS
// stands in for the relay), never from the resource's own URL; the clone's origin is the sandbox's git endpoint
// and neither the workspace nor .git/config holds the authorization. A failing Remote, and a relay URL with
// credentials, leave the resource unplaced with the reason.
func TestResourcesThroughRemote(t *testing.T) {
	t.Parallel()
	token := "relay-token-0123456789"
	srv := sandboxtest.NewGitServer(t, token)
	relayURL := srv.NewRepo(t, "relay/proj")
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+token))
	var asked []string
	remote := func(_ context.Context, sessionID string, res *apitype.Resource) (string, string, error) {
		asked = append(asked, sessionID+" "+res.ID)
		switch res.ID {
		case "sesrsc_fail":
			return "", "", errors.New("the worker holds no work item of it")
		case "sesrsc_creds":
			return strings.Replace(relayURL, "https://", "https://u:p@", 1), auth, nil
		}
		return relayURL, auth, nil
	}
	prov := &fakeProvider{}
	root := t.TempDir()
	p := placerPool(t, prov, root, workspace.Config{Remote: remote, ExtraRootCAsPEM: srv.CAPEM})
	// The resource's own URL is never reached: nothing answers there.
	own := "https://git.invalid/o/proj.git"
	ok := apitype.Resource{ID: "sesrsc_ok", Type: apitype.ResourceGitHubRepository, URL: own, MountPath: "/workspace/repo"}
	fail := apitype.Resource{ID: "sesrsc_fail", Type: apitype.ResourceGitHubRepository, URL: own, MountPath: "/workspace/fail"}
	creds := apitype.Resource{ID: "sesrsc_creds", Type: apitype.ResourceGitHubRepository, URL: own, MountPath: "/workspace/creds"}
	_, unplaced := provisionWith(t, p, "sess_remote", ok, fail, creds)
	if len(unplaced) != 2 || !strings.Contains(unplaced[0].Err.Error()+unplaced[1].Err.Error(), "holds no work item") ||
		!strings.Contains(unplaced[0].Err.Error()+unplaced[1].Err.Error(), "without credentials") {
		t.Fatalf("unplaced: %v", unplaced)
	}
	if strings.Join(asked, ",") != "sess_remote sesrsc_ok,sess_remote sesrsc_fail,sess_remote sesrsc_creds" {
		t.Errorf("Remote was asked for %v", asked)
	}
	clone := filepath.Join(root, "sess_remote", "repo")
	if got := readFile(t, filepath.Join(clone, "README")); got != "v2\n" {
		t.Errorf("README = %q", got)
	}
	if got := gitOut(t, clone, "remote", "get-url", "origin"); got != sandbox.LocalRemote("sesrsc_ok") {
		t.Errorf("origin = %q, want the git endpoint", got)
	}
	err := filepath.WalkDir(filepath.Join(root, "sess_remote"), func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err == nil && (strings.Contains(string(b), token) || strings.Contains(string(b), auth[len("Basic "):])) {
			t.Errorf("%s holds the authorization", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
