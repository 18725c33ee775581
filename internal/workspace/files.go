package workspace

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"syscall"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/skills"
)

// Files is the Files API as the workspace uses it (*files.Service): the content of file resources in, the
// session's outputs out.
type Files interface {
	// OpenContent returns a file's content; an error if there is no such file (deleted, or never uploaded).
	OpenContent(ctx context.Context, id string) (io.ReadCloser, error)
	// CreateOutput stores a file of the session's outputs, scoped to the session, and returns its id.
	CreateOutput(ctx context.Context, sessionID, name string, content io.Reader) (string, error)
}

// Output collection limits (defaults of Config).
const (
	// DefaultMaxOutputBytes is the most a session's collected outputs may hold together.
	DefaultMaxOutputBytes = 1 << 30
	// MaxOutputFiles is the most files one collection looks at.
	MaxOutputFiles = 1000
)

// ErrNoFiles is the error of a file resource on a server whose workspace has no Files.
var ErrNoFiles = errors.New("this server has no file storage; the file was not placed")

// ErrOutputQuota: a session's outputs exceed what may be collected from it.
var ErrOutputQuota = errors.New("the session's outputs exceed their quota")

// placeFile copies a file resource's content to its mount path: under sandbox.UploadsMount, into the session's
// uploads directory (bound read-only in the sandbox); under /workspace, into the workspace, with mode 0444. It
// returns where it went, for the record ("uploads:<rel>" or "workspace:<rel>").
func (p *Placer) placeFile(ctx context.Context, host sandbox.HostDirs, res *apitype.Resource, mountPath string) (string, error) {
	if p.cfg.Files == nil {
		return "", ErrNoFiles
	}
	dir, rel, where, err := fileTarget(host, mountPath)
	if err != nil {
		return "", err
	}
	rc, err := p.cfg.Files.OpenContent(ctx, res.FileID)
	if err != nil {
		return "", fmt.Errorf("file %s: %w", res.FileID, err)
	}
	defer rc.Close()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// Through an os.Root: what the sandbox left in its workspace (links) cannot send the copy elsewhere.
	root, err := os.OpenRoot(dir)
	if err != nil {
		return "", err
	}
	defer root.Close()
	if d := path.Dir(rel); d != "." {
		if err := root.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := path.Join(path.Dir(rel), ".corral-place-"+hex.EncodeToString(rnd[:]))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return "", err
	}
	_, err = io.Copy(f, rc)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, rel) // replaces a link at rel itself, never its target
	}
	if err != nil {
		_ = root.Remove(tmp)
		return "", fmt.Errorf("file %s: %w", res.FileID, err)
	}
	return where + ":" + rel, nil
}

// fileTarget maps a file resource's mount path to a host directory and a path relative to it.
func fileTarget(host sandbox.HostDirs, mountPath string) (dir, rel, where string, err error) {
	clean := path.Clean(mountPath)
	if rest, ok := strings.CutPrefix(clean, sandbox.UploadsMount+"/"); ok && host.Session != "" {
		return host.Uploads(), rest, "uploads", nil
	}
	if rest, ok := strings.CutPrefix(clean, workspaceMount+"/"); ok {
		return host.Workspace, rest, "workspace", nil
	}
	return "", "", "", fmt.Errorf("mount path %q must lie under %s/ or %s/", mountPath, sandbox.UploadsMount, workspaceMount)
}

// removeFile removes a placed file (a record entry of placeFile). A missing file is not an error.
func removeFile(host sandbox.HostDirs, placed string) error {
	where, rel, _ := strings.Cut(placed, ":")
	dir := host.Workspace
	if where == "uploads" {
		dir = host.Uploads()
	}
	if dir == "" || rel == "" {
		return nil
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	defer root.Close()
	if err := root.Remove(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// removeDeletedFiles removes the placed files of resources the recipe no longer has (deleted from the session),
// so that the next sandbox does not see them, and forgets them: a resource added again is placed again.
func (p *Placer) removeDeletedFiles(r *sandbox.Recipe, host sandbox.HostDirs, rec *resourceRecord) bool {
	keys := map[string]bool{}
	for i := range r.Resources {
		keys[resourceKey(&r.Resources[i])] = true
	}
	changed := false
	for key, placed := range rec.Files {
		if keys[key] {
			continue
		}
		if err := removeFile(host, placed); err != nil {
			p.cfg.Logger.Warn("session resource: deleted file not removed", "session", r.SessionID, "err", err)
			continue
		}
		delete(rec.Files, key)
		delete(rec.Attempted, key)
		changed = true
	}
	return changed
}

// outputRecord is the file, beside a workspace (out of every sandbox's reach), that lists the outputs already
// collected and counts the bytes stored from them.
type outputRecord struct {
	// Collected maps a path under the outputs directory to the version of it that was collected last.
	Collected map[string]collected `json:"collected"`
	// Stored is every byte ever collected from the session: each version collected stays a file of the Files
	// API, so a file shrunk or removed in the sandbox gives nothing back. The quota counts Stored.
	Stored int64 `json:"stored_bytes"`
}

type collected struct {
	Size    int64  `json:"size"`
	ModTime int64  `json:"mtime_ns"`
	FileID  string `json:"file_id"`
}

func outputRecordPath(ws string) string {
	return filepath.Join(filepath.Dir(ws), "."+filepath.Base(ws)+".outputs.json")
}

var _ sandbox.Collector = (*Placer)(nil)

// Collect stores every regular file under the session's outputs directory (host.Outputs) that was not
// collected before, or changed since, as a file of the Files API scoped to the session. Links, devices and pipes
// are skipped: the directory is the sandbox's, and what it holds is hostile. The session's budget is cumulative:
// every byte ever collected from it counts, every version of a changed file included, whatever the sandbox does
// to the files afterwards (truncating a collected file frees nothing). Files that would bring it past
// MaxOutputBytes are not collected, and the error says which; a file that grows while it is copied is stored
// only up to the size it had when it was looked at.
//
// It then collects what the session changed in its read_write memory stores (collectMemories).
func (p *Placer) Collect(ctx context.Context, r *sandbox.Recipe, host sandbox.HostDirs) error {
	return errors.Join(p.collectOutputs(ctx, r, host), p.collectMemories(ctx, r, host))
}

func (p *Placer) collectOutputs(ctx context.Context, r *sandbox.Recipe, host sandbox.HostDirs) error {
	dir := host.Outputs()
	if dir == "" || p.cfg.Files == nil {
		return nil
	}
	defer p.sessionLock(r.SessionID)()
	root, err := os.OpenRoot(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("outputs: %w", err)
	}
	defer root.Close()
	recPath := outputRecordPath(host.Workspace)
	rec := outputRecord{Collected: map[string]collected{}}
	if data, err := os.ReadFile(recPath); err == nil {
		if err := json.Unmarshal(data, &rec); err != nil || rec.Collected == nil {
			return fmt.Errorf("outputs: record %s is unreadable: %v", recPath, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("outputs: %w", err)
	}
	total := rec.Stored
	if total == 0 {
		// A record from before the cumulative count: at least what its last versions hold.
		for _, c := range rec.Collected {
			total += c.Size
		}
	}
	quota := cmp.Or(p.cfg.MaxOutputBytes, DefaultMaxOutputBytes)
	var over []string
	var errs []error
	seen, changed := 0, false
	err = fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil // directories are walked; links, devices, pipes and sockets are not outputs
		}
		if seen++; seen > MaxOutputFiles {
			return fs.SkipAll
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		prev, ok := rec.Collected[name]
		if ok && prev.Size == info.Size() && prev.ModTime == info.ModTime().UnixNano() {
			return nil
		}
		if total+info.Size() > quota {
			over = append(over, name)
			return nil
		}
		id, n, err := p.collectOne(ctx, root, r.SessionID, name, info.Size())
		if errors.Is(err, errEmptyOutput) {
			return nil
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			return nil
		}
		changed = true
		rec.Collected[name] = collected{Size: info.Size(), ModTime: info.ModTime().UnixNano(), FileID: id}
		total += n
		rec.Stored = total
		p.cfg.Logger.Info("session output collected", "session", r.SessionID, "path", name, "file_id", id, "bytes", n)
		return nil
	})
	if err != nil {
		errs = append(errs, err)
	}
	if changed {
		if err := writeRecord(recPath, &rec); err != nil {
			errs = append(errs, fmt.Errorf("record: %w", err))
		}
	}
	if seen > MaxOutputFiles {
		errs = append(errs, fmt.Errorf("more than %d files: the rest were not collected", MaxOutputFiles))
	}
	if len(over) > 0 {
		slices.Sort(over)
		errs = append(errs, fmt.Errorf("%w (%d bytes): not collected: %s", ErrOutputQuota, quota, strings.Join(over, ", ")))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("outputs of %s under %s: %w", r.SessionID, sandbox.OutputsMount, err)
	}
	return nil
}

// errEmptyOutput marks an empty output, which the Files API cannot hold; it is skipped.
var errEmptyOutput = errors.New("empty")

// collectOne stores one output file, at most size bytes of it (its size when the walk looked at it, which the
// quota admitted), and returns its id and how many bytes were stored. It opens it without following a link and
// without blocking on a pipe swapped in since the walk, and copies it only if it is still a regular file.
func (p *Placer) collectOne(ctx context.Context, root *os.Root, sessionID, name string, size int64) (string, int64, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", 0, err
	}
	if !fi.Mode().IsRegular() {
		return "", 0, errors.New("not a regular file")
	}
	if fi.Size() == 0 || size == 0 {
		return "", 0, errEmptyOutput
	}
	cr := &countingReader{r: io.LimitReader(f, size)}
	id, err := p.cfg.Files.CreateOutput(ctx, sessionID, path.Base(name), cr)
	return id, cr.n, err
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	return n, err
}

// Skills is the Skills API as the workspace uses it (*files.Service).
type Skills interface {
	// OpenSkillArchive returns a skill version's name and its zip.
	OpenSkillArchive(ctx context.Context, skillID, version string) (string, io.ReadCloser, error)
}

// placeSkills unpacks the recipe's skills that were not placed before into the session's skills directory
// (bound read-only at sandbox.SkillsMount), each under the name its SKILL.md gives it.
func (p *Placer) placeSkills(ctx context.Context, r *sandbox.Recipe, host sandbox.HostDirs, rec *resourceRecord) ([]*sandbox.ResourceError, bool) {
	var failed []*sandbox.ResourceError
	changed := false
	for _, ref := range r.Skills {
		key := ref.SkillID + "@" + ref.Version
		if _, done := rec.Skills[key]; done {
			continue
		}
		rerr := &sandbox.ResourceError{ResourceID: ref.SkillID, Type: "skill", MountPath: sandbox.SkillsMount}
		name, err := p.placeSkill(ctx, host, ref)
		if err != nil && ctx.Err() != nil {
			break // not attempted: the next provisioning tries again
		}
		changed = true
		rec.Skills[key] = name
		if err != nil {
			rerr.Err = fmt.Errorf("skill %s version %s: %w", ref.SkillID, ref.Version, err)
			failed = append(failed, rerr)
			p.cfg.Logger.Warn("skill not placed", "session", r.SessionID, "err", rerr.Err)
			continue
		}
		p.cfg.Logger.Info("skill placed", "session", r.SessionID, "skill", ref.SkillID, "name", name)
	}
	return failed, changed
}

func (p *Placer) placeSkill(ctx context.Context, host sandbox.HostDirs, ref apitype.SkillRef) (string, error) {
	if p.cfg.Skills == nil {
		return "", ErrNoFiles
	}
	if ref.Type != apitype.SkillSourceCustom || host.Skills() == "" {
		return "", fmt.Errorf("skills of type %q cannot be placed here", ref.Type)
	}
	name, rc, err := p.cfg.Skills.OpenSkillArchive(ctx, ref.SkillID, ref.Version)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	if name == "" || strings.ContainsAny(name, "/\\.") {
		return "", fmt.Errorf("invalid skill name %q", name)
	}
	// The zip is read at random: spooled beside the session's directories, never bound into a sandbox.
	spool, err := os.CreateTemp(host.Session, ".skill-*.zip")
	if err != nil {
		return "", err
	}
	defer func() { spool.Close(); os.Remove(spool.Name()) }()
	n, err := io.Copy(spool, io.LimitReader(rc, skills.MaxArchive+1))
	if err != nil {
		return "", err
	}
	if n > skills.MaxArchive {
		return "", fmt.Errorf("archive larger than %d bytes", skills.MaxArchive)
	}
	dst := filepath.Join(host.Skills(), name)
	if err := os.RemoveAll(dst); err != nil {
		return "", err
	}
	if err := skills.Extract(spool, n, dst); err != nil {
		_ = os.RemoveAll(dst)
		return "", err
	}
	return name, nil
}
