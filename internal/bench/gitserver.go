package bench

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// GitServer is the recipe workload's git server: `git http-backend` (smart HTTP, read-only) through
// net/http/cgi over TLS on 127.0.0.1, under a certificate of a CA generated for the run, serving one generated
// repository. The servers under test trust the CA as an operator's extra CA (corral serve --egress-ca-file) and
// its address as an internal destination (--egress-allow-internal).
type GitServer struct {
	// URL is the repository's clone URL (https://127.0.0.1:PORT/corral/bench-repo.git); HostPort the server's
	// address.
	URL, HostPort string
	// CAPEM is the CA certificate (PEM) that verifies the server.
	CAPEM []byte
	// Commits and PackBytes describe the repository: its commits on main and the size of its packed history.
	Commits   int
	PackBytes int64
	srv       *http.Server
	done      chan struct{}
}

// RepoName is the generated repository's name (its owner is repoOwner): a session's clone appears at
// /workspace/RepoName.
const (
	RepoName  = "bench-repo"
	repoOwner = "corral"
)

// repoFileBytes is the size of one file version of the generated repository; each commit rewrites one of
// repoFiles files with fresh random (incompressible) bytes, so the packed history grows by this much per commit
// while the checkout stays repoFiles × repoFileBytes.
const (
	repoFileBytes = 256 << 10
	repoFiles     = 16
)

// StartGitServer generates a repository of about size bytes of history under dir (which it creates) and serves
// it until Close.
func StartGitServer(ctx context.Context, dir string, size int64) (*GitServer, error) {
	gitPath, err := exec.LookPath("git")
	if err != nil {
		return nil, fmt.Errorf("the recipe's git server needs git: %w", err)
	}
	repos, home := filepath.Join(dir, "repos"), filepath.Join(dir, "home")
	for _, d := range []string{repos, home} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	bare := filepath.Join(repos, repoOwner, RepoName+".git")
	commits := max(1, int(size/repoFileBytes))
	if err := generateRepo(ctx, gitPath, home, bare, commits); err != nil {
		return nil, err
	}
	var pack int64
	_ = filepath.WalkDir(filepath.Join(bare, "objects"), func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				pack += fi.Size()
			}
		}
		return nil
	})
	caPEM, cert, err := selfSigned()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	backend := &cgi.Handler{Path: gitPath, Args: []string{"http-backend"}, Dir: repos,
		Env: []string{"GIT_PROJECT_ROOT=" + repos, "GIT_HTTP_EXPORT_ALL=1", "HOME=" + home, "GIT_CONFIG_NOSYSTEM=1"}}
	s := &GitServer{HostPort: ln.Addr().String(), CAPEM: caPEM, Commits: commits, PackBytes: pack, done: make(chan struct{})}
	repoPath := "/" + repoOwner + "/" + RepoName + ".git"
	s.URL = "https://" + s.HostPort + repoPath
	s.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Only the repository's read side: refs and upload-pack.
			if !strings.HasPrefix(r.URL.Path, repoPath+"/") {
				http.Error(w, "repository not found", http.StatusNotFound)
				return
			}
			backend.ServeHTTP(w, r)
		}),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	go func() {
		defer close(s.done)
		_ = s.srv.ServeTLS(ln, "", "")
	}()
	return s, nil
}

// Close stops the server.
func (s *GitServer) Close() {
	_ = s.srv.Close()
	<-s.done
}

// generateRepo makes bare a repository of commits commits on main through git fast-import: a README, then
// each commit one of repoFiles files rewritten with fresh pseudo-random bytes (a fixed seed: every run
// generates the same repository).
func generateRepo(ctx context.Context, gitPath, home, bare string, commits int) error {
	env := []string{"PATH=" + filepath.Dir(gitPath) + ":/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null"}
	run := func(stdin io.Reader, args ...string) error {
		cmd := exec.CommandContext(ctx, gitPath, args...)
		cmd.Env, cmd.Stdin = env, stdin
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %s: %v: %s", args[0], err, out)
		}
		return nil
	}
	if err := os.RemoveAll(bare); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(bare), 0o755); err != nil {
		return err
	}
	if err := run(nil, "init", "--quiet", "--bare", "--initial-branch=main", bare); err != nil {
		return err
	}
	pr, pw := io.Pipe()
	go func() {
		w := bufio.NewWriterSize(pw, 1<<20)
		rng := mrand.New(mrand.NewChaCha8([32]byte{'c', 'o', 'r', 'r', 'a', 'l'}))
		buf := make([]byte, repoFileBytes)
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
		for i := range commits {
			path, content := "README", []byte("A repository generated by corral bench.\n")
			if i > 0 {
				for j := 0; j < len(buf); j += 8 {
					v := rng.Uint64()
					for k := range 8 {
						buf[j+k] = byte(v >> (8 * k))
					}
				}
				path, content = fmt.Sprintf("data/%02d.bin", (i-1)%repoFiles), buf
			}
			msg := fmt.Sprintf("commit %d", i+1)
			fmt.Fprintf(w, "commit refs/heads/main\ncommitter bench <bench@corral.invalid> %d +0000\ndata %d\n%s\n", t0+int64(i), len(msg), msg)
			fmt.Fprintf(w, "M 100644 inline %s\ndata %d\n", path, len(content))
			w.Write(content)
			w.WriteString("\n")
		}
		pw.CloseWithError(w.Flush())
	}()
	err := run(pr, "--git-dir="+bare, "fast-import", "--quiet")
	pr.Close()
	if err != nil {
		return err
	}
	// Packed as a hosted repository is, with a bitmap and no delta search when serving (random bytes do not
	// delta): a clone then costs the server little but copying its pack, and the cost measured is the client's
	// (receiving, indexing and checking out the history), as with a remote host.
	if err := run(nil, "--git-dir="+bare, "repack", "--quiet", "-a", "-d", "-b", "--window=0"); err != nil {
		return err
	}
	return run(nil, "--git-dir="+bare, "config", "pack.window", "0")
}

// selfSigned returns a CA certificate (PEM) and a server certificate for 127.0.0.1 that it signed.
func selfSigned() ([]byte, tls.Certificate, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "corral bench git CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(7 * 24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(7 * 24 * time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	return caPEM, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
