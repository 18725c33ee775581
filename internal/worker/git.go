package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
)

// repos is the worker's side of the server's git relay (/v1/sessions/{id}/resources/{id}/git/..., which adds a
// repository resource's token on the server: the worker never has it). The workspace clones a session's
// repositories through the relay (workspace.Config.Remote), and the session's sandbox fetches and pushes
// through its git endpoint (http://corral.internal/git/<resource_id>, sandbox.Egress.Local), which this
// forwards to the relay. Both authenticate with the sessions token of the work item the worker holds for the
// session, and only while it holds it; the token stays outside the sandbox and reaches the clone's git only
// in its environment.
type repos struct {
	base string       // the server's URL
	hc   *http.Client // the API client's, redirects not followed
	log  *slog.Logger
	// held gives the sessions token of each session the worker holds.
	held *held
}

func newRepos(base string, hc *http.Client, h *held, log *slog.Logger) *repos {
	c := *hc
	// A redirect would carry the sessions token to wherever it points: not followed.
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &repos{base: strings.TrimRight(base, "/"), hc: &c, log: log, held: h}
}

func (g *repos) token(sessionID string) (string, bool) {
	c, err := g.held.session(sessionID)
	if err != nil {
		return "", false
	}
	return c.Key(), true
}

// relayURL is the git relay of a session's repository resource: a git remote URL.
func (g *repos) relayURL(sessionID, resourceID string) string {
	return g.base + "/v1/sessions/" + url.PathEscape(sessionID) + "/resources/" + url.PathEscape(resourceID) + "/git"
}

// remote is workspace.Config.Remote: a repository resource is cloned from the relay with the sessions token.
func (g *repos) remote(_ context.Context, sessionID string, res *apitype.Resource) (string, string, error) {
	token, ok := g.token(sessionID)
	if !ok {
		return "", "", fmt.Errorf("session %s: the worker holds no work item of it", sessionID)
	}
	return g.relayURL(sessionID, res.ID), "Bearer " + token, nil
}

// handler is the git endpoint of session sessionID's sandboxes (sandbox.Egress.Local).
// It forwards at most maxGitRequests requests at once (the server's relay takes as many from a work item), so
// that a sandbox cannot hold the worker's connections.
func (g *repos) handler(sessionID string) http.Handler {
	slots := make(chan struct{}, maxGitRequests)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
			g.serve(w, r, sessionID)
		default:
			g.refuse(w, r, sessionID, http.StatusTooManyRequests, fmt.Sprintf("at most %d git requests at once", maxGitRequests))
		}
	})
}

// maxGitRequests bounds a sandbox's git requests at once through its git endpoint.
const maxGitRequests = 4

// refuse answers a request the endpoint does not serve, in plain text that git shows to the user.
func (g *repos) refuse(w http.ResponseWriter, r *http.Request, sessionID string, code int, msg string) {
	g.log.Info("git endpoint refused", "session", sessionID, "method", r.Method, "path", r.URL.Path, "status", code, "reason", msg)
	http.Error(w, "corral git endpoint: "+msg, code)
}

// serve forwards one smart-HTTP request of git from the sandbox to the relay, with the sessions token.
func (g *repos) serve(w http.ResponseWriter, r *http.Request, sessionID string) {
	rest, ok := strings.CutPrefix(r.URL.Path, sandbox.GitPrefix)
	rid, op, _ := strings.Cut(rest, "/")
	service := r.URL.Query().Get("service")
	if !ok || rid == "" || !apitype.GitSmartHTTP(r.Method, op, service) {
		g.refuse(w, r, sessionID, http.StatusNotFound, "only git's smart HTTP (info/refs?service=git-upload-pack|git-receive-pack, "+
			"git-upload-pack, git-receive-pack) under "+sandbox.GitPrefix+"<resource_id>/ is served here")
		return
	}
	token, ok := g.token(sessionID)
	if !ok {
		g.refuse(w, r, sessionID, http.StatusForbidden, "this worker no longer holds the session")
		return
	}
	up := g.relayURL(sessionID, rid) + "/" + op
	if r.Method == http.MethodGet {
		up += "?service=" + service
	}
	body := io.Reader(http.NoBody)
	if r.Method == http.MethodPost {
		body = r.Body
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, up, body)
	if err != nil {
		g.refuse(w, r, sessionID, http.StatusBadRequest, "bad request")
		return
	}
	if r.Method == http.MethodPost {
		out.ContentLength = r.ContentLength
	}
	sandbox.CopyGitHeaders(out.Header, r.Header, sandbox.GitRequestHeaders)
	out.Header.Set("Authorization", "Bearer "+token)
	resp, err := g.hc.Do(out)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL
		}
		g.refuse(w, r, sessionID, http.StatusBadGateway, fmt.Sprintf("the server's git relay could not be reached: %v", err))
		return
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		g.refuse(w, r, sessionID, http.StatusBadGateway, fmt.Sprintf("the server's git relay redirected (%d)", resp.StatusCode))
		return
	case resp.StatusCode >= 400:
		// The relay's refusal, in words git shows; never a 401, for which git in the sandbox would ask for
		// credentials it must not have.
		code := resp.StatusCode
		if code == http.StatusUnauthorized {
			code = http.StatusForbidden
		}
		g.refuse(w, r, sessionID, code, relayError(resp))
		return
	}
	if err := sandbox.ForwardGitResponse(w, resp); err != nil {
		g.log.Warn("git endpoint: response cut", "session", sessionID, "resource", rid, "err", err)
	}
}

// relayError is what a refusal of the relay says: the API error's message, or the git endpoint's text.
func relayError(resp *http.Response) string {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<10))
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
		return fmt.Sprintf("the server's git relay refused (%d): %s", resp.StatusCode, e.Error.Message)
	}
	msg := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(b)), "corral git endpoint: "))
	if msg == "" {
		msg = resp.Status
	}
	return msg
}
