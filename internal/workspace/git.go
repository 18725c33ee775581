// This file is the git engine the clones run on: host git under a clean environment, pinned to the addresses the
// session's networking allowed, with the token only in its environment, and the probe that types its failures.

package workspace

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/corralhq/corral/internal/apitype"
)

// remoteOpts are what git needs to reach a repository: the options that pin its host to the addresses the
// policy checked, the environment that carries its token and CA bundle, and the secrets to keep out of errors.
type remoteOpts struct {
	args    []string
	env     []string
	secrets []string
	// ips, host and port are the pinned destination (ips empty: not pinned).
	ips        []net.IP
	host, port string
	auth       string // the Authorization header value, if any
	// allowHTTP lets git use http:// (a relay of the operator's at an http:// URL: Config.Remote).
	allowHTTP bool
}

// withAuthorization makes git send auth to repoURL (and only there), through its environment.
func (o *remoteOpts) withAuthorization(repoURL, auth string) {
	o.auth = auth
	o.secrets = append(o.secrets, auth)
	if _, enc, ok := strings.Cut(auth, " "); ok {
		o.secrets = append(o.secrets, enc)
		if dec, err := base64.StdEncoding.DecodeString(enc); err == nil {
			o.secrets = append(o.secrets, string(dec))
			if _, tok, ok := strings.Cut(string(dec), ":"); ok && tok != "" {
				o.secrets = append(o.secrets, tok)
			}
		}
	}
	o.env = append(o.env, "GIT_CONFIG_COUNT=2",
		"GIT_CONFIG_KEY_0=http."+repoURL+".extraHeader", "GIT_CONFIG_VALUE_0=Authorization: "+auth,
		"GIT_CONFIG_KEY_1=http.followRedirects", "GIT_CONFIG_VALUE_1=false")
}

// pinHost checks the repository's host against the session's networking policy (Resolve) and returns the git
// options that pin the host to the addresses checked; none without Resolve or for a URL without a host.
func (c *Config) pinHost(ctx context.Context, repoURL string, n *apitype.Networking) (*remoteOpts, error) {
	o := &remoteOpts{}
	u, err := url.Parse(repoURL)
	if err != nil || u.Hostname() == "" {
		return o, nil
	}
	o.host, o.port = u.Hostname(), u.Port()
	if o.port == "" {
		o.port = map[string]string{"https": "443", "http": "80"}[u.Scheme]
	}
	if c.Resolve == nil {
		return o, nil
	}
	ips, err := c.Resolve(ctx, n, o.host, o.port)
	if err != nil {
		return nil, fmt.Errorf("repository host %s: %w", o.host, err)
	}
	o.ips = ips
	addrs := make([]string, len(ips))
	for i, ip := range ips {
		addrs[i] = ip.String()
		if ip.To4() == nil {
			addrs[i] = "[" + addrs[i] + "]"
		}
	}
	o.args = []string{"-c", fmt.Sprintf("http.curloptResolve=%s:%s:%s", o.host, o.port, strings.Join(addrs, ","))}
	return o, nil
}

// systemCABundles are where Linux distributions keep the system's CA bundle (as crypto/x509 looks for it).
var systemCABundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/pki/tls/cacert.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// caBundle writes, with ExtraRootCAsPEM, the system's CA bundle and the extra CAs to a file of git's private
// home and points git at it (GIT_SSL_CAINFO). No secret is in it.
func (c *Config) caBundle(home string, o *remoteOpts) error {
	if len(c.ExtraRootCAsPEM) == 0 {
		return nil
	}
	var bundle []byte
	for _, f := range systemCABundles {
		if b, err := os.ReadFile(f); err == nil {
			bundle = append(b, '\n')
			break
		}
	}
	bundle = append(bundle, c.ExtraRootCAsPEM...)
	name := filepath.Join(home, "ca-bundle.pem")
	if err := os.WriteFile(name, bundle, 0o600); err != nil {
		return fmt.Errorf("git CA bundle: %w", err)
	}
	o.env = append(o.env, "GIT_SSL_CAINFO="+name)
	return nil
}

// rootCAs are the system roots with ExtraRootCAsPEM.
func (c *Config) rootCAs() *x509.CertPool {
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	pool.AppendCertsFromPEM(c.ExtraRootCAsPEM)
	return pool
}

// probe asks an https repository for its refs as the clone will, with Go's HTTP client (pinned, verified, no
// redirects), to tell the typed failures apart by the real status: 401 (authentication), 403 (forbidden), 404
// (not found); anything else that is not a success, or a host that cannot be reached, is a clone error.
func (c *Config) probe(ctx context.Context, repoURL string, o *remoteOpts) (apitype.SessionErrorType, error) {
	u, err := url.Parse(repoURL)
	if err != nil || u.Scheme != "https" {
		return "", nil
	}
	ctx, cancel := context.WithTimeout(ctx, min(c.CloneTimeout, time.Minute))
	defer cancel()
	dialer := &net.Dialer{Timeout: 15 * time.Second}
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if len(o.ips) == 0 {
				return dialer.DialContext(ctx, network, addr)
			}
			var last error
			for _, ip := range o.ips {
				conn, err := dialer.DialContext(ctx, "tcp", net.JoinHostPort(ip.String(), o.port))
				if err == nil {
					return conn, nil
				}
				last = err
			}
			return nil, last
		},
		TLSClientConfig:     &tls.Config{RootCAs: c.rootCAs(), MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: 15 * time.Second,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	probeURL := *u
	probeURL.Path = strings.TrimRight(u.Path, "/") + "/info/refs"
	probeURL.RawPath, probeURL.RawQuery, probeURL.Fragment = "", "service=git-upload-pack", ""
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, probeURL.String(), nil)
	if err != nil {
		return apitype.SessionErrRepositoryClone, fmt.Errorf("repository URL: %w", err)
	}
	req.Header.Set("User-Agent", "git/2 (corral)")
	if o.auth != "" {
		req.Header.Set("Authorization", o.auth)
	}
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL's query
		}
		return apitype.SessionErrRepositoryClone, fmt.Errorf("could not reach the repository at %s: %w", u.Host, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	withToken := "without a token"
	if o.auth != "" {
		withToken = "with the resource's authorization_token"
	}
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		return "", nil
	case code == http.StatusUnauthorized:
		return apitype.SessionErrRepositoryAuthentication, fmt.Errorf("the repository refused the credentials (401 %s): "+
			"the token is missing, wrong, expired or revoked", withToken)
	case code == http.StatusForbidden:
		return apitype.SessionErrRepositoryForbidden, fmt.Errorf("the repository refused access (403 %s): the token may not read it", withToken)
	case code == http.StatusNotFound:
		return apitype.SessionErrRepositoryNotFound, fmt.Errorf("the repository was not found (404 %s)", withToken)
	case code >= 300 && code < 400:
		return apitype.SessionErrRepositoryClone, fmt.Errorf("the repository redirected (%d); redirects are not followed", code)
	default:
		return apitype.SessionErrRepositoryClone, fmt.Errorf("the repository answered %s", resp.Status)
	}
}

// gitEnvPath is the PATH of git when Config.Path is empty.
const gitEnvPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// git runs git in dir (if set) with a clean environment: nothing of the server's but PATH, a private HOME, no
// system or global configuration, no prompts, and only the allowed transport protocols. The whole process
// group is killed when ctx ends.
func (c *Config) git(ctx context.Context, home, dir string, remote *remoteOpts, args ...string) error {
	var pin, env, secrets []string
	if remote != nil {
		pin, env, secrets = remote.args, remote.env, remote.secrets
	}
	protocols := []string{"-c", "protocol.allow=never", "-c", "protocol.https.allow=always"}
	if c.AllowLocalURLs {
		protocols = append(protocols, "-c", "protocol.http.allow=always", "-c", "protocol.file.allow=always")
	} else {
		if remote != nil && remote.allowHTTP {
			protocols = append(protocols, "-c", "protocol.http.allow=always")
		}
		protocols = append(protocols, "-c", "protocol.file.allow=never")
	}
	full := slices.Concat(protocols, []string{"-c", "credential.helper=", "-c", "core.hooksPath=/dev/null"}, pin)
	if dir != "" {
		full = append(full, "-C", dir)
	}
	full = append(full, args...)
	cmd := exec.CommandContext(ctx, c.Git, full...)
	cmd.Env = []string{
		"PATH=" + c.Path,
		"HOME=" + home,
		"GIT_TERMINAL_PROMPT=0",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"LC_ALL=C",
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Dir = home
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (%w)", err, ctx.Err())
	}
	msg := strings.TrimSpace(out.String())
	for _, sec := range secrets {
		if sec != "" {
			msg = strings.ReplaceAll(msg, sec, "[redacted]")
		}
	}
	if len(msg) > 2000 {
		msg = "…" + msg[len(msg)-2000:]
	}
	if msg == "" {
		return fmt.Errorf("git %s: %w", args[0], err)
	}
	return fmt.Errorf("git %s: %w: %s", args[0], err, msg)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
