// Package workspace places a session's resources in its workspace, on the host, before the session's sandbox
// is provisioned: it is the sandbox Pool's Placer (sandbox.Placer). A git repository is cloned by a git process
// that runs outside every sandbox, with a clean environment and only https allowed (so that a credential, once
// the vault supplies one, never enters the sandbox, and a session cannot clone the server's own files), and
// pinned to the addresses the session's networking policy allowed. Each resource is placed once per session: a
// record beside the workspace lists the resources already attempted, so re-provisioning a sandbox (the
// workspace survives) does not clone again. A resource that cannot be placed does not stop the session: the
// failure is reported (sandbox.ProvisionReport.ResourceErrors, the log, and a note in front of the session's
// next tool result) and the session continues without it.
//
// Neither the sandbox backends nor the in-sandbox agent import this package (internal/archtest checks it): the
// code that handles repositories and their credentials stays in the server.
package workspace

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
)

// DefaultCloneTimeout bounds the clone and checkout of one repository resource.
const DefaultCloneTimeout = 5 * time.Minute

// Config configures a Placer.
type Config struct {
	// CloneTimeout bounds the clone and checkout of one repository; default DefaultCloneTimeout.
	CloneTimeout time.Duration
	// Git is the git binary; default "git" on Path.
	Git string
	// Path is the PATH host git runs with (cmd/ passes the server's); default the usual system directories.
	Path string
	// AllowLocalURLs lets repositories be cloned from http:// URLs, file:// URLs and absolute host paths, not
	// only https:// ones. For tests only: with it a session can clone any repository the server can read.
	AllowLocalURLs bool
	// Resolve decides whether a repository's host may be reached under the session's networking policy and
	// returns its addresses, which git is then pinned to (so a second DNS answer cannot send the clone to an
	// internal address). The server wires the egress proxy's rules (egress.Resolve); nil allows every host.
	Resolve func(ctx context.Context, n *apitype.Networking, host, port string) ([]net.IP, error)
	// Logger receives the placements and their failures; default discards.
	Logger *slog.Logger
	// Tokens, if set, supplies the repositories' authorization tokens (internal/proxy's Git), and means that
	// the server serves the git endpoint: a repository resource is cloned with its token, and its clone's
	// origin is then set to the endpoint (http://corral.internal/git/<resource_id>), through which the sandbox
	// fetches and pushes without ever holding the token. The token reaches git only in its environment
	// (GIT_CONFIG_COUNT), never in its arguments, a file or the clone's .git/config.
	Tokens Tokens
	// Remote, if set, says where a repository resource is cloned from instead of its URL (and its token):
	// `corral worker` clones through the server's git relay (/v1/sessions/{id}/resources/{id}/git), which
	// adds the token there, with the work item's sessions token as authorization. The URL is the operator's
	// (the server's), so http:// is allowed for it, it is not checked against the session's networking (the
	// relay reaches the repository under the server's rules) and it may not carry credentials. authorization
	// reaches git only in its environment, as a token does with Tokens, and the clone's origin is then
	// sandbox.LocalRemote(resource id), which the sandbox's egress (Egress.Local) serves.
	Remote func(ctx context.Context, sessionID string, res *apitype.Resource) (url, authorization string, err error)
	// ExtraRootCAsPEM are CA certificates (PEM) trusted for the repositories' TLS besides the system roots
	// (corral serve --egress-ca-file).
	ExtraRootCAsPEM []byte
	// Files is the Files API (*files.Service): file resources are placed from it and outputs collected into
	// it. Without it a file resource fails with ErrNoFiles and nothing is collected.
	Files Files
	// MaxOutputBytes bounds what is collected from one session's outputs; default DefaultMaxOutputBytes.
	MaxOutputBytes int64
	// Skills is the Skills API (*files.Service): the agent's skills are placed from it under
	// sandbox.SkillsMount. Without it a skill fails with ErrNoFiles.
	Skills Skills
	// Memories is the memory stores (internal/workspace/memstore over the store): a session's memory_store
	// resources are placed from them at their mount paths and what the agent changes in a read_write one is
	// collected back into them. Without it a memory_store resource fails with ErrNoMemories.
	Memories Memories
}

// Tokens supplies repository tokens to the clones.
type Tokens interface {
	// RepositoryAuthorization returns the Authorization header value that carries the token of a session's
	// repository resource; false if the resource has no token.
	RepositoryAuthorization(ctx context.Context, sessionID, resourceID string) (string, bool, error)
}

// Placer places session resources in workspaces. It keeps no state but the records beside the workspaces, so
// one Placer serves every session concurrently (the Pool serialises the provisionings of one session).
type Placer struct {
	cfg Config
	// collectLocks serialise the collections of one session (a brain ending a turn, the pool reaping a
	// sandbox) and its memory placements: session id -> *sync.Mutex, forgotten with the session's workspace
	// (Forget).
	collectLocks sync.Map

	// notices are what sessions' agents are to be told in their next tool result (TakeNotices); pending is
	// set while there is any.
	noticeMu sync.Mutex
	notices  map[string][]string
	pending  atomic.Bool
}

var _ sandbox.Placer = (*Placer)(nil)

// New returns a Placer. git is looked up only when a repository is cloned: a server without git still runs,
// and a repository resource then fails with the reason.
func New(cfg Config) (*Placer, error) {
	if cfg.CloneTimeout < 0 {
		return nil, errors.New("workspace: CloneTimeout must not be negative")
	}
	if len(cfg.ExtraRootCAsPEM) > 0 {
		if !x509.NewCertPool().AppendCertsFromPEM(cfg.ExtraRootCAsPEM) {
			return nil, errors.New("workspace: ExtraRootCAsPEM holds no PEM certificate")
		}
	}
	cfg.CloneTimeout = cmp.Or(cfg.CloneTimeout, DefaultCloneTimeout)
	cfg.Git = cmp.Or(cfg.Git, "git")
	cfg.Path = cmp.Or(cfg.Path, gitEnvPath)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Placer{cfg: cfg}, nil
}

// workspaceMount is where the workspace appears in a sandbox.
const workspaceMount = "/workspace"

// resourceRecord is the file, beside a workspace, that lists the resources already placed (or attempted).
type resourceRecord struct {
	// Attempted maps a resource's key to "" when it was placed, or to the error that prevented it.
	Attempted map[string]string `json:"attempted"`
	// Files maps the key of a placed file resource to where it was placed (placeFile), so that it can be
	// removed once the resource is deleted.
	Files map[string]string `json:"files,omitempty"`
	// Skills maps "<skill id>@<version>" to the name the skill was placed under ("" if it failed).
	Skills map[string]string `json:"skills,omitempty"`
}

// recordPath is the record of workspace ws. It lives beside the workspace, out of every sandbox's reach.
func recordPath(ws string) string {
	return filepath.Join(filepath.Dir(ws), "."+filepath.Base(ws)+".resources.json")
}

// resourceKey identifies a resource in the record: its id, or a hash of what it places where.
func resourceKey(res *apitype.Resource) string {
	if res.ID != "" {
		return res.ID
	}
	var checkout []byte // the checkout as the API stores it: the key of a resource placed before it was typed
	if res.Checkout != nil {
		checkout, _ = json.Marshal(res.Checkout)
	}
	h := sha256.Sum256([]byte(string(res.Type) + "\x00" + res.URL + "\x00" + res.FileID + "\x00" + res.MountPath + "\x00" + string(checkout)))
	return "sha256:" + hex.EncodeToString(h[:])
}

// Place places the recipe's resources that were not attempted before in its workspace (host.Workspace, and
// its session directory host.Session), which exist. It returns the resources that could not be placed; those
// are recorded too and not attempted again. An attempt cut short because ctx ended is not recorded, so the next
// provisioning tries again.
func (p *Placer) Place(ctx context.Context, r *sandbox.Recipe, host sandbox.HostDirs) []*sandbox.ResourceError {
	recPath := recordPath(host.Workspace)
	if len(r.Resources) == 0 && len(r.Skills) == 0 {
		if _, err := os.Stat(recPath); err != nil {
			return nil // nothing was ever placed: nothing to remove either
		}
	}
	rec := resourceRecord{Attempted: map[string]string{}}
	switch data, err := os.ReadFile(recPath); {
	case err == nil:
		if err := json.Unmarshal(data, &rec); err != nil || rec.Attempted == nil {
			// An unreadable record must not make every resource be placed again over what is there.
			err = fmt.Errorf("record %s of the placed resources is unreadable (%v); no resource was placed", recPath, err)
			p.cfg.Logger.Error("session resources not placed", "session", r.SessionID, "err", err)
			return []*sandbox.ResourceError{{Err: err}}
		}
	case !errors.Is(err, fs.ErrNotExist):
		err = fmt.Errorf("record of the placed resources: %w; no resource was placed", err)
		p.cfg.Logger.Error("session resources not placed", "session", r.SessionID, "err", err)
		return []*sandbox.ResourceError{{Err: err}}
	}
	if rec.Files == nil {
		rec.Files = map[string]string{}
	}
	if rec.Skills == nil {
		rec.Skills = map[string]string{}
	}
	var failed []*sandbox.ResourceError
	changed := p.removeDeletedFiles(r, host, &rec)
	for i := range r.Resources {
		res := &r.Resources[i]
		key := resourceKey(res)
		if _, done := rec.Attempted[key]; done || res.Type == apitype.ResourceMemoryStore {
			continue // memory stores are not files of the workspace
		}
		start := time.Now()
		rerr := p.placeResource(ctx, r, host, res, &rec)
		if rerr != nil && ctx.Err() != nil {
			p.cfg.Logger.Warn("session resource: placement interrupted", "session", r.SessionID, "err", rerr)
			break
		}
		changed = true
		rec.Attempted[key] = ""
		if rerr != nil {
			rec.Attempted[key] = rerr.Error()
			failed = append(failed, rerr)
			p.cfg.Logger.Warn("session resource not placed", "session", r.SessionID, "type", res.Type, "err", rerr)
			continue
		}
		p.cfg.Logger.Info("session resource placed", "session", r.SessionID, "type", res.Type, "url", res.URL,
			"mount_path", res.Path(), "duration", time.Since(start))
	}
	if f, ch := p.placeSkills(ctx, r, host, &rec); ch {
		failed, changed = append(failed, f...), true
	}
	failed = append(failed, p.placeMemories(ctx, r, host)...)
	if changed {
		if err := writeRecord(recPath, &rec); err != nil {
			p.cfg.Logger.Error("session resources: record not written; they may be placed again", "session", r.SessionID, "err", err)
		}
	}
	return failed
}

// Forget removes the record of workspace ws, whose workspace is gone. Idempotent.
func (p *Placer) Forget(ws string) error {
	p.collectLocks.Delete(filepath.Base(ws))
	p.TakeNotices(filepath.Base(ws))
	for _, rec := range []string{recordPath(ws), outputRecordPath(ws), memoryRecordPath(ws)} {
		if err := os.Remove(rec); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("workspace: %w", err)
		}
	}
	return nil
}

// writeRecord replaces a record (of resources or outputs) atomically.
func writeRecord(name string, rec any) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, name); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// placeResource places one resource in the session's host directories.
func (p *Placer) placeResource(ctx context.Context, r *sandbox.Recipe, host sandbox.HostDirs, res *apitype.Resource, rec *resourceRecord) *sandbox.ResourceError {
	sessionID, ws, n := r.SessionID, host.Workspace, r.Environment.Networking
	rerr := &sandbox.ResourceError{ResourceID: res.ID, Type: string(res.Type), URL: redactURL(res.URL), MountPath: res.Path()}
	switch res.Type {
	case apitype.ResourceGitHubRepository:
		if rerr.MountPath == "" {
			_, rerr.Err = apitype.RepoName(res.URL)
			return rerr
		}
		rerr.ErrorType, rerr.Err = p.cloneRepository(ctx, sessionID, ws, res, rerr.MountPath, n)
	case apitype.ResourceFile:
		var placed string
		if placed, rerr.Err = p.placeFile(ctx, host, res, rerr.MountPath); rerr.Err == nil {
			rec.Files[resourceKey(res)] = placed
		}
	default:
		rerr.Err = fmt.Errorf("unsupported resource type %q", res.Type)
	}
	if rerr.Err != nil {
		return rerr
	}
	return nil
}

// redactURL hides the password of a URL that has one.
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		return u.Redacted()
	}
	return raw
}

// workspaceRel maps a mount path under /workspace to a path relative to the workspace.
func workspaceRel(mountPath string) (string, error) {
	if !strings.HasPrefix(mountPath, "/") || strings.ContainsRune(mountPath, 0) {
		return "", fmt.Errorf("mount path %q must be an absolute path under %s", mountPath, workspaceMount)
	}
	clean := path.Clean(mountPath)
	rel, ok := strings.CutPrefix(clean, workspaceMount+"/")
	if !ok || rel == "" {
		return "", fmt.Errorf("mount path %q must lie under %s/ (only the workspace is writable from the host)", mountPath, workspaceMount)
	}
	return filepath.FromSlash(rel), nil
}
