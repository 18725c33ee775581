package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

func newVault(created time.Time) *apitype.Vault {
	return &apitype.Vault{Type: apitype.ObjectVault, ID: apitype.NewID(apitype.PrefixVault), DisplayName: "vault",
		Metadata: map[string]string{"team": "a"}, CreatedAt: created, UpdatedAt: created}
}

func newCredential(vaultID string, created time.Time, url string) *apitype.Credential {
	name := "bearer"
	return &apitype.Credential{Type: apitype.ObjectCredential, ID: apitype.NewID(apitype.PrefixCredential), VaultID: vaultID,
		DisplayName: &name, Metadata: map[string]string{}, CreatedAt: created, UpdatedAt: created,
		Auth: apitype.CredentialAuth{Type: apitype.AuthStaticBearer, MCPServerURL: url}}
}

// sealed is a stand-in for a sealed secret: the store treats its bytes as opaque.
func sealed(credentialID, name, keyID string, n byte) store.SealedSecret {
	return store.SealedSecret{CredentialID: credentialID, Name: name, KeyID: keyID,
		WrappedKey: bytes.Repeat([]byte{n}, 60), Ciphertext: append(bytes.Repeat([]byte{n + 1}, 40), 0, 0xff)}
}

func ids[T any](items []T, id func(*T) string) string {
	out := make([]string, len(items))
	for i := range items {
		out[i] = id(&items[i])
	}
	return strings.Join(out, ",")
}

func vaultID(v *apitype.Vault) string           { return v.ID }
func credentialID(c *apitype.Credential) string { return c.ID }

func testVault(t *testing.T, h Harness) {
	s := h.open(t)
	v := newVault(base)
	must(t, s.VaultCreate(ctxBg, v), "create vault")
	mustIs(t, s.VaultCreate(ctxBg, v), store.ErrConflict, "create vault twice")
	got, err := s.VaultGet(ctxBg, v.ID)
	must(t, err, "get vault")
	equal(t, got.DisplayName, "vault", "display name")
	equal(t, got.Metadata["team"], "a", "metadata")
	sameTime(t, got.CreatedAt, base, "created_at")
	equal(t, got.ArchivedAt == nil, true, "not archived")
	_, err = s.VaultGet(ctxBg, "vlt_missing")
	mustIs(t, err, store.ErrNotFound, "get unknown vault")

	later := base.Add(time.Minute)
	upd, err := s.VaultUpdate(ctxBg, v.ID, func(v *apitype.Vault) error {
		v.DisplayName, v.UpdatedAt = "renamed", later
		return nil
	})
	must(t, err, "update vault")
	equal(t, upd.DisplayName, "renamed", "updated name")
	got, err = s.VaultGet(ctxBg, v.ID)
	must(t, err, "get updated vault")
	equal(t, got.DisplayName, "renamed", "stored name")
	sameTime(t, got.UpdatedAt, later, "updated_at")
	boom := errors.New("boom")
	_, err = s.VaultUpdate(ctxBg, v.ID, func(v *apitype.Vault) error { v.DisplayName = "lost"; return boom })
	mustIs(t, err, boom, "update whose fn fails")
	got, err = s.VaultGet(ctxBg, v.ID)
	must(t, err, "get after failed update")
	equal(t, got.DisplayName, "renamed", "a failed update writes nothing")
	_, err = s.VaultUpdate(ctxBg, "vlt_missing", func(*apitype.Vault) error { return nil })
	mustIs(t, err, store.ErrNotFound, "update unknown vault")

	mustIs(t, s.VaultDelete(ctxBg, "vlt_missing"), store.ErrNotFound, "delete unknown vault")
	must(t, s.VaultDelete(ctxBg, v.ID), "delete vault")
	_, err = s.VaultGet(ctxBg, v.ID)
	mustIs(t, err, store.ErrNotFound, "get deleted vault")
	_, err = s.VaultArchive(ctxBg, &store.ArchiveParams{ID: v.ID, At: later})
	mustIs(t, err, store.ErrNotFound, "archive deleted vault")
}

func testVaultList(t *testing.T, h Harness) {
	s := h.open(t)
	var vids []string
	for i := range 4 {
		v := newVault(base.Add(time.Duration(i) * time.Second))
		must(t, s.VaultCreate(ctxBg, v), "create vault")
		vids = append(vids, v.ID)
	}
	at := base.Add(time.Hour)
	arch, err := s.VaultArchive(ctxBg, &store.ArchiveParams{ID: vids[2], At: at})
	must(t, err, "archive vault")
	sameTime(t, *arch.ArchivedAt, at, "archived_at")
	again, err := s.VaultArchive(ctxBg, &store.ArchiveParams{ID: vids[2], At: at.Add(time.Hour)})
	must(t, err, "archive again")
	sameTime(t, *again.ArchivedAt, at, "archiving again keeps the first time")

	list, err := s.VaultList(ctxBg, &store.ListParams{Limit: 10})
	must(t, err, "list")
	equal(t, ids(list, vaultID), strings.Join([]string{vids[0], vids[1], vids[3]}, ","), "list excludes archived")
	list, err = s.VaultList(ctxBg, &store.ListParams{Limit: 10, IncludeArchived: true, Desc: true})
	must(t, err, "list desc")
	equal(t, ids(list, vaultID), strings.Join([]string{vids[3], vids[2], vids[1], vids[0]}, ","), "list desc with archived")
	list, err = s.VaultList(ctxBg, &store.ListParams{Limit: 1, After: &store.Cursor{CreatedAt: base, ID: vids[0]}})
	must(t, err, "list after cursor")
	equal(t, ids(list, vaultID), vids[1], "list after cursor")
}

func testCredential(t *testing.T, h Harness) {
	s := h.open(t)
	v := newVault(base)
	must(t, s.VaultCreate(ctxBg, v), "create vault")
	c := newCredential(v.ID, base, "https://mcp.example.com/")
	tok := sealed(c.ID, "token", "mk_a", 1)
	must(t, s.CredentialCreate(ctxBg, &store.CredentialCreateParams{Credential: c, MatchKey: "mcp:https://mcp.example.com/",
		Secrets: []store.SealedSecret{tok}}), "create credential")

	got, err := s.CredentialGet(ctxBg, &store.CredentialRef{VaultID: v.ID, ID: c.ID})
	must(t, err, "get credential")
	equal(t, got.Auth.Type, apitype.AuthStaticBearer, "auth type")
	equal(t, got.Auth.MCPServerURL, "https://mcp.example.com/", "mcp_server_url")
	equal(t, *got.DisplayName, "bearer", "display name")
	_, err = s.CredentialGet(ctxBg, &store.CredentialRef{VaultID: "vlt_other", ID: c.ID})
	mustIs(t, err, store.ErrNotFound, "get credential through another vault")

	secs, err := s.SecretList(ctxBg, &store.SecretListParams{CredentialID: c.ID})
	must(t, err, "list secrets")
	equal(t, len(secs), 1, "one secret")
	equal(t, secs[0].Name, "token", "secret name")
	equal(t, secs[0].KeyID, "mk_a", "key id")
	equal(t, bytes.Equal(secs[0].WrappedKey, tok.WrappedKey) && bytes.Equal(secs[0].Ciphertext, tok.Ciphertext), true,
		"secret bytes round-trip")

	// Uniqueness of the match key among unarchived credentials of a vault, and the vault's own checks.
	dup := newCredential(v.ID, base, "https://mcp.example.com/")
	err = s.CredentialCreate(ctxBg, &store.CredentialCreateParams{Credential: dup, MatchKey: "mcp:https://mcp.example.com/"})
	mustIs(t, err, store.ErrConflict, "second credential for the same server")
	err = s.CredentialCreate(ctxBg, &store.CredentialCreateParams{Credential: c, MatchKey: "mcp:other"})
	mustIs(t, err, store.ErrConflict, "credential id twice")
	orphan := newCredential("vlt_missing", base, "https://x/")
	err = s.CredentialCreate(ctxBg, &store.CredentialCreateParams{Credential: orphan, MatchKey: "mcp:https://x/"})
	mustIs(t, err, store.ErrNotFound, "credential of an unknown vault")

	// Update: the document and the secrets it returns, atomically.
	later := base.Add(time.Minute)
	upd, err := s.CredentialUpdate(ctxBg, &store.CredentialUpdateParams{CredentialRef: store.CredentialRef{VaultID: v.ID, ID: c.ID},
		Update: func(c *apitype.Credential) ([]store.SealedSecret, error) {
			c.Metadata = map[string]string{"k": "v"}
			c.UpdatedAt = later
			return []store.SealedSecret{sealed(c.ID, "token", "mk_b", 7), sealed(c.ID, "extra", "mk_b", 9)}, nil
		}})
	must(t, err, "update credential")
	equal(t, upd.Metadata["k"], "v", "updated metadata")
	secs, err = s.SecretList(ctxBg, &store.SecretListParams{CredentialID: c.ID})
	must(t, err, "list secrets after update")
	equal(t, len(secs), 2, "secrets after update")
	equal(t, secs[0].Name+"/"+secs[0].KeyID+","+secs[1].Name+"/"+secs[1].KeyID, "extra/mk_b,token/mk_b", "replaced secrets")
	_, err = s.CredentialUpdate(ctxBg, &store.CredentialUpdateParams{CredentialRef: store.CredentialRef{VaultID: v.ID, ID: c.ID},
		Update: func(c *apitype.Credential) ([]store.SealedSecret, error) {
			return []store.SealedSecret{{CredentialID: c.ID, Name: "extra"}}, nil // nil ciphertext removes
		}})
	must(t, err, "update removing a secret")
	boom := errors.New("boom")
	_, err = s.CredentialUpdate(ctxBg, &store.CredentialUpdateParams{CredentialRef: store.CredentialRef{VaultID: v.ID, ID: c.ID},
		Update: func(c *apitype.Credential) ([]store.SealedSecret, error) {
			c.Metadata = map[string]string{"lost": "yes"}
			return []store.SealedSecret{sealed(c.ID, "token", "mk_lost", 3)}, boom
		}})
	mustIs(t, err, boom, "update whose fn fails")
	secs, err = s.SecretList(ctxBg, &store.SecretListParams{CredentialID: c.ID})
	must(t, err, "list secrets after failed update")
	equal(t, len(secs), 1, "secrets after removal")
	equal(t, secs[0].KeyID, "mk_b", "a failed update writes no secret")
	got, err = s.CredentialGet(ctxBg, &store.CredentialRef{VaultID: v.ID, ID: c.ID})
	must(t, err, "get after failed update")
	equal(t, got.Metadata["lost"], "", "a failed update writes no document")
	_, err = s.CredentialUpdate(ctxBg, &store.CredentialUpdateParams{CredentialRef: store.CredentialRef{VaultID: v.ID, ID: "vcrd_missing"},
		Update: func(*apitype.Credential) ([]store.SealedSecret, error) { return nil, nil }})
	mustIs(t, err, store.ErrNotFound, "update unknown credential")

	// Archive keeps the record, drops the secrets, frees the match key.
	at := base.Add(time.Hour)
	arch, err := s.CredentialArchive(ctxBg, &store.CredentialArchiveParams{CredentialRef: store.CredentialRef{VaultID: v.ID, ID: c.ID}, At: at})
	must(t, err, "archive credential")
	sameTime(t, *arch.ArchivedAt, at, "archived_at")
	got, err = s.CredentialGet(ctxBg, &store.CredentialRef{VaultID: v.ID, ID: c.ID})
	must(t, err, "get archived credential")
	sameTime(t, *got.ArchivedAt, at, "stored archived_at")
	secs, err = s.SecretList(ctxBg, &store.SecretListParams{CredentialID: c.ID})
	must(t, err, "list secrets of archived credential")
	equal(t, len(secs), 0, "an archived credential keeps no secret")
	must(t, s.CredentialCreate(ctxBg, &store.CredentialCreateParams{Credential: dup, MatchKey: "mcp:https://mcp.example.com/"}),
		"the match key is free once the holder is archived")

	// Delete.
	must(t, s.CredentialDelete(ctxBg, &store.CredentialRef{VaultID: v.ID, ID: c.ID}), "delete credential")
	_, err = s.CredentialGet(ctxBg, &store.CredentialRef{VaultID: v.ID, ID: c.ID})
	mustIs(t, err, store.ErrNotFound, "get deleted credential")
	mustIs(t, s.CredentialDelete(ctxBg, &store.CredentialRef{VaultID: v.ID, ID: c.ID}), store.ErrNotFound, "delete twice")
	mustIs(t, s.CredentialDelete(ctxBg, &store.CredentialRef{VaultID: "vlt_other", ID: dup.ID}), store.ErrNotFound,
		"delete through another vault")
}

func testCredentialList(t *testing.T, h Harness) {
	s := h.open(t)
	v, other := newVault(base), newVault(base)
	must(t, s.VaultCreate(ctxBg, v), "create vault")
	must(t, s.VaultCreate(ctxBg, other), "create other vault")
	var cids []string
	for i := range 4 {
		c := newCredential(v.ID, base.Add(time.Duration(i)*time.Second), fmt.Sprintf("https://mcp%d/", i))
		must(t, s.CredentialCreate(ctxBg, &store.CredentialCreateParams{Credential: c, MatchKey: c.Auth.MCPServerURL}), "create credential")
		cids = append(cids, c.ID)
	}
	oc := newCredential(other.ID, base, "https://mcp0/")
	must(t, s.CredentialCreate(ctxBg, &store.CredentialCreateParams{Credential: oc, MatchKey: oc.Auth.MCPServerURL}),
		"the same match key in another vault")
	_, err := s.CredentialArchive(ctxBg, &store.CredentialArchiveParams{CredentialRef: store.CredentialRef{VaultID: v.ID, ID: cids[1]}, At: base.Add(time.Hour)})
	must(t, err, "archive credential")

	list, err := s.CredentialList(ctxBg, &store.CredentialListParams{VaultID: v.ID, ListParams: store.ListParams{Limit: 10}})
	must(t, err, "list")
	equal(t, ids(list, credentialID), strings.Join([]string{cids[0], cids[2], cids[3]}, ","), "list excludes archived and other vaults")
	list, err = s.CredentialList(ctxBg, &store.CredentialListParams{VaultID: v.ID,
		ListParams: store.ListParams{Limit: 2, IncludeArchived: true, Desc: true}})
	must(t, err, "list desc")
	equal(t, ids(list, credentialID), cids[3]+","+cids[2], "list desc with archived, limited")
	list, err = s.CredentialList(ctxBg, &store.CredentialListParams{VaultID: v.ID, ListParams: store.ListParams{
		Limit: 10, IncludeArchived: true, Desc: true, After: &store.Cursor{CreatedAt: list[1].CreatedAt, ID: list[1].ID}}})
	must(t, err, "list after cursor")
	equal(t, ids(list, credentialID), cids[1]+","+cids[0], "list after cursor")
	_, err = s.CredentialList(ctxBg, &store.CredentialListParams{VaultID: "vlt_missing", ListParams: store.ListParams{Limit: 10}})
	mustIs(t, err, store.ErrNotFound, "list credentials of an unknown vault")
	empty := newVault(base)
	must(t, s.VaultCreate(ctxBg, empty), "create empty vault")
	list, err = s.CredentialList(ctxBg, &store.CredentialListParams{VaultID: empty.ID, ListParams: store.ListParams{Limit: 10}})
	must(t, err, "list an empty vault")
	equal(t, len(list), 0, "an empty vault lists nothing")
}

func testVaultCascade(t *testing.T, h Harness) {
	s := h.open(t)
	v := newVault(base)
	must(t, s.VaultCreate(ctxBg, v), "create vault")
	var cs []*apitype.Credential
	for i := range 2 {
		c := newCredential(v.ID, base, fmt.Sprintf("https://mcp%d/", i))
		must(t, s.CredentialCreate(ctxBg, &store.CredentialCreateParams{Credential: c, MatchKey: c.Auth.MCPServerURL,
			Secrets: []store.SealedSecret{sealed(c.ID, "token", "mk_a", byte(i))}}), "create credential")
		cs = append(cs, c)
	}
	at := base.Add(time.Hour)
	_, err := s.VaultArchive(ctxBg, &store.ArchiveParams{ID: v.ID, At: at})
	must(t, err, "archive vault")
	for _, c := range cs {
		got, err := s.CredentialGet(ctxBg, &store.CredentialRef{VaultID: v.ID, ID: c.ID})
		must(t, err, "get credential of archived vault")
		equal(t, got.ArchivedAt != nil && got.ArchivedAt.Equal(at), true, "archiving a vault archives its credentials")
	}
	secs, err := s.SecretList(ctxBg, &store.SecretListParams{})
	must(t, err, "list secrets")
	equal(t, len(secs), 0, "an archived vault's credentials keep no secret")
	late := newCredential(v.ID, base, "https://late/")
	err = s.CredentialCreate(ctxBg, &store.CredentialCreateParams{Credential: late, MatchKey: late.Auth.MCPServerURL})
	mustIs(t, err, store.ErrConflict, "credential in an archived vault")

	w := newVault(base)
	must(t, s.VaultCreate(ctxBg, w), "create second vault")
	c := newCredential(w.ID, base, "https://mcp/")
	must(t, s.CredentialCreate(ctxBg, &store.CredentialCreateParams{Credential: c, MatchKey: c.Auth.MCPServerURL,
		Secrets: []store.SealedSecret{sealed(c.ID, "token", "mk_a", 5)}}), "create credential")
	must(t, s.VaultDelete(ctxBg, w.ID), "delete vault")
	_, err = s.CredentialGet(ctxBg, &store.CredentialRef{VaultID: w.ID, ID: c.ID})
	mustIs(t, err, store.ErrNotFound, "a deleted vault's credential")
	secs, err = s.SecretList(ctxBg, &store.SecretListParams{CredentialID: c.ID})
	must(t, err, "list secrets of deleted vault")
	equal(t, len(secs), 0, "a deleted vault's secrets are gone")
}

func testSecretRewrap(t *testing.T, h Harness) {
	s := h.open(t)
	v := newVault(base)
	must(t, s.VaultCreate(ctxBg, v), "create vault")
	for i := range 3 {
		c := newCredential(v.ID, base, fmt.Sprintf("https://mcp%d/", i))
		key := "mk_old"
		if i == 1 {
			key = "mk_new"
		}
		must(t, s.CredentialCreate(ctxBg, &store.CredentialCreateParams{Credential: c, MatchKey: c.Auth.MCPServerURL,
			Secrets: []store.SealedSecret{sealed(c.ID, "a", key, 1), sealed(c.ID, "b", key, 2)}}), "create credential")
	}
	old, err := s.SecretList(ctxBg, &store.SecretListParams{NotKeyIDs: []string{"mk_new"}})
	must(t, err, "list secrets not under mk_new")
	equal(t, len(old), 4, "secrets under other keys")
	for _, sec := range old {
		equal(t, sec.KeyID, "mk_old", "filtered key id")
	}
	// Paging by (credential id, name) visits each once.
	var seen []string
	p := &store.SecretListParams{Limit: 2}
	for {
		page, err := s.SecretList(ctxBg, p)
		must(t, err, "page secrets")
		for _, sec := range page {
			seen = append(seen, sec.CredentialID+"/"+sec.Name)
		}
		if len(page) < 2 {
			break
		}
		p.AfterCredentialID, p.AfterName = page[len(page)-1].CredentialID, page[len(page)-1].Name
	}
	equal(t, len(seen), 6, "paged secrets")
	for i := 1; i < len(seen); i++ {
		equal(t, seen[i-1] < seen[i], true, "secrets in (credential id, name) order")
	}

	sec := old[0]
	newWrapped := bytes.Repeat([]byte{0xee}, 60)
	rw := &store.SecretRewrapParams{CredentialID: sec.CredentialID, Name: sec.Name, OldKeyID: sec.KeyID,
		OldWrappedKey: sec.WrappedKey, KeyID: "mk_new", WrappedKey: newWrapped}
	must(t, s.SecretRewrap(ctxBg, rw), "rewrap")
	mustIs(t, s.SecretRewrap(ctxBg, rw), store.ErrConflict, "rewrap of a secret no longer wrapped as read")
	got, err := s.SecretList(ctxBg, &store.SecretListParams{CredentialID: sec.CredentialID})
	must(t, err, "list rewrapped")
	for _, g := range got {
		if g.Name == sec.Name {
			equal(t, g.KeyID, "mk_new", "rewrapped key id")
			equal(t, bytes.Equal(g.WrappedKey, newWrapped), true, "rewrapped key")
			equal(t, bytes.Equal(g.Ciphertext, sec.Ciphertext), true, "ciphertext untouched")
		}
	}
	gone := *rw
	gone.Name = "missing"
	mustIs(t, s.SecretRewrap(ctxBg, &gone), store.ErrNotFound, "rewrap of an unknown secret")
}

func testMasterKey(t *testing.T, h Harness) {
	s := h.open(t)
	keys, err := s.MasterKeyList(ctxBg)
	must(t, err, "list master keys")
	equal(t, len(keys), 0, "no master key at first")
	k := &store.MasterKey{ID: "mk_a", CheckValue: []byte{1, 2, 3, 0, 255}, CreatedAt: base}
	must(t, s.MasterKeyAdd(ctxBg, k), "add master key")
	mustIs(t, s.MasterKeyAdd(ctxBg, k), store.ErrConflict, "add master key twice")
	must(t, s.MasterKeyAdd(ctxBg, &store.MasterKey{ID: "mk_b", CheckValue: []byte{9}, CreatedAt: base.Add(time.Second)}),
		"add second key")
	keys, err = s.MasterKeyList(ctxBg)
	must(t, err, "list master keys")
	equal(t, len(keys), 2, "master keys")
	equal(t, keys[0].ID+","+keys[1].ID, "mk_a,mk_b", "master keys in creation order")
	equal(t, bytes.Equal(keys[0].CheckValue, k.CheckValue), true, "check value round-trips")
	sameTime(t, keys[0].CreatedAt, base, "created_at")
}

func testResourceSecret(t *testing.T, h Harness) {
	s := h.open(t)
	sess := createSession(t, s)
	other := createSession(t, s)
	ref := &store.ResourceSecretRef{SessionID: sess.ID, ResourceID: "sesrsc_a", Name: "authorization_token"}
	_, err := s.ResourceSecretGet(ctxBg, ref)
	mustIs(t, err, store.ErrNotFound, "get a secret never put")
	first := sealed("sesrsc_a", "authorization_token", "mk_a", 1)
	mustIs(t, s.ResourceSecretPut(ctxBg, "sesn_missing", &first), store.ErrNotFound, "put for a missing session")
	must(t, s.ResourceSecretPut(ctxBg, sess.ID, &first), "put")
	got, err := s.ResourceSecretGet(ctxBg, ref)
	must(t, err, "get")
	if got.CredentialID != "sesrsc_a" || got.Name != "authorization_token" || got.KeyID != "mk_a" ||
		!bytes.Equal(got.WrappedKey, first.WrappedKey) || !bytes.Equal(got.Ciphertext, first.Ciphertext) {
		t.Fatalf("get: %+v, want %+v", got, first)
	}
	// Another session's resource of the same id is another secret.
	_, err = s.ResourceSecretGet(ctxBg, &store.ResourceSecretRef{SessionID: other.ID, ResourceID: "sesrsc_a", Name: "authorization_token"})
	mustIs(t, err, store.ErrNotFound, "get through another session")
	// Put again replaces (a rotated token).
	second := sealed("sesrsc_a", "authorization_token", "mk_b", 7)
	must(t, s.ResourceSecretPut(ctxBg, sess.ID, &second), "put again")
	got, err = s.ResourceSecretGet(ctxBg, ref)
	must(t, err, "get after put again")
	if got.KeyID != "mk_b" || !bytes.Equal(got.Ciphertext, second.Ciphertext) {
		t.Fatalf("get after put again: %+v", got)
	}
	// Listed and rewrapped apart from the credentials' secrets (a key rotation).
	list, err := s.SecretList(ctxBg, &store.SecretListParams{Resources: true, NotKeyIDs: []string{"mk_a"}})
	must(t, err, "list resource secrets")
	if len(list) != 1 || list[0].CredentialID != "sesrsc_a" || list[0].Name != "authorization_token" || list[0].KeyID != "mk_b" {
		t.Fatalf("list resource secrets: %+v", list)
	}
	creds, err := s.SecretList(ctxBg, &store.SecretListParams{CredentialID: "sesrsc_a"})
	must(t, err, "list credential secrets")
	equal(t, len(creds), 0, "credential secrets listing a resource's")
	list, err = s.SecretList(ctxBg, &store.SecretListParams{Resources: true, NotKeyIDs: []string{"mk_b"}})
	must(t, err, "list resource secrets not under mk_b")
	equal(t, len(list), 0, "resource secrets not under mk_b")
	rw := &store.SecretRewrapParams{CredentialID: "sesrsc_a", Name: "authorization_token", OldKeyID: "mk_b",
		OldWrappedKey: second.WrappedKey, KeyID: "mk_c", WrappedKey: []byte("rewrapped"), Resources: true}
	mustIs(t, s.SecretRewrap(ctxBg, &store.SecretRewrapParams{CredentialID: "sesrsc_a", Name: "authorization_token",
		OldKeyID: "mk_b", OldWrappedKey: second.WrappedKey, KeyID: "mk_c", WrappedKey: []byte("x")}), store.ErrNotFound,
		"rewrap a resource's secret as a credential's")
	must(t, s.SecretRewrap(ctxBg, rw), "rewrap a resource secret")
	mustIs(t, s.SecretRewrap(ctxBg, rw), store.ErrConflict, "rewrap a resource secret again")
	got, err = s.ResourceSecretGet(ctxBg, ref)
	must(t, err, "get after rewrap")
	if got.KeyID != "mk_c" || string(got.WrappedKey) != "rewrapped" || !bytes.Equal(got.Ciphertext, second.Ciphertext) {
		t.Fatalf("get after rewrap: %+v", got)
	}
	must(t, s.ResourceSecretDelete(ctxBg, sess.ID, "sesrsc_a"), "delete")
	must(t, s.ResourceSecretDelete(ctxBg, sess.ID, "sesrsc_a"), "delete again")
	_, err = s.ResourceSecretGet(ctxBg, ref)
	mustIs(t, err, store.ErrNotFound, "get after delete")
	// A session created with its resources' secrets has them at once.
	withSecret := newSession("agent_x", 1, apitype.Now())
	third := sealed("sesrsc_c", "authorization_token", "mk_a", 9)
	_, _, err = s.SessionCreate(ctxBg, &store.SessionCreateParams{Session: withSecret, ResourceSecrets: []store.SealedSecret{third}})
	must(t, err, "create a session with a resource secret")
	got, err = s.ResourceSecretGet(ctxBg, &store.ResourceSecretRef{SessionID: withSecret.ID, ResourceID: "sesrsc_c", Name: "authorization_token"})
	must(t, err, "get a secret created with its session")
	if !bytes.Equal(got.Ciphertext, third.Ciphertext) || got.KeyID != "mk_a" {
		t.Fatalf("secret created with its session: %+v", got)
	}
	// Deleting the session deletes its resources' secrets.
	must(t, s.ResourceSecretPut(ctxBg, sess.ID, &first), "put before the session's deletion")
	must(t, s.SessionDelete(ctxBg, sess.ID), "delete session")
	_, err = s.ResourceSecretGet(ctxBg, ref)
	mustIs(t, err, store.ErrNotFound, "get after the session's deletion")
}
