package sandboxtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// GitRepo is a bare git repository made by NewGitRepo, to be cloned as a session resource through a local path
// (sandbox.ResourceConfig.AllowLocalURLs).
type GitRepo struct {
	// Path is the bare repository, a directory named proj.git.
	Path string
	// First and Second are the commits of the default branch, main: README is "v1\n" at First and "v2\n" at
	// Second (its head).
	First, Second string
	// Branch is a branch, "feature", made from First, that adds feature.txt ("feature\n").
	Branch string
}

// NewGitRepo makes a GitRepo in a new temporary directory. It skips the test when git is missing.
func NewGitRepo(t testing.TB) GitRepo {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skipf("git unavailable: %v", err)
	}
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = work
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "GIT_CONFIG_NOSYSTEM=1",
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(work, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	var r GitRepo
	git("init", "--quiet", "--initial-branch=main")
	write("README", "v1\n")
	git("add", "README")
	git("commit", "--quiet", "-m", "first")
	r.First = git("rev-parse", "HEAD")
	git("checkout", "--quiet", "-b", "feature")
	write("feature.txt", "feature\n")
	git("add", "feature.txt")
	git("commit", "--quiet", "-m", "feature")
	r.Branch = "feature"
	git("checkout", "--quiet", "main")
	write("README", "v2\n")
	git("commit", "--quiet", "-am", "second")
	r.Second = git("rev-parse", "HEAD")
	r.Path = filepath.Join(dir, "proj.git")
	git("clone", "--quiet", "--bare", work, r.Path)
	return r
}
