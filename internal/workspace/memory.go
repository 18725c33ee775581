package workspace

import (
	"bytes"
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
	"sync"
	"syscall"
	"unicode/utf8"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
)

// Memories is the memory stores as the workspace uses them: a session's memory_store resources are placed from
// them in the session's directory (each at its mount path) before every provisioning, and what the agent changes
// in a read_write store is written back as versions whose actor is the session. internal/workspace/memstore
// adapts store.MemoryStore to it.
type Memories interface {
	// ListMemories returns every memory of the store with its content, in path order. It refuses (an error
	// wrapping ErrMemoryStoreTooLarge, which says why) a store of more than MaxMountedMemories memories or
	// MaxMountedMemoryBytes of content: such a store is not mounted.
	ListMemories(ctx context.Context, storeID string) ([]Memory, error)
	// PutMemory writes content at path (an update of the memory there, or a create), as sessionID's
	// session_actor. expectSHA256, if set, is the content_sha256 the memory there must have
	// (ErrMemoryPrecondition otherwise). It returns the memory as written.
	PutMemory(ctx context.Context, storeID, sessionID, path, content, expectSHA256 string) (Memory, error)
	// DeleteMemory deletes memory id as sessionID's session_actor if it still holds expectSHA256
	// (ErrMemoryPrecondition otherwise; ErrMemoryNotFound if it is gone).
	DeleteMemory(ctx context.Context, storeID, sessionID, id, expectSHA256 string) error
}

// Memory is a memory as placement and collection see it.
type Memory struct {
	ID, Path, Content, SHA256 string
}

// Mounted is a store's memories as an adapter of Memories reads them for ListMemories, within the mount's
// limits: Add refuses (wrapping ErrMemoryStoreTooLarge) the memory that takes the store past MaxMountedMemories
// memories or MaxMountedMemoryBytes of content.
type Mounted struct {
	Memories []Memory
	bytes    int64
}

// Add appends a memory read with its content (a nil content is an empty one).
func (l *Mounted) Add(m *apitype.Memory) error {
	content := ""
	if m.Content != nil {
		content = *m.Content
	}
	l.bytes += int64(len(content))
	if len(l.Memories) >= MaxMountedMemories {
		return fmt.Errorf("%w: it holds more than %d memories", ErrMemoryStoreTooLarge, MaxMountedMemories)
	}
	if l.bytes > MaxMountedMemoryBytes {
		return fmt.Errorf("%w: its memories hold more than %d bytes", ErrMemoryStoreTooLarge, MaxMountedMemoryBytes)
	}
	l.Memories = append(l.Memories, Memory{ID: m.ID, Path: m.Path, Content: content, SHA256: m.ContentSHA256})
	return nil
}

// Memory errors, which a Memories adapter wraps.
var (
	// ErrMemoryPrecondition: the memory's content is no longer the one the write expected (someone else
	// changed it meanwhile).
	ErrMemoryPrecondition = errors.New("the memory changed since the session last saw it")
	// ErrMemoryNotFound: the memory (or its store) is gone.
	ErrMemoryNotFound = errors.New("no such memory")
	// ErrMemoryStoreArchived: the store is archived; its memories can no longer be written.
	ErrMemoryStoreArchived = errors.New("the memory store is archived; its memories can no longer be written")
	// ErrMemoryStoreTooLarge: the store holds too much to be mounted in a sandbox.
	ErrMemoryStoreTooLarge = errors.New("the memory store is too large to be mounted")
	// ErrNoMemories is the error of a memory_store resource on a server whose workspace has no Memories.
	ErrNoMemories = errors.New("this server has no memory stores; the store was not mounted")
)

// Memory mount limits.
const (
	// MaxMountedMemories is the most memories a mounted store may hold, and the most entries one collection
	// of a store's directory looks at.
	MaxMountedMemories = 5000
	// MaxMountedMemoryBytes is the most content a mounted store may hold, and the most one collection of a
	// store's directory reads.
	MaxMountedMemoryBytes = 64 << 20
	// maxNoticeFiles is the most files one notice to the agent names (the rest are counted): a sandbox can
	// make thousands of files that cannot be stored, and the notice goes in front of a tool result.
	maxNoticeFiles = 20
)

// memoryRecord is the file, beside a workspace (out of every sandbox's reach), that holds for each memory store
// of the session the baseline of its directory: what the session last saw of each memory (placed or collected).
// A file that differs from its baseline was changed by the session; a memory whose current digest differs
// from it was changed elsewhere.
type memoryRecord struct {
	Stores map[string]*memoryBaseline `json:"stores"` // by store id
}

type memoryBaseline struct {
	// Dir is the store's directory under sandbox.HostDirs.Memory; a store mounted elsewhere starts afresh.
	Dir   string                `json:"dir"`
	Files map[string]memoryFile `json:"files"` // by memory path
	// Told maps a path the agent was told could not be stored to what it was told, so that it is told once.
	Told map[string]string `json:"told,omitempty"`
}

// memoryFile is a memory as the session last saw it, and its file as it then was (size and ctime: a file
// whose size and ctime are unchanged is not read again; the sandbox cannot set a ctime).
type memoryFile struct {
	ID     string `json:"id"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	Ctime  int64  `json:"ctime_ns"`
}

func memoryRecordPath(ws string) string {
	return filepath.Join(filepath.Dir(ws), "."+filepath.Base(ws)+".memory.json")
}

func readMemoryRecord(ws string) (*memoryRecord, error) {
	rec := &memoryRecord{Stores: map[string]*memoryBaseline{}}
	data, err := os.ReadFile(memoryRecordPath(ws))
	if errors.Is(err, fs.ErrNotExist) {
		return rec, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, rec); err != nil || rec.Stores == nil {
		return nil, fmt.Errorf("memory record %s is unreadable: %v", memoryRecordPath(ws), err)
	}
	return rec, nil
}

func (rec *memoryRecord) baseline(storeID, dir string) *memoryBaseline {
	b := rec.Stores[storeID]
	if b == nil || b.Dir != dir {
		b = &memoryBaseline{Dir: dir}
		rec.Stores[storeID] = b
	}
	if b.Files == nil {
		b.Files = map[string]memoryFile{}
	}
	if b.Told == nil {
		b.Told = map[string]string{}
	}
	return b
}

// sessionLock serialises the placements and collections of one session.
func (p *Placer) sessionLock(sessionID string) func() {
	mu, _ := p.collectLocks.LoadOrStore(sessionID, new(sync.Mutex))
	mu.(*sync.Mutex).Lock()
	return mu.(*sync.Mutex).Unlock
}

// placeMemories brings each memory store of the recipe into its directory under host.Memory(), on every
// provisioning, so that a new sandbox sees the store's current memories. In a read_write store a memory changed
// only elsewhere is written, and one deleted elsewhere removed, but a file the session changed since it last saw
// it is left as it is until it is collected. A read_only store's directory is the store's as it is now.
func (p *Placer) placeMemories(ctx context.Context, r *sandbox.Recipe, host sandbox.HostDirs) []*sandbox.ResourceError {
	dirs, failed := r.MemoryDirs()
	if len(dirs) == 0 && len(failed) == 0 {
		return nil
	}
	if host.Memory() == "" {
		return failed
	}
	if p.cfg.Memories == nil {
		for _, d := range dirs {
			failed = append(failed, &sandbox.ResourceError{ResourceID: d.Resource.ID, Type: string(d.Resource.Type), MountPath: d.Target, Err: ErrNoMemories})
		}
		return failed
	}
	defer p.sessionLock(r.SessionID)()
	rec, err := readMemoryRecord(host.Workspace)
	if err != nil {
		return append(failed, &sandbox.ResourceError{Type: string(apitype.ResourceMemoryStore), Err: err})
	}
	if err := os.MkdirAll(host.Memory(), 0o755); err != nil {
		return append(failed, &sandbox.ResourceError{Type: string(apitype.ResourceMemoryStore), Err: err})
	}
	for _, d := range dirs {
		if err := p.placeMemoryStore(ctx, r.SessionID, host, d, rec); err != nil {
			rerr := &sandbox.ResourceError{ResourceID: d.Resource.ID, Type: string(d.Resource.Type), MountPath: d.Target,
				Err: fmt.Errorf("memory store %s: %w", d.Resource.MemoryStoreID, err)}
			p.cfg.Logger.Warn("memory store not placed", "session", r.SessionID, "err", rerr)
			failed = append(failed, rerr)
		}
	}
	if err := writeRecord(memoryRecordPath(host.Workspace), rec); err != nil {
		failed = append(failed, &sandbox.ResourceError{Type: string(apitype.ResourceMemoryStore), Err: fmt.Errorf("memory record: %w", err)})
	}
	return failed
}

func (p *Placer) placeMemoryStore(ctx context.Context, sessionID string, host sandbox.HostDirs, d sandbox.MemoryDir, rec *memoryRecord) error {
	mems, err := p.cfg.Memories.ListMemories(ctx, d.Resource.MemoryStoreID)
	if err != nil {
		return err
	}
	dir := filepath.Join(host.Memory(), d.Name)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	// What is written in a read_write store's directory belongs to its owner (the last sandbox's uid; root
	// before the first, whose provisioning then gives the whole directory to its uid).
	uid, gid := -1, -1
	if fi, err := root.Stat("."); err == nil && !d.ReadOnly {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			uid, gid = int(st.Uid), int(st.Gid)
		}
	}
	w := memoryWriter{root: root, ro: d.ReadOnly, uid: uid, gid: gid}
	base := rec.baseline(d.Resource.MemoryStoreID, d.Name)
	remote := make(map[string]bool, len(mems))
	var errs []error
	for i := range mems {
		m := &mems[i]
		remote[m.Path] = true
		rel := strings.TrimPrefix(m.Path, "/")
		if apitype.ValidateMemoryPath(m.Path) != nil {
			continue
		}
		prev, seen := base.Files[m.Path]
		local, fi, lerr := localSHA(root, rel)
		switch {
		case lerr == nil && local == m.SHA256:
			base.Files[m.Path] = memoryFile{ID: m.ID, SHA256: m.SHA256, Size: fi.Size(), Ctime: ctime(fi)}
			continue
		case d.ReadOnly, errors.Is(lerr, fs.ErrNotExist) && (!seen || prev.SHA256 != m.SHA256):
			// not there (and not deleted by the session since it saw this version): written
		case lerr != nil:
			continue // deleted by the session (collected as a deletion), not a regular file, or unreadable
		case seen && local == prev.SHA256:
			// changed elsewhere only: written
		default:
			continue // changed by the session: it wins until collected
		}
		fi, err := w.write(rel, m.Content)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.Path, err))
			continue
		}
		base.Files[m.Path] = memoryFile{ID: m.ID, SHA256: m.SHA256, Size: fi.Size(), Ctime: ctime(fi)}
	}
	for mp, prev := range base.Files {
		if remote[mp] {
			continue
		}
		// Deleted elsewhere: removed unless the session changed it since (then collection recreates it).
		rel := strings.TrimPrefix(mp, "/")
		if local, _, err := localSHA(root, rel); d.ReadOnly || (err == nil && local == prev.SHA256) {
			if err := root.Remove(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("%s: %w", mp, err))
				continue
			}
		}
		delete(base.Files, mp)
	}
	if d.ReadOnly {
		errs = append(errs, pruneReadOnly(root, remote))
	}
	p.cfg.Logger.Info("memory store placed", "session", sessionID, "store", d.Resource.MemoryStoreID, "mount_path", d.Target,
		"memories", len(mems), "read_only", d.ReadOnly)
	return errors.Join(errs...)
}

// pruneReadOnly removes from a read_only store's directory (the host's) every file that is no memory of it.
func pruneReadOnly(root *os.Root, remote map[string]bool) error {
	var stale []string
	err := fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || name == "." || d.IsDir() {
			return nil
		}
		if !remote["/"+name] {
			stale = append(stale, name)
		}
		return nil
	})
	for _, name := range stale {
		if rerr := root.Remove(name); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}
	return err
}

// memoryWriter writes memories into a store's directory through an os.Root (what the sandbox left there cannot
// send a write elsewhere): read_only, directories 0755 and files 0444 of the host's; otherwise directories 0755
// and files 0644 given to uid:gid.
type memoryWriter struct {
	root     *os.Root
	ro       bool
	uid, gid int
}

func (w *memoryWriter) write(rel, content string) (fs.FileInfo, error) {
	parts := strings.Split(rel, "/")
	for i := 1; i < len(parts); i++ {
		d := path.Join(parts[:i]...)
		err := w.root.Mkdir(d, 0o755)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if err := w.chown(d); err != nil {
			return nil, err
		}
	}
	mode := os.FileMode(0o644)
	if w.ro {
		mode = 0o444
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := path.Join(path.Dir(rel), ".corral-memory-"+hex.EncodeToString(rnd[:]))
	f, err := w.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return nil, err
	}
	_, err = io.WriteString(f, content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = w.chown(tmp)
	}
	if err == nil {
		err = w.root.Rename(tmp, rel) // replaces a link at rel itself, never its target
	}
	if err != nil {
		_ = w.root.Remove(tmp)
		return nil, err
	}
	return w.root.Lstat(rel)
}

func (w *memoryWriter) chown(name string) error {
	if w.ro || w.uid < 0 || w.uid == os.Getuid() {
		return nil
	}
	return w.root.Lchown(name, w.uid, w.gid)
}

// errNotRegular is the error of a path of a store's directory that is not a regular file.
type errNotRegular struct{ mode fs.FileMode }

func (e errNotRegular) Error() string {
	switch t := e.mode.Type(); {
	case t&fs.ModeSymlink != 0:
		return "it is a symbolic link; only regular files are stored"
	case t&fs.ModeNamedPipe != 0:
		return "it is a named pipe (FIFO); only regular files are stored"
	case t&(fs.ModeDevice|fs.ModeCharDevice) != 0:
		return "it is a device; only regular files are stored"
	case t&fs.ModeSocket != 0:
		return "it is a socket; only regular files are stored"
	case t.IsDir():
		return "it is a directory"
	}
	return "it is not a regular file; only regular files are stored"
}

// readLocal reads a file of a store's directory without following a link or blocking on a pipe, and only if it
// is a regular file of at most apitype.MaxMemoryBytes.
func readLocal(root *os.Root, rel string) ([]byte, fs.FileInfo, error) {
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, nil, errNotRegular{fs.ModeSymlink}
		}
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fi, errNotRegular{fi.Mode()}
	}
	if fi.Size() > apitype.MaxMemoryBytes {
		return nil, fi, errTooLarge(fi.Size())
	}
	data, err := io.ReadAll(io.LimitReader(f, apitype.MaxMemoryBytes+1))
	if err != nil {
		return nil, fi, err
	}
	if len(data) > apitype.MaxMemoryBytes {
		return nil, fi, errTooLarge(int64(len(data)))
	}
	return data, fi, nil
}

func errTooLarge(n int64) error {
	return fmt.Errorf("it is larger than a memory may be (%d bytes; the most is %d)", n, apitype.MaxMemoryBytes)
}

// localSHA is the digest of a file of a store's directory (readLocal).
func localSHA(root *os.Root, rel string) (string, fs.FileInfo, error) {
	data, fi, err := readLocal(root, rel)
	if err != nil {
		return "", fi, err
	}
	return apitype.ContentSHA256(string(data)), fi, nil
}

func ctime(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ctim.Nano()
	}
	return 0
}

// collectMemories writes back what the session changed in each of its read_write memory stores' directories:
// a file whose content differs from what the session last saw is put (with no precondition: when two sessions
// write one memory, both versions stay and the later is current), and a file the session last saw and that is
// gone is deleted if the memory still holds what the session saw (otherwise the other change wins). The walk
// never follows a link and reads regular files only, at most MaxMountedMemories entries and
// MaxMountedMemoryBytes per store. What cannot be stored (too large, not UTF-8 or with a NUL, a path the memory
// rules refuse, a link, a pipe or a device) is not, and the agent is told why in its next tool result
// (TakeNotices).
func (p *Placer) collectMemories(ctx context.Context, r *sandbox.Recipe, host sandbox.HostDirs) error {
	if p.cfg.Memories == nil || host.Memory() == "" {
		return nil
	}
	dirs, _ := r.MemoryDirs()
	dirs = slices.DeleteFunc(dirs, func(d sandbox.MemoryDir) bool { return d.ReadOnly })
	if len(dirs) == 0 {
		return nil
	}
	defer p.sessionLock(r.SessionID)()
	rec, err := readMemoryRecord(host.Workspace)
	if err != nil {
		return err
	}
	var errs []error
	changed := false
	for _, d := range dirs {
		ch, err := p.collectMemoryStore(ctx, r.SessionID, host, d, rec)
		changed = changed || ch
		if err != nil {
			errs = append(errs, fmt.Errorf("memory store %s at %s: %w", d.Resource.MemoryStoreID, d.Target, err))
		}
	}
	if changed {
		if err := writeRecord(memoryRecordPath(host.Workspace), rec); err != nil {
			errs = append(errs, fmt.Errorf("memory record: %w", err))
		}
	}
	return errors.Join(errs...)
}

func (p *Placer) collectMemoryStore(ctx context.Context, sessionID string, host sandbox.HostDirs, d sandbox.MemoryDir, rec *memoryRecord) (bool, error) {
	root, err := os.OpenRoot(filepath.Join(host.Memory(), d.Name))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil // never placed
	}
	if err != nil {
		return false, err
	}
	defer root.Close()
	storeID := d.Resource.MemoryStoreID
	base := rec.baseline(storeID, d.Name)
	var tell []string
	changed := false
	notice := func(p, reason string) {
		if base.Told[p] != reason {
			base.Told[p], changed = reason, true
			tell = append(tell, fmt.Sprintf("- %s: %s", path.Join(d.Target, p), reason))
		}
	}
	defer func() {
		if len(tell) > 0 {
			slices.Sort(tell)
			if len(tell) > maxNoticeFiles {
				tell = append(tell[:maxNoticeFiles], fmt.Sprintf("- and %d more", len(tell)-maxNoticeFiles))
			}
			p.addNotice(sessionID, "Note: these files under "+d.Target+" were not saved to the memory store "+
				cmpName(d.Resource)+":\n"+strings.Join(tell, "\n"))
		}
	}()
	// First the walk: what changed, without writing anything, so that a directory over the bounds stores
	// nothing (a partial collection could store a deletion of what it did not reach).
	w, err := walkMemoryDir(ctx, root, base, notice)
	if err != nil {
		return changed, err
	}
	if w.over != "" {
		notice(".", w.over+"; nothing in it was saved: remove files to bring it under the limit")
		return changed, nil
	}
	if base.Told["."] != "" {
		delete(base.Told, ".")
		changed = true
	}
	for p := range base.Told {
		if !w.seen["/"+p] && !w.tooDeep[p] {
			delete(base.Told, p) // gone: told again if it comes back
			changed = true
		}
	}
	var errs []error
	for _, c := range w.unchanged {
		base.Files[c.path], changed = c.file, true
	}
	for _, c := range w.puts {
		m, err := p.cfg.Memories.PutMemory(ctx, storeID, sessionID, c.path, c.content, "")
		switch {
		case errors.Is(err, ErrMemoryStoreArchived):
			notice(strings.TrimPrefix(c.path, "/"), ErrMemoryStoreArchived.Error())
			continue
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", c.path, err))
			continue
		}
		c.file.ID, c.file.SHA256 = m.ID, m.SHA256
		base.Files[c.path], changed = c.file, true
		delete(base.Told, strings.TrimPrefix(c.path, "/"))
		p.cfg.Logger.Info("memory collected", "session", sessionID, "store", storeID, "path", c.path, "memory", m.ID, "bytes", len(c.content))
	}
	for mp, prev := range base.Files {
		if w.seen[mp] {
			continue
		}
		err := p.cfg.Memories.DeleteMemory(ctx, storeID, sessionID, prev.ID, prev.SHA256)
		switch {
		case err == nil, errors.Is(err, ErrMemoryNotFound):
			p.cfg.Logger.Info("memory deletion collected", "session", sessionID, "store", storeID, "path", mp, "err", err)
		case errors.Is(err, ErrMemoryPrecondition):
			// Changed elsewhere since the session saw it: that change wins; the next placement brings it.
		case errors.Is(err, ErrMemoryStoreArchived):
			notice(strings.TrimPrefix(mp, "/"), "deleted in the sandbox, but "+ErrMemoryStoreArchived.Error())
		default:
			errs = append(errs, fmt.Errorf("%s: %w", mp, err))
			continue
		}
		delete(base.Files, mp)
		changed = true
	}
	return changed, errors.Join(errs...)
}

// memoryWalk is what walkMemoryDir found in a store's directory.
type memoryWalk struct {
	seen      map[string]bool // every memory path there, stored or not
	tooDeep   map[string]bool // the directories not walked: no path under them is a valid memory path
	puts      []memoryChange  // files whose content differs from the baseline
	unchanged []memoryChange  // files read again whose content is the baseline's (a new ctime)
	over      string          // why the directory is over the bounds, if it is
}

type memoryChange struct {
	path, content string
	file          memoryFile
}

// walkMemoryDir walks a store's directory without following a link, reading the regular files whose size or
// ctime differ from the baseline; what cannot be stored goes to notice. It stops past MaxMountedMemories
// entries or MaxMountedMemoryBytes read (memoryWalk.over). Each directory is read a batch of entries at a time
// (never its whole listing: a sandbox can fill one directory with millions of names), so that the walk holds at
// most about MaxMountedMemories entries. A directory that cannot be read fails the walk: a partial walk would
// store the deletion of what it did not reach.
func walkMemoryDir(ctx context.Context, root *os.Root, base *memoryBaseline, notice func(p, reason string)) (*memoryWalk, error) {
	w := &memoryWalk{seen: map[string]bool{}, tooDeep: map[string]bool{}}
	entries, read := 0, int64(0)
	visit := func(name string, de fs.DirEntry) (stop bool) {
		if entries++; entries > MaxMountedMemories {
			w.over = fmt.Sprintf("the store's directory holds more than %d files and directories", MaxMountedMemories)
			return true
		}
		if strings.HasPrefix(de.Name(), ".corral-memory-") {
			return false // a placement's temporary file
		}
		if de.IsDir() {
			// Walked after, unless no file under it can have a valid memory path: then neither its depth nor
			// its names' length (without bound in a filesystem) costs the walk anything.
			if strings.Count(name, "/")+1 >= apitype.MaxMemoryPathSegments || len(name)+3 > apitype.MaxMemoryPathBytes {
				w.tooDeep[name] = true
				notice(name, fmt.Sprintf("it is nested too deep for a memory (a memory's path has at most %d segments and %d bytes); nothing under it was saved",
					apitype.MaxMemoryPathSegments, apitype.MaxMemoryPathBytes))
			}
			return false
		}
		mp := "/" + name
		w.seen[mp] = true
		if !de.Type().IsRegular() {
			notice(name, errNotRegular{de.Type()}.Error())
			return false
		}
		if err := apitype.ValidateMemoryPath(mp); err != nil {
			notice(name, "its path is not a valid memory path: it "+err.Error())
			return false
		}
		info, err := root.Lstat(name)
		if err != nil {
			return false
		}
		prev, had := base.Files[mp]
		if had && prev.Size == info.Size() && prev.Ctime == ctime(info) {
			return false
		}
		if info.Size() > apitype.MaxMemoryBytes {
			notice(name, errTooLarge(info.Size()).Error())
			return false
		}
		if read+info.Size() > MaxMountedMemoryBytes {
			w.over = fmt.Sprintf("its changed files hold more than %d bytes", MaxMountedMemoryBytes)
			return true
		}
		data, fi, err := readLocal(root, name)
		read += int64(len(data))
		var nr errNotRegular
		switch {
		case errors.As(err, &nr), err != nil && fi != nil && fi.Size() > apitype.MaxMemoryBytes:
			notice(name, err.Error())
			return false
		case err != nil:
			return false // gone meanwhile, or unreadable: tried again next time
		case !utf8.Valid(data):
			notice(name, "its content is not valid UTF-8 text; memories are text")
			return false
		case bytes.IndexByte(data, 0) >= 0:
			notice(name, "its content must not contain NUL characters; memories are text")
			return false
		}
		c := memoryChange{path: mp, content: string(data), file: memoryFile{Size: fi.Size(), Ctime: ctime(fi)}}
		if sum := apitype.ContentSHA256(c.content); had && sum == prev.SHA256 {
			c.file.ID, c.file.SHA256 = prev.ID, prev.SHA256
			w.unchanged = append(w.unchanged, c)
			return false
		}
		w.puts = append(w.puts, c)
		return false
	}
	dirs := []string{"."}
	for len(dirs) > 0 {
		dir := dirs[len(dirs)-1]
		dirs = dirs[:len(dirs)-1]
		stop, sub, err := walkMemoryDirOne(ctx, root, dir, visit, w.tooDeep)
		if err != nil {
			return w, err
		}
		if stop {
			return w, nil
		}
		dirs = append(dirs, sub...)
	}
	slices.SortFunc(w.puts, func(a, b memoryChange) int { return strings.Compare(a.path, b.path) })
	return w, nil
}

// walkMemoryDirOne visits the entries of one directory of a store's directory, a batch at a time, and returns
// its subdirectories (to walk next: those not in skip) and whether visit stopped the walk. A directory gone
// meanwhile has no entry.
func walkMemoryDirOne(ctx context.Context, root *os.Root, dir string, visit func(string, fs.DirEntry) bool, skip map[string]bool) (bool, []string, error) {
	f, err := root.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ELOOP) {
		return false, nil, nil // replaced meanwhile: what it became is walked next time
	}
	if err != nil {
		return false, nil, fmt.Errorf("%s: %w", dir, err)
	}
	defer f.Close()
	var sub []string
	for {
		if err := ctx.Err(); err != nil {
			return false, nil, err
		}
		ents, err := f.ReadDir(256)
		for _, de := range ents {
			name := de.Name()
			if dir != "." {
				name = dir + "/" + name
			}
			if visit(name, de) {
				return true, nil, nil
			}
			if de.IsDir() && !skip[name] {
				sub = append(sub, name)
			}
		}
		if errors.Is(err, io.EOF) || err == nil && len(ents) == 0 {
			return false, sub, nil
		}
		if err != nil {
			return false, nil, fmt.Errorf("%s: %w", dir, err)
		}
	}
}

func cmpName(res *apitype.Resource) string {
	if res.Name != "" {
		return fmt.Sprintf("%q", res.Name)
	}
	return res.MemoryStoreID
}

// addNotice keeps a notice for the session's next tool result.
func (p *Placer) addNotice(sessionID, n string) {
	p.noticeMu.Lock()
	defer p.noticeMu.Unlock()
	if p.notices == nil {
		p.notices = map[string][]string{}
	}
	p.notices[sessionID] = append(p.notices[sessionID], n)
	p.pending.Store(true)
}

var _ sandbox.Noticer = (*Placer)(nil)

// TakeNotices returns and forgets what the session's agent is to be told about its memory files (the Pool puts
// it in front of the session's next tool result). Without any pending notice it reads one atomic flag.
func (p *Placer) TakeNotices(sessionID string) []string {
	if !p.pending.Load() {
		return nil
	}
	p.noticeMu.Lock()
	defer p.noticeMu.Unlock()
	n := p.notices[sessionID]
	delete(p.notices, sessionID)
	p.pending.Store(len(p.notices) > 0)
	return n
}
