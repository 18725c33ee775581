package api

import (
	"cmp"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// Who may call the API, and what each caller may reach. Every credential kind and every access policy is here;
// the route table (routes.go) names the access of each route, and the handlers read the caller from the
// request's context.
//
// Three kinds of credential reach the API:
//
//   - an API key (Config.Keys): the operator. It may do everything but take work (poll, ack).
//   - an environment key (apitype.EnvironmentKeyPrefix), held by the workers of a self-hosted environment: it may
//     poll, ack, heartbeat, stop, list and count its own environment's work, and nothing else.
//   - a sessions token (apitype.SessionsTokenPrefix), minted by the poll that delivers a work item and carried in
//     its secret (the SDK's EnvironmentWorker uses it): it may heartbeat and stop that item, read, follow and
//     answer (user.tool_result) that item's session, read its environment and the skills its session's agent
//     names, and read and write the memories of the memory stores attached to its session (write: only those
//     attached read_write), and use the git relay of its session's repositories (the only credential that
//     may). It dies when the item stops or another poll delivers it.
//
// A request is authenticated into one caller (authenticate), kept in its context under one key (callerOf).

// credKind is a kind of credential; kinds are bits, so that an access accepts a set of them.
type credKind uint8

const (
	kindAPIKey credKind = 1 << iota
	kindEnvKey
	kindToken
	allKinds = kindAPIKey | kindEnvKey | kindToken
)

// caller is who a request was authenticated as.
type caller struct {
	kind   credKind
	id     string                  // for rate limiting and stream slots
	envKey *apitype.EnvironmentKey // kindEnvKey: the key
	work   *apitype.Work           // kindToken: the work item the token was minted for
	// ws is the workspace the request acts in (workspaces.go): the API key's, the one an organization admin
	// key's request names (the default one if none), the environment key's environment's, the sessions
	// token's session's.
	ws    string
	admin bool // an organization admin key
}

// credential is how one kind of credential is recognised, authenticated and scoped to a request's path.
type credential struct {
	kind credKind
	name string
	// prefix tells the kind's secrets apart; API keys have none: a secret no other kind claims is an API key.
	prefix string
	// authenticate looks the secret up: an unknown, revoked or expired one is a 401.
	authenticate func(s *Server, ctx context.Context, secret string) (*caller, error)
	// scope checks that the caller may act on the request's path (its environment, work item and session).
	scope func(r *http.Request, c *caller) error
	// refused is the 403 of a route whose access does not take this kind.
	refused string
}

// credentials are the kinds of credential, prefixed kinds first.
var credentials = []credential{
	{kind: kindEnvKey, name: "environment key", prefix: apitype.EnvironmentKeyPrefix,
		authenticate: (*Server).authEnvKey, scope: scopeEnvKey,
		refused: "an environment key may only poll, ack, heartbeat, stop, list and count its environment's work"},
	{kind: kindToken, name: "sessions token", prefix: apitype.SessionsTokenPrefix,
		authenticate: (*Server).authToken, scope: scopeToken,
		refused: "a sessions token may only heartbeat and stop its work item and use its session and its memory stores' memories"},
	{kind: kindAPIKey, name: "API key",
		authenticate: (*Server).authAPIKey, scope: func(*http.Request, *caller) error { return nil },
		refused: "this endpoint takes an environment key, not an API key"},
}

func (s *Server) authEnvKey(ctx context.Context, secret string) (*caller, error) {
	k, err := s.store.EnvironmentKeyByHash(ctx, apitype.HashAPIKey(secret))
	if errors.Is(err, store.ErrNotFound) {
		return nil, errUnauthorized("invalid or revoked environment key")
	}
	if err != nil {
		return nil, err
	}
	return s.inOwnersWorkspace(ctx, &caller{kind: kindEnvKey, id: k.ID, envKey: k}, k.EnvironmentID)
}

// scopeEnvKey: an environment key reaches only its own environment.
func scopeEnvKey(r *http.Request, c *caller) error {
	if r.PathValue("environment_id") != c.envKey.EnvironmentID {
		return errForbidden("this environment key belongs to another environment")
	}
	return nil
}

func (s *Server) authToken(ctx context.Context, secret string) (*caller, error) {
	wk, err := s.store.WorkByTokenHash(ctx, apitype.HashAPIKey(secret))
	if errors.Is(err, store.ErrNotFound) || err == nil && wk.State == apitype.WorkStopped {
		return nil, errUnauthorized("invalid or expired sessions token (its work item stopped or was delivered again)")
	}
	if err != nil {
		return nil, err
	}
	return s.inOwnersWorkspace(ctx, &caller{kind: kindToken, id: "work:" + wk.ID, work: wk}, wk.Data.ID)
}

// scopeToken: a sessions token reaches only its work item, that item's environment and its session.
func scopeToken(r *http.Request, c *caller) error {
	env, workID, sessID := r.PathValue("environment_id"), r.PathValue("work_id"), r.PathValue("session_id")
	switch {
	case env != "" && env != c.work.EnvironmentID, workID != "" && workID != c.work.ID:
		return errForbidden("this sessions token belongs to another work item")
	case sessID != "" && sessID != c.work.Data.ID:
		return errForbidden("this sessions token belongs to another session")
	}
	return nil
}

func (s *Server) authAPIKey(ctx context.Context, secret string) (*caller, error) {
	k, err := s.keys.Authenticate(ctx, secret)
	if err != nil {
		return nil, err
	}
	return &caller{kind: kindAPIKey, id: k.ID, ws: k.WorkspaceID, admin: k.WorkspaceID == ""}, nil
}

// access is what a route lets through: the kinds of credential it accepts and, for some, a body cap of its own
// or a further check of a sessions token. Its zero value is no access: such a route cannot be registered.
type access struct {
	name   string
	public bool     // no credential at all
	accept credKind // the kinds of credential accepted
	// queue marks the work queue's routes, which every kind of credential reaches: there each kind is told
	// apart by its prefix, and a kind the route does not accept is a 403. Elsewhere only the kinds a route
	// accepts are told apart, and any other secret is tried as an API key (a 401 unless it is one).
	queue bool
	// tokenScope is a further check of a sessions token, after its kind's scope.
	tokenScope func(s *Server, r *http.Request, wk *apitype.Work) error
	// maxBody caps the body of an upload; nil means Config.MaxBodyBytes.
	maxBody func() int64
	// refused, if set, is the 403 of a credential this access does not take, instead of its kind's.
	refused string
	// admin marks the admin API's routes, which only an organization admin key reaches.
	admin bool
}

// The accesses of the route table.
var (
	accessPublic = access{name: "public", public: true}
	// accessAPIKey: the operator's resources.
	accessAPIKey = access{name: "api_key", accept: kindAPIKey}
	// accessAdmin: the organization's workspaces and keys, an organization admin key's alone.
	accessAdmin = access{name: "admin", accept: kindAPIKey, admin: true}
	// accessSession: a session (or its environment), which the sessions token of a work item of it may use too.
	accessSession = access{name: "session", accept: kindAPIKey | kindToken}
	// accessSessionSkill: a skill's versions, which a sessions token reads only for the skills its session's
	// agent names (the SDK's EnvironmentWorker downloads them).
	accessSessionSkill = access{name: "session_skill", accept: kindAPIKey | kindToken, tokenScope: (*Server).skillOfSession}
	// accessSessionMemory and accessSessionMemoryWrite: a memory store's memories, which a sessions token reads
	// only in the stores attached to its session, and writes only in those attached read_write (the SDK's
	// EnvironmentWorker syncs them). A token writes as its session (session_actor).
	accessSessionMemory      = access{name: "session_memory", accept: kindAPIKey | kindToken, tokenScope: memoryOfSession(false)}
	accessSessionMemoryWrite = access{name: "session_memory_write", accept: kindAPIKey | kindToken, tokenScope: memoryOfSession(true)}
	// accessSessionFile: a file, which a sessions token reads only if it is a file resource of its session or
	// a file scoped to its session (an output); accessSessionOutput: an upload, which from a sessions token is
	// always an output of its session (fileUpload scopes it), within the session's output quota (the self-hosted
	// worker collects outputs with it).
	accessSessionFile   = access{name: "session_file", accept: kindAPIKey | kindToken, tokenScope: (*Server).fileOfSession}
	accessSessionOutput = access{name: "session_output", accept: kindAPIKey | kindToken, tokenScope: (*Server).outputOfSession}
	// accessSessionGit: the git relay of a session's repositories, the sessions token's alone: the
	// repositories' tokens are used for the workers of the session's environment, on its behalf, and for no one
	// else.
	accessSessionGit = access{name: "session_git", accept: kindToken,
		refused: "the git relay takes only the sessions token of a work item of the session"}
	// The work queue: take (poll, ack) is the environment key's alone; hold (heartbeat, stop) every kind's;
	// watching the queue (list, stats) the keys'; operating an item (get, update) the API key's.
	accessTake    = access{name: "work_take", queue: true, accept: kindEnvKey}
	accessHold    = access{name: "work_hold", queue: true, accept: allKinds}
	accessQueue   = access{name: "work_queue", queue: true, accept: kindAPIKey | kindEnvKey}
	accessOperate = access{name: "work_operate", queue: true, accept: kindAPIKey}
)

// upload is access a with a body cap of its own (an upload larger than Config.MaxBodyBytes).
func (a access) upload(maxBody func() int64) access {
	a.maxBody = maxBody
	return a
}

// credentialFor tells which kind of credential a secret is, as a route of access a tells them apart.
func (a access) credentialFor(secret string) *credential {
	known := a.accept
	if a.queue {
		known = allKinds
	}
	for i := range credentials {
		c := &credentials[i]
		if c.prefix == "" || known&c.kind != 0 && strings.HasPrefix(secret, c.prefix) {
			return c
		}
	}
	panic("unreachable: the API key takes every secret")
}

// authenticate finds the caller of a request to a route of access a and checks that a lets it through to the
// request's path.
func (s *Server) authenticate(r *http.Request, a access) (*caller, error) {
	secret := presentedKey(r)
	if secret == "" {
		if a.queue {
			return nil, errUnauthorized("missing credential: send Authorization: Bearer <key>")
		}
		return nil, errUnauthorized("missing API key: send Authorization: Bearer <key> or x-api-key: <key>")
	}
	cred := a.credentialFor(secret)
	c, err := cred.authenticate(s, r.Context(), secret)
	if err != nil {
		return nil, err
	}
	if a.accept&c.kind == 0 {
		return nil, errForbidden("%s", cmp.Or(a.refused, cred.refused))
	}
	if err := cred.scope(r, c); err != nil {
		return nil, err
	}
	if err := s.enterWorkspace(r, a, c); err != nil {
		return nil, err
	}
	return c, nil
}

// serve is the handler of a route: it authenticates the caller, rate limits it and caps the body size, then
// runs h with the caller in the request's context.
func (s *Server) serve(a access, h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.admit(w, r, a, h); err != nil {
			s.serveErr(w, r, err)
		}
	})
}

func (s *Server) admit(w http.ResponseWriter, r *http.Request, a access, h handlerFunc) error {
	if a.public {
		return h(w, r)
	}
	c, err := s.authenticate(r, a)
	if err != nil {
		return err
	}
	if err := s.rateLimit(w, c.id); err != nil {
		return err
	}
	if err := s.workspaceRate(w, r, c); err != nil {
		return err
	}
	r = r.WithContext(context.WithValue(r.Context(), callerKey{}, c))
	maxBody := s.maxBody
	if a.maxBody != nil {
		maxBody = a.maxBody()
	}
	if r.ContentLength > maxBody {
		return errTooLarge(maxBody)
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	if c.kind == kindToken && a.tokenScope != nil {
		if err := a.tokenScope(s, r, c.work); err != nil {
			return err
		}
	}
	return h(w, r)
}

// rateLimit applies the rate limit of a caller id.
func (s *Server) rateLimit(w http.ResponseWriter, id string) error {
	if s.limiter != nil {
		if wait, ok := s.limiter.allow(id, time.Now()); !ok {
			secs := int(wait/time.Second) + 1
			w.Header().Set("retry-after", fmt.Sprint(secs))
			return &apiError{status: http.StatusTooManyRequests, typ: apitype.ErrRateLimit,
				msg: fmt.Sprintf("rate limit exceeded; retry in %d s", secs)}
		}
	}
	return nil
}

// callerKey is the context key of the request's *caller.
type callerKey struct{}

// callerOf is the caller of the request (nil on public routes).
func callerOf(ctx context.Context) *caller {
	c, _ := ctx.Value(callerKey{}).(*caller)
	return c
}

// callerID is the id the caller is rate limited and counted by ("" on public routes).
func callerID(ctx context.Context) string {
	if c := callerOf(ctx); c != nil {
		return c.id
	}
	return ""
}

// envKeyID is the id of the request's environment key, "" for other credentials.
func envKeyID(ctx context.Context) string {
	if c := callerOf(ctx); c != nil && c.kind == kindEnvKey {
		return c.envKey.ID
	}
	return ""
}

// tokenMayAppend checks what a sessions token sends to its session: only user.tool_result.
func tokenMayAppend(ctx context.Context, events []clientEvent) error {
	if c := callerOf(ctx); c != nil && c.kind == kindToken {
		for _, ce := range events {
			if ce.ev.Type != apitype.EventUserToolResult {
				return errForbidden("a sessions token may only send user.tool_result events, not %s", ce.ev.Type)
			}
		}
	}
	return nil
}

// skillOfSession lets a sessions token read a skill only if its session's agent names it.
func (s *Server) skillOfSession(r *http.Request, wk *apitype.Work) error {
	id := r.PathValue("skill_id")
	sess, err := s.store.SessionGet(r.Context(), wk.Data.ID)
	if err != nil {
		return lookup(err, "session", wk.Data.ID)
	}
	for _, ref := range sess.Agent.Skills {
		if ref.SkillID == id {
			return nil
		}
	}
	return errForbidden("this sessions token may read only the skills of its session's agent, not %s", id)
}

func errUnauthorized(msg string) error {
	return &apiError{status: http.StatusUnauthorized, typ: apitype.ErrAuthentication, msg: msg}
}

func errForbidden(format string, args ...any) error {
	return &apiError{status: http.StatusForbidden, typ: apitype.ErrPermission, msg: fmt.Sprintf(format, args...)}
}

// Authenticator checks an API key and returns it: its id is stable (it rate limits per key), its WorkspaceID
// is its workspace ("" for an organization admin key). An unknown key gives an error; the server answers 401
// whatever the error says, and logs nothing.
type Authenticator interface {
	Authenticate(ctx context.Context, key string) (*apitype.APIKey, error)
}

// StaticKeyID is the key id KeyAuth reports for the static key.
const StaticKeyID = "static"

// KeyAuth accepts an optional static key (e.g. from CORRAL_API_KEY), an organization admin key, and the active
// keys of a store, which are looked up by apitype.HashAPIKey of the presented key.
type KeyAuth struct {
	Static string            // accepted as is when non-empty
	Store  store.APIKeyStore // may be nil: only the static key is accepted
}

var errBadKey = &apiError{status: http.StatusUnauthorized, typ: apitype.ErrAuthentication, msg: "invalid API key"}

// Authenticate implements Authenticator.
func (k *KeyAuth) Authenticate(ctx context.Context, key string) (*apitype.APIKey, error) {
	if k.Static != "" && subtle.ConstantTimeCompare([]byte(key), []byte(k.Static)) == 1 {
		return &apitype.APIKey{ID: StaticKeyID}, nil
	}
	if k.Store == nil {
		return nil, errBadKey
	}
	ak, err := k.Store.APIKeyByHash(ctx, apitype.HashAPIKey(key))
	if errors.Is(err, store.ErrNotFound) {
		return nil, errBadKey
	}
	if err != nil {
		return nil, err // a store failure is a 500, not a wrong key
	}
	if ak.RevokedAt != nil || ak.Inactive {
		return nil, errBadKey
	}
	return ak, nil
}

// presentedKey returns the key from "Authorization: Bearer KEY" or "x-api-key: KEY".
func presentedKey(r *http.Request) string {
	if k := strings.TrimSpace(r.Header.Get("x-api-key")); k != "" {
		return k
	}
	auth := r.Header.Get("Authorization")
	if scheme, token, ok := strings.Cut(auth, " "); ok && strings.EqualFold(scheme, "Bearer") {
		return strings.TrimSpace(token)
	}
	return ""
}

// rateLimiter is a token bucket per key id.
type rateLimiter struct {
	rate  float64 // tokens per second
	burst float64
	mu    sync.Mutex
	keys  map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newRateLimiter(rate float64, burst int) *rateLimiter {
	return &rateLimiter{rate: rate, burst: float64(burst), keys: map[string]*bucket{}}
}

// allow takes a token for key, or reports how long until one is available.
func (l *rateLimiter) allow(key string, now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.keys[key]
	if b == nil {
		b = &bucket{tokens: l.burst, last: now}
		l.keys[key] = b
	}
	b.tokens = min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate)
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return 0, true
	}
	return time.Duration((1 - b.tokens) / l.rate * float64(time.Second)), false
}
