package workspace_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/workspace"
	"github.com/corralhq/corral/internal/workspace/memstore"
)

// memEnv is a Placer whose Memories are a real SQLite store's, and a workspace root.
type memEnv struct {
	st     store.Store
	placer *workspace.Placer
	root   string
}

func newMemEnv(t *testing.T) *memEnv {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), "sqlite://"+filepath.Join(dir, "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	placer, err := workspace.New(workspace.Config{Memories: memstore.New(st)})
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "workspaces")
	return &memEnv{st: st, placer: placer, root: root}
}

func (e *memEnv) newStore(t *testing.T, name string) string {
	t.Helper()
	now := time.Now().UTC()
	ms := &apitype.MemoryStore{Type: apitype.ObjectMemoryStore, ID: apitype.NewID(apitype.PrefixMemoryStore), Name: name,
		Metadata: map[string]string{}, CreatedAt: now, UpdatedAt: now}
	if err := e.st.MemoryStoreCreate(t.Context(), ms); err != nil {
		t.Fatal(err)
	}
	return ms.ID
}

// apiPut writes a memory as an API key would.
func (e *memEnv) apiPut(t *testing.T, storeID, path, content string) *apitype.Memory {
	t.Helper()
	res, err := e.st.MemoryWrite(t.Context(), &store.MemoryWriteParams{StoreID: storeID, Op: store.MemoryOpPut, Path: &path, Content: &content,
		Actor: apitype.Actor{Type: apitype.ActorAPI, APIKeyID: "key_test"}, At: time.Now().UTC(),
		NewMemoryID: apitype.NewID(apitype.PrefixMemory), NewVersionID: apitype.NewID(apitype.PrefixMemVersion)})
	if err != nil {
		t.Fatal(err)
	}
	return res.Memory
}

// memories maps a store's memory paths to their content.
func (e *memEnv) memories(t *testing.T, storeID string) map[string]string {
	t.Helper()
	items, err := e.st.MemoryList(t.Context(), &store.MemoryListParams{StoreID: storeID, Limit: 10000, Content: true})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, it := range items {
		out[it.Memory.Path] = *it.Memory.Content
	}
	return out
}

// versions are a store's versions written by the session, oldest first, as "operation path content".
func (e *memEnv) versions(t *testing.T, storeID, sessionID string) []string {
	t.Helper()
	vs, err := e.st.MemoryVersionList(t.Context(), &store.MemoryVersionListParams{StoreID: storeID, SessionID: sessionID, Limit: 1000, Content: true})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := len(vs) - 1; i >= 0; i-- {
		v := vs[i]
		if v.CreatedBy == nil || v.CreatedBy.Type != apitype.ActorSession || v.CreatedBy.SessionID != sessionID {
			t.Errorf("version %s created by %+v, want the session_actor of %s", v.ID, v.CreatedBy, sessionID)
		}
		s := string(v.Operation) + " " + *v.Path
		if v.Content != nil {
			s += " " + *v.Content
		}
		out = append(out, s)
	}
	return out
}

func memResource(storeID, name string, access apitype.ResourceAccess) apitype.Resource {
	return apitype.Resource{ID: "sesrsc_" + storeID, Type: apitype.ResourceMemoryStore, MemoryStoreID: storeID, Name: name,
		Access: access, MountPath: apitype.MemoryMountPath(name, storeID)}
}

// session is one session's recipe and host directories.
type memSession struct {
	r    sandbox.Recipe
	host sandbox.HostDirs
}

func (e *memEnv) session(t *testing.T, id string, res ...apitype.Resource) *memSession {
	t.Helper()
	host := sandbox.HostDirs{Workspace: filepath.Join(e.root, id), Session: sandbox.SessionDir(e.root, id)}
	for _, d := range []string{host.Workspace, host.Session} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return &memSession{r: sandbox.Recipe{SessionID: id, Resources: res}, host: host}
}

// place places the session's resources as a provisioning does; it fails the test on a resource error.
func (e *memEnv) place(t *testing.T, s *memSession) {
	t.Helper()
	for _, rerr := range e.placer.Place(t.Context(), &s.r, s.host) {
		t.Errorf("placement: %v", rerr)
	}
}

func (e *memEnv) collect(t *testing.T, s *memSession) {
	t.Helper()
	if err := e.placer.Collect(t.Context(), &s.r, s.host); err != nil {
		t.Errorf("collect: %v", err)
	}
}

// dir is the host directory of the session's store named name.
func (s *memSession) dir(name string) string {
	return filepath.Join(s.host.Memory(), apitype.MemorySlug(name, ""))
}

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestMemoryPlaceAndCollect: a store's memories are placed in its directory; what the session creates, changes
// and deletes there becomes versions with its session_actor; an unchanged directory writes nothing.
func TestMemoryPlaceAndCollect(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t)
	id := e.newStore(t, "Team Notes")
	e.apiPut(t, id, "/notes/old.md", "old")
	e.apiPut(t, id, "/keep.md", "keep")
	s := e.session(t, "sesn_a", memResource(id, "Team Notes", apitype.AccessReadWrite))
	e.place(t, s)
	dir := s.dir("Team Notes")
	if got := readFile(t, filepath.Join(dir, "notes/old.md")); got != "old" {
		t.Fatalf("placed: %q", got)
	}
	writeFile(t, filepath.Join(dir, "notes/old.md"), "changed")
	writeFile(t, filepath.Join(dir, "notes/a.md"), "# A\n")
	e.collect(t, s)
	if err := os.Remove(filepath.Join(dir, "notes/old.md")); err != nil {
		t.Fatal(err)
	}
	e.collect(t, s)
	e.collect(t, s) // nothing changed: nothing written
	want := []string{"created /notes/a.md # A\n", "modified /notes/old.md changed", "deleted /notes/old.md"}
	got := e.versions(t, id, "sesn_a")
	slices.Sort(got[:2])
	if !slices.Equal(got, want) {
		t.Errorf("versions: %q, want %q", got, want)
	}
	if got, want := e.memories(t, id), map[string]string{"/keep.md": "keep", "/notes/a.md": "# A\n"}; !mapsEqual(got, want) {
		t.Errorf("memories: %v, want %v", got, want)
	}
	if n := e.placer.TakeNotices("sesn_a"); n != nil {
		t.Errorf("notices: %q", n)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestMemoryRemoteChanges: a new provisioning brings what changed elsewhere (a memory updated, one deleted) but
// never overwrites a file the session changed and has not had collected; once collected, the session's is
// current.
func TestMemoryRemoteChanges(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t)
	id := e.newStore(t, "notes")
	e.apiPut(t, id, "/a.md", "a1")
	b := e.apiPut(t, id, "/b.md", "b1")
	e.apiPut(t, id, "/c.md", "c1")
	s := e.session(t, "sesn_r", memResource(id, "notes", apitype.AccessReadWrite))
	e.place(t, s)
	dir := s.dir("notes")
	writeFile(t, filepath.Join(dir, "c.md"), "c-session") // changed by the session, not yet collected
	e.apiPut(t, id, "/a.md", "a2")                        // changed elsewhere only
	e.apiPut(t, id, "/c.md", "c2")                        // changed elsewhere too
	if _, err := e.st.MemoryWrite(t.Context(), &store.MemoryWriteParams{StoreID: id, Op: store.MemoryOpDelete, ID: b.ID,
		Actor: apitype.Actor{Type: apitype.ActorAPI, APIKeyID: "key_test"}, At: time.Now().UTC(), NewVersionID: apitype.NewID(apitype.PrefixMemVersion)}); err != nil {
		t.Fatal(err)
	}
	e.place(t, s) // the next sandbox
	if got := readFile(t, filepath.Join(dir, "a.md")); got != "a2" {
		t.Errorf("a.md changed elsewhere: %q, want a2", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "b.md")); !os.IsNotExist(err) {
		t.Errorf("b.md deleted while mounted is still there: %v", err)
	}
	if got := readFile(t, filepath.Join(dir, "c.md")); got != "c-session" {
		t.Errorf("c.md changed by the session was overwritten: %q", got)
	}
	e.collect(t, s)
	if got := e.memories(t, id); !mapsEqual(got, map[string]string{"/a.md": "a2", "/c.md": "c-session"}) {
		t.Errorf("memories: %v", got)
	}
	if got, want := e.versions(t, id, "sesn_r"), []string{"modified /c.md c-session"}; !slices.Equal(got, want) {
		t.Errorf("versions: %q, want %q", got, want)
	}
	// A deletion by the session of a memory changed elsewhere since it saw it: the other change wins.
	if err := os.Remove(filepath.Join(dir, "a.md")); err != nil {
		t.Fatal(err)
	}
	e.apiPut(t, id, "/a.md", "a3")
	e.collect(t, s)
	if got := e.memories(t, id)["/a.md"]; got != "a3" {
		t.Errorf("a.md after a stale deletion: %q, want a3", got)
	}
	e.place(t, s)
	if got := readFile(t, filepath.Join(dir, "a.md")); got != "a3" {
		t.Errorf("a.md placed again: %q, want a3", got)
	}
}

// TestMemoryRefused: a file over the size limit, one that is not UTF-8, one whose path the memory rules refuse,
// a symlink to a host file, a FIFO and a device are not stored, nothing outside the directory is read, and the
// agent is told why once, in a notice for its next tool result.
func TestMemoryRefused(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t)
	id := e.newStore(t, "notes")
	s := e.session(t, "sesn_n", memResource(id, "notes", apitype.AccessReadWrite))
	e.place(t, s)
	dir := s.dir("notes")
	secret := filepath.Join(t.TempDir(), "secret")
	writeFile(t, secret, "host secret")
	writeFile(t, filepath.Join(dir, "big.md"), strings.Repeat("x", apitype.MaxMemoryBytes+1))
	writeFile(t, filepath.Join(dir, "bin.dat"), "\xff\xfe\x00")
	writeFile(t, filepath.Join(dir, "bad\u2028name.md"), "x")
	writeFile(t, filepath.Join(dir, "ok.md"), "fine")
	if err := os.Symlink(secret, filepath.Join(dir, "link.md")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(secret), filepath.Join(dir, "linkdir")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mknod(filepath.Join(dir, "null"), syscall.S_IFCHR|0o666, int(1<<8|3)); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { e.collect(t, s); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("collection blocked (on the FIFO?)")
	}
	if got := e.memories(t, id); !mapsEqual(got, map[string]string{"/ok.md": "fine"}) {
		t.Errorf("memories: %v, want only /ok.md", got)
	}
	n := strings.Join(e.placer.TakeNotices("sesn_n"), "\n")
	for _, want := range []string{
		"/mnt/memory/notes/big.md: it is larger than a memory may be",
		"/mnt/memory/notes/bin.dat: its content is not valid UTF-8",
		"/mnt/memory/notes/bad\u2028name.md: its path is not a valid memory path: it must not contain the character U+2028",
		"/mnt/memory/notes/link.md: it is a symbolic link",
		"/mnt/memory/notes/linkdir: it is a symbolic link",
		"/mnt/memory/notes/fifo: it is a named pipe (FIFO)",
		"/mnt/memory/notes/null: it is a device",
	} {
		if !strings.Contains(n, want) {
			t.Errorf("notice lacks %q:\n%s", want, n)
		}
	}
	if strings.Contains(n, "ok.md") || strings.Contains(n, "host secret") {
		t.Errorf("notice: %s", n)
	}
	e.collect(t, s)
	if n := e.placer.TakeNotices("sesn_n"); n != nil {
		t.Errorf("told again: %q", n)
	}
	// Fixed, the file is stored.
	writeFile(t, filepath.Join(dir, "big.md"), "small now")
	e.collect(t, s)
	if got := e.memories(t, id)["/big.md"]; got != "small now" {
		t.Errorf("big.md once fixed: %q", got)
	}
}

// TestMemoryTooManyFiles: a directory of 10,000 files is over the bound: nothing of it is stored, and the agent
// is told why.
func TestMemoryTooManyFiles(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t)
	id := e.newStore(t, "notes")
	e.apiPut(t, id, "/keep.md", "keep")
	s := e.session(t, "sesn_m", memResource(id, "notes", apitype.AccessReadWrite))
	e.place(t, s)
	dir := s.dir("notes")
	if err := os.Remove(filepath.Join(dir, "keep.md")); err != nil {
		t.Fatal(err)
	}
	for i := range 10000 {
		writeFile(t, filepath.Join(dir, fmt.Sprintf("d%d/f%d.md", i%10, i)), "x")
	}
	e.collect(t, s)
	if got := e.memories(t, id); !mapsEqual(got, map[string]string{"/keep.md": "keep"}) {
		t.Errorf("memories: %d of them, want only /keep.md (nothing stored, nothing deleted)", len(got))
	}
	n := strings.Join(e.placer.TakeNotices("sesn_m"), "\n")
	if !strings.Contains(n, "more than 5000 files and directories; nothing in it was saved") {
		t.Errorf("notice: %q", n)
	}
}

// TestMemoryTwoSessions: two sessions writing the same path both leave a version, each with its session_actor;
// the later one is current.
func TestMemoryTwoSessions(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t)
	id := e.newStore(t, "shared")
	s1 := e.session(t, "sesn_1", memResource(id, "shared", apitype.AccessReadWrite))
	s2 := e.session(t, "sesn_2", memResource(id, "shared", apitype.AccessReadWrite))
	e.place(t, s1)
	e.place(t, s2)
	writeFile(t, filepath.Join(s1.dir("shared"), "x.md"), "from one")
	writeFile(t, filepath.Join(s2.dir("shared"), "x.md"), "from two")
	e.collect(t, s1)
	e.collect(t, s2)
	if got := e.versions(t, id, "sesn_1"); !slices.Equal(got, []string{"created /x.md from one"}) {
		t.Errorf("session 1's versions: %q", got)
	}
	if got := e.versions(t, id, "sesn_2"); !slices.Equal(got, []string{"modified /x.md from two"}) {
		t.Errorf("session 2's versions: %q", got)
	}
	if got := e.memories(t, id)["/x.md"]; got != "from two" {
		t.Errorf("current: %q", got)
	}
	// Session 1's next sandbox sees the current version (its own file was collected, so it is not its change).
	e.place(t, s1)
	if got := readFile(t, filepath.Join(s1.dir("shared"), "x.md")); got != "from two" {
		t.Errorf("session 1 sees %q", got)
	}
}

// TestMemoryReadOnly: a read_only store's files are the host's, 0444 in 0755 directories, are the store's as it
// is at each provisioning, and are never collected.
func TestMemoryReadOnly(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t)
	id := e.newStore(t, "Style")
	e.apiPut(t, id, "/rules/a.md", "rules")
	e.apiPut(t, id, "/gone.md", "gone")
	s := e.session(t, "sesn_ro", memResource(id, "Style", apitype.AccessReadOnly))
	e.place(t, s)
	dir := s.dir("Style")
	for name, mode := range map[string]os.FileMode{"rules": 0o755 | os.ModeDir, "rules/a.md": 0o444} {
		fi, err := os.Lstat(filepath.Join(dir, name))
		if err != nil || fi.Mode() != mode {
			t.Errorf("%s: %v, %v; want mode %v", name, fi.Mode(), err, mode)
		}
	}
	writeFile(t, filepath.Join(dir, "stray.md"), "not the store's")
	m := e.memories(t, id)
	e.collect(t, s)
	if got := e.memories(t, id); !mapsEqual(got, m) {
		t.Errorf("a read_only store was written: %v", got)
	}
	e.apiPut(t, id, "/rules/a.md", "rules 2")
	gone, _ := e.st.MemoryList(t.Context(), &store.MemoryListParams{StoreID: id, Prefix: "/", Limit: 10})
	for _, it := range gone {
		if it.Memory.Path == "/gone.md" {
			if _, err := e.st.MemoryWrite(t.Context(), &store.MemoryWriteParams{StoreID: id, Op: store.MemoryOpDelete, ID: it.Memory.ID,
				Actor: apitype.Actor{Type: apitype.ActorAPI, APIKeyID: "k"}, At: time.Now().UTC(), NewVersionID: apitype.NewID(apitype.PrefixMemVersion)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.place(t, s)
	if got := readFile(t, filepath.Join(dir, "rules/a.md")); got != "rules 2" {
		t.Errorf("rules/a.md: %q", got)
	}
	for _, name := range []string{"gone.md", "stray.md"} {
		if _, err := os.Lstat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Errorf("%s is still there: %v", name, err)
		}
	}
}

// TestMemoryNoticeInToolResult: the Pool puts a collection's notice in front of the session's next tool
// result, once.
func TestMemoryNoticeInToolResult(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t)
	id := e.newStore(t, "notes")
	prov := &fakeProvider{}
	p, err := sandbox.NewPool(sandbox.PoolConfig{Provider: prov, WorkspaceRoot: e.root, Placer: e.placer, Outputs: e.placer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	c := call("sesn_p")
	c.Recipe.Resources = []apitype.Resource{memResource(id, "notes", apitype.AccessReadWrite)}
	if _, err := p.Execute(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(prov.dirs[0].Memory(), "notes")
	writeFile(t, filepath.Join(dir, "bin.dat"), "\xff")
	writeFile(t, filepath.Join(dir, "ok.md"), "ok")
	if err := p.CollectOutputs(t.Context(), &c.Recipe); err != nil {
		t.Fatal(err)
	}
	res, err := p.Execute(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Content) != 2 || !strings.Contains(res.Content[0].Text, "/mnt/memory/notes/bin.dat: its content is not valid UTF-8") {
		b, _ := json.Marshal(res.Content)
		t.Errorf("result: %s", b)
	}
	if res, _ := p.Execute(t.Context(), c); len(res.Content) != 1 {
		t.Errorf("the notice came twice: %+v", res.Content)
	}
	if got := e.memories(t, id); !mapsEqual(got, map[string]string{"/ok.md": "ok"}) {
		t.Errorf("memories: %v", got)
	}
}

// TestMemoryDeletedWhileMounted: a memory deleted through the store while a sandbox has it is not brought back
// by the collection of its unchanged file, and is gone from the next sandbox.
func TestMemoryDeletedWhileMounted(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t)
	id := e.newStore(t, "notes")
	b := e.apiPut(t, id, "/b.md", "b")
	s := e.session(t, "sesn_d", memResource(id, "notes", apitype.AccessReadWrite))
	e.place(t, s)
	if _, err := e.st.MemoryWrite(t.Context(), &store.MemoryWriteParams{StoreID: id, Op: store.MemoryOpDelete, ID: b.ID,
		Actor: apitype.Actor{Type: apitype.ActorAPI, APIKeyID: "key_test"}, At: time.Now().UTC(), NewVersionID: apitype.NewID(apitype.PrefixMemVersion)}); err != nil {
		t.Fatal(err)
	}
	e.collect(t, s)
	if got := e.memories(t, id); len(got) != 0 {
		t.Errorf("memories after the collection: %v, want none", got)
	}
	if got := e.versions(t, id, "sesn_d"); len(got) != 0 {
		t.Errorf("the session wrote %q", got)
	}
	e.place(t, s)
	if _, err := os.Lstat(filepath.Join(s.dir("notes"), "b.md")); !os.IsNotExist(err) {
		t.Errorf("b.md in the next sandbox: %v", err)
	}
}

// TestMemoryHugeDirectoryBounded: a sandbox that fills one directory of a read_write store with 100,000 entries
// of long names does not make collection read the whole listing into the server's memory: the walk stops at
// the bound (MaxMountedMemories entries), and what it allocates does not grow with the directory's size.
func TestMemoryHugeDirectoryBounded(t *testing.T) {
	e := newMemEnv(t)
	id := e.newStore(t, "notes")
	e.apiPut(t, id, "/keep.md", "keep")
	s := e.session(t, "sesn_h", memResource(id, "notes", apitype.AccessReadWrite))
	e.place(t, s)
	dir := filepath.Join(s.dir("notes"), "flood")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("n", 200)
	for i := range 100000 {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("%s%06d", long, i)), os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	e.collect(t, s)
	runtime.ReadMemStats(&after)
	if got := e.memories(t, id); !mapsEqual(got, map[string]string{"/keep.md": "keep"}) {
		t.Errorf("memories: %d of them, want only /keep.md", len(got))
	}
	if n := strings.Join(e.placer.TakeNotices("sesn_h"), "\n"); !strings.Contains(n, "more than 5000 files and directories") {
		t.Errorf("notice: %q", n)
	}
	// Reading the whole listing, then sorting it, allocated 86 MB (100,000 names of 206 bytes, an entry and a
	// path each); reading the first 5,000 files (a few kilobytes each) about 17 MB.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 40<<20 {
		t.Errorf("collection allocated %d MB for a directory of 100,000 entries; want it bounded by the walk's limit", alloc>>20)
	}
}

// TestMemoryNULContent: a file with a NUL character (valid UTF-8, but no memory's content may hold one: the API
// refuses it and PostgreSQL cannot store it) is not stored, and the agent is told why.
func TestMemoryNULContent(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t)
	id := e.newStore(t, "notes")
	s := e.session(t, "sesn_z", memResource(id, "notes", apitype.AccessReadWrite))
	e.place(t, s)
	writeFile(t, filepath.Join(s.dir("notes"), "nul.md"), "a\x00b")
	writeFile(t, filepath.Join(s.dir("notes"), "ok.md"), "fine")
	e.collect(t, s)
	if got := e.memories(t, id); !mapsEqual(got, map[string]string{"/ok.md": "fine"}) {
		t.Errorf("memories: %q, want only /ok.md", got)
	}
	if n := strings.Join(e.placer.TakeNotices("sesn_z"), "\n"); !strings.Contains(n, "/mnt/memory/notes/nul.md: its content must not contain NUL characters") {
		t.Errorf("notice: %q", n)
	}
}

// TestMemoryPlacementLinks: links the sandbox leaves in a read_write store's directory after a collection
// (a memory's file made a link to a host file, a memory's directory a link to a host directory, a new directory
// a link to another) never make the next placement write or read outside the directory, although the memories
// behind them changed elsewhere meanwhile.
func TestMemoryPlacementLinks(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t)
	id := e.newStore(t, "notes")
	e.apiPut(t, id, "/a.md", "a1")
	e.apiPut(t, id, "/d/b.md", "b1")
	s := e.session(t, "sesn_l", memResource(id, "notes", apitype.AccessReadWrite))
	e.place(t, s)
	e.collect(t, s)
	dir := s.dir("notes")
	host := t.TempDir()
	secret, hostDir, hostDir2 := filepath.Join(host, "secret"), filepath.Join(host, "dir"), filepath.Join(host, "dir2")
	writeFile(t, secret, "host secret")
	writeFile(t, filepath.Join(hostDir, "b.md"), "host b")
	if err := os.Mkdir(hostDir2, 0o755); err != nil {
		t.Fatal(err)
	}
	rec := filepath.Join(filepath.Dir(s.host.Workspace), "."+filepath.Base(s.host.Workspace)+".memory.json")
	for _, l := range [][2]string{{secret, "a.md"}, {hostDir, "d"}, {hostDir2, "e"}, {rec, "rec.md"}} {
		target := filepath.Join(dir, l[1])
		if err := os.RemoveAll(target); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(l[0], target); err != nil {
			t.Fatal(err)
		}
	}
	e.apiPut(t, id, "/a.md", "a2")
	e.apiPut(t, id, "/d/b.md", "b2")
	e.apiPut(t, id, "/d/new.md", "new")
	e.apiPut(t, id, "/e/x.md", "x")
	e.apiPut(t, id, "/rec.md", "rec")
	for _, rerr := range e.placer.Place(t.Context(), &s.r, s.host) {
		t.Logf("placement (refusing a link): %v", rerr)
	}
	for name, want := range map[string]string{secret: "host secret", filepath.Join(hostDir, "b.md"): "host b"} {
		if got, err := os.ReadFile(name); err != nil || string(got) != want {
			t.Errorf("host file %s: %q %v, want it untouched", name, got, err)
		}
	}
	for _, d := range []string{hostDir, hostDir2} {
		if ents, _ := os.ReadDir(d); len(ents) > 1 || len(ents) == 1 && ents[0].Name() != "b.md" {
			t.Errorf("placement wrote into host directory %s: %v", d, ents)
		}
	}
	if data, err := os.ReadFile(rec); err != nil || !json.Valid(data) {
		t.Errorf("the record after a link to it: %v %q", err, data)
	}
	// The links stay the sandbox's own business: collection stores none of them, and the memories stay the
	// ones written elsewhere.
	e.collect(t, s)
	want := map[string]string{"/a.md": "a2", "/d/b.md": "b2", "/d/new.md": "new", "/e/x.md": "x", "/rec.md": "rec"}
	if got := e.memories(t, id); !mapsEqual(got, want) {
		t.Errorf("memories: %q, want %q", got, want)
	}
}

// TestMemoryDeepAndLongNames: a directory nested 1,000 levels deep (its path far past PATH_MAX) and names of
// 255 bytes neither break collection nor store anything the memory rules refuse; the walk goes no deeper than a
// memory can be (the sandbox could nest without end, with names of 255 bytes: quadratic paths), the agent is
// told why in a notice of bounded size, and the valid memories beside them are stored.
func TestMemoryDeepAndLongNames(t *testing.T) {
	t.Parallel()
	e := newMemEnv(t)
	id := e.newStore(t, "notes")
	s := e.session(t, "sesn_d", memResource(id, "notes", apitype.AccessReadWrite))
	e.place(t, s)
	dir := s.dir("notes")
	// Made with relative paths from an open directory: the whole path is longer than the host's PATH_MAX.
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	deep := "deep"
	if err := root.Mkdir(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	for range 999 {
		sub, err := root.OpenRoot(deep)
		if err != nil {
			t.Fatal(err)
		}
		if err := sub.Mkdir("level", 0o755); err != nil {
			t.Fatal(err)
		}
		sub.Close()
		deep += "/level"
	}
	if len(dir)+len(deep) <= 4096 {
		t.Fatalf("the nesting is only %d bytes deep", len(deep))
	}
	if err := root.WriteFile(deep+"/bottom.md", []byte("bottom"), 0o644); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("é", 127) + "x" // 255 bytes
	writeFile(t, filepath.Join(dir, long), "long")
	writeFile(t, filepath.Join(dir, "ok.md"), "fine")
	e.collect(t, s)
	if got := e.memories(t, id); !mapsEqual(got, map[string]string{"/ok.md": "fine", "/" + long: "long"}) {
		t.Errorf("memories: %q", got)
	}
	// The walk stops at the depth past which no memory can be: the notice names that directory, not the files
	// below it.
	n := strings.Join(e.placer.TakeNotices("sesn_d"), "\n")
	if want := "/mnt/memory/notes/deep" + strings.Repeat("/level", 19) + ": it is nested too deep for a memory"; !strings.Contains(n, want) ||
		strings.Contains(n, "bottom.md") || len(n) > 2000 {
		t.Errorf("notice (%d bytes): %.600q", len(n), n)
	}
	// Many files that cannot be stored: the notice names 20 of them and counts the others.
	for i := range 100 {
		writeFile(t, filepath.Join(dir, fmt.Sprintf("bad\x01%03d", i)), "x")
	}
	e.collect(t, s)
	n = strings.Join(e.placer.TakeNotices("sesn_d"), "\n")
	if lines := strings.Count(n, "\n- "); lines != 21 || !strings.Contains(n, "\n- and 80 more") {
		t.Errorf("notice of 100 refused files (%d lines): %q", lines, n)
	}
	// The next placement leaves the tree as it is.
	e.place(t, s)
	if data, err := root.ReadFile(deep + "/bottom.md"); err != nil || string(data) != "bottom" {
		t.Errorf("the deep file after a placement: %q %v", data, err)
	}
}
