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
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
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
	// sandbox): session id -> *sync.Mutex, forgotten with the session's workspace (Forget).
	collectLocks sync.Map
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
	h := sha256.Sum256([]byte(string(res.Type) + "\x00" + res.URL + "\x00" + res.FileID + "\x00" + res.MountPath + "\x00" + string(res.Checkout)))
	return "sha256:" + hex.EncodeToString(h[:])
}

// Place places the recipe's resources that were not attempted before in its workspace, which exists. It
// returns the resources that could not be placed; those are recorded too and not attempted again. An attempt
// cut short because ctx ended is not recorded, so the next provisioning tries again.
func (p *Placer) Place(ctx context.Context, r *sandbox.Recipe) []*sandbox.ResourceError {
	recPath := recordPath(r.WorkspaceDir)
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
	changed := p.removeDeletedFiles(r, &rec)
	for i := range r.Resources {
		res := &r.Resources[i]
		key := resourceKey(res)
		if _, done := rec.Attempted[key]; done || res.Type == apitype.ResourceMemoryStore {
			continue // memory stores are not files of the workspace
		}
		start := time.Now()
		rerr := p.placeResource(ctx, r, res, &rec)
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
			"mount_path", mountPathOf(res), "duration", time.Since(start))
	}
	if f, ch := p.placeSkills(ctx, r, &rec); ch {
		failed, changed = append(failed, f...), true
	}
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
	for _, rec := range []string{recordPath(ws), outputRecordPath(ws)} {
		if err := os.Remove(rec); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("workspace: %w", err)
		}
	}
	return nil
}

// mountPathOf is where a resource appears in the sandbox: its mount path, or the default of its type
// (/workspace/<repo-name> for a repository, /mnt/session/uploads/<file_id> for a file).
func mountPathOf(res *apitype.Resource) string {
	switch {
	case res.MountPath != "":
		return res.MountPath
	case res.Type == apitype.ResourceGitHubRepository:
		if name, err := repoName(res.URL); err == nil {
			return workspaceMount + "/" + name
		}
	case res.Type == apitype.ResourceFile:
		return "/mnt/session/uploads/" + res.FileID
	}
	return ""
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

// placeResource places one resource in workspace ws.
func (p *Placer) placeResource(ctx context.Context, r *sandbox.Recipe, res *apitype.Resource, rec *resourceRecord) *sandbox.ResourceError {
	sessionID, ws, n := r.SessionID, r.WorkspaceDir, r.Environment.Networking
	rerr := &sandbox.ResourceError{ResourceID: res.ID, Type: string(res.Type), URL: redactURL(res.URL), MountPath: mountPathOf(res)}
	switch res.Type {
	case apitype.ResourceGitHubRepository:
		if rerr.MountPath == "" {
			_, rerr.Err = repoName(res.URL)
			return rerr
		}
		rerr.ErrorType, rerr.Err = p.cloneRepository(ctx, sessionID, ws, res, rerr.MountPath, n)
	case apitype.ResourceFile:
		var placed string
		if placed, rerr.Err = p.placeFile(ctx, r, res, rerr.MountPath); rerr.Err == nil {
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

// parseCheckout decodes and validates a repository resource's checkout (apitype.Checkout.Validate, the rule
// the API applied when the resource was created). No checkout (nil) means the default branch.
func parseCheckout(raw json.RawMessage) (*apitype.Checkout, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var c apitype.Checkout
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("checkout: %w", err)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// repoName is the last element of a repository URL's path without ".git": the default mount directory.
func repoName(rawURL string) (string, error) {
	p := rawURL
	if u, err := url.Parse(rawURL); err == nil && u.Scheme != "" {
		p = u.Path
	}
	name := strings.TrimSuffix(path.Base(strings.TrimRight(p, "/")), ".git")
	if name == "" || name == "." || name == ".." || name == "/" {
		return "", fmt.Errorf("repository URL %q names no repository", rawURL)
	}
	return name, nil
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

// checkRepoURL refuses what may not be cloned: anything but https:// (http://, file:// and absolute paths too
// with AllowLocalURLs), and URLs that carry credentials, which would end up in the clone's .git/config.
func (c *Config) checkRepoURL(raw string) error {
	if strings.HasPrefix(raw, "-") || strings.ContainsAny(raw, "\x00\n\r") {
		return fmt.Errorf("invalid repository URL %q", raw)
	}
	if filepath.IsAbs(raw) {
		if c.AllowLocalURLs {
			return nil
		}
		return fmt.Errorf("repository URL %q: local paths are not allowed; use an https:// URL", raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("repository URL %q is not allowed; use an https:// URL: %w", raw, err)
	}
	switch u.Scheme {
	case "https":
	case "http", "file":
		if !c.AllowLocalURLs {
			return fmt.Errorf("repository URL %q: scheme %s is not allowed; use an https:// URL", u.Redacted(), u.Scheme)
		}
	default:
		return fmt.Errorf("repository URL %q: scheme %q is not allowed; use an https:// URL", u.Redacted(), u.Scheme)
	}
	if u.User != nil {
		return fmt.Errorf("repository URL %q carries credentials; they are not allowed in a URL", u.Redacted())
	}
	if u.Scheme != "file" && u.Host == "" {
		return fmt.Errorf("repository URL %q has no host", raw)
	}
	return nil
}

// cloneRepository clones repoURL into workspace ws at mountPath and checks out rawCheckout (a branch, a commit,
// or by default the default branch). The clone goes to a new directory of the workspace first and is then
// renamed into place, through an os.Root of the workspace, so that nothing a sandbox left in the workspace (a
// symlink) can redirect the host's writes out of it. It returns the hosted service's error type with the error.
func (p *Placer) cloneRepository(ctx context.Context, sessionID, ws string, res *apitype.Resource, mountPath string, n *apitype.Networking) (string, error) {
	cfg := &p.cfg
	repoURL := res.URL
	rel, err := workspaceRel(mountPath)
	if err != nil {
		return "", err
	}
	if err := cfg.checkRepoURL(repoURL); err != nil {
		return "", err
	}
	co, err := parseCheckout(res.Checkout)
	if err != nil {
		return sandbox.ErrTypeRepositoryCheckout, err
	}
	remote, err := cfg.pinHost(ctx, repoURL, n)
	if err != nil {
		return sandbox.ErrTypeRepositoryClone, err
	}
	if cfg.Tokens != nil && res.ID != "" {
		auth, ok, err := cfg.Tokens.RepositoryAuthorization(ctx, sessionID, res.ID)
		if err != nil {
			return sandbox.ErrTypeRepositoryClone, fmt.Errorf("the repository's token: %w", err)
		}
		if ok {
			remote.withAuthorization(repoURL, auth)
		}
	}
	if typ, err := cfg.probe(ctx, repoURL, remote); err != nil {
		return typ, err
	}
	root, err := os.OpenRoot(ws)
	if err != nil {
		return sandbox.ErrTypeRepositoryClone, fmt.Errorf("workspace: %w", err)
	}
	defer root.Close()
	if _, err := root.Lstat(rel); err == nil {
		return sandbox.ErrTypeRepositoryClone, fmt.Errorf("%s already exists in the workspace", mountPath)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return sandbox.ErrTypeRepositoryClone, fmt.Errorf("workspace: %w", err)
	}
	owner, err := root.Stat(".")
	if err != nil {
		return sandbox.ErrTypeRepositoryClone, fmt.Errorf("workspace: %w", err)
	}
	st, ok := owner.Sys().(*syscall.Stat_t)
	if !ok {
		return sandbox.ErrTypeRepositoryClone, errors.New("workspace: no owner information")
	}
	uid, gid := int(st.Uid), int(st.Gid)

	staging := ".corral-clone-" + randomHex(8)
	if err := root.Mkdir(staging, 0o700); err != nil {
		return sandbox.ErrTypeRepositoryClone, fmt.Errorf("workspace: %w", err)
	}
	defer func() { _ = root.RemoveAll(staging) }()
	home, err := os.MkdirTemp("", "corral-git-home-")
	if err != nil {
		return sandbox.ErrTypeRepositoryClone, fmt.Errorf("git home: %w", err)
	}
	defer func() { _ = os.RemoveAll(home) }()
	if err := cfg.caBundle(home, remote); err != nil {
		return sandbox.ErrTypeRepositoryClone, err
	}

	ctx, cancel := context.WithTimeout(ctx, cfg.CloneTimeout)
	defer cancel()
	dst := filepath.Join(ws, staging, "repo")
	args := []string{"clone", "--quiet"}
	switch {
	case co == nil:
	case co.Type == apitype.CheckoutBranch:
		args = append(args, "--branch="+co.Name)
	case co.Type == apitype.CheckoutCommit:
		args = append(args, "--no-checkout")
	}
	if err := cfg.git(ctx, home, "", remote, append(args, "--", repoURL, dst)...); err != nil {
		if co != nil && co.Type == apitype.CheckoutBranch && strings.Contains(err.Error(), "not found in upstream") {
			return sandbox.ErrTypeRepositoryCheckout, fmt.Errorf("could not check out branch %s: %w", co.Name, err)
		}
		return sandbox.ErrTypeRepositoryClone, fmt.Errorf("could not clone the repository: %w", err)
	}
	if co != nil && co.Type == apitype.CheckoutCommit {
		if err := cfg.git(ctx, home, dst, nil, "checkout", "--quiet", "--detach", co.SHA, "--"); err != nil {
			// The commit may be on no branch the clone fetched; ask the remote for it by id.
			if ferr := cfg.git(ctx, home, dst, remote, "fetch", "--quiet", "origin", co.SHA); ferr != nil {
				return sandbox.ErrTypeRepositoryCheckout, fmt.Errorf("could not check out commit %s: %w", co.SHA, err)
			}
			if err := cfg.git(ctx, home, dst, nil, "checkout", "--quiet", "--detach", "FETCH_HEAD", "--"); err != nil {
				return sandbox.ErrTypeRepositoryCheckout, fmt.Errorf("could not check out commit %s: %w", co.SHA, err)
			}
		}
	}
	if cfg.Tokens != nil && res.ID != "" {
		// The sandbox reaches the repository through the git endpoint, which adds the token.
		if err := cfg.git(ctx, home, dst, nil, "remote", "set-url", "origin", LocalRemote(res.ID)); err != nil {
			return sandbox.ErrTypeRepositoryClone, fmt.Errorf("could not point origin at the git endpoint: %w", err)
		}
	}
	// The clone belongs to the workspace's owner. A fresh workspace is still the server's: the backend gives
	// it, with everything in it, to the sandbox's uid when it provisions.
	if uid != os.Geteuid() || gid != os.Getegid() {
		err := filepath.WalkDir(dst, func(p string, _ fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, uid, gid)
		})
		if err != nil {
			return sandbox.ErrTypeRepositoryClone, fmt.Errorf("chown the clone: %w", err)
		}
	}
	if err := mkdirAllOwned(root, filepath.Dir(rel), uid, gid); err != nil {
		return sandbox.ErrTypeRepositoryClone, fmt.Errorf("workspace: %w", err)
	}
	if err := root.Rename(filepath.Join(staging, "repo"), rel); err != nil {
		return sandbox.ErrTypeRepositoryClone, fmt.Errorf("workspace: %w", err)
	}
	return "", nil
}

// mkdirAllOwned creates dir (relative to root) and its missing parents, owned by uid:gid.
func mkdirAllOwned(root *os.Root, dir string, uid, gid int) error {
	if dir == "." || dir == "" {
		return nil
	}
	if err := mkdirAllOwned(root, filepath.Dir(dir), uid, gid); err != nil {
		return err
	}
	fi, err := root.Lstat(dir)
	switch {
	case err == nil && fi.IsDir():
		return nil
	case err == nil:
		return fmt.Errorf("%s is not a directory", dir)
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	if err := root.Mkdir(dir, 0o755); err != nil {
		return err
	}
	if uid != os.Geteuid() || gid != os.Getegid() {
		return root.Lchown(dir, uid, gid)
	}
	return nil
}

// remoteOpts are what git needs to reach a repository: the options that pin its host to the addresses the
// policy checked, the environment that carries its token and CA bundle, and the secrets to keep out of errors.
type remoteOpts struct {
	args    []string
	env     []string
	secrets []string
	// ips, host and port are the pinned destination (ips empty: not pinned).
	ips        []net.IP
	host, port string
	auth       string // the Authorization header value, if any
}

// withAuthorization makes git send auth to repoURL (and only there), through its environment.
func (o *remoteOpts) withAuthorization(repoURL, auth string) {
	o.auth = auth
	o.secrets = append(o.secrets, auth)
	if _, enc, ok := strings.Cut(auth, " "); ok {
		o.secrets = append(o.secrets, enc)
		if dec, err := base64.StdEncoding.DecodeString(enc); err == nil {
			o.secrets = append(o.secrets, string(dec))
			if _, tok, ok := strings.Cut(string(dec), ":"); ok && tok != "" {
				o.secrets = append(o.secrets, tok)
			}
		}
	}
	o.env = append(o.env, "GIT_CONFIG_COUNT=2",
		"GIT_CONFIG_KEY_0=http."+repoURL+".extraHeader", "GIT_CONFIG_VALUE_0=Authorization: "+auth,
		"GIT_CONFIG_KEY_1=http.followRedirects", "GIT_CONFIG_VALUE_1=false")
}

// pinHost checks the repository's host against the session's networking policy (Resolve) and returns the git
// options that pin the host to the addresses checked; none without Resolve or for a URL without a host.
func (c *Config) pinHost(ctx context.Context, repoURL string, n *apitype.Networking) (*remoteOpts, error) {
	o := &remoteOpts{}
	u, err := url.Parse(repoURL)
	if err != nil || u.Hostname() == "" {
		return o, nil
	}
	o.host, o.port = u.Hostname(), u.Port()
	if o.port == "" {
		o.port = map[string]string{"https": "443", "http": "80"}[u.Scheme]
	}
	if c.Resolve == nil {
		return o, nil
	}
	ips, err := c.Resolve(ctx, n, o.host, o.port)
	if err != nil {
		return nil, fmt.Errorf("repository host %s: %w", o.host, err)
	}
	o.ips = ips
	addrs := make([]string, len(ips))
	for i, ip := range ips {
		addrs[i] = ip.String()
		if ip.To4() == nil {
			addrs[i] = "[" + addrs[i] + "]"
		}
	}
	o.args = []string{"-c", fmt.Sprintf("http.curloptResolve=%s:%s:%s", o.host, o.port, strings.Join(addrs, ","))}
	return o, nil
}

// systemCABundles are where Linux distributions keep the system's CA bundle (as crypto/x509 looks for it).
var systemCABundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/pki/tls/cacert.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// caBundle writes, with ExtraRootCAsPEM, the system's CA bundle and the extra CAs to a file of git's private
// home and points git at it (GIT_SSL_CAINFO). No secret is in it.
func (c *Config) caBundle(home string, o *remoteOpts) error {
	if len(c.ExtraRootCAsPEM) == 0 {
		return nil
	}
	var bundle []byte
	for _, f := range systemCABundles {
		if b, err := os.ReadFile(f); err == nil {
			bundle = append(b, '\n')
			break
		}
	}
	bundle = append(bundle, c.ExtraRootCAsPEM...)
	name := filepath.Join(home, "ca-bundle.pem")
	if err := os.WriteFile(name, bundle, 0o600); err != nil {
		return fmt.Errorf("git CA bundle: %w", err)
	}
	o.env = append(o.env, "GIT_SSL_CAINFO="+name)
	return nil
}

// rootCAs are the system roots with ExtraRootCAsPEM.
func (c *Config) rootCAs() *x509.CertPool {
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	pool.AppendCertsFromPEM(c.ExtraRootCAsPEM)
	return pool
}

// probe asks an https repository for its refs as the clone will, with Go's HTTP client (pinned, verified, no
// redirects), to tell the typed failures apart by the real status: 401 (authentication), 403 (forbidden), 404
// (not found); anything else that is not a success, or a host that cannot be reached, is a clone error.
func (c *Config) probe(ctx context.Context, repoURL string, o *remoteOpts) (string, error) {
	u, err := url.Parse(repoURL)
	if err != nil || u.Scheme != "https" {
		return "", nil
	}
	ctx, cancel := context.WithTimeout(ctx, min(c.CloneTimeout, time.Minute))
	defer cancel()
	dialer := &net.Dialer{Timeout: 15 * time.Second}
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if len(o.ips) == 0 {
				return dialer.DialContext(ctx, network, addr)
			}
			var last error
			for _, ip := range o.ips {
				conn, err := dialer.DialContext(ctx, "tcp", net.JoinHostPort(ip.String(), o.port))
				if err == nil {
					return conn, nil
				}
				last = err
			}
			return nil, last
		},
		TLSClientConfig:     &tls.Config{RootCAs: c.rootCAs(), MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: 15 * time.Second,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	probeURL := *u
	probeURL.Path = strings.TrimRight(u.Path, "/") + "/info/refs"
	probeURL.RawPath, probeURL.RawQuery, probeURL.Fragment = "", "service=git-upload-pack", ""
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, probeURL.String(), nil)
	if err != nil {
		return sandbox.ErrTypeRepositoryClone, fmt.Errorf("repository URL: %w", err)
	}
	req.Header.Set("User-Agent", "git/2 (corral)")
	if o.auth != "" {
		req.Header.Set("Authorization", o.auth)
	}
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL's query
		}
		return sandbox.ErrTypeRepositoryClone, fmt.Errorf("could not reach the repository at %s: %w", u.Host, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	withToken := "without a token"
	if o.auth != "" {
		withToken = "with the resource's authorization_token"
	}
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		return "", nil
	case code == http.StatusUnauthorized:
		return sandbox.ErrTypeRepositoryAuthentication, fmt.Errorf("the repository refused the credentials (401 %s): "+
			"the token is missing, wrong, expired or revoked", withToken)
	case code == http.StatusForbidden:
		return sandbox.ErrTypeRepositoryForbidden, fmt.Errorf("the repository refused access (403 %s): the token may not read it", withToken)
	case code == http.StatusNotFound:
		return sandbox.ErrTypeRepositoryNotFound, fmt.Errorf("the repository was not found (404 %s)", withToken)
	case code >= 300 && code < 400:
		return sandbox.ErrTypeRepositoryClone, fmt.Errorf("the repository redirected (%d); redirects are not followed", code)
	default:
		return sandbox.ErrTypeRepositoryClone, fmt.Errorf("the repository answered %s", resp.Status)
	}
}

// LocalRemote is the origin of a clone of repository resource resourceID in the sandbox: the git endpoint
// (internal/proxy) under sandbox.LocalHost.
func LocalRemote(resourceID string) string {
	return "http://" + sandbox.LocalHost + "/git/" + resourceID
}

// gitEnvPath is the PATH of git when Config.Path is empty.
const gitEnvPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// git runs git in dir (if set) with a clean environment: nothing of the server's but PATH, a private HOME, no
// system or global configuration, no prompts, and only the allowed transport protocols. The whole process
// group is killed when ctx ends.
func (c *Config) git(ctx context.Context, home, dir string, remote *remoteOpts, args ...string) error {
	var pin, env, secrets []string
	if remote != nil {
		pin, env, secrets = remote.args, remote.env, remote.secrets
	}
	protocols := []string{"-c", "protocol.allow=never", "-c", "protocol.https.allow=always"}
	if c.AllowLocalURLs {
		protocols = append(protocols, "-c", "protocol.http.allow=always", "-c", "protocol.file.allow=always")
	} else {
		protocols = append(protocols, "-c", "protocol.file.allow=never")
	}
	full := slices.Concat(protocols, []string{"-c", "credential.helper=", "-c", "core.hooksPath=/dev/null"}, pin)
	if dir != "" {
		full = append(full, "-C", dir)
	}
	full = append(full, args...)
	cmd := exec.CommandContext(ctx, c.Git, full...)
	cmd.Env = []string{
		"PATH=" + c.Path,
		"HOME=" + home,
		"GIT_TERMINAL_PROMPT=0",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"LC_ALL=C",
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Dir = home
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (%w)", err, ctx.Err())
	}
	msg := strings.TrimSpace(out.String())
	for _, sec := range secrets {
		if sec != "" {
			msg = strings.ReplaceAll(msg, sec, "[redacted]")
		}
	}
	if len(msg) > 2000 {
		msg = "…" + msg[len(msg)-2000:]
	}
	if msg == "" {
		return fmt.Errorf("git %s: %w", args[0], err)
	}
	return fmt.Errorf("git %s: %w: %s", args[0], err, msg)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
