// This file clones a repository resource into a workspace: the URL's checks, the clone and its checkout, staged
// in the workspace and renamed into place.

package workspace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
)

// checkoutOf validates a repository resource's checkout again (apitype.Checkout.Validate, the rule the API
// applied when the resource was created) before git sees it. No checkout (nil) means the default branch.
func checkoutOf(res *apitype.Resource) (*apitype.Checkout, error) {
	if res.Checkout == nil {
		return nil, nil
	}
	if err := res.Checkout.Validate(); err != nil {
		return nil, err
	}
	return res.Checkout, nil
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

// relayOpts are the git options of a clone through a relay (Config.Remote): its http(s) URL, without
// credentials, and the authorization git sends there.
func relayOpts(relayURL, auth string) (*remoteOpts, error) {
	u, err := url.Parse(relayURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.RawQuery != "" ||
		strings.HasPrefix(relayURL, "-") || strings.ContainsAny(relayURL, "\x00\n\r") {
		return nil, errors.New("the repository's relay URL is not an http(s) URL without credentials")
	}
	o := &remoteOpts{allowHTTP: u.Scheme == "http"}
	if auth != "" {
		o.withAuthorization(relayURL, auth)
	}
	return o, nil
}

// cloneRepository clones repoURL into workspace ws at mountPath and checks out rawCheckout (a branch, a commit,
// or by default the default branch). The clone goes to a new directory of the workspace first and is then
// renamed into place, through an os.Root of the workspace, so that nothing a sandbox left in the workspace (a
// symlink) can redirect the host's writes out of it. It returns the hosted service's error type with the error.
func (p *Placer) cloneRepository(ctx context.Context, sessionID, ws string, res *apitype.Resource, mountPath string, n *apitype.Networking) (apitype.SessionErrorType, error) {
	cfg := &p.cfg
	repoURL := res.URL
	rel, err := workspaceRel(mountPath)
	if err != nil {
		return "", err
	}
	if err := cfg.checkRepoURL(repoURL); err != nil {
		return "", err
	}
	co, err := checkoutOf(res)
	if err != nil {
		return apitype.SessionErrRepositoryCheckout, err
	}
	var remote *remoteOpts
	relayed := cfg.Remote != nil && res.ID != ""
	switch {
	case relayed:
		var auth string
		repoURL, auth, err = cfg.Remote(ctx, sessionID, res)
		if err != nil {
			return apitype.SessionErrRepositoryClone, fmt.Errorf("the repository's relay: %w", err)
		}
		if remote, err = relayOpts(repoURL, auth); err != nil {
			return apitype.SessionErrRepositoryClone, err
		}
	default:
		if remote, err = cfg.pinHost(ctx, repoURL, n); err != nil {
			return apitype.SessionErrRepositoryClone, err
		}
	}
	if cfg.Tokens != nil && res.ID != "" && !relayed {
		auth, ok, err := cfg.Tokens.RepositoryAuthorization(ctx, sessionID, res.ID)
		if err != nil {
			return apitype.SessionErrRepositoryClone, fmt.Errorf("the repository's token: %w", err)
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
		return apitype.SessionErrRepositoryClone, fmt.Errorf("workspace: %w", err)
	}
	defer root.Close()
	if _, err := root.Lstat(rel); err == nil {
		return apitype.SessionErrRepositoryClone, fmt.Errorf("%s already exists in the workspace", mountPath)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return apitype.SessionErrRepositoryClone, fmt.Errorf("workspace: %w", err)
	}
	owner, err := root.Stat(".")
	if err != nil {
		return apitype.SessionErrRepositoryClone, fmt.Errorf("workspace: %w", err)
	}
	st, ok := owner.Sys().(*syscall.Stat_t)
	if !ok {
		return apitype.SessionErrRepositoryClone, errors.New("workspace: no owner information")
	}
	uid, gid := int(st.Uid), int(st.Gid)

	staging := ".corral-clone-" + randomHex(8)
	if err := root.Mkdir(staging, 0o700); err != nil {
		return apitype.SessionErrRepositoryClone, fmt.Errorf("workspace: %w", err)
	}
	defer func() { _ = root.RemoveAll(staging) }()
	home, err := os.MkdirTemp("", "corral-git-home-")
	if err != nil {
		return apitype.SessionErrRepositoryClone, fmt.Errorf("git home: %w", err)
	}
	defer func() { _ = os.RemoveAll(home) }()
	if err := cfg.caBundle(home, remote); err != nil {
		return apitype.SessionErrRepositoryClone, err
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
			return apitype.SessionErrRepositoryCheckout, fmt.Errorf("could not check out branch %s: %w", co.Name, err)
		}
		return apitype.SessionErrRepositoryClone, fmt.Errorf("could not clone the repository: %w", err)
	}
	if co != nil && co.Type == apitype.CheckoutCommit {
		if err := cfg.git(ctx, home, dst, nil, "checkout", "--quiet", "--detach", co.SHA, "--"); err != nil {
			// The commit may be on no branch the clone fetched; ask the remote for it by id.
			if ferr := cfg.git(ctx, home, dst, remote, "fetch", "--quiet", "origin", co.SHA); ferr != nil {
				return apitype.SessionErrRepositoryCheckout, fmt.Errorf("could not check out commit %s: %w", co.SHA, err)
			}
			if err := cfg.git(ctx, home, dst, nil, "checkout", "--quiet", "--detach", "FETCH_HEAD", "--"); err != nil {
				return apitype.SessionErrRepositoryCheckout, fmt.Errorf("could not check out commit %s: %w", co.SHA, err)
			}
		}
	}
	if (cfg.Tokens != nil || relayed) && res.ID != "" {
		// The sandbox reaches the repository through the git endpoint, which adds the token.
		if err := cfg.git(ctx, home, dst, nil, "remote", "set-url", "origin", sandbox.LocalRemote(res.ID)); err != nil {
			return apitype.SessionErrRepositoryClone, fmt.Errorf("could not point origin at the git endpoint: %w", err)
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
			return apitype.SessionErrRepositoryClone, fmt.Errorf("chown the clone: %w", err)
		}
	}
	if err := mkdirAllOwned(root, filepath.Dir(rel), uid, gid); err != nil {
		return apitype.SessionErrRepositoryClone, fmt.Errorf("workspace: %w", err)
	}
	if err := root.Rename(filepath.Join(staging, "repo"), rel); err != nil {
		return apitype.SessionErrRepositoryClone, fmt.Errorf("workspace: %w", err)
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
