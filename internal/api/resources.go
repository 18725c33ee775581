package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	gopath "path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

const maxResourcesPerSession = 100

// SecretAuthorizationToken is the name of a repository resource's sealed authorization_token
// (store.SealedSecret.Name, bound into its encryption with the resource's id).
const SecretAuthorizationToken = "authorization_token"

// maxTokenLen bounds an authorization_token.
const maxTokenLen = 4096

// parseResource validates «ResourceIn». Mount paths default as the hosted service's do. It returns a repository's
// authorization_token apart: the token is sealed and kept beside the session (store.ResourceSecretPut), never in
// the session's document or its log. Repositories and memory stores are attached only when a session is created
// (creating); a memory store's mount path and snapshot are set by checkMemoryStore.
func parseResource(p string, raw json.RawMessage, now time.Time, creating bool) (apitype.Resource, string, error) {
	res, token, err := parseResourceIn(p, raw, now, creating)
	if err == nil && token != "" {
		err = checkToken(path(p, "authorization_token"), token)
	}
	return res, token, err
}

// checkToken refuses a token that cannot travel in an HTTP header. The token is never part of the message.
func checkToken(p, token string) error {
	if len(token) > maxTokenLen {
		return invalid(p, "longer than %d bytes", maxTokenLen)
	}
	for _, c := range []byte(token) {
		if c < 0x21 || c > 0x7e {
			return invalid(p, "must be printable ASCII without spaces")
		}
	}
	return nil
}

// sealToken seals a repository resource's authorization_token.
func (s *Server) sealToken(resourceID, token string) (*store.SealedSecret, error) {
	if s.sealer == nil {
		return nil, errNoSealer
	}
	sealed, err := s.sealer.Seal(resourceID, SecretAuthorizationToken, []byte(token))
	if err != nil {
		return nil, fmt.Errorf("seal the authorization token of %s: %w", resourceID, err)
	}
	return sealed, nil
}

// resealToken seals a deployment's repository token anew for a session's resource.
func (s *Server) resealToken(sealed *store.SealedSecret, resourceID string) (*store.SealedSecret, error) {
	if s.sealer == nil {
		return nil, errNoSealer
	}
	out, err := s.sealer.Reseal(sealed, resourceID, SecretAuthorizationToken)
	if err != nil {
		return nil, fmt.Errorf("seal the authorization token of %s anew: %w", resourceID, err)
	}
	return out, nil
}

func parseResourceIn(p string, raw json.RawMessage, now time.Time, creating bool) (apitype.Resource, string, error) {
	typ, err := typeOf(p, raw)
	if err != nil {
		return apitype.Resource{}, "", err
	}
	res := apitype.Resource{ID: apitype.NewID(apitype.PrefixResource), Type: apitype.ResourceType(typ),
		CreatedAt: now, UpdatedAt: now}
	var token string
	switch res.Type {
	case apitype.ResourceGitHubRepository:
		if !creating {
			return res, "", invalid(path(p, "type"), "only file resources can be added to an existing session")
		}
		var in struct {
			Type               string          `json:"type"`
			URL                string          `json:"url"`
			MountPath          string          `json:"mount_path"`
			Checkout           json.RawMessage `json:"checkout"`
			AuthorizationToken string          `json:"authorization_token"`
		}
		if err := strictUnmarshal(p, raw, &in); err != nil {
			return res, "", err
		}
		name, err := repoName(path(p, "url"), in.URL)
		if err != nil {
			return res, "", err
		}
		res.URL = in.URL
		token = in.AuthorizationToken
		res.MountPath = in.MountPath
		if res.MountPath == "" {
			res.MountPath = "/workspace/" + name
		}
		if !isNull(in.Checkout) {
			if res.Checkout, err = parseCheckout(path(p, "checkout"), in.Checkout); err != nil {
				return res, "", err
			}
		}
	case apitype.ResourceFile:
		var in struct {
			Type      string `json:"type"`
			FileID    string `json:"file_id"`
			MountPath string `json:"mount_path"`
		}
		if err := strictUnmarshal(p, raw, &in); err != nil {
			return res, "", err
		}
		if err := checkString(path(p, "file_id"), in.FileID, true, 256); err != nil {
			return res, "", err
		}
		if strings.ContainsAny(in.FileID, "/\\") {
			return res, "", invalid(path(p, "file_id"), "invalid file id %q", in.FileID)
		}
		res.FileID = in.FileID
		res.MountPath = in.MountPath
		if res.MountPath == "" {
			res.MountPath = fileUploadsRoot + in.FileID
		}
		if !strings.HasPrefix(res.MountPath, fileUploadsRoot) && !strings.HasPrefix(res.MountPath, "/workspace/") {
			return res, "", invalid(path(p, "mount_path"), "a file's mount path must lie under %s or /workspace/, got %q",
				fileUploadsRoot, res.MountPath)
		}
	case apitype.ResourceMemoryStore:
		if !creating {
			return res, "", invalid(path(p, "type"), "only file resources can be added to an existing session")
		}
		var in struct {
			Type          string          `json:"type"`
			MemoryStoreID string          `json:"memory_store_id"`
			Access        *string         `json:"access"`
			Instructions  *string         `json:"instructions"`
			MountPath     json.RawMessage `json:"mount_path"`
		}
		if err := strictUnmarshal(p, raw, &in); err != nil {
			return res, "", err
		}
		if err := checkString(path(p, "memory_store_id"), in.MemoryStoreID, true, 256); err != nil {
			return res, "", err
		}
		if !isNull(in.MountPath) {
			return res, "", invalid(path(p, "mount_path"),
				"a memory store's mount path is output-only: it is %s/<slug of the store's name>", apitype.MemoryMount)
		}
		res.MemoryStoreID = in.MemoryStoreID
		res.Access = apitype.AccessReadWrite
		if in.Access != nil {
			if res.Access = apitype.ResourceAccess(*in.Access); !res.Access.Valid() {
				return res, "", invalid(path(p, "access"), `must be "read_write" or "read_only"`)
			}
		}
		if in.Instructions != nil {
			if err := checkText(path(p, "instructions"), *in.Instructions, false, maxMemoryInstructions); err != nil {
				return res, "", err
			}
			res.Instructions = *in.Instructions
		}
		// The mount path comes from the store's name: checkMemoryStore sets and checks it.
		return res, "", nil
	case "":
		return res, "", invalid(path(p, "type"), "required")
	default:
		return res, "", invalid(path(p, "type"), "unknown resource type %q", typ)
	}
	if err := checkMount(path(p, "mount_path"), res.MountPath); err != nil {
		return res, "", err
	}
	return res, token, nil
}

// repoName checks a repository URL (https, host, owner/repo) and returns the repository's name (apitype.RepoName).
func repoName(p, s string) (string, error) {
	if s == "" {
		return "", invalid(p, "required")
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil {
		return "", invalid(p, "must be an https URL of a repository, without credentials")
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(parts) < 2 || parts[0] == "" || parts[len(parts)-1] == "" {
		return "", invalid(p, "must name a repository, e.g. https://github.com/owner/repo")
	}
	name, err := apitype.RepoName(s)
	if err != nil {
		return "", invalid(p, "must name a repository")
	}
	return name, nil
}

// parseCheckout validates a repository's «Checkout» (apitype.Checkout.Validate) and returns it.
func parseCheckout(p string, raw json.RawMessage) (*apitype.Checkout, error) {
	var in apitype.Checkout
	if err := strictUnmarshal(p, raw, &in); err != nil {
		return nil, err
	}
	if err := in.Validate(); err != nil {
		var ce *apitype.CheckoutError
		if errors.As(err, &ce) {
			return nil, invalid(path(p, ce.Field), "%s", ce.Message)
		}
		return nil, invalid(p, "%v", err)
	}
	return &in, nil
}

// fileUploadsRoot is where file resources go by default (the hosted service's /mnt/session/uploads/); files
// may also go under /workspace/. /mnt/session/outputs is the agent's, for the files it hands back.
const fileUploadsRoot = "/mnt/session/uploads/"

// checkFile refuses a file resource that names no file of the Files API (never uploaded, or deleted).
func (s *Server) checkFile(ctx context.Context, p string, res *apitype.Resource) error {
	if res.Type != apitype.ResourceFile {
		return nil
	}
	if _, err := s.store.FileGet(ctx, res.FileID); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return invalid(path(p, "file_id"), "no file %q: upload it first (POST /v1/files)", res.FileID)
		}
		return err
	}
	return nil
}

// checkMount checks a mount path: absolute, clean, and not the root.
func checkMount(p, m string) error {
	if len(m) > 1024 {
		return invalid(p, "longer than 1024 characters")
	}
	if !strings.HasPrefix(m, "/") || gopath.Clean(m) != m || m == "/" || strings.ContainsAny(m, "\x00\n") {
		return invalid(p, "must be a clean absolute path other than /, got %q", m)
	}
	return nil
}

// checkMountPath rejects a mount path that another resource of the session already uses.
func checkMountPath(p string, existing []apitype.Resource, m string) error {
	if len(existing) >= maxResourcesPerSession {
		return invalid(p, "a session has at most %d resources", maxResourcesPerSession)
	}
	for _, r := range existing {
		if r.MountPath == m {
			return invalid(path(p, "mount_path"), "%q is already used by resource %s", m, r.ID)
		}
	}
	return nil
}

func (s *Server) resourceList(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("session_id")
	q := newQuery(r.URL)
	limit, err := q.limit(maxResourceLimit, maxResourceLimit)
	if err != nil {
		return err
	}
	c, err := q.page()
	if err != nil {
		return err
	}
	sess, err := s.store.SessionGet(r.Context(), id)
	if err != nil {
		return lookup(err, "session", id)
	}
	all := sess.Resources
	if c != nil {
		if c.ID == "" {
			return invalid("page", "invalid page token")
		}
		i := slices.IndexFunc(all, func(res apitype.Resource) bool { return res.ID == c.ID })
		if i < 0 {
			return invalid("page", "the page token's resource no longer exists; list from the start")
		}
		all = all[i+1:]
	}
	data, more := trim(all, limit)
	if data == nil {
		data = []apitype.Resource{}
	}
	var next *string
	if more {
		next = cursor{ID: data[len(data)-1].ID}.encode()
	}
	return writeJSON(w, http.StatusOK, listPage[apitype.Resource]{Data: data, NextPage: next})
}

func (s *Server) resourceGet(w http.ResponseWriter, r *http.Request) error {
	id, rid := r.PathValue("session_id"), r.PathValue("resource_id")
	sess, err := s.store.SessionGet(r.Context(), id)
	if err != nil {
		return lookup(err, "session", id)
	}
	i := slices.IndexFunc(sess.Resources, func(res apitype.Resource) bool { return res.ID == rid })
	if i < 0 {
		return notFound("session resource", rid)
	}
	return writeJSON(w, http.StatusOK, sess.Resources[i])
}

func (s *Server) resourceAdd(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("session_id")
	body, err := readBody(r)
	if err != nil {
		return err
	}
	if err := decodeJSON(body, new(json.RawMessage)); err != nil {
		return err
	}
	now := s.now()
	res, _, err := parseResource("", body, now, false)
	if err != nil {
		return err
	}
	if err := s.checkFile(r.Context(), "", &res); err != nil {
		return err
	}
	_, err = s.store.SessionUpdate(r.Context(), id, func(sess *apitype.Session) error {
		if sess.Status == apitype.StatusTerminated {
			return invalid("", "session %s is terminated", id)
		}
		if err := checkMountPath("", sess.Resources, res.MountPath); err != nil {
			return err
		}
		sess.Resources = append(sess.Resources, res)
		sess.UpdatedAt = now
		return nil
	})
	if err != nil {
		return lookup(err, "session", id)
	}
	return writeJSON(w, http.StatusOK, res)
}

func (s *Server) resourceUpdate(w http.ResponseWriter, r *http.Request) error {
	id, rid := r.PathValue("session_id"), r.PathValue("resource_id")
	var req struct {
		AuthorizationToken *string `json:"authorization_token"`
	}
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	if req.AuthorizationToken == nil || *req.AuthorizationToken == "" {
		return invalid("authorization_token", "required")
	}
	if err := checkToken("authorization_token", *req.AuthorizationToken); err != nil {
		return err
	}
	sealed, err := s.sealToken(rid, *req.AuthorizationToken)
	if err != nil {
		return err
	}
	now := s.now()
	var out apitype.Resource
	_, err = s.store.SessionUpdate(r.Context(), id, func(sess *apitype.Session) error {
		i := slices.IndexFunc(sess.Resources, func(res apitype.Resource) bool { return res.ID == rid })
		if i < 0 {
			return notFound("session resource", rid)
		}
		if sess.Resources[i].Type != apitype.ResourceGitHubRepository {
			return invalid("authorization_token", "only github_repository resources take an authorization token")
		}
		sess.Resources[i].UpdatedAt = now
		sess.UpdatedAt = now
		out = sess.Resources[i]
		return nil
	})
	if err != nil {
		return lookup(err, "session", id)
	}
	// The rotated token replaces the old one for the next clone and every later request of the session's git
	// endpoint. (A concurrent deletion of the resource may leave a secret behind; it goes with the session.)
	if err := s.store.ResourceSecretPut(r.Context(), id, sealed); err != nil {
		return lookup(err, "session", id)
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *Server) resourceDelete(w http.ResponseWriter, r *http.Request) error {
	id, rid := r.PathValue("session_id"), r.PathValue("resource_id")
	now := s.now()
	_, err := s.store.SessionUpdate(r.Context(), id, func(sess *apitype.Session) error {
		i := slices.IndexFunc(sess.Resources, func(res apitype.Resource) bool { return res.ID == rid })
		if i < 0 {
			return notFound("session resource", rid)
		}
		sess.Resources = slices.Delete(sess.Resources, i, i+1)
		sess.UpdatedAt = now
		return nil
	})
	if err != nil {
		return lookup(err, "session", id)
	}
	if err := s.store.ResourceSecretDelete(r.Context(), id, rid); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]string{"id": rid, "type": "session_resource_deleted"})
}

// resourceGit is the git relay (a Corral extension): it forwards git's smart HTTP (apitype.GitSmartHTTP) to
// the repository of one of the session's github_repository resources with the resource's token added, which
// never leaves the server. Only the sessions token of a work item of the session reaches it
// (accessSessionGit): `corral worker` clones through it and its sandboxes fetch and push through it, with
// no repository token on the worker. The repository is reached under the session's environment's networking
// and the server's egress rules, with the git endpoint's limits (GitRelay).
func (s *Server) resourceGit(w http.ResponseWriter, r *http.Request) error {
	id, rid, op := r.PathValue("session_id"), r.PathValue("resource_id"), r.PathValue("op")
	if s.gitRelay == nil {
		return &apiError{status: http.StatusNotImplemented, typ: apitype.ErrAPI, msg: "this server has no git relay"}
	}
	if !apitype.GitSmartHTTP(r.Method, op, r.URL.Query().Get("service")) {
		return &apiError{status: http.StatusNotFound, typ: apitype.ErrNotFound, msg: "the git relay serves only git's smart HTTP: " +
			"GET info/refs?service=git-upload-pack|git-receive-pack, POST git-upload-pack, POST git-receive-pack"}
	}
	ctx := r.Context()
	sess, err := s.store.SessionGet(ctx, id)
	if err != nil {
		return lookup(err, "session", id)
	}
	i := slices.IndexFunc(sess.Resources, func(res apitype.Resource) bool { return res.ID == rid })
	if i < 0 {
		return notFound("session resource", rid)
	}
	if typ := sess.Resources[i].Type; typ != apitype.ResourceGitHubRepository {
		return errForbidden("resource %s is a %s resource: the git relay serves only %s resources", rid, typ, apitype.ResourceGitHubRepository)
	}
	// The session's environment's networking, as its sandbox's: none at all without an environment.
	networking := &apitype.Networking{Type: apitype.NetworkingLimited, AllowedHosts: []string{}}
	if sess.EnvironmentID != "" {
		env, err := s.store.EnvironmentGet(ctx, sess.EnvironmentID)
		switch {
		case err == nil:
			networking = env.Config.Networking
		case !errors.Is(err, store.ErrNotFound):
			return fmt.Errorf("environment %s: %w", sess.EnvironmentID, err)
		}
	}
	// A work item holds at most maxRelayPerItem relayed requests at once, and the server maxRelay: a token
	// cannot hold the server's connections and goroutines for the relay's hour.
	release, ok := s.relaySlots.take(callerOf(ctx).work.ID)
	if !ok {
		return &apiError{status: http.StatusTooManyRequests, typ: apitype.ErrRateLimit,
			msg: fmt.Sprintf("too many git requests through the relay at once (at most %d a work item, %d in all)", maxRelayPerItem, maxRelay)}
	}
	defer release()
	// A push's pack or a clone's may take longer than the server's read and write timeouts: the relay's own
	// bound applies instead.
	_, timeout := s.gitRelay.Limits()
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(timeout))
	_ = rc.SetWriteDeadline(time.Now().Add(timeout))
	s.gitRelay.Relay(w, r, id, rid, op, networking)
	return nil
}

// The git relay's bounds on requests at once (relaySlots).
const (
	maxRelayPerItem = 4
	maxRelay        = 64
)

// relaySlots counts the git relay's requests running, by work item.
type relaySlots struct {
	mu     sync.Mutex
	byItem map[string]int
	total  int
}

// take reserves a slot for a request of work item id; false when its item or the server has none left.
func (r *relaySlots) take(id string) (release func(), ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byItem == nil {
		r.byItem = map[string]int{}
	}
	if r.byItem[id] >= maxRelayPerItem || r.total >= maxRelay {
		return nil, false
	}
	r.byItem[id]++
	r.total++
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.total--
		if r.byItem[id]--; r.byItem[id] == 0 {
			delete(r.byItem, id)
		}
	}, true
}
