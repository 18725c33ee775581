package sandboxtest

import (
	"cmp"
	"crypto/subtle"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// GitServer is a private git server for tests: `git http-backend` (smart HTTP, push enabled) over real TLS on
// 127.0.0.1, answering only requests that carry its token as GitHub takes it (Basic base64 of
// "x-access-token:"+token). A missing or wrong token gets 401; a repository under /forbidden/ gets 403 with the
// token; a repository that does not exist gets 404.
type GitServer struct {
	// URL is the server's base, https://127.0.0.1:<port>; HostPort its host:port (to trust as an internal
	// destination).
	URL, HostPort string
	// CAPEM is the certificate that verifies the server (PEM); RootCAs a pool of just that.
	CAPEM   []byte
	RootCAs *x509.CertPool
	root    string
	home    string
	srv     *httptest.Server

	mu    sync.Mutex
	token string
	// Seen records the Authorization headers the server received.
	seen []string
}

// NewGitServer starts a GitServer requiring token, stopped at the end of the test. It skips the test when git is
// missing.
func NewGitServer(t testing.TB, token string) *GitServer {
	t.Helper()
	gitPath, err := exec.LookPath("git")
	if err != nil {
		t.Skipf("git unavailable: %v", err)
	}
	s := &GitServer{root: t.TempDir(), home: t.TempDir(), token: token}
	backend := &cgi.Handler{Path: gitPath, Args: []string{"http-backend"}, Dir: s.root,
		Env: []string{"GIT_PROJECT_ROOT=" + s.root, "GIT_HTTP_EXPORT_ALL=1", "HOME=" + s.home, "GIT_CONFIG_NOSYSTEM=1"}}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		s.mu.Lock()
		s.seen = append(s.seen, auth)
		want := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+s.token))
		s.mu.Unlock()
		if subtle.ConstantTimeCompare([]byte(auth), []byte(want)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, "bad credentials", http.StatusUnauthorized)
			return
		}
		if strings.HasPrefix(r.URL.Path, "/forbidden/") {
			http.Error(w, "this token may not read the repository", http.StatusForbidden)
			return
		}
		repo, _, _ := strings.Cut(r.URL.Path, ".git/")
		if fi, err := os.Stat(filepath.Join(s.root, filepath.FromSlash(repo)+".git")); err != nil || !fi.IsDir() {
			http.Error(w, "repository not found", http.StatusNotFound)
			return
		}
		backend.ServeHTTP(w, r)
	}))
	s.srv.StartTLS()
	t.Cleanup(s.srv.Close)
	s.URL = s.srv.URL
	s.HostPort = strings.TrimPrefix(s.srv.URL, "https://")
	cert := s.srv.Certificate()
	s.CAPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
	s.RootCAs = x509.NewCertPool()
	s.RootCAs.AddCert(cert)
	return s
}

// SetToken changes the token the server accepts (the old one is then revoked).
func (s *GitServer) SetToken(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.token = token
}

// Seen returns the Authorization headers the server received so far.
func (s *GitServer) Seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

// NewRepo makes a bare repository at path (e.g. "o/proj", served as <URL>/o/proj.git) with one commit on main
// (README "v1\n") that accepts pushes, and returns its URL.
func (s *GitServer) NewRepo(t testing.TB, path string) string {
	t.Helper()
	src := NewGitRepo(t)
	dst := filepath.Join(s.root, filepath.FromSlash(path)+".git")
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	s.git(t, "", "clone", "--quiet", "--bare", src.Path, dst)
	s.git(t, dst, "config", "http.receivepack", "true")
	return s.URL + "/" + path + ".git"
}

// Head returns the commit ref points at in the repository at path, or "" if it does not exist.
func (s *GitServer) Head(t testing.TB, path, ref string) string {
	t.Helper()
	cmd := exec.Command("git", "rev-parse", "--verify", "--quiet", ref)
	cmd.Dir = filepath.Join(s.root, filepath.FromSlash(path)+".git")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + s.home, "GIT_CONFIG_NOSYSTEM=1"}
	out, _ := cmd.Output()
	return strings.TrimSpace(string(out))
}

// Log returns the subjects of ref's commits in the repository at path, newest first.
func (s *GitServer) Log(t testing.TB, path, ref string) string {
	t.Helper()
	return s.git(t, filepath.Join(s.root, filepath.FromSlash(path)+".git"), "log", "--format=%s", ref)
}

func (s *GitServer) git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = cmp.Or(dir, s.root)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + s.home, "GIT_CONFIG_NOSYSTEM=1"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// Commit adds an empty commit with subject msg on main of the repository at path, as another user's push
// would, and returns its id.
func (s *GitServer) Commit(t testing.TB, path, msg string) string {
	t.Helper()
	bare := filepath.Join(s.root, filepath.FromSlash(path)+".git")
	work := filepath.Join(t.TempDir(), "work")
	s.git(t, "", "clone", "--quiet", bare, work)
	s.git(t, work, "-c", "user.name=other", "-c", "user.email=other@example.com", "commit", "--quiet", "--allow-empty", "-m", msg)
	s.git(t, work, "push", "--quiet", "origin", "HEAD:main")
	return s.git(t, work, "rev-parse", "HEAD")
}
