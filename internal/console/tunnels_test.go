package console_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/server"
	"github.com/corralhq/corral/internal/vault"
)

// TestConsoleTunnels: a tunnel created through the API is listed (name, domain) and opened; its token revealed
// on a click is the API's; a certificate that is no PEM is refused with the API's message on the form, a CA
// certificate pasted in the form is added and shown by its fingerprint, then archived in two clicks; the token
// rotated in two clicks is shown, the new one; the tunnel archived in two clicks leaves the list. A tunnel
// created through the list's form (after the API's refusal of a name too long) opens its page.
func TestConsoleTunnels(t *testing.T) {
	seal, err := vault.New(vault.NewKey())
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, false, func(c *server.Config) { c.API.Sealer = seal })
	var tn apitype.Tunnel
	e.api("POST", "/v1/tunnels", map[string]any{"display_name": "private MCP"}, &tn)
	e.login()
	e.do("g t", chromedp.KeyEvent("g"), chromedp.KeyEvent("t"))
	e.wait("listed", `(() => { const a = document.querySelector('[data-row]'); if (!location.hash.startsWith('#/tunnels') || !a || a.textContent !== 'private MCP') return false;
		const c = a.closest('tr').cells; return c[1].textContent === `+js(tn.Domain)+` && c[3].textContent === '—'; })()`)
	e.shot("step-tunnels")

	e.clickCSS(`a[href="#/tunnels/` + tn.ID + `"]`)
	e.wait("its page", `document.getElementById('tunnel-domain')?.textContent === `+js(tn.Domain)+` && !!document.querySelector('#certificates .empty')`)
	var tok apitype.TunnelToken
	e.api("POST", "/v1/tunnels/"+tn.ID+"/reveal_token", nil, &tok)
	e.click("reveal-token")
	e.wait("the token", `document.getElementById('new-token-value')?.value === `+js(tok.TunnelToken))

	// A certificate: refused when it is no PEM (the API's message on the form), then added from a CA's PEM.
	bad := e.refused("POST", "/v1/tunnels/"+tn.ID+"/certificates", map[string]any{"ca_certificate_pem": "not a certificate"})
	e.setValue("certificate-pem", "not a certificate")
	e.click("certificate-form-submit")
	e.wait("the API's refusal", formError("certificate-form", bad))
	caPEM, fingerprint := consoleCA(t)
	e.setValue("certificate-pem", caPEM)
	e.click("certificate-form-submit")
	row := `document.querySelector('#certificates tr[data-certificate]')`
	e.wait("the certificate", row+`?.cells[0].textContent.startsWith(`+js(fingerprint)+`) && document.getElementById('certificate-pem').value === ''`)
	e.shot("tunnel")
	var certs struct{ Data []apitype.TunnelCertificate }
	e.api("GET", "/v1/tunnels/"+tn.ID+"/certificates", nil, &certs)
	if len(certs.Data) != 1 || certs.Data[0].Fingerprint != fingerprint {
		t.Fatalf("the tunnel's certificates: %+v", certs.Data)
	}
	e.clickCSS(`[data-archive="` + certs.Data[0].ID + `"]`)
	e.wait("armed", `document.querySelector('[data-archive]').textContent.startsWith('Click again')`)
	e.clickCSS(`[data-archive="` + certs.Data[0].ID + `"]`)
	e.wait("the certificate archived", row+`?.cells[3].textContent === 'archived'`)
	e.api("GET", "/v1/tunnels/"+tn.ID+"/certificates", nil, &certs)
	if len(certs.Data) != 0 {
		t.Fatalf("active certificates after the archive: %+v", certs.Data)
	}

	// Rotate: the new token shown, the one the API reveals since.
	e.click("rotate-token")
	e.wait("rotate armed", `document.getElementById('rotate-token').textContent.startsWith('Click again')`)
	e.click("rotate-token")
	e.wait("the new token", `(document.getElementById('new-token-value')?.value || '').startsWith('ctt_') && document.getElementById('new-token-value').value !== `+js(tok.TunnelToken))
	var rot apitype.TunnelToken
	e.api("POST", "/v1/tunnels/"+tn.ID+"/reveal_token", nil, &rot)
	if got := e.eval(`document.getElementById('new-token-value').value`); got != rot.TunnelToken || rot.ID == tok.ID {
		t.Fatalf("the page shows %q after the rotation, the API reveals %+v (was %s)", got, rot, tok.ID)
	}

	// Archive the tunnel: back to the list, where it shows only with the archived ones.
	e.click("archive-tunnel")
	e.wait("archive armed", `document.getElementById('archive-tunnel').textContent.startsWith('Click again')`)
	e.click("archive-tunnel")
	e.wait("the list without it", `location.hash.startsWith('#/tunnels') && !document.getElementById('tunnel-domain') && !!document.querySelector('table.list .empty')`)
	var got apitype.Tunnel
	e.api("GET", "/v1/tunnels/"+tn.ID, nil, &got)
	if got.ArchivedAt == nil {
		t.Fatalf("the tunnel after Archive: %+v", got)
	}
	e.clickCSS("#f-archived")
	e.wait("listed archived", `(() => { const a = document.querySelector('[data-row]'); return !!a && a.textContent === 'private MCP' && a.closest('tr').cells[3].textContent !== '—'; })()`)

	// The form: a name too long is refused with the API's message, a good one makes a tunnel and opens it.
	long := strings.Repeat("n", 256)
	bad = e.refused("POST", "/v1/tunnels", map[string]any{"display_name": long})
	e.clickCSS("#new-tunnel summary")
	e.setValue("tunnel-name", long)
	e.click("tunnel-form-submit")
	e.wait("the API's refusal", formError("tunnel-form", bad))
	e.setValue("tunnel-name", "staging")
	e.click("tunnel-form-submit")
	e.wait("the new tunnel's page", `location.hash.startsWith('#/tunnels/tnl_') && document.querySelector('h1')?.textContent === 'staging'`+
		` && (document.getElementById('tunnel-domain')?.textContent || '').endsWith('.tunnels.corral.internal')`)
}

// consoleCA makes a CA certificate and returns its PEM and the fingerprint the API shows: the hex SHA-256 of its
// DER.
func consoleCA(t *testing.T) (string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "console test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		BasicConstraintsValid: true, IsCA: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(der)
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), hex.EncodeToString(sum[:])
}
