package storetest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// hexSHA256 is the lowercase hex SHA-256 of s.
func hexSHA256(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// newTunnel is an active tunnel created at created, with a domain and a token of its own.
func newTunnel(created time.Time) *store.TunnelRecord {
	id := apitype.NewID(apitype.PrefixTunnel)
	name := "tunnel " + id
	r := &store.TunnelRecord{Tunnel: apitype.Tunnel{Type: apitype.ObjectTunnel, ID: id, DisplayName: &name,
		Domain: hexSHA256(id)[:16] + ".tunnels.example.com", CreatedAt: created}}
	setTunnelToken(r, 5)
	return r
}

// setTunnelToken gives the tunnel a new token (as a rotation does): its id, the hash of its plaintext and its
// sealed form.
func setTunnelToken(r *store.TunnelRecord, n byte) {
	r.TokenID = apitype.NewID(apitype.PrefixTunnelToken)
	r.TokenHash = hexSHA256("plaintext of " + r.TokenID)
	r.Token = sealed(r.ID, r.TokenID, "key_1", n)
}

func createTunnel(t testing.TB, s store.Store, created time.Time) *store.TunnelRecord {
	t.Helper()
	r := newTunnel(created)
	must(t, s.TunnelCreate(ctxBg, r), "create tunnel")
	return r
}

// newTunnelCertificate is an active certificate of the tunnel created at created.
func newTunnelCertificate(tunnelID string, created time.Time) *store.TunnelCertificateRecord {
	id := apitype.NewID(apitype.PrefixTunnelCert)
	expires := created.Add(365 * 24 * time.Hour)
	return &store.TunnelCertificateRecord{
		TunnelCertificate: apitype.TunnelCertificate{Type: apitype.ObjectTunnelCertificate, ID: id, TunnelID: tunnelID,
			Fingerprint: hexSHA256(id), CreatedAt: created, ExpiresAt: &expires},
		PEM: "-----BEGIN CERTIFICATE-----\n" + id + "\n-----END CERTIFICATE-----\n",
	}
}

func createTunnelCertificate(t testing.TB, s store.Store, tunnelID string, created time.Time) *store.TunnelCertificateRecord {
	t.Helper()
	c := newTunnelCertificate(tunnelID, created)
	must(t, s.TunnelCertificateCreate(ctxBg, c), "create tunnel certificate")
	return c
}

func tunnelID(r *store.TunnelRecord) string                { return r.ID }
func tunnelCertID(c *store.TunnelCertificateRecord) string { return c.ID }

// archiveTunnel archives the tunnel at at through TunnelUpdate.
func archiveTunnel(t testing.TB, s store.Store, id string, at time.Time) *store.TunnelRecord {
	t.Helper()
	r, err := s.TunnelUpdate(ctxBg, id, func(r *store.TunnelRecord) error {
		store.Archive(&r.ArchivedAt, new(time.Time), at)
		return nil
	})
	must(t, err, "archive tunnel")
	return r
}

// sameTunnel fails unless got is the tunnel want, its sealed token included.
func sameTunnel(t testing.TB, got, want *store.TunnelRecord, what string) {
	t.Helper()
	equal(t, got.ID, want.ID, what+": id")
	equal(t, got.Type, apitype.ObjectTunnel, what+": type")
	equal(t, got.Domain, want.Domain, what+": domain")
	equal(t, *got.DisplayName, *want.DisplayName, what+": display_name")
	sameTime(t, got.CreatedAt, want.CreatedAt, what+": created_at")
	equal(t, got.ArchivedAt == nil, want.ArchivedAt == nil, what+": archived")
	equal(t, got.TokenID, want.TokenID, what+": token id")
	equal(t, got.TokenHash, want.TokenHash, what+": token hash")
	equal(t, got.Token.CredentialID, want.Token.CredentialID, what+": sealed token's credential id")
	equal(t, got.Token.Name, want.Token.Name, what+": sealed token's name")
	equal(t, got.Token.KeyID, want.Token.KeyID, what+": sealed token's key")
	equal(t, string(got.Token.WrappedKey), string(want.Token.WrappedKey), what+": sealed token's wrapped key")
	equal(t, string(got.Token.Ciphertext), string(want.Token.Ciphertext), what+": sealed token's ciphertext")
}

// testTunnel: create, get, the unique id, domain (archived tunnels' too) and token hash, the lookups by domain
// and by token hash (a rotated token's hash finds nothing), and the Update rule (KeepTunnel).
func testTunnel(t *testing.T, h Harness) {
	s := h.open(t)
	a := newTunnel(base)
	must(t, s.TunnelCreate(ctxBg, a), "create tunnel")
	got, err := s.TunnelGet(ctxBg, a.ID)
	must(t, err, "get tunnel")
	sameTunnel(t, got, a, "got")
	_, err = s.TunnelGet(ctxBg, "tnl_missing")
	mustIs(t, err, store.ErrNotFound, "get unknown tunnel")

	dup := newTunnel(base)
	dup.ID = a.ID
	mustIs(t, s.TunnelCreate(ctxBg, dup), store.ErrConflict, "create a tunnel of a taken id")
	dup = newTunnel(base)
	dup.Domain = a.Domain
	mustIs(t, s.TunnelCreate(ctxBg, dup), store.ErrConflict, "create a tunnel of a taken domain")
	dup = newTunnel(base)
	dup.TokenHash = a.TokenHash
	mustIs(t, s.TunnelCreate(ctxBg, dup), store.ErrConflict, "create a tunnel of a taken token hash")
	_, err = s.TunnelGet(ctxBg, dup.ID)
	mustIs(t, err, store.ErrNotFound, "a tunnel refused is not stored")

	got, err = s.TunnelByDomain(ctxBg, a.Domain)
	must(t, err, "tunnel by domain")
	sameTunnel(t, got, a, "by domain")
	_, err = s.TunnelByDomain(ctxBg, "other."+a.Domain)
	mustIs(t, err, store.ErrNotFound, "tunnel by unknown domain")
	got, err = s.TunnelByTokenHash(ctxBg, a.TokenHash)
	must(t, err, "tunnel by token hash")
	sameTunnel(t, got, a, "by token hash")
	_, err = s.TunnelByTokenHash(ctxBg, hexSHA256("no such token"))
	mustIs(t, err, store.ErrNotFound, "tunnel by unknown token hash")

	// A rotation: the old hash finds nothing, the new one the tunnel; what KeepTunnel keeps stays.
	old := *a
	rotated := *a
	setTunnelToken(&rotated, 9)
	name := "renamed"
	upd, err := s.TunnelUpdate(ctxBg, a.ID, func(r *store.TunnelRecord) error {
		r.TokenID, r.TokenHash, r.Token = rotated.TokenID, rotated.TokenHash, rotated.Token
		r.DisplayName = &name
		r.ID, r.Domain, r.CreatedAt, r.Type = "tnl_other", "other.example.com", base.Add(time.Hour), "other"
		return nil
	})
	must(t, err, "rotate tunnel token")
	rotated.DisplayName = &name
	sameTunnel(t, upd, &rotated, "updated")
	got, err = s.TunnelGet(ctxBg, a.ID)
	must(t, err, "get rotated tunnel")
	sameTunnel(t, got, &rotated, "stored after the update")
	_, err = s.TunnelGet(ctxBg, "tnl_other")
	mustIs(t, err, store.ErrNotFound, "the update kept the id")
	_, err = s.TunnelByDomain(ctxBg, "other.example.com")
	mustIs(t, err, store.ErrNotFound, "the update kept the domain")
	_, err = s.TunnelByTokenHash(ctxBg, old.TokenHash)
	mustIs(t, err, store.ErrNotFound, "the rotated token's hash")
	got, err = s.TunnelByTokenHash(ctxBg, rotated.TokenHash)
	must(t, err, "tunnel by the new token's hash")
	equal(t, got.ID, a.ID, "the new token's tunnel")
	// The old hash is free: another tunnel may have it (a fresh token never hashes to it in practice).
	b := newTunnel(base.Add(time.Second))
	b.TokenHash = old.TokenHash
	must(t, s.TunnelCreate(ctxBg, b), "create a tunnel with the rotated token's hash")
	_, err = s.TunnelUpdate(ctxBg, b.ID, func(r *store.TunnelRecord) error { r.TokenHash = rotated.TokenHash; return nil })
	mustIs(t, err, store.ErrConflict, "rotate to a token hash another tunnel has")

	boom := fmt.Errorf("boom")
	_, err = s.TunnelUpdate(ctxBg, a.ID, func(r *store.TunnelRecord) error { r.DisplayName = nil; return boom })
	mustIs(t, err, boom, "update whose fn fails")
	got, err = s.TunnelGet(ctxBg, a.ID)
	must(t, err, "get tunnel after a failed update")
	equal(t, *got.DisplayName, name, "a failed update changes nothing")
	_, err = s.TunnelUpdate(ctxBg, "tnl_missing", func(*store.TunnelRecord) error { return nil })
	mustIs(t, err, store.ErrNotFound, "update unknown tunnel")

	// Archived: it stays archived, its token (id and hash) cannot change, and its domain is never reused.
	at := base.Add(2 * time.Hour)
	arch := archiveTunnel(t, s, a.ID, at)
	sameTime(t, *arch.ArchivedAt, at, "archived_at")
	upd, err = s.TunnelUpdate(ctxBg, a.ID, func(r *store.TunnelRecord) error {
		r.ArchivedAt = nil
		r.TokenID, r.TokenHash, r.Token = old.TokenID, old.TokenHash, old.Token
		r.DisplayName = nil
		return nil
	})
	must(t, err, "update archived tunnel")
	equal(t, upd.DisplayName == nil, true, "an archived tunnel's name still changes")
	got, err = s.TunnelGet(ctxBg, a.ID)
	must(t, err, "get archived tunnel")
	equal(t, got.ArchivedAt != nil, true, "an archived tunnel stays archived")
	sameTime(t, *got.ArchivedAt, at, "archived_at kept")
	equal(t, got.TokenID, rotated.TokenID, "an archived tunnel's token id stays")
	equal(t, got.TokenHash, rotated.TokenHash, "an archived tunnel's token hash stays")
	// Its sealing may change (a vault key rotation rewraps it), not which token it is.
	equal(t, string(got.Token.Ciphertext), string(old.Token.Ciphertext), "an archived tunnel's token is rewrapped")
	got, err = s.TunnelByDomain(ctxBg, a.Domain)
	must(t, err, "archived tunnel by domain")
	equal(t, got.ID, a.ID, "an archived tunnel keeps its domain")
	got, err = s.TunnelByTokenHash(ctxBg, rotated.TokenHash)
	must(t, err, "archived tunnel by token hash")
	equal(t, got.ID, a.ID, "an archived tunnel is found by its token")
	dup = newTunnel(base)
	dup.Domain = a.Domain
	mustIs(t, s.TunnelCreate(ctxBg, dup), store.ErrConflict, "create a tunnel of an archived tunnel's domain")
}

// testTunnelCertificate: create, get (of its tunnel only), the refusals (unknown or archived tunnel, taken id),
// the limit of active certificates, and the idempotent archive.
func testTunnelCertificate(t *testing.T, h Harness) {
	s := h.open(t)
	a := createTunnel(t, s, base)
	other := createTunnel(t, s, base)
	c1 := createTunnelCertificate(t, s, a.ID, base.Add(time.Second))
	got, err := s.TunnelCertificateGet(ctxBg, a.ID, c1.ID)
	must(t, err, "get certificate")
	equal(t, got.ID, c1.ID, "id")
	equal(t, got.Type, apitype.ObjectTunnelCertificate, "type")
	equal(t, got.TunnelID, a.ID, "tunnel id")
	equal(t, got.Fingerprint, c1.Fingerprint, "fingerprint")
	equal(t, got.PEM, c1.PEM, "pem")
	sameTime(t, got.CreatedAt, c1.CreatedAt, "created_at")
	sameTime(t, *got.ExpiresAt, *c1.ExpiresAt, "expires_at")
	equal(t, got.ArchivedAt == nil, true, "active")
	_, err = s.TunnelCertificateGet(ctxBg, other.ID, c1.ID)
	mustIs(t, err, store.ErrNotFound, "get certificate of another tunnel")
	_, err = s.TunnelCertificateGet(ctxBg, a.ID, "tcrt_missing")
	mustIs(t, err, store.ErrNotFound, "get unknown certificate")

	mustIs(t, s.TunnelCertificateCreate(ctxBg, newTunnelCertificate("tnl_missing", base)), store.ErrNotFound,
		"certificate of an unknown tunnel")
	dup := newTunnelCertificate(other.ID, base)
	dup.ID = c1.ID
	mustIs(t, s.TunnelCertificateCreate(ctxBg, dup), store.ErrConflict, "certificate of a taken id")

	c2 := createTunnelCertificate(t, s, a.ID, base.Add(2*time.Second))
	extra := newTunnelCertificate(a.ID, base.Add(3*time.Second))
	mustIs(t, s.TunnelCertificateCreate(ctxBg, extra), store.ErrTunnelCertificateLimit, "a third active certificate")
	_, err = s.TunnelCertificateGet(ctxBg, a.ID, extra.ID)
	mustIs(t, err, store.ErrNotFound, "a refused certificate is not stored")
	createTunnelCertificate(t, s, other.ID, base) // the limit is per tunnel

	_, err = s.TunnelCertificateArchive(ctxBg, other.ID, c1.ID)
	mustIs(t, err, store.ErrNotFound, "archive a certificate of another tunnel")
	_, err = s.TunnelCertificateArchive(ctxBg, a.ID, "tcrt_missing")
	mustIs(t, err, store.ErrNotFound, "archive unknown certificate")
	before := apitype.Now()
	arch, err := s.TunnelCertificateArchive(ctxBg, a.ID, c1.ID)
	must(t, err, "archive certificate")
	if arch.ArchivedAt == nil || arch.ArchivedAt.Before(before) {
		t.Fatalf("archived certificate: archived_at %v, want a time from %v", arch.ArchivedAt, before)
	}
	equal(t, arch.PEM, c1.PEM, "archived certificate's pem")
	again, err := s.TunnelCertificateArchive(ctxBg, a.ID, c1.ID)
	must(t, err, "archive certificate again")
	sameTime(t, *again.ArchivedAt, *arch.ArchivedAt, "archiving again keeps the time")
	got, err = s.TunnelCertificateGet(ctxBg, a.ID, c1.ID)
	must(t, err, "get archived certificate")
	sameTime(t, *got.ArchivedAt, *arch.ArchivedAt, "stored archived_at")

	// One slot is free again, and only one.
	createTunnelCertificate(t, s, a.ID, base.Add(3*time.Second))
	mustIs(t, s.TunnelCertificateCreate(ctxBg, newTunnelCertificate(a.ID, base.Add(4*time.Second))),
		store.ErrTunnelCertificateLimit, "a third active certificate after one was replaced")
	got, err = s.TunnelCertificateGet(ctxBg, a.ID, c2.ID)
	must(t, err, "get second certificate")
	equal(t, got.ArchivedAt == nil, true, "the second certificate is still active")
}

// testTunnelArchive: archiving a tunnel archives its active certificates at the same time and leaves the
// archived ones' times; an archived tunnel takes no certificate.
func testTunnelArchive(t *testing.T, h Harness) {
	s := h.open(t)
	a := createTunnel(t, s, base)
	other := createTunnel(t, s, base)
	old := createTunnelCertificate(t, s, a.ID, base.Add(time.Second))
	oldArch, err := s.TunnelCertificateArchive(ctxBg, a.ID, old.ID)
	must(t, err, "archive a certificate")
	c1 := createTunnelCertificate(t, s, a.ID, base.Add(2*time.Second))
	c2 := createTunnelCertificate(t, s, a.ID, base.Add(3*time.Second))
	kept := createTunnelCertificate(t, s, other.ID, base.Add(time.Second))

	at := base.Add(time.Hour)
	archiveTunnel(t, s, a.ID, at)
	for _, c := range []*store.TunnelCertificateRecord{c1, c2} {
		got, err := s.TunnelCertificateGet(ctxBg, a.ID, c.ID)
		must(t, err, "get certificate of the archived tunnel")
		if got.ArchivedAt == nil {
			t.Fatalf("certificate %s of the archived tunnel is active", c.ID)
		}
		sameTime(t, *got.ArchivedAt, at, "an active certificate is archived with its tunnel")
	}
	got, err := s.TunnelCertificateGet(ctxBg, a.ID, old.ID)
	must(t, err, "get certificate archived before")
	sameTime(t, *got.ArchivedAt, *oldArch.ArchivedAt, "a certificate archived before keeps its time")
	got, err = s.TunnelCertificateGet(ctxBg, other.ID, kept.ID)
	must(t, err, "get another tunnel's certificate")
	equal(t, got.ArchivedAt == nil, true, "another tunnel's certificate stays active")
	active, err := s.TunnelCertificateList(ctxBg, a.ID, &store.ListParams{})
	must(t, err, "list active certificates of the archived tunnel")
	equal(t, len(active), 0, "no active certificate of the archived tunnel")

	mustIs(t, s.TunnelCertificateCreate(ctxBg, newTunnelCertificate(a.ID, base.Add(time.Hour))), store.ErrTunnelArchived,
		"certificate of an archived tunnel")
	// Archiving again changes nothing: not the tunnel's time, nor its certificates'.
	later := at.Add(time.Hour)
	_, err = s.TunnelUpdate(ctxBg, a.ID, func(r *store.TunnelRecord) error { r.ArchivedAt = &later; return nil })
	must(t, err, "archive the tunnel again")
	tun, err := s.TunnelGet(ctxBg, a.ID)
	must(t, err, "get archived tunnel")
	sameTime(t, *tun.ArchivedAt, at, "archiving again keeps the time")
	got, err = s.TunnelCertificateGet(ctxBg, a.ID, c1.ID)
	must(t, err, "get certificate")
	sameTime(t, *got.ArchivedAt, at, "archiving again keeps the certificates' time")
	arch, err := s.TunnelCertificateArchive(ctxBg, a.ID, c2.ID)
	must(t, err, "archive a certificate archived with its tunnel")
	sameTime(t, *arch.ArchivedAt, at, "the cascade's time stays")
}

// testTunnelCertificateRace: of concurrent creates of certificates of a fresh tunnel, exactly
// store.MaxTunnelCertificates succeed, and the others get ErrTunnelCertificateLimit.
func testTunnelCertificateRace(t *testing.T, h Harness) {
	s := h.open(t)
	const n, rounds = 8, 4
	openConnections(s, "memstore_none", n) // any read opens a connection: the store need not exist
	for round := range rounds {
		tun := createTunnel(t, s, base)
		errs := make([]error, n)
		certs := make([]*store.TunnelCertificateRecord, n)
		for i := range certs {
			certs[i] = newTunnelCertificate(tun.ID, base.Add(time.Duration(i)*time.Second))
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = s.TunnelCertificateCreate(ctxBg, certs[i])
			}()
		}
		close(start)
		wg.Wait()
		won := map[string]bool{}
		for i, err := range errs {
			if err == nil {
				won[certs[i].ID] = true
				continue
			}
			mustIs(t, err, store.ErrTunnelCertificateLimit, fmt.Sprintf("round %d: losing create %d", round, i))
		}
		equal(t, len(won), store.MaxTunnelCertificates, fmt.Sprintf("round %d: creates that won", round))
		list, err := s.TunnelCertificateList(ctxBg, tun.ID, &store.ListParams{IncludeArchived: true})
		must(t, err, "list certificates")
		equal(t, len(list), store.MaxTunnelCertificates, fmt.Sprintf("round %d: certificates stored", round))
		for _, c := range list {
			equal(t, won[c.ID], true, fmt.Sprintf("round %d: certificate %s stored by a create that won", round, c.ID))
		}
	}
}

// testTunnelList: by (created_at, id), paging with a cursor, newest first, archived ones only if asked, the
// created_at filters.
func testTunnelList(t *testing.T, h Harness) {
	s := h.open(t)
	var all []*store.TunnelRecord
	for i := range 5 {
		all = append(all, createTunnel(t, s, base.Add(time.Duration(i)*time.Second)))
	}
	archiveTunnel(t, s, all[3].ID, base.Add(time.Hour))
	list := func(p *store.ListParams) string {
		t.Helper()
		got, err := s.TunnelList(ctxBg, p)
		must(t, err, "list tunnels")
		return ids(got, tunnelID)
	}
	join := func(rs ...*store.TunnelRecord) string {
		return ids(rs, func(r **store.TunnelRecord) string { return (*r).ID })
	}
	equal(t, list(&store.ListParams{}), join(all[0], all[1], all[2], all[4]), "oldest first, archived left out")
	equal(t, list(&store.ListParams{IncludeArchived: true}), join(all...), "with archived")
	equal(t, list(&store.ListParams{Desc: true}), join(all[4], all[2], all[1], all[0]), "newest first")
	equal(t, list(&store.ListParams{Limit: 2}), join(all[0], all[1]), "first page")
	equal(t, list(&store.ListParams{Limit: 2, After: &store.Cursor{CreatedAt: all[1].CreatedAt, ID: all[1].ID}}),
		join(all[2], all[4]), "second page")
	equal(t, list(&store.ListParams{Limit: 2, IncludeArchived: true,
		After: &store.Cursor{CreatedAt: all[2].CreatedAt, ID: all[2].ID}}), join(all[3], all[4]), "a page with archived")
	equal(t, list(&store.ListParams{Desc: true, Limit: 2, After: &store.Cursor{CreatedAt: all[2].CreatedAt, ID: all[2].ID}}),
		join(all[1], all[0]), "a page newest first")
	gt, lt := all[0].CreatedAt, all[4].CreatedAt
	equal(t, list(&store.ListParams{IncludeArchived: true, CreatedAfter: &gt, CreatedBefore: &lt}),
		join(all[1], all[2], all[3]), "created_at gt and lt")
	from, to := all[1].CreatedAt, all[3].CreatedAt
	equal(t, list(&store.ListParams{CreatedFrom: &from, CreatedTo: &to}), join(all[1], all[2]), "created_at gte and lte")
}

// testTunnelCertificateList: a tunnel's certificates only, by (created_at, id), paging with a cursor, newest
// first, archived ones only if asked.
func testTunnelCertificateList(t *testing.T, h Harness) {
	s := h.open(t)
	a := createTunnel(t, s, base)
	other := createTunnel(t, s, base)
	createTunnelCertificate(t, s, other.ID, base)
	var all []*store.TunnelCertificateRecord
	for i := range 5 {
		all = append(all, createTunnelCertificate(t, s, a.ID, base.Add(time.Duration(i)*time.Second)))
		if i < 3 { // two active at most: archive all but the last two
			_, err := s.TunnelCertificateArchive(ctxBg, a.ID, all[i].ID)
			must(t, err, "archive certificate")
		}
	}
	list := func(p *store.ListParams) string {
		t.Helper()
		got, err := s.TunnelCertificateList(ctxBg, a.ID, p)
		must(t, err, "list certificates")
		return ids(got, tunnelCertID)
	}
	join := func(cs ...*store.TunnelCertificateRecord) string {
		return ids(cs, func(c **store.TunnelCertificateRecord) string { return (*c).ID })
	}
	equal(t, list(&store.ListParams{}), join(all[3], all[4]), "active ones, oldest first")
	equal(t, list(&store.ListParams{IncludeArchived: true}), join(all...), "with archived")
	equal(t, list(&store.ListParams{IncludeArchived: true, Desc: true}), join(all[4], all[3], all[2], all[1], all[0]),
		"newest first")
	equal(t, list(&store.ListParams{IncludeArchived: true, Limit: 2}), join(all[0], all[1]), "first page")
	equal(t, list(&store.ListParams{IncludeArchived: true, Limit: 2,
		After: &store.Cursor{CreatedAt: all[1].CreatedAt, ID: all[1].ID}}), join(all[2], all[3]), "second page")
	equal(t, list(&store.ListParams{IncludeArchived: true, Desc: true, Limit: 2,
		After: &store.Cursor{CreatedAt: all[3].CreatedAt, ID: all[3].ID}}), join(all[2], all[1]), "a page newest first")
	equal(t, list(&store.ListParams{Desc: true, After: &store.Cursor{CreatedAt: all[4].CreatedAt, ID: all[4].ID}}),
		join(all[3]), "active, after a cursor, newest first")
	gt := all[2].CreatedAt
	equal(t, list(&store.ListParams{IncludeArchived: true, CreatedAfter: &gt}), join(all[3], all[4]), "created_at gt")
}
