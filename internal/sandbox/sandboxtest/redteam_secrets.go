package sandboxtest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
// sessions holding creds, with the operator's trusted internal host:port pairs (--egress-allow-internal) as
// allowInternal: a secret goes to a port other than 443 only where such a pair (or the credential's host
// entry) names it. It returns the source of their Egress, and the strings besides the secret values that no
// sandbox may ever show, by label: the egress CA's private key and the vault's master key, in every encoding
// they could leak in.
type SecretsSetup func(t *testing.T, creds []SecretCredential, allowInternal []string) (sandbox.EgressSource, map[string]string)

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

// recorder is an upstream that records the requests it receives and echoes their Authorization header back;
// under /encoded, in the encodings of echoForms instead.
type recorder struct {
	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	host, auth, token, body string
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	rc.reqs = append(rc.reqs, recorded{host: r.Host, auth: r.Header.Get("Authorization"), token: r.Header.Get("X-Token"), body: string(b)})
	rc.mu.Unlock()
	if r.URL.Path == "/encoded" {
		token := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		forms := echoForms(token)
		for _, label := range slices.Sorted(maps.Keys(forms)) {
			fmt.Fprintf(w, "%s: %s\n", label, forms[label])
		}
		return
	}
	fmt.Fprintf(w, "echo auth=%s token=%s body=%s\n", r.Header.Get("Authorization"), r.Header.Get("X-Token"), b)
}

// echoForms are the encodings of s an upstream may echo: base64 (standard and URL-safe, padded or not), hex in
// either case, percent-encoding, and base64 of a JSON document holding s (s at each of the 3 alignments of a
// longer base64 string).
func echoForms(s string) map[string]string {
	b := []byte(s)
	forms := map[string]string{
		"base64":        base64.StdEncoding.EncodeToString(b),
		"base64 raw":    base64.RawStdEncoding.EncodeToString(b),
		"base64url":     base64.URLEncoding.EncodeToString(b),
		"base64url raw": base64.RawURLEncoding.EncodeToString(b),
		"hex":           hex.EncodeToString(b),
		"HEX":           strings.ToUpper(hex.EncodeToString(b)),
		"query escape":  url.QueryEscape(s),
		"path escape":   url.PathEscape(s),
	}
	for k := range 3 {
		doc := []byte(`{"user":"` + "ab"[:k] + `","token":"` + s + `"}`)
		forms[fmt.Sprintf("embedded base64 %d", k)] = base64.StdEncoding.EncodeToString(doc)
		forms[fmt.Sprintf("embedded base64url %d", k)] = base64.URLEncoding.EncodeToString(doc)
	}
	return forms
}

// take returns the requests received and forgets them.
func (rc *recorder) take() []recorded {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	r := rc.reqs
	rc.reqs = nil
	return r
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
// an allowed host arrives with the secret (headers, Basic auth, a body only where body injection is on),
// verified by curl against the sandbox's CA bundle (and against the system bundle, which holds the egress CA
// too); the placeholder sent to a host that is not allowed, in plain HTTP, or to a port of the allowed host that
// neither the credential nor the operator names arrives as the placeholder; a Host header or request target the
// sandbox chose is refused and reaches no upstream; an allowed host echoing the secret, literally or encoded,
// shows the sandbox the placeholder.
// Then it searches everything the sandbox can reach (every process's environ and cmdline, every file outside
// /usr, /proc, /sys and /dev, the CA bundle, the proxy's answers) for the secrets, the CA key and the master key.
func RunSecrets(t *testing.T, newProvider func(testing.TB) sandbox.Provider, setup SecretsSetup) {
	var allowedRec, otherRec, plainRec, unnamedRec recorder
	allowed := httptest.NewTLSServer(&allowedRec)
	t.Cleanup(allowed.Close)
	other := httptest.NewTLSServer(&otherRec)
	t.Cleanup(other.Close)
	plain := httptest.NewServer(&plainRec)
	t.Cleanup(plain.Close)
	// unnamed is the allowed host (127.0.0.1) on a port the egress rules let the sandbox reach but that neither
	// the credential nor the operator's pairs given to the credential proxy name: what another port of a public
	// allowed host is, which no test reaches.
	unnamed := httptest.NewTLSServer(&unnamedRec)
	t.Cleanup(unnamed.Close)
	allowedAddr := strings.TrimPrefix(allowed.URL, "https://")
	_, otherPort, _ := net.SplitHostPort(strings.TrimPrefix(other.URL, "https://"))
	plainAddr := strings.TrimPrefix(plain.URL, "http://")
	unnamedAddr := strings.TrimPrefix(unnamed.URL, "https://")

	random := func() string {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		return hex.EncodeToString(b)
	}
	value, bodyValue := "redteam-header-secret-"+random(), "redteam-body-secret-"+random()
	// Every encoding of echoValue differs from it.
	echoValue := "redteam/echo+secret=" + random() + "?&"
	creds := []SecretCredential{
		{Name: "MY_TOKEN", Value: value, Hosts: []string{"127.0.0.1"}},
		{Name: "MY_BODY_TOKEN", Value: bodyValue, Hosts: []string{"127.0.0.1"}, Body: true},
		{Name: "MY_ECHO_TOKEN", Value: echoValue, Hosts: []string{"127.0.0.1"}},
	}
	trusted := []string{allowedAddr, "localhost:" + otherPort, plainAddr}
	src, forbidden := setup(t, creds, trusted)
	forbidden = maps.Clone(forbidden)
	if forbidden == nil {
		forbidden = map[string]string{}
	}
	forbidden["secret value of MY_TOKEN"] = value
	forbidden["secret value of MY_BODY_TOKEN"] = bodyValue
	forbidden["secret value of MY_ECHO_TOKEN"] = echoValue
	forbidden["secret value of MY_TOKEN (base64 of user:value)"] = base64.StdEncoding.EncodeToString([]byte("user:" + value))
	for label, f := range echoForms(echoValue) {
		if !strings.HasPrefix(label, "embedded") { // those hold other text; checked decoded (EncodedEcho)
			forbidden["secret value of MY_ECHO_TOKEN ("+label+")"] = f
		}
	}

	roots := x509.NewCertPool()
	roots.AddCert(allowed.Certificate())
	roots.AddCert(other.Certificate())
	var caPEM []byte
	source := egressFunc(func(ctx context.Context, r *sandbox.Recipe) (*sandbox.Egress, error) {
		eg, err := src.Egress(ctx, r)
		if err != nil || eg == nil {
			return eg, fmt.Errorf("secrets egress: %v (egress %v)", err, eg)
		}
		eg.AllowInternal = append(slices.Clone(trusted), unnamedAddr)
		eg.RootCAs = roots
		caPEM = eg.CACertPEM
		return eg, nil
	})
	root := WorkspaceRoot(t)
	prov := newProvider(t)
	p, err := sandbox.NewPool(sandbox.PoolConfig{Provider: prov, WorkspaceRoot: root, Egress: source})
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
		// Secrets go only inside TLS the proxy terminates (issue 21, item 2).
		run(curl + `-H "X-Token: $MY_TOKEN" http://` + plainAddr + "/")
		if got := plainRec.last(t).token; got != ph {
			t.Errorf("plain HTTP to an allowed host: X-Token %q, want the placeholder %q", got, ph)
		}
	})
	t.Run("PortNotNamed", func(t *testing.T) {
		// The allowed host on a port neither the credential nor the operator names: tunnelled, the secret is
		// not sent (issue 21, item 2).
		run(curl + `-k -H "Authorization: Bearer $MY_TOKEN" https://` + unnamedAddr + "/")
		if got := unnamedRec.last(t).auth; got != "Bearer "+ph {
			t.Errorf("a port no one names received %q, want the placeholder %q", got, ph)
		}
	})
	t.Run("HostChosenBySandbox", func(t *testing.T) {
		// Inside a connection to the allowed host, a Host header or an absolute request target naming another
		// site is refused, and no upstream request is made (issue 21, item 1).
		for _, opt := range []string{`-H "Host: evil.example"`, `-H "Host: ` + allowedAddr + `.evil.example"`,
			`--request-target https://evil.example/`} {
			out := run(curl + `-o /dev/null -w '%{http_code}' ` + opt + ` -H "Authorization: Bearer $MY_TOKEN" https://` + allowedAddr + "/ 2>&1; true")
			if got := allowedRec.take(); len(got) > 0 {
				t.Errorf("%s: the upstream received %d request(s), the first with Host %q and Authorization %q; want none",
					opt, len(got), got[0].host, got[0].auth)
			}
			if !strings.HasPrefix(strings.TrimSpace(out), "421") {
				t.Errorf("%s: the sandbox was answered %q, want 421", opt, out)
			}
		}
	})
	t.Run("EncodedEcho", func(t *testing.T) {
		// An allowed host echoing the secret encoded shows the sandbox the placeholder's encodings
		// (issue 21, item 7).
		out := run(curl + `-H "Authorization: Bearer $MY_ECHO_TOKEN" https://` + allowedAddr + "/encoded")
		if got := allowedRec.last(t).auth; got != "Bearer "+echoValue {
			t.Fatalf("the allowed host received %q, want the secret", got)
		}
		echoPh := strings.TrimSpace(run(`printf '%s' "$MY_ECHO_TOKEN"`))
		forms, phForms := echoForms(echoValue), echoForms(echoPh)
		shown := map[string]string{}
		for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
			if label, enc, ok := strings.Cut(line, ": "); ok {
				shown[label] = enc
			}
		}
		for label, f := range forms {
			if strings.Contains(out, f) {
				t.Errorf("the %s of the secret reached the sandbox", label)
			}
			if strings.HasPrefix(label, "embedded") {
				continue
			}
			// A form the secret shares with another (a length divisible by 3 has no base64 padding) may be
			// replaced by either's form of the placeholder.
			replaced := false
			for other, o := range forms {
				replaced = replaced || o == f && shown[label] == phForms[other]
			}
			if !replaced {
				t.Errorf("the %s of the secret was replaced by %q, not by that of the placeholder", label, shown[label])
			}
		}
		for label, enc := range shown {
			if !strings.HasPrefix(label, "embedded") {
				continue
			}
			for _, e := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
				if dec := decodeLoose(e, enc); bytes.Contains(dec, []byte(echoValue[2:len(echoValue)-2])) {
					t.Errorf("%s: the sandbox decodes the secret from %q", label, enc)
				}
			}
		}
	})
	t.Run("ProxyAnswers", func(t *testing.T) {
		// Errors and refusals of the proxy itself.
		run(curl + `-H "Authorization: Bearer $MY_TOKEN" https://127.0.0.1:1/ 2>&1; true`)
		run(curl + `-w '%{http_code}' http://127.0.0.1:1/ 2>&1; true`)
		run(curl + `-i -H "Authorization: Bearer $MY_TOKEN" https://` + allowedAddr + "/ 2>&1; true")
	})
	t.Run("RedTeam", func(t *testing.T) {
		run(DumpScript("/workspace/.dump", "/workspace"))
		dumpDir := filepath.Join(root, sess, ".dump")
		if !prov.Capabilities().HostWorkspace {
			dumpDir = fetchDir(t, p, sess, "/workspace/.dump")
		}
		dump := ReadDump(t, dumpDir)
		var all bytes.Buffer
		all.Write(dump.All)
		all.Write(answers.Bytes())
		// The search is not vacuous: the dump holds the placeholders (environ) and the CA bundle.
		if !bytes.Contains(all.Bytes(), []byte("MY_TOKEN="+ph)) || len(caPEM) == 0 || !bytes.Contains(all.Bytes(), caPEM) {
			t.Fatalf("the dump (%d bytes) lacks the environment or the CA bundle", all.Len())
		}
		files := dump.Files
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

// DumpScript is a bash script that writes to dir (a directory of the sandbox's workspace, which the host reads
// back with ReadDump) everything a process in the sandbox can read where a secret could sit: the environ and
// cmdline of every process it can see, and the content of every file under 64 MiB outside /proc, /sys, /dev,
// /usr, dir itself and the paths in prune. It prints the number of files read. The script names no secret: what
// it dumps is searched on the host, so that the search itself puts nothing to find in the sandbox.
func DumpScript(dir string, prune ...string) string {
	var paths []string
	for _, p := range append([]string{"/proc", "/sys", "/dev", "/usr", dir}, prune...) {
		paths = append(paths, "-path "+p)
	}
	return `mkdir -p ` + dir + ` && cd ` + dir + ` &&
for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do cat "$f" 2>/dev/null; echo; done > procs
find / \( ` + strings.Join(paths, " -o ") + ` \) -prune -o -type f -size -64M -print 2>/dev/null > files
tr '\n' '\0' < files | xargs -0 -r cat 2>/dev/null > contents; wc -l < files`
}

// Dump is what a DumpScript wrote.
type Dump struct {
	All   []byte // everything dumped: the processes' environ and cmdline, the list of files, their contents
	Files []byte // the paths of the files read, one a line
}

// ReadDump reads what a DumpScript wrote, from hostDir: its directory as the host sees it.
func ReadDump(t testing.TB, hostDir string) Dump {
	t.Helper()
	var all bytes.Buffer
	err := filepath.WalkDir(hostDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		all.Write(b)
		return err
	})
	if err != nil {
		t.Fatalf("the sandbox's dump: %v", err)
	}
	files, err := os.ReadFile(filepath.Join(hostDir, "files"))
	if err != nil {
		t.Fatalf("the sandbox's dump: %v", err)
	}
	return Dump{All: all.Bytes(), Files: files}
}

// decodeLoose decodes as much of s as enc takes (padding dropped, a tail that is no whole quantum cut), so
// that a scrubbed string whose length changed still shows what it holds.
func decodeLoose(enc *base64.Encoding, s string) []byte {
	s = strings.TrimRight(s, "=")
	enc = enc.WithPadding(base64.NoPadding)
	for len(s) > 0 {
		if b, err := enc.DecodeString(s); err == nil {
			return b
		}
		s = s[:len(s)-1]
	}
	return nil
}

// fetchDir copies the directory dir of the session's sandbox into a new directory of this host, through the
// sandbox's own tools (tar, then base64 in pieces each result holds): the way to a remote backend's files,
// whose workspace is not on this host.
func fetchDir(t *testing.T, h sandbox.Hands, sess, dir string) string {
	t.Helper()
	const archive, piece = "/tmp/.corral-fetch.tgz", 48 << 10
	size, err := strconv.Atoi(strings.TrimSpace(mustRun(t, h, bash(sess, "tar -czf "+archive+" -C "+dir+" . && stat -c %s "+archive))))
	if err != nil {
		t.Fatalf("fetch %s: %v", dir, err)
	}
	var tgz bytes.Buffer
	for off := 0; off < size; off += piece {
		out := strings.TrimSpace(mustRun(t, h, bash(sess, fmt.Sprintf("dd if=%s bs=%d skip=%d count=1 status=none | base64 -w0", archive, piece, off/piece))))
		b, err := base64.StdEncoding.DecodeString(out)
		if err != nil {
			t.Fatalf("fetch %s: %v: %.200q", dir, err, out)
		}
		tgz.Write(b)
	}
	if tgz.Len() != size {
		t.Fatalf("fetch %s: got %d bytes of %d", dir, tgz.Len(), size)
	}
	zr, err := gzip.NewReader(&tgz)
	if err != nil {
		t.Fatalf("fetch %s: %v", dir, err)
	}
	out := t.TempDir()
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("fetch %s: %v", dir, err)
		}
		name := filepath.Join(out, filepath.Clean("/"+hdr.Name))
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(name, 0o755)
		case tar.TypeReg:
			var b []byte
			if b, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(name, b, 0o644)
			}
		}
		if err != nil {
			t.Fatalf("fetch %s: %v", dir, err)
		}
	}
}
