// Package webhook signs and sends one webhook delivery, per Standard Webhooks
// (https://www.standardwebhooks.com), so that the official SDKs' Webhooks.Unwrap verifies it. It knows nothing
// of events, endpoints or retries: the dispatcher picks what to send, when, and records the Result. Every
// connection obeys Corral's egress rules (egress.Policy.DialContext): an endpoint may be any public host, but
// an internal, loopback, private or host address only if the operator trusts that exact host:port.
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	crand "crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/corralhq/corral/internal/sandbox/egress"
)

// secretPrefix starts every signing secret, as in Standard Webhooks and the reference API.
const secretPrefix = "whsec_"

// Standard Webhooks wants keys of 24 to 64 bytes.
const minKey, maxKey = 24, 64

// NewSecret returns a fresh signing secret "whsec_" + base64(32 random bytes).
func NewSecret() (string, error) {
	key := make([]byte, 32)
	if _, err := crand.Read(key); err != nil {
		return "", fmt.Errorf("webhook: secret: %w", err)
	}
	return secretPrefix + base64.StdEncoding.EncodeToString(key), nil
}

// key decodes a signing secret: "whsec_" and the standard (padded) base64 of 24 to 64 bytes, the encoding the
// verifiers decode.
func key(secret string) ([]byte, error) {
	enc, ok := strings.CutPrefix(secret, secretPrefix)
	if !ok {
		return nil, errors.New("webhook: malformed secret: no whsec_ prefix")
	}
	k, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return nil, errors.New("webhook: malformed secret: not base64") // the error would quote the secret
	}
	if len(k) < minKey || len(k) > maxKey {
		return nil, fmt.Errorf("webhook: malformed secret: a key of %d bytes, not %d to %d", len(k), minKey, maxKey)
	}
	return k, nil
}

// Sign returns the headers of a delivery: webhook-id (msgID), webhook-timestamp (the Unix seconds of at) and
// webhook-signature "v1,<base64 HMAC-SHA256(key, msgID.timestamp.body)>", where key is the decoded part of the
// secret after whsec_. The verifiers refuse a timestamp more than 5 minutes from their clock, so at is the time
// of the attempt, not of the event; msgID stays the same across the attempts of one delivery (receivers
// deduplicate on it). It fails on a malformed secret.
func Sign(secret, msgID string, at time.Time, body []byte) (http.Header, error) {
	k, err := key(secret)
	if err != nil {
		return nil, err
	}
	ts := strconv.FormatInt(at.Unix(), 10)
	mac := hmac.New(sha256.New, k)
	mac.Write([]byte(msgID + "." + ts + "."))
	mac.Write(body)
	h := http.Header{}
	h.Set("webhook-id", msgID)
	h.Set("webhook-timestamp", ts)
	h.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	return h, nil
}

// maxURL bounds an endpoint URL.
const maxURL = 2048

// ValidateURL checks an endpoint URL when it is registered: an absolute http or https URL with a host, no
// userinfo (credentials in a URL end up in logs), no fragment, at most 2048 bytes. Whether the endpoint may be
// reached is decided at each delivery by the egress rules, since a name's addresses change.
func ValidateURL(raw string) error {
	if len(raw) > maxURL {
		return fmt.Errorf("url is %d bytes, more than %d", len(raw), maxURL)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("url: %w", errors.Unwrap(err)) // *url.Error quotes the URL again
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("url must be an absolute http or https URL")
	case u.Opaque != "" || u.Hostname() == "":
		return errors.New("url must have a host")
	case u.User != nil:
		return errors.New("url must not contain a user name or password")
	case strings.Contains(raw, "#"):
		return errors.New("url must not contain a fragment")
	}
	return nil
}

// Defaults of SenderConfig.
const (
	defaultTimeout          = 10 * time.Second
	defaultMaxResponseBytes = 4 << 10
	defaultUserAgent        = "Corral-Webhooks/1"
)

// SenderConfig configures a Sender.
type SenderConfig struct {
	// AllowInternal are the operator's --egress-allow-internal host:port pairs: the only internal, loopback,
	// private or host addresses an endpoint may resolve to.
	AllowInternal []string
	// Timeout bounds a whole attempt, from the connection to the last byte of the response read; default 10s.
	Timeout time.Duration
	// MaxResponseBytes is how much of a response body is read (and kept in Result.Body); default 4 KiB.
	MaxResponseBytes int64
	// UserAgent is the User-Agent of the requests; default "Corral-Webhooks/1".
	UserAgent string
	// RootCAs verify the endpoints' certificates; nil means the system roots.
	RootCAs *x509.CertPool
}

// Sender posts deliveries. It is safe for concurrent use, and keeps connections to the endpoints alive between
// attempts.
type Sender struct {
	client    *http.Client
	timeout   time.Duration
	maxBody   int64
	userAgent string
}

// NewSender returns a Sender whose every connection is checked by the egress rules with cfg.AllowInternal.
func NewSender(cfg SenderConfig) *Sender {
	s := &Sender{timeout: cfg.Timeout, maxBody: cfg.MaxResponseBytes, userAgent: cfg.UserAgent}
	if s.timeout <= 0 {
		s.timeout = defaultTimeout
	}
	if s.maxBody <= 0 {
		s.maxBody = defaultMaxResponseBytes
	}
	if s.userAgent == "" {
		s.userAgent = defaultUserAgent
	}
	policy := egress.Policy{AllowAll: true, AllowInternal: slices.Clone(cfg.AllowInternal)}
	// A response's headers are bounded like its body: an endpoint cannot make the sender hold more.
	tr := policy.Transport(cfg.RootCAs, s.timeout)
	tr.IdleConnTimeout, tr.MaxIdleConns = 90*time.Second, 64
	s.client = &http.Client{
		Transport: tr,
		// A redirect is never followed: the signed delivery would go to wherever it points.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return s
}

// Result is the outcome of one attempt.
type Result struct {
	// Status is the HTTP status of the response, 0 if there was none.
	Status int
	// Delivered: the endpoint answered 2xx.
	Delivered bool
	// Permanent: retrying cannot help, as the URL is refused (by the egress rules, or not an http(s) URL) or
	// the endpoint answered a redirect (3xx, never followed). A malformed secret, the caller's error rather than
	// the endpoint's, fails the attempt without being Permanent.
	Permanent bool
	// Err is a short human-readable reason when !Delivered, with neither the secret nor the URL's query in it:
	// "HTTP 500: <the start of the body>", "connect: destination not allowed: ...", "timeout after 10s".
	Err string
	// Body is the start of the response body, at most SenderConfig.MaxResponseBytes.
	Body []byte
	// Duration is how long the attempt took.
	Duration time.Duration
}

// maxErrBody bounds the part of a response body quoted in Result.Err.
const maxErrBody = 200

// Send POSTs body (Content-Type application/json) to rawURL with Sign's headers for secret, msgID and at (the
// time of this attempt). It never follows a redirect, reads at most MaxResponseBytes of the response, and
// gives up when ctx ends or after the Timeout. Only http and https URLs are sent to.
func (s *Sender) Send(ctx context.Context, rawURL, secret, msgID string, at time.Time, body []byte) Result {
	start := time.Now()
	r := s.send(ctx, rawURL, secret, msgID, at, body)
	r.Duration = time.Since(start)
	return r
}

func (s *Sender) send(ctx context.Context, rawURL, secret, msgID string, at time.Time, body []byte) Result {
	if err := ValidateURL(rawURL); err != nil {
		return Result{Permanent: true, Err: err.Error()}
	}
	h, err := Sign(secret, msgID, at, body)
	if err != nil {
		return Result{Err: err.Error()}
	}
	ctx, cancel := context.WithTimeoutCause(ctx, s.timeout, errTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, bytes.NewReader(body))
	if err != nil {
		return Result{Permanent: true, Err: "url: " + errors.Unwrap(err).Error()}
	}
	req.Header = h
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", s.userAgent)
	resp, err := s.client.Do(req)
	if err != nil {
		return Result{Permanent: errors.Is(err, egress.ErrDenied), Err: s.reason(ctx, err)}
	}
	defer resp.Body.Close()
	// The body is read, within the timeout, before the attempt counts as delivered: a receiver that fails
	// while answering has not acknowledged it.
	got, err := io.ReadAll(io.LimitReader(resp.Body, s.maxBody))
	if err == nil && ctx.Err() != nil {
		// The end of the body can arrive after the deadline: closing the connection tells the endpoint, which
		// may then finish its answer before the connection is gone. The attempt still timed out.
		err = ctx.Err()
	}
	r := Result{Status: resp.StatusCode, Body: got}
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		r.Permanent = true
		r.Err = fmt.Sprintf("HTTP %d: redirects are not followed", resp.StatusCode)
		if loc := resp.Header.Get("Location"); loc != "" {
			r.Err += " (Location: " + printable([]byte(loc), maxErrBody) + ")"
		}
	case resp.StatusCode < 200 || resp.StatusCode >= 300:
		r.Err = fmt.Sprintf("HTTP %d", resp.StatusCode)
		if b := printable(got, maxErrBody); b != "" {
			r.Err += ": " + b
		}
	case err != nil:
		r.Err = "read response: " + s.reason(ctx, err)
	default:
		r.Delivered = true
	}
	return r
}

// errTimeout is the cause of an attempt's context when the Sender's timeout ends it.
var errTimeout = errors.New("timeout")

// reason is the short reason of a failed request: the cause without the "Post <url>:" of *url.Error, which
// may quote a token of the URL's query.
func (s *Sender) reason(ctx context.Context, err error) string {
	if context.Cause(ctx) == errTimeout {
		return "timeout after " + s.timeout.String()
	}
	if ue, ok := errors.AsType[*url.Error](err); ok {
		err = ue.Err
	}
	if errors.Is(err, egress.ErrDenied) {
		return "connect: " + err.Error()
	}
	if ctx.Err() != nil {
		return "canceled: " + context.Cause(ctx).Error()
	}
	return err.Error()
}

// printable is b as text of at most n bytes (cut on a rune), invalid UTF-8 and control characters replaced, so
// that an endpoint's answer cannot garble a log or a console.
func printable(b []byte, n int) string {
	var sb strings.Builder
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		b = b[size:]
		switch {
		case r == '\n' || r == '\r' || r == '\t':
			r = ' '
		case r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Cf, r):
			r = utf8.RuneError // bidi overrides (Cf) included: the text shown is the text read
		}
		if sb.Len()+utf8.RuneLen(r) > n {
			break
		}
		sb.WriteRune(r)
	}
	return strings.TrimSpace(sb.String())
}

// Backoff bounds the delays between attempts.
const (
	firstBackoff = 5 * time.Second
	maxBackoff   = time.Hour
)

// Backoff returns the delay before retry number attempt (1 is the retry after the first failure): 5s doubling
// with each retry, capped at 1h, with jitter drawn in [d/2, d] so that the retries of many deliveries failed
// at once do not arrive together.
func Backoff(attempt int) time.Duration {
	d := firstBackoff
	for i := 1; i < attempt && d < maxBackoff; i++ {
		d *= 2
	}
	d = min(d, maxBackoff)
	return d/2 + rand.N(d/2+1)
}
