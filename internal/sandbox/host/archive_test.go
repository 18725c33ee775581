package host

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/agent"
)

// agentClient is a Client of a real agent (agent.Server) over pipes.
func agentClient(t *testing.T) *Client {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	srv := agent.NewServer(agent.Config{Workspace: t.TempDir()})
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(context.Background(), inR, outW)
		outW.Close()
	}()
	c := NewClient(inW, outR)
	t.Cleanup(func() {
		inW.Close()
		<-served
		<-c.Done()
		srv.Close()
	})
	return c
}

func writeFile(t *testing.T, name, content string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// tree reads a directory as path -> content ("-> target" for a link, "/" for a directory).
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			out[rel] = "-> " + target
			return err
		case d.IsDir():
			out[rel] = "/"
		default:
			b, err := os.ReadFile(p)
			out[rel] = string(b)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestArchivePutAndGet: a tree of several chunks goes into the sandbox's directory, leaving a kept path that is
// already there as it was and replacing the rest, with its links, modes and times; a read-only copy has no
// write permission; and a copy back replaces the host's directory whole, deletions included.
func TestArchivePutAndGet(t *testing.T) {
	c := agentClient(t)
	ctx := context.Background()
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "in", "sandbox")
	big := make([]byte, 2*agent.ArchiveChunk+12345) // three chunks
	_, _ = rand.Read(big)
	writeFile(t, filepath.Join(src, "big.bin"), string(big), 0o644)
	writeFile(t, filepath.Join(src, "repo", "README"), "placed", 0o644)
	writeFile(t, filepath.Join(src, "data", "run.sh"), "#!/bin/sh\n", 0o755)
	if err := os.MkdirAll(filepath.Join(src, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../big.bin", filepath.Join(src, "data", "link")); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(src, "data", "run.sh"), old, old); err != nil {
		t.Fatal(err)
	}
	// What the sandbox already has: its own edit of a resource (kept), and a stale file the copy replaces.
	writeFile(t, filepath.Join(dst, "repo", "README"), "edited by the agent", 0o644)
	writeFile(t, filepath.Join(dst, "data", "run.sh"), "stale", 0o644)

	if err := c.PutDir(ctx, src, agent.ArchiveInput{Dir: dst, Keep: []string{"repo", "gone"}}); err != nil {
		t.Fatal(err)
	}
	got := tree(t, dst)
	want := tree(t, src)
	want["repo/README"] = "edited by the agent"
	if len(got) != len(want) {
		t.Errorf("the sandbox has %d entries, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %.40q, want %.40q", k, got[k], v)
		}
	}
	fi, err := os.Stat(filepath.Join(dst, "data", "run.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o755 || !fi.ModTime().Equal(old) {
		t.Errorf("run.sh: mode %v, time %v; want 0755, %v", fi.Mode(), fi.ModTime(), old)
	}

	ro := filepath.Join(t.TempDir(), "ro")
	if err := c.PutDir(ctx, src, agent.ArchiveInput{Dir: ro, ReadOnly: true}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"big.bin", "data/run.sh", "data", "empty"} {
		fi, err := os.Stat(filepath.Join(ro, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o222 != 0 {
			t.Errorf("read-only copy: %s has mode %v", name, fi.Mode())
		}
	}
	t.Cleanup(func() {
		_ = filepath.WalkDir(ro, func(p string, _ fs.DirEntry, _ error) error { return os.Chmod(p, 0o755) })
	})

	// Back: the host's copy loses what the sandbox deleted and gets what it made.
	back := filepath.Join(t.TempDir(), "back")
	writeFile(t, filepath.Join(back, "deleted-in-sandbox"), "x", 0o644)
	if err := os.Remove(filepath.Join(dst, "big.bin")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dst, "out", "report.txt"), "made in the sandbox", 0o644)
	if err := c.GetDir(ctx, agent.ArchiveInput{Dir: dst}, back, agent.ExtractOptions{}); err != nil {
		t.Fatal(err)
	}
	got, want = tree(t, back), tree(t, dst)
	if len(got) != len(want) {
		t.Errorf("the copy back has %d entries, want %d: %v", len(got), len(want), got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("copy back: %s: %.40q, want %.40q", k, got[k], v)
		}
	}
	if siblings, _ := os.ReadDir(filepath.Dir(back)); len(siblings) != 1 {
		t.Errorf("the copy left %d entries beside it", len(siblings)-1)
	}
}

// TestArchiveGetBounded: a copy back past its bounds fails and leaves the host's directory as it was; the agent
// is not left stuck in it: the next transfer works.
func TestArchiveGetBounded(t *testing.T) {
	c := agentClient(t)
	ctx := context.Background()
	dir := t.TempDir()
	big := make([]byte, 3*agent.ArchiveChunk)
	writeFile(t, filepath.Join(dir, "a"), string(big), 0o644)
	for i := range 20 {
		writeFile(t, filepath.Join(dir, "many", string(rune('a'+i))), "x", 0o644)
	}
	back := filepath.Join(t.TempDir(), "back")
	writeFile(t, filepath.Join(back, "before"), "as it was", 0o644)
	for _, opt := range []agent.ExtractOptions{{MaxBytes: agent.ArchiveChunk}, {MaxEntries: 10}} {
		err := c.GetDir(ctx, agent.ArchiveInput{Dir: dir}, back, opt)
		if !errors.Is(err, agent.ErrArchiveTooLarge) {
			t.Fatalf("%+v: %v, want ErrArchiveTooLarge", opt, err)
		}
		if got := tree(t, back); len(got) != 1 || got["before"] != "as it was" {
			t.Fatalf("%+v: the host's directory changed: %v", opt, got)
		}
	}
	if err := c.GetDir(ctx, agent.ArchiveInput{Dir: dir}, back, agent.ExtractOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := tree(t, back); len(got) != 22 || got["a"] != string(big) {
		t.Fatalf("the copy after the refused ones has %d entries", len(got))
	}
}

// TestExtractTarConfined: a stream made to write outside its directory (a path out of it, a link it then
// writes through) writes nothing there.
func TestExtractTarConfined(t *testing.T) {
	outside := t.TempDir()
	for name, entries := range map[string][]tar.Header{
		"dot-dot":  {{Name: "../escaped", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}},
		"absolute": {{Name: filepath.Join(outside, "escaped"), Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}},
		"via link": {
			{Name: "l", Typeflag: tar.TypeSymlink, Linkname: outside},
			{Name: "l/escaped", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644},
		},
	} {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, h := range entries {
			if err := tw.WriteHeader(&h); err != nil {
				t.Fatal(err)
			}
			if h.Size > 0 {
				_, _ = tw.Write([]byte("x"))
			}
		}
		_ = tw.Close()
		err := agent.ExtractTar(context.Background(), t.TempDir(), &b, agent.ExtractOptions{})
		if err == nil {
			t.Errorf("%s: extracted", name)
		}
		if _, serr := os.Stat(filepath.Join(outside, "escaped")); serr == nil {
			t.Fatalf("%s: wrote outside its directory (%v)", name, err)
		}
		if _, serr := os.Stat(filepath.Join(filepath.Dir(outside), "escaped")); serr == nil {
			t.Fatalf("%s: wrote outside its directory (%v)", name, err)
		}
	}
}

// TestClientBoundsData: an agent that answers a transfer with more than a chunk of data is treated as dead.
func TestClientBoundsData(t *testing.T) {
	f := newFakeAgent(t)
	done := make(chan error, 1)
	go func() {
		done <- f.c.GetDir(context.Background(), agent.ArchiveInput{Dir: "/x"}, filepath.Join(t.TempDir(), "d"), agent.ExtractOptions{})
	}()
	var req agent.Request
	if err := f.req.Decode(&req); err != nil {
		t.Fatal(err)
	}
	if req.Tool != agent.ArchiveGetTool {
		t.Fatalf("tool %q", req.Tool)
	}
	resp, _ := json.Marshal(agent.Response{ID: req.ID, Data: make([]byte, agent.ArchiveChunk+1), Content: []apitype.ContentBlock{}})
	go func() { _, _ = f.out.Write(append(resp, '\n')) }()
	if err := <-done; !errors.Is(err, sandbox.ErrSandboxDead) || !strings.Contains(err.Error(), "chunk") {
		t.Fatalf("%v, want ErrSandboxDead over the chunk", err)
	}
}

// TestArchiveLinksNotFollowed: a link the sandbox makes to a file of the machine (its own, or the host's by the
// same path) is copied as a link, never as what it names, both ways: the host never reads through it.
func TestArchiveLinksNotFollowed(t *testing.T) {
	c := agentClient(t)
	ctx := context.Background()
	secret := filepath.Join(t.TempDir(), "host-secret")
	writeFile(t, secret, "host only", 0o600)
	sandboxDir := t.TempDir()
	if err := os.Symlink(secret, filepath.Join(sandboxDir, "leak")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(secret), filepath.Join(sandboxDir, "leakdir")); err != nil {
		t.Fatal(err)
	}
	staging := filepath.Join(t.TempDir(), "staging")
	if err := c.GetDir(ctx, agent.ArchiveInput{Dir: sandboxDir}, staging, agent.ExtractOptions{}); err != nil {
		t.Fatal(err)
	}
	next := filepath.Join(t.TempDir(), "next")
	if err := c.PutDir(ctx, staging, agent.ArchiveInput{Dir: next}); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{staging, next} {
		got := tree(t, dir)
		want := map[string]string{"leak": "-> " + secret, "leakdir": "-> " + filepath.Dir(secret)}
		if len(got) != len(want) || got["leak"] != want["leak"] || got["leakdir"] != want["leakdir"] {
			t.Errorf("%s: %v, want the links only: %v", dir, got, want)
		}
	}
}

// TestArchiveTransferNotRestarted: a transfer another one aborted fails at its next request, rather than start
// again from its beginning (a copy back would then be cut short, and the files it missed taken for deleted);
// transfers of one Client run one at a time, so that concurrent copies back are all whole.
func TestArchiveTransferNotRestarted(t *testing.T) {
	c := agentClient(t)
	ctx := context.Background()
	dir := t.TempDir()
	for i := range 8 {
		writeFile(t, filepath.Join(dir, fmt.Sprintf("f%d", i)), strings.Repeat("x", agent.ArchiveChunk/3), 0o644)
	}
	first := agent.ArchiveInput{Transfer: "first", Dir: dir}
	if err := c.chunk(ctx, agent.ArchiveGetTool, first, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.GetDir(ctx, agent.ArchiveInput{Dir: dir}, filepath.Join(t.TempDir(), "other"), agent.ExtractOptions{}); err != nil {
		t.Fatal(err)
	}
	first.Seq = 1
	if err := c.chunk(ctx, agent.ArchiveGetTool, first, nil, nil); err == nil || !strings.Contains(err.Error(), "not under way") {
		t.Fatalf("the aborted transfer's next request: %v, want a refusal", err)
	}
	want := tree(t, dir)
	done := make(chan error, 6)
	for i := range 6 {
		go func() {
			back := filepath.Join(t.TempDir(), fmt.Sprint("back", i))
			err := c.GetDir(ctx, agent.ArchiveInput{Dir: dir}, back, agent.ExtractOptions{})
			if got := tree(t, back); err == nil && len(got) != len(want) {
				err = fmt.Errorf("a concurrent copy back has %d entries, want %d", len(got), len(want))
			}
			done <- err
		}()
	}
	for range 6 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// TestExtractTarBounded: a name too long or too deep for any path the host keeps, or a stream that carries more
// than its bounds allow in entries the extraction skips, fails the extraction.
func TestExtractTarBounded(t *testing.T) {
	for name, h := range map[string]tar.Header{
		"deep":         {Name: strings.Repeat("d/", 200) + "f", Typeflag: tar.TypeReg, Mode: 0o644},
		"long":         {Name: strings.Repeat("n", 5000), Typeflag: tar.TypeReg, Mode: 0o644},
		"skipped data": {Name: "x", Typeflag: 'Z', Size: 8 << 20, Mode: 0o644},
	} {
		pr, pw := io.Pipe()
		go func() {
			tw := tar.NewWriter(pw)
			if err := tw.WriteHeader(&h); err != nil {
				pw.CloseWithError(err)
				return
			}
			_, _ = io.Copy(tw, io.LimitReader(zeros{}, h.Size))
			pw.CloseWithError(tw.Close())
		}()
		err := agent.ExtractTar(context.Background(), t.TempDir(), pr, agent.ExtractOptions{MaxBytes: 1 << 20, MaxEntries: 10})
		pr.Close()
		if !errors.Is(err, agent.ErrArchiveTooLarge) {
			t.Errorf("%s: %v, want ErrArchiveTooLarge", name, err)
		}
	}
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) { clear(b); return len(b), nil }
