package sandboxtest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
)

// Run is the conformance suite. newProvider returns a provider for one subtest.
func Run(t *testing.T, newProvider func(testing.TB) sandbox.Provider, opts Options) {
	t.Run("Tools", func(t *testing.T) { t.Parallel(); testTools(t, newProvider) })
	t.Run("InvalidInput", func(t *testing.T) { t.Parallel(); testInvalidInput(t, newProvider) })
	t.Run("BashState", func(t *testing.T) { t.Parallel(); testBashState(t, newProvider) })
	t.Run("Shells", func(t *testing.T) { t.Parallel(); testShells(t, newProvider) })
	t.Run("Timeout", func(t *testing.T) { t.Parallel(); testTimeout(t, newProvider) })
	t.Run("Cancel", func(t *testing.T) { t.Parallel(); testCancel(t, newProvider) })
	t.Run("OutputCap", func(t *testing.T) { t.Parallel(); testOutputCap(t, newProvider) })
	t.Run("WorkspaceSurvivesReprovision", func(t *testing.T) {
		if opts.EphemeralWorkspace {
			t.Skip("the workspace goes with its sandbox (Options.EphemeralWorkspace); KilledSandbox and IdleReap check that the next one starts empty")
		}
		t.Parallel()
		testWorkspaceSurvives(t, newProvider, opts)
	})
	t.Run("KilledSandbox", func(t *testing.T) {
		if opts.NoHostProcesses {
			t.Skip("the sandbox's processes are not host processes; the death path is the oci backend's, tested there")
		}
		t.Parallel()
		testKilled(t, newProvider, opts)
	})
	t.Run("CloseIdempotent", func(t *testing.T) { t.Parallel(); testCloseIdempotent(t, newProvider) })
	t.Run("IdleReap", func(t *testing.T) { t.Parallel(); testIdleReap(t, newProvider, opts) })
	t.Run("Threads", func(t *testing.T) { t.Parallel(); testThreads(t, newProvider) })
	if opts.NotIsolated {
		return
	}
	t.Run("Isolation", func(t *testing.T) { testIsolation(t, newProvider, opts) })
	t.Run("SessionMounts", func(t *testing.T) { skipRemote(t, opts); t.Parallel(); testSessionMounts(t, newProvider) })
	t.Run("MemoryMounts", func(t *testing.T) { skipRemote(t, opts); t.Parallel(); testMemoryMounts(t, newProvider) })
	t.Run("MemoryMountEscapes", func(t *testing.T) { skipRemote(t, opts); t.Parallel(); testMemoryMountEscapes(t, newProvider) })
}

// skipRemote skips, for a remote backend, a check of the session's files as mounts of host directories: a
// remote backend's are copies of the Pool's staging copy (sandbox.Capabilities.StagedWorkspace), which its own
// tests check (kubernetes: TestSessionFiles, and cmd/corral's TestKubernetesSession through the API).
func skipRemote(t *testing.T, opts Options) {
	if opts.Remote {
		t.Skip("a remote backend's session files are copies, not mounts of the host's directories: its own tests check them (Options.Remote)")
	}
}

// testMemoryMounts: a session's memory stores are bound at their mount paths, a read_write one writable by the
// sandbox (what it writes is on the host, in the store's directory), a read_only one readable, mounted
// read-only (EROFS on bwrap and runc; gVisor refuses most writes by the host directory's permissions first) and
// refusing every write, even to its files' modes.
func testMemoryMounts(t *testing.T, newProvider func(testing.TB) sandbox.Provider) {
	p, root := newPoolRoot(t, newProvider, 0)
	const s = "memory"
	r := sandbox.Recipe{SessionID: s, Resources: []apitype.Resource{
		{ID: "sesrsc_rw", Type: apitype.ResourceMemoryStore, MemoryStoreID: "memstore_rw", Name: "Team Notes",
			Access: apitype.AccessReadWrite, MountPath: apitype.MemoryMountPath("Team Notes", "memstore_rw")},
		{ID: "sesrsc_ro", Type: apitype.ResourceMemoryStore, MemoryStoreID: "memstore_ro", Name: "Style guide",
			Access: apitype.AccessReadOnly},
	}}
	// Placed before the sandbox starts, as the Placer places them.
	dir := sandbox.HostDirs{Session: sandbox.SessionDir(root, s)}.Memory()
	for _, f := range []struct{ name, content string }{{"team-notes/old.md", "old"}, {"style-guide/rules/a.md", "rules"}} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f.name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f.name), []byte(f.content), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "team-notes/old.md"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := bash(s, "cd /mnt/memory && cat team-notes/old.md style-guide/rules/a.md; echo; "+
		"echo new > team-notes/old.md && mkdir -p team-notes/notes && echo hi > team-notes/notes/a.md && echo rw-ok; "+
		"for w in 'touch style-guide/x' 'mv style-guide/rules/a.md style-guide/b.md' 'rm -f style-guide/rules/a.md' "+
		"'chmod 666 style-guide/rules/a.md' 'echo y >> style-guide/rules/a.md'; do sh -c \"$w\" 2>/dev/null && echo WROTE || echo refused; done; "+
		"awk '$5 ~ /^\\/mnt\\/memory\\// {split($6, o, \",\"); print $5, o[1]}' /proc/self/mountinfo | sort; "+
		"ls style-guide/rules")
	c.Recipe = r
	res, err := p.Execute(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	got := res.Text()
	// The pool has no placer here: a note about that may come first.
	if want := "oldrules\nrw-ok\n" + strings.Repeat("refused\n", 5) +
		"/mnt/memory/style-guide ro\n/mnt/memory/team-notes rw\na.md"; !strings.HasSuffix(got, want) {
		t.Errorf("in the sandbox: %q, want it to end with %q", got, want)
	}
	for name, want := range map[string]string{"team-notes/old.md": "new\n", "team-notes/notes/a.md": "hi\n", "style-guide/rules/a.md": "rules"} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != want {
			t.Errorf("%s on the host: %q, %v; want %q", name, b, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "style-guide/x")); err == nil {
		t.Error("the sandbox wrote into the read_only store's directory")
	}
}

// testMemoryMountEscapes: what model-written code tries to get around a memory mount. A read_only store cannot
// be remounted read-write, unmounted (to write the directory beneath) or written through /proc/self/root; no
// file of another mount (the workspace, the read_only store, the root filesystem) can be hard-linked into a
// read_write store, where collection would read it as a memory; a device node cannot be made there.
func testMemoryMountEscapes(t *testing.T, newProvider func(testing.TB) sandbox.Provider) {
	p, root := newPoolRoot(t, newProvider, 0)
	const s = "memescape"
	r := sandbox.Recipe{SessionID: s, Resources: []apitype.Resource{
		{ID: "sesrsc_rw", Type: apitype.ResourceMemoryStore, MemoryStoreID: "memstore_rw", Name: "notes",
			Access: apitype.AccessReadWrite},
		{ID: "sesrsc_ro", Type: apitype.ResourceMemoryStore, MemoryStoreID: "memstore_ro", Name: "facts",
			Access: apitype.AccessReadOnly},
	}}
	dir := sandbox.HostDirs{Session: sandbox.SessionDir(root, s)}.Memory()
	if err := os.MkdirAll(filepath.Join(dir, "facts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "facts", "a.md"), []byte("fact"), 0o444); err != nil {
		t.Fatal(err)
	}
	c := bash(s, "echo w > /workspace/w.txt; cd /mnt/memory; "+
		"for w in 'mount -o remount,rw,bind /mnt/memory/facts' 'umount /mnt/memory/facts' 'umount -l /mnt/memory/facts' "+
		"'echo y > /proc/self/root/mnt/memory/facts/a.md' 'touch /proc/1/root/mnt/memory/facts/new' "+
		"'ln /workspace/w.txt notes/w' 'ln facts/a.md notes/a' 'ln /etc/passwd notes/passwd' 'ln /usr/bin/env notes/env' "+
		"'mknod notes/null c 1 3' 'mount -t tmpfs none notes'; do "+
		"sh -c \"$w\" 2>/dev/null && echo \"WROTE: $w\" || echo refused; done; ls -A notes; cat facts/a.md")
	c.Recipe = r
	res, err := p.Execute(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	got := res.Text()
	if want := strings.Repeat("refused\n", 11) + "fact"; !strings.HasSuffix(got, want) {
		t.Errorf("in the sandbox: %q, want it to end with %q", got, want)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "facts", "a.md")); err != nil || string(b) != "fact" {
		t.Errorf("the read_only store's file on the host: %q, %v", b, err)
	}
	if ents, err := os.ReadDir(filepath.Join(dir, "notes")); err != nil || len(ents) != 0 {
		t.Errorf("the read_write store's directory on the host: %v, %v; want it empty", ents, err)
	}
}

// testSessionMounts: the session directory's uploads and skills are readable and not writable in the sandbox,
// its outputs writable, and what the sandbox writes there is on the host.
func testSessionMounts(t *testing.T, newProvider func(testing.TB) sandbox.Provider) {
	p, root := newPoolRoot(t, newProvider, 0)
	const s = "mounts"
	// Placed before the sandbox starts, as the Placer places them.
	dir := sandbox.SessionDir(root, s)
	for _, d := range []string{"uploads", "skills"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "uploads", "in.txt"), []byte("uploaded"), 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "skills", "SKILL.md"), []byte("skill"), 0o444); err != nil {
		t.Fatal(err)
	}
	got := mustRun(t, p, bash(s, "cat "+sandbox.UploadsMount+"/in.txt "+sandbox.SkillsMount+"/SKILL.md; echo; "+
		"for d in "+sandbox.UploadsMount+" "+sandbox.SkillsMount+"; do (touch $d/new; echo x >> $d/in.txt; rm -f $d/SKILL.md) 2>/dev/null; ls $d; done; "+
		"echo out > "+sandbox.OutputsMount+"/o.txt && echo wrote"))
	if want := "uploadedskill\nin.txt\nSKILL.md\nwrote"; got != want {
		t.Errorf("in the sandbox: %q, want %q", got, want)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "outputs", "o.txt")); err != nil || string(b) != "out\n" {
		t.Errorf("the output on the host: %q, %v", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "uploads", "in.txt")); string(b) != "uploaded" {
		t.Errorf("the upload was changed: %q", b)
	}
}

func testTools(t *testing.T, newProvider func(testing.TB) sandbox.Provider) {
	p := newPool(t, newProvider, 0)
	const s = "tools"
	if got := mustRun(t, p, bash(s, "echo hello; echo oops >&2")); got != "hello\noops" {
		t.Errorf("bash: got %q", got)
	}
	if got := mustFail(t, p, bash(s, "echo partial; (exit 3)")); !strings.Contains(got, "partial") || !strings.Contains(got, "exit code: 3") {
		t.Errorf("bash exit 3: got %q", got)
	}
	// write, read, view_range.
	if got := mustRun(t, p, call(s, "write", map[string]any{"file_path": "dir/a.txt", "content": "one\ntwo\nthree\nfour\n"})); !strings.Contains(got, "wrote 19 bytes") {
		t.Errorf("write: got %q", got)
	}
	if got := mustRun(t, p, call(s, "read", map[string]any{"file_path": "dir/a.txt"})); got != "one\ntwo\nthree\nfour\n" {
		t.Errorf("read: got %q", got)
	}
	if got := mustRun(t, p, call(s, "read", map[string]any{"file_path": "dir/a.txt", "view_range": []int{2, 3}})); got != "two\nthree" {
		t.Errorf("read view_range: got %q", got)
	}
	if got := mustRun(t, p, bash(s, "cat dir/a.txt | wc -l")); strings.TrimSpace(got) != "4" {
		t.Errorf("bash sees written file: got %q", got)
	}
	if got := mustFail(t, p, call(s, "read", map[string]any{"file_path": "missing.txt"})); !strings.Contains(got, "no such file") {
		t.Errorf("read missing: got %q", got)
	}
	// edit: unique match, ambiguous match, replace_all, not found.
	mustRun(t, p, call(s, "write", map[string]any{"file_path": "e.txt", "content": "a b a c"}))
	if got := mustFail(t, p, call(s, "edit", map[string]any{"file_path": "e.txt", "old_string": "a", "new_string": "x"})); !strings.Contains(got, "appears 2 times") {
		t.Errorf("edit ambiguous: got %q", got)
	}
	mustRun(t, p, call(s, "edit", map[string]any{"file_path": "e.txt", "old_string": "b", "new_string": "B"}))
	mustRun(t, p, call(s, "edit", map[string]any{"file_path": "e.txt", "old_string": "a", "new_string": "x", "replace_all": true}))
	if got := mustRun(t, p, call(s, "read", map[string]any{"file_path": "e.txt"})); got != "x B x c" {
		t.Errorf("after edits: got %q", got)
	}
	if got := mustFail(t, p, call(s, "edit", map[string]any{"file_path": "e.txt", "old_string": "zzz", "new_string": "y"})); !strings.Contains(got, "not found") {
		t.Errorf("edit not found: got %q", got)
	}
	// glob and grep.
	mustRun(t, p, call(s, "write", map[string]any{"file_path": "src/x/main.go", "content": "package main\nfunc main() {}\n"}))
	mustRun(t, p, call(s, "write", map[string]any{"file_path": "src/y.go", "content": "package y\n"}))
	got := mustRun(t, p, call(s, "glob", map[string]any{"pattern": "**/*.go"}))
	if !strings.Contains(got, "main.go") || !strings.Contains(got, "y.go") || strings.Contains(got, "a.txt") {
		t.Errorf("glob: got %q", got)
	}
	if got := mustRun(t, p, call(s, "glob", map[string]any{"pattern": "*.nothing"})); got != "no matches" {
		t.Errorf("glob no match: got %q", got)
	}
	if got := mustFail(t, p, call(s, "glob", map[string]any{"pattern": "../*"})); !strings.Contains(got, "..") {
		t.Errorf("glob ..: got %q", got)
	}
	got = mustRun(t, p, call(s, "grep", map[string]any{"pattern": "func ma.n", "path": "src"}))
	if !strings.Contains(got, "main.go:2:func main() {}") {
		t.Errorf("grep: got %q", got)
	}
	if got := mustFail(t, p, call(s, "grep", map[string]any{"pattern": "("})); !strings.Contains(got, "invalid regex") {
		t.Errorf("grep bad regex: got %q", got)
	}
	// An image comes back as a base64 image block.
	png := []byte("\x89PNG\r\n\x1a\nnot-really-a-png")
	mustRun(t, p, bash(s, "printf '\\211PNG\\r\\n\\032\\nnot-really-a-png' > pic.png"))
	res, err := p.Execute(context.Background(), call(s, "read", map[string]any{"file_path": "pic.png"}))
	if err != nil || res.IsError || len(res.Content) != 1 || res.Content[0].Type != apitype.ContentImage {
		t.Fatalf("read image: %v %+v", err, res)
	}
	var src apitype.ImageSource
	if err := json.Unmarshal(res.Content[0].Source, &src); err != nil {
		t.Fatal(err)
	}
	if src.Type != apitype.SourceBase64 || src.MediaType != "image/png" || src.Data != base64.StdEncoding.EncodeToString(png) {
		t.Errorf("image source: %+v", src)
	}
}

func testInvalidInput(t *testing.T, newProvider func(testing.TB) sandbox.Provider) {
	p := newPool(t, newProvider, 0)
	const s = "invalid"
	for _, tc := range []struct {
		tool, input, want string
	}{
		{"bash", `{}`, "command is required"},
		{"bash", `{"command": 42}`, `"command"`},
		{"bash", `{"command": "true", "timeout_ms": -1}`, "timeout_ms"},
		{"bash", `[]`, "JSON object"},
		{"read", `{}`, "file_path is required"},
		{"read", `{"file_path": "x", "view_range": [1]}`, "view_range"},
		{"write", `{"file_path": "x"}`, "content is required"},
		{"edit", `{"file_path": "x", "new_string": "y"}`, "old_string is required"},
		{"glob", `{"pattern": 3}`, `"pattern"`},
		{"grep", `{}`, "pattern is required"},
		{"teleport", `{}`, "unknown tool"},
	} {
		c := &sandbox.Call{Recipe: sandbox.Recipe{SessionID: s}, Name: tc.tool, Input: json.RawMessage(tc.input)}
		if got := mustFail(t, p, c); !strings.Contains(got, tc.want) {
			t.Errorf("%s %s: got %q, want it to mention %q", tc.tool, tc.input, got, tc.want)
		}
	}
	// The provider declares the tools its sandboxes run: each one is dispatched, none refused as unknown.
	if len(p.Tools()) == 0 {
		t.Error("the provider declares no tools")
	}
	for _, tl := range p.Tools() {
		c := &sandbox.Call{Recipe: sandbox.Recipe{SessionID: s}, Name: tl.Name, Input: json.RawMessage(`{}`)}
		res, err := p.Execute(context.Background(), c)
		if err != nil || strings.Contains(res.Text(), "unknown tool") {
			t.Errorf("declared tool %s: %v %q", tl.Name, err, res.Text())
		}
	}
}

func testBashState(t *testing.T, newProvider func(testing.TB) sandbox.Provider) {
	p := newPool(t, newProvider, 0)
	const s = "state"
	mustRun(t, p, bash(s, "mkdir -p sub && cd sub && export CORRAL_X=42 && Y=local"))
	if got := mustRun(t, p, bash(s, `basename "$PWD"; echo "$CORRAL_X$Y"`)); got != "sub\n42local" {
		t.Errorf("state not kept: got %q", got)
	}
	// A syntax error is an error result, and the shell keeps going.
	if got := mustFail(t, p, bash(s, `echo "unterminated`)); !strings.Contains(got, "exit code") {
		t.Errorf("syntax error: got %q", got)
	}
	if got := mustRun(t, p, bash(s, `echo "$CORRAL_X"`)); got != "42" {
		t.Errorf("after syntax error: got %q", got)
	}
	if got := mustRun(t, p, call(s, "bash", map[string]any{"restart": true})); !strings.Contains(got, "restarted") {
		t.Errorf("restart: got %q", got)
	}
	if got := mustRun(t, p, call(s, "bash", map[string]any{"command": `echo "[$CORRAL_X]"; basename "$PWD"`})); got != "[]\nworkspace" && !strings.HasPrefix(got, "[]\n") {
		t.Errorf("after restart: got %q", got)
	}
	// stdin is not the protocol: a command reading it gets EOF at once.
	if got := mustRun(t, p, bash(s, "cat; echo done")); got != "done" {
		t.Errorf("stdin: got %q", got)
	}
	// exit ends the shell; the next call gets a new one.
	if got := mustFail(t, p, bash(s, "exit 4")); !strings.Contains(got, "exit code: 4") || !strings.Contains(got, "shell exited") {
		t.Errorf("exit: got %q", got)
	}
	if got := mustRun(t, p, bash(s, "echo back")); got != "back" {
		t.Errorf("after exit: got %q", got)
	}
}

// timeoutRuns numbers the runs of testTimeout in this process.
var timeoutRuns atomic.Int64

func testTimeout(t *testing.T, newProvider func(testing.TB) sandbox.Provider) {
	p := newPool(t, newProvider, 0)
	const s = "timeout"
	mustRun(t, p, bash(s, "true"))
	// The sleeps' argument is this run's own: a backend that shares the host's processes (process) sees every
	// other sandbox of the host, and the other backends' packages run this test at the same time (CI counted two
	// sleeps of another package's run as left by this one). A test binary's pid is unique among those running.
	sleep := fmt.Sprintf("sleep 31.%07d%03d", os.Getpid(), timeoutRuns.Add(1)%1000)
	start := time.Now()
	// 2 s for "echo before" to run even on a loaded machine; the sleeps are not waited for (31 s).
	got := mustFail(t, p, call(s, "bash", map[string]any{"command": "echo before; " + sleep + " & " + sleep + "; echo never", "timeout_ms": 2000}))
	if d := time.Since(start); d > 25*time.Second {
		t.Errorf("timeout took %s: the command's sleep was waited for", d)
	}
	if !strings.Contains(got, "before") || !strings.Contains(got, "timed out") || strings.Contains(got, "never") {
		t.Errorf("timeout result: %q", got)
	}
	// The command's processes are gone, and the shell works again.
	if got := mustRun(t, p, bash(s, "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done 2>/dev/null | grep -cxF '"+sleep+" ' || true")); strings.TrimSpace(got) != "0" {
		t.Errorf("sleep processes left after timeout: %q", got)
	}
	// The recipe's CommandTimeout is the default.
	c := bash(s+"2", "sleep 30")
	c.Recipe.Limits.CommandTimeout = 200 * time.Millisecond
	res, err := p.Execute(context.Background(), c)
	if got := res.Text(); err != nil || !res.IsError || res.Failure != sandbox.FailureTimeout || !strings.Contains(got, "timed out") {
		t.Errorf("recipe timeout: err %v, error result %v, failure %q: %q; want failure %q", err, res.IsError, res.Failure, got, sandbox.FailureTimeout)
	}
}

func testCancel(t *testing.T, newProvider func(testing.TB) sandbox.Provider) {
	p := newPool(t, newProvider, 0)
	const s = "cancel"
	mustRun(t, p, bash(s, "true")) // provisioned: the deadline below is the command's, not the runtime's
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	// The kill has until the sleep ends to land: 1.7 s, since a loaded machine (gVisor under CI) is slow at it.
	if _, err := p.Execute(ctx, bash(s, "sleep 2; touch late")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled call: err = %v", err)
	}
	time.Sleep(2500 * time.Millisecond)
	// The command was killed with its shell; the sandbox lives on.
	if got := mustRun(t, p, bash(s, "ls late 2>/dev/null || echo absent")); got != "absent" {
		t.Errorf("the cancelled command ran on: %q", got)
	}
}

func testOutputCap(t *testing.T, newProvider func(testing.TB) sandbox.Provider) {
	p := newPool(t, newProvider, 0)
	c := bash("cap", "for i in $(seq 1 2000); do echo line-$i; done")
	c.Recipe.Limits.OutputBytes = 1000
	got := mustRun(t, p, c)
	if len(got) > 1200 || !strings.Contains(got, "truncated") || !strings.Contains(got, "line-2000") {
		t.Errorf("capped output (%d bytes): %q", len(got), got)
	}
	c = call("cap", "read", map[string]any{"file_path": "big.txt"})
	c.Recipe.Limits.OutputBytes = 1000
	mustRun(t, p, bash("cap", "seq 1 5000 > big.txt"))
	if got := mustRun(t, p, c); len(got) > 1200 || !strings.Contains(got, "truncated") {
		t.Errorf("capped read (%d bytes): %q", len(got), got)
	}
}

func testWorkspaceSurvives(t *testing.T, newProvider func(testing.TB) sandbox.Provider, opts Options) {
	p := newPool(t, newProvider, 0)
	const s = "survive"
	mustRun(t, p, call(s, "write", map[string]any{"file_path": "keep.txt", "content": "kept"}))
	tmpFile := "/tmp/gone.txt" // private to the sandbox
	if opts.NotIsolated {
		tmpFile = "gone.d/gone.txt"
	}
	mustRun(t, p, bash(s, "mkdir -p gone.d && echo tmp > "+tmpFile))
	if opts.NotIsolated {
		mustRun(t, p, bash(s, "rm -r gone.d"))
	}
	if err := p.Close(s); err != nil {
		t.Fatal(err)
	}
	var provisions int
	c := bash(s, "cat keep.txt; cat "+tmpFile+" 2>/dev/null || echo ' no-tmp'")
	c.OnProvision = func(r sandbox.ProvisionReport) {
		if r.Done {
			provisions++
			if r.Err != nil || r.Duration <= 0 {
				t.Errorf("provision report: %+v", r)
			}
		}
	}
	if got := mustRun(t, p, c); got != "kept no-tmp" && got != "kept\n no-tmp" {
		t.Errorf("after re-provision: %q", got)
	}
	if provisions != 1 {
		t.Errorf("provisions = %d, want 1", provisions)
	}
}

func testKilled(t *testing.T, newProvider func(testing.TB) sandbox.Provider, opts Options) {
	p := newPool(t, newProvider, 0)
	const s = "killed"
	mustRun(t, p, call(s, "write", map[string]any{"file_path": "keep.txt", "content": "kept"}))
	marker := fmt.Sprintf("corral-kill-me-%d", time.Now().UnixNano())
	// A process whose name the test can find on the host, and a call in flight.
	mustRun(t, p, bash(s, fmt.Sprintf("(exec -a %s sleep 1000) >/dev/null 2>&1 &", marker)))
	inflight := make(chan error, 1)
	go func() {
		_, err := p.Execute(context.Background(), bash(s, "sleep 60"))
		inflight <- err
	}()
	time.Sleep(200 * time.Millisecond)
	killSandboxOf(t, marker)
	select {
	case err := <-inflight:
		if !errors.Is(err, sandbox.ErrSandboxDead) {
			t.Fatalf("call in flight: err = %v, want ErrSandboxDead", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("call in flight did not end after the sandbox was killed")
	}
	var provisions int
	c := call(s, "read", map[string]any{"file_path": "keep.txt"})
	if opts.EphemeralWorkspace {
		c = bash(s, "echo fresh") // the workspace went with the sandbox
	}
	c.OnProvision = func(r sandbox.ProvisionReport) {
		if r.Done {
			provisions++
		}
	}
	if got := mustRun(t, p, c); got != "kept" && (!opts.EphemeralWorkspace || got != "fresh") {
		t.Errorf("after re-provision: %q", got)
	}
	if provisions != 1 {
		t.Errorf("provisions = %d, want 1", provisions)
	}
}

// killSandboxOf SIGKILLs, from the host, the process named marker and its ancestors up to (not including) the
// test process: the agent, the sandbox's init and its launcher.
func killSandboxOf(t *testing.T, marker string) {
	t.Helper()
	pid := findProcess(t, marker)
	self := os.Getpid()
	var chain []int
	for p := pid; p > 1 && p != self; p = parentOf(p) {
		chain = append(chain, p)
	}
	if len(chain) < 2 {
		t.Fatalf("process chain of %s: %v", marker, chain)
	}
	for _, p := range chain {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}

func findProcess(t *testing.T, marker string) int {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			var pid int
			if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
				continue
			}
			b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if strings.HasPrefix(string(b), marker+"\x00") {
				return pid
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no host process named %s", marker)
	return 0
}

func parentOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	var state string
	var ppid int
	if i < 0 {
		return 0
	}
	if _, err := fmt.Sscan(s[i+1:], &state, &ppid); err != nil {
		return 0
	}
	return ppid
}

// testThreads: programs that start threads work (glibc creates them with clone3, which the seccomp profile
// must not turn into a failure; git's sideband and Python threads need it).
func testThreads(t *testing.T, newProvider func(testing.TB) sandbox.Provider) {
	p := newPool(t, newProvider, 0)
	got := mustRun(t, p, bash("threads", `python3 -c 'import threading; t = threading.Thread(target=print, args=("thread ran",)); t.start(); t.join()'`))
	if !strings.Contains(got, "thread ran") {
		t.Errorf("a thread could not run: %q", got)
	}
}

func testCloseIdempotent(t *testing.T, newProvider func(testing.TB) sandbox.Provider) {
	prov := newProvider(t)
	sb := provision(t, prov, filepath.Join(WorkspaceRoot(t), "close"), sandbox.Recipe{})
	if _, err := exec1(t, sb, "bash", map[string]any{"command": "true"}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := sb.Close(); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
	if _, err := exec1(t, sb, "bash", map[string]any{"command": "true"}); !errors.Is(err, sandbox.ErrSandboxDead) {
		t.Errorf("Execute after Close: err = %v, want ErrSandboxDead", err)
	}
	p := newPool(t, newProvider, 0)
	mustRun(t, p, bash("c", "true"))
	for range 2 {
		if err := p.Close("c"); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close("never-used"); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Execute(context.Background(), bash("c", "true")); !errors.Is(err, sandbox.ErrPoolStopped) {
		t.Errorf("Execute after Stop: %v", err)
	}
}

func testIdleReap(t *testing.T, newProvider func(testing.TB) sandbox.Provider, opts Options) {
	p := newPool(t, newProvider, 100*time.Millisecond)
	mustRun(t, p, call("idle", "write", map[string]any{"file_path": "f", "content": "x"}))
	want := "x"
	if opts.EphemeralWorkspace {
		want = "" // the workspace went with the reaped sandbox
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.Sessions() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("idle sandbox not reaped")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := mustRun(t, p, bash("idle", "cat f 2>/dev/null; true")); got != want {
		t.Errorf("after reap: %q, want %q", got, want)
	}
}

func testIsolation(t *testing.T, newProvider func(testing.TB) sandbox.Provider, opts Options) {
	const canary = "CORRAL_TEST_HOST_ENV_CANARY"
	t.Setenv(canary, "host-env-value")
	prov := newProvider(t)
	// On an image (OnImage), the image's own /var, /home or /etc/shadow are not the host's.
	rootfs := rootFSOf(prov)
	p, _ := newPoolWith(t, prov, 0)
	const s = "iso"
	t.Run("Namespaces", func(t *testing.T) {
		for _, ns := range []string{"pid", "mnt", "net", "ipc", "uts"} {
			host, err := os.Readlink("/proc/self/ns/" + ns)
			if err != nil {
				t.Fatal(err)
			}
			got := strings.TrimSpace(mustRun(t, p, bash(s, "readlink /proc/self/ns/"+ns)))
			if got == "" || got == host {
				t.Errorf("%s namespace: sandbox %q, host %q", ns, got, host)
			}
		}
	})
	t.Run("ReadOnlyUsr", func(t *testing.T) {
		if got := mustFail(t, p, bash(s, "touch /usr/corral-probe && echo WROTE")); strings.Contains(got, "WROTE") {
			t.Errorf("/usr writable: %q", got)
		}
		if got := mustFail(t, p, call(s, "write", map[string]any{"file_path": "/usr/corral-probe", "content": "x"})); got == "" {
			t.Error("write to /usr gave no message")
		}
	})
	t.Run("PrivateTmp", func(t *testing.T) {
		name := fmt.Sprintf("corral-private-tmp-%d", time.Now().UnixNano())
		mustRun(t, p, bash(s, "echo x > /tmp/"+name))
		if _, err := os.Stat(filepath.Join("/tmp", name)); err == nil {
			t.Error("sandbox /tmp file visible on the host")
		}
		if got := mustRun(t, p, bash(s+"-other", "ls /tmp/"+name+" 2>/dev/null || echo absent")); got != "absent" {
			t.Errorf("another sandbox sees the /tmp file: %q", got)
		}
	})
	t.Run("NoHostEnv", func(t *testing.T) {
		got := mustRun(t, p, bash(s, "env; cat /proc/1/environ | tr '\\0' '\\n'; cat /proc/1/cmdline | tr '\\0' ' '"))
		if strings.Contains(got, canary) || strings.Contains(got, "host-env-value") {
			t.Errorf("host environment visible in the sandbox: %q", got)
		}
		wd, _ := os.Getwd()
		if strings.Contains(got, wd) {
			t.Errorf("host path %s visible in the sandbox: %q", wd, got)
		}
	})
	t.Run("NoHostFiles", func(t *testing.T) {
		wd, _ := os.Getwd()
		paths := []string{"/root", "/home", "/var", "/sys/fs/cgroup/pids", "/run", "/etc/shadow", "/etc/sudoers", wd, t.TempDir()}
		if opts.Remote {
			// A pod sees its own cgroups, read-only, as every container on a cluster does.
			paths = slices.DeleteFunc(paths, func(p string) bool { return strings.HasPrefix(p, "/sys/fs/cgroup") })
		}
		for _, path := range paths {
			if _, err := os.Lstat(filepath.Join(rootfs, path)); rootfs != "" && err == nil {
				continue
			}
			if got := mustFail(t, p, bash(s, "ls -d "+path+" && echo VISIBLE")); strings.Contains(got, "VISIBLE") {
				t.Errorf("%s visible: %q", path, got)
			}
		}
		if got := mustRun(t, p, bash(s, "pwd; id -u; ls /")); !strings.HasPrefix(got, "/workspace\n") || strings.Contains(got, "\n0\n") {
			t.Errorf("sandbox root: %q", got)
		}
	})
}
