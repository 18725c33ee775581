package sandboxtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/corralhq/corral/internal/sandbox"
)

// SecretCredential is an environment_variable credential of a session, as RunSecrets asks for it.
type SecretCredential struct {
	Name  string   // secret_name: the variable the sandbox sees
	Value string   // secret_value: what only the allowed hosts receive
	Hosts []string // networking.allowed_hosts (limited)
	Body  bool     // injection_location.body (header is always on)
}

// SecretsSetup builds the credential proxy (internal/proxy, which this kit may not import; proxytest.Setup) for
// sessions holding creds. It returns the source of their Egress, and the strings besides the secret values
// that no sandbox may ever show, by label: the egress CA's private key and the vault's master key, in every
// encoding they could leak in.
type SecretsSetup func(t *testing.T, creds []SecretCredential) (sandbox.EgressSource, map[string]string)

// SearchSecrets returns the labels of the forbidden strings found in data, sorted.
func SearchSecrets(data []byte, forbidden map[string]string) []string {
	var found []string
	for label, s := range forbidden {
		if s != "" && bytes.Contains(data, []byte(s)) {
			found = append(found, label)
		}
	}
	slices.Sort(found)
	return found
}

// recorder is an upstream that records the requests it receives and echoes their Authorization header back.
type recorder struct {
	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	auth, token, body string
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	rc.reqs = append(rc.reqs, recorded{auth: r.Header.Get("Authorization"), token: r.Header.Get("X-Token"), body: string(b)})
	rc.mu.Unlock()
	fmt.Fprintf(w, "echo auth=%s token=%s body=%s\n", r.Header.Get("Authorization"), r.Header.Get("X-Token"), b)
}

// last returns the last request received and forgets them all.
func (rc *recorder) last(t *testing.T) recorded {
	t.Helper()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.reqs) == 0 {
		t.Fatal("the upstream received no request")
	}
	r := rc.reqs[len(rc.reqs)-1]
	rc.reqs = nil
	return r
}

type egressFunc func(ctx context.Context, r *sandbox.Recipe) (*sandbox.Egress, error)

func (f egressFunc) Egress(ctx context.Context, r *sandbox.Recipe) (*sandbox.Egress, error) {
	return f(ctx, r)
}

// RunSecrets checks environment_variable credentials injected at egress, from bash in real sandboxes, against
// real HTTPS servers on 127.0.0.1 that record what they receive: the sandbox sees a placeholder; a request to
// an allowed host arrives with the secret (headers, Basic auth, a body only where body injection is on, plain
// HTTP too), verified by curl against the sandbox's CA bundle (and against the system bundle, which holds the
// egress CA too); the placeholder sent to a host that is not
// allowed arrives as the placeholder; an allowed host echoing the secret shows the sandbox the placeholder.
// Then it searches everything the sandbox can reach (every process's environ and cmdline, every file outside
// /usr, /proc, /sys and /dev, the CA bundle, the proxy's answers) for the secrets, the CA key and the master key.
func RunSecrets(t *testing.T, newProvider func(testing.TB) sandbox.Provider, setup SecretsSetup) {
	var allowedRec, otherRec, plainRec recorder
	allowed := httptest.NewTLSServer(&allowedRec)
	t.Cleanup(allowed.Close)
	other := httptest.NewTLSServer(&otherRec)
	t.Cleanup(other.Close)
	plain := httptest.NewServer(&plainRec)
	t.Cleanup(plain.Close)
	allowedAddr := strings.TrimPrefix(allowed.URL, "https://")
	_, otherPort, _ := net.SplitHostPort(strings.TrimPrefix(other.URL, "https://"))
	plainAddr := strings.TrimPrefix(plain.URL, "http://")

	random := func() string {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		return hex.EncodeToString(b)
	}
	value, bodyValue := "redteam-header-secret-"+random(), "redteam-body-secret-"+random()
	creds := []SecretCredential{
		{Name: "MY_TOKEN", Value: value, Hosts: []string{"127.0.0.1"}},
		{Name: "MY_BODY_TOKEN", Value: bodyValue, Hosts: []string{"127.0.0.1"}, Body: true},
	}
	src, forbidden := setup(t, creds)
	forbidden = maps.Clone(forbidden)
	if forbidden == nil {
		forbidden = map[string]string{}
	}
	forbidden["secret value of MY_TOKEN"] = value
	forbidden["secret value of MY_BODY_TOKEN"] = bodyValue
	forbidden["secret value of MY_TOKEN (base64 of user:value)"] = base64.StdEncoding.EncodeToString([]byte("user:" + value))

	roots := x509.NewCertPool()
	roots.AddCert(allowed.Certificate())
	roots.AddCert(other.Certificate())
	var caPEM []byte
	source := egressFunc(func(ctx context.Context, r *sandbox.Recipe) (*sandbox.Egress, error) {
		eg, err := src.Egress(ctx, r)
		if err != nil || eg == nil {
			return eg, fmt.Errorf("secrets egress: %v (egress %v)", err, eg)
		}
		eg.AllowInternal = []string{allowedAddr, "localhost:" + otherPort, plainAddr}
		eg.RootCAs = roots
		caPEM = eg.CACertPEM
		return eg, nil
	})
	root := WorkspaceRoot(t)
	p, err := sandbox.NewPool(sandbox.PoolConfig{Provider: newProvider(t), WorkspaceRoot: root, Egress: source})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	const sess = "secrets"
	var answers bytes.Buffer // everything the sandbox was shown
	run := func(cmd string) string {
		t.Helper()
		out := mustRun(t, p, bash(sess, cmd))
		answers.WriteString(out)
		return out
	}
	curl := "curl -sS --max-time 20 --noproxy '' -x \"$http_proxy\" "

	ph := strings.TrimSpace(run(`printf '%s' "$MY_TOKEN"`))
	bodyPh := strings.TrimSpace(run(`printf '%s' "$MY_BODY_TOKEN"`))
	if !strings.HasPrefix(ph, "corral-secret-") || len(ph) != len("corral-secret-")+32 || ph == bodyPh {
		t.Fatalf("placeholders: %q, %q", ph, bodyPh)
	}
	if env := run("env"); !strings.Contains(env, "SSL_CERT_FILE=/.corral/ca.pem") || !strings.Contains(env, "NODE_EXTRA_CA_CERTS=/.corral/ca.pem") ||
		!strings.Contains(env, "REQUESTS_CA_BUNDLE=/.corral/ca.pem") || !strings.Contains(env, "CURL_CA_BUNDLE=/.corral/ca.pem") ||
		!strings.Contains(env, "GIT_SSL_CAINFO=/.corral/ca.pem") {
		t.Errorf("the sandbox's environment does not point at its CA bundle:\n%s", env)
	}

	t.Run("HeaderToAllowedHost", func(t *testing.T) {
		out := run(curl + `-H "Authorization: Bearer $MY_TOKEN" https://` + allowedAddr + "/")
		if got := allowedRec.last(t).auth; got != "Bearer "+value {
			t.Errorf("the allowed host received Authorization %q, want the secret", got)
		}
		if !strings.Contains(out, "auth=Bearer "+ph) {
			t.Errorf("the echo of the allowed host should show the placeholder back: %q", out)
		}
	})
	t.Run("SystemBundleTrusted", func(t *testing.T) {
		// A tool that reads no CA variable uses the system bundle, which holds the egress CA too.
		if _, err := os.Stat("/etc/ssl/certs/ca-certificates.crt"); err != nil {
			t.Skip("the host has no /etc/ssl/certs/ca-certificates.crt")
		}
		if got := strings.TrimSpace(run("grep -c 'Corral egress CA' /etc/ssl/certs/ca-certificates.crt")); got != "1" {
			t.Errorf("the system bundle in the sandbox names the egress CA %s times", got)
		}
		run("env -u SSL_CERT_FILE -u CURL_CA_BUNDLE " + curl + `--cacert /etc/ssl/certs/ca-certificates.crt -H "Authorization: Bearer $MY_TOKEN" https://` + allowedAddr + "/")
		if got := allowedRec.last(t).auth; got != "Bearer "+value {
			t.Errorf("through the system bundle: Authorization %q", got)
		}
	})
	t.Run("BasicAuthToAllowedHost", func(t *testing.T) {
		run(curl + `-u "user:$MY_TOKEN" https://` + allowedAddr + "/")
		if got, want := allowedRec.last(t).auth, "Basic "+base64.StdEncoding.EncodeToString([]byte("user:"+value)); got != want {
			t.Errorf("Basic auth arrived as %q, want %q", got, want)
		}
	})
	t.Run("PlaceholderToOtherHost", func(t *testing.T) {
		// localhost is the same machine, but not a host the credential allows: not intercepted, tunnelled.
		run(curl + `-k -H "Authorization: Bearer $MY_TOKEN" https://localhost:` + otherPort + "/")
		if got := otherRec.last(t).auth; got != "Bearer "+ph {
			t.Errorf("a host that is not allowed received %q, want the placeholder %q", got, ph)
		}
	})
	t.Run("Body", func(t *testing.T) {
		run(curl + `-H "X-Token: $MY_BODY_TOKEN" --data-binary "a=$MY_TOKEN&b=$MY_BODY_TOKEN" https://` + allowedAddr + "/")
		got := allowedRec.last(t)
		if want := "a=" + ph + "&b=" + bodyValue; got.body != want {
			t.Errorf("body arrived as %q, want %q (only the body-injected credential replaced)", got.body, want)
		}
		if got.token != bodyValue {
			t.Errorf("header of the body credential arrived as %q", got.token)
		}
	})
	t.Run("PlainHTTP", func(t *testing.T) {
		run(curl + `-H "X-Token: $MY_TOKEN" http://` + plainAddr + "/")
		if got := plainRec.last(t).token; got != value {
			t.Errorf("plain HTTP to an allowed host: X-Token %q, want the secret", got)
		}
	})
	t.Run("ProxyAnswers", func(t *testing.T) {
		// Errors and refusals of the proxy itself.
		run(curl + `-H "Authorization: Bearer $MY_TOKEN" https://127.0.0.1:1/ 2>&1; true`)
		run(curl + `-w '%{http_code}' http://127.0.0.1:1/ 2>&1; true`)
		run(curl + `-i -H "Authorization: Bearer $MY_TOKEN" https://` + allowedAddr + "/ 2>&1; true")
	})
	t.Run("RedTeam", func(t *testing.T) {
		run(`mkdir -p /workspace/.dump && cd /workspace/.dump &&
for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do cat "$f" 2>/dev/null; echo; done > procs
find / \( -path /proc -o -path /sys -o -path /dev -o -path /usr -o -path /workspace \) -prune -o -type f -size -64M -print 2>/dev/null > files
while read -r f; do cat "$f" 2>/dev/null; done < files > contents; wc -l < files`)
		dump := filepath.Join(root, sess, ".dump")
		var all bytes.Buffer
		err := filepath.WalkDir(dump, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			all.Write(b)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		all.Write(answers.Bytes())
		// The search is not vacuous: the dump holds the placeholders (environ) and the CA bundle.
		if !bytes.Contains(all.Bytes(), []byte("MY_TOKEN="+ph)) || len(caPEM) == 0 || !bytes.Contains(all.Bytes(), caPEM) {
			t.Fatalf("the dump (%d bytes) lacks the environment or the CA bundle", all.Len())
		}
		files, _ := os.ReadFile(filepath.Join(dump, "files"))
		if !bytes.Contains(files, []byte("/.corral/ca.pem")) {
			t.Errorf("the sandbox does not see its CA bundle at /.corral/ca.pem; files: %s", files)
		}
		if found := SearchSecrets(all.Bytes(), forbidden); len(found) > 0 {
			t.Errorf("the sandbox can reach: %s", strings.Join(found, "; "))
		}
		t.Logf("searched %d bytes (environ and cmdline of every process, %d files, %d bytes of answers) for %d forbidden strings",
			all.Len(), bytes.Count(files, []byte("\n")), answers.Len(), len(forbidden))
	})
}
