package vault_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/vault"
)

func mustVault(t *testing.T, keys ...vault.Key) *vault.Vault {
	t.Helper()
	v, err := vault.New(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestSealOpenRoundTrip(t *testing.T) {
	t.Parallel()
	v := mustVault(t, vault.NewKey())
	for _, secret := range []string{"", "s3cr3t-token", strings.Repeat("x", 1<<16)} {
		s, err := v.Seal("vcrd_1", "token", []byte(secret))
		if err != nil {
			t.Fatalf("seal: %v", err)
		}
		if s.KeyID != v.PrimaryKeyID() || s.CredentialID != "vcrd_1" || s.Name != "token" {
			t.Fatalf("sealed secret metadata: %+v", s)
		}
		if secret != "" && bytes.Contains(s.Ciphertext, []byte(secret)) {
			t.Fatal("the ciphertext contains the plaintext")
		}
		got, err := v.Open(s)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		if string(got) != secret {
			t.Fatalf("open: got %d bytes, want %d", len(got), len(secret))
		}
	}
	// Each seal has its own data key and nonce: the same secret never seals to the same bytes.
	a, _ := v.Seal("vcrd_1", "token", []byte("same"))
	b, _ := v.Seal("vcrd_1", "token", []byte("same"))
	if bytes.Equal(a.Ciphertext, b.Ciphertext) || bytes.Equal(a.WrappedKey, b.WrappedKey) {
		t.Fatal("two seals of one secret are identical")
	}
}

func TestOpenRefusesTamperingAndOtherBindings(t *testing.T) {
	t.Parallel()
	v := mustVault(t, vault.NewKey())
	s, err := v.Seal("vcrd_1", "token", []byte("s3cr3t"))
	if err != nil {
		t.Fatal(err)
	}
	flip := func(b []byte, i int) []byte {
		c := bytes.Clone(b)
		c[i] ^= 1
		return c
	}
	cases := map[string]func(s store.SealedSecret) store.SealedSecret{
		"tampered ciphertext":       func(s store.SealedSecret) store.SealedSecret { s.Ciphertext = flip(s.Ciphertext, 20); return s },
		"tampered nonce":            func(s store.SealedSecret) store.SealedSecret { s.Ciphertext = flip(s.Ciphertext, 0); return s },
		"truncated ciphertext":      func(s store.SealedSecret) store.SealedSecret { s.Ciphertext = s.Ciphertext[:10]; return s },
		"tampered wrapped key":      func(s store.SealedSecret) store.SealedSecret { s.WrappedKey = flip(s.WrappedKey, 30); return s },
		"other credential id (AAD)": func(s store.SealedSecret) store.SealedSecret { s.CredentialID = "vcrd_2"; return s },
		"other secret name (AAD)":   func(s store.SealedSecret) store.SealedSecret { s.Name = "secret_value"; return s },
	}
	for name, mod := range cases {
		t.Run(name, func(t *testing.T) {
			bad := mod(*s)
			got, err := v.Open(&bad)
			if !errors.Is(err, vault.ErrDecrypt) {
				t.Fatalf("got %q, %v; want ErrDecrypt", got, err)
			}
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Fatal("the error carries the secret")
			}
		})
	}
	// A ciphertext moved under another credential's wrapped key does not open either.
	other, _ := v.Seal("vcrd_2", "token", []byte("other"))
	mixed := *s
	mixed.WrappedKey = other.WrappedKey
	if _, err := v.Open(&mixed); !errors.Is(err, vault.ErrDecrypt) {
		t.Fatalf("swapped wrapped key: %v, want ErrDecrypt", err)
	}
	// Another master key cannot open it.
	stranger := mustVault(t, vault.NewKey())
	if _, err := stranger.Open(s); !errors.Is(err, vault.ErrUnknownKey) {
		t.Fatalf("open under another master key: %v, want ErrUnknownKey", err)
	}
	// Even with the key id forged, a wrong key's unwrap fails rather than producing garbage.
	forged := *s
	forged.KeyID = stranger.PrimaryKeyID()
	if _, err := stranger.Open(&forged); !errors.Is(err, vault.ErrDecrypt) {
		t.Fatalf("open with a forged key id: %v, want ErrDecrypt", err)
	}
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	k := vault.NewKey()
	got, err := vault.ParseKey(" " + k.Encode() + "\n")
	if err != nil {
		t.Fatal(err)
	}
	if got.ID() != k.ID() || !strings.HasPrefix(k.ID(), "mk_") {
		t.Fatalf("id %s, want %s", got.ID(), k.ID())
	}
	if vault.NewKey().ID() == k.ID() {
		t.Fatal("two keys share an id")
	}
	for _, bad := range []string{"", "not base64!", "c2hvcnQ="} {
		if _, err := vault.ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) succeeded", bad)
		}
	}
}

func TestKeyFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "vault.key")
	a, b := vault.NewKey(), vault.NewKey()
	if err := vault.WriteKeyFile(path, a, b); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	if err := vault.WriteKeyFile(path, a); err == nil {
		t.Fatal("WriteKeyFile overwrote an existing file")
	}
	keys, err := vault.ReadKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || keys[0].ID() != a.ID() || keys[1].ID() != b.ID() {
		t.Fatalf("read %d keys", len(keys))
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := vault.ReadKeyFile(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a world-readable key file: %v", err)
	}
	empty := filepath.Join(dir, "empty.key")
	if err := os.WriteFile(empty, []byte("# nothing\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := vault.ReadKeyFile(empty); err == nil {
		t.Fatal("a key file without a key was accepted")
	}
	if _, err := vault.ReadKeyFile(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("a missing key file was accepted")
	}
}

func openStore(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// putCredential stores a credential with secrets sealed by v.
func putCredential(t *testing.T, st store.Store, v *vault.Vault, vaultID string, secrets map[string]string) string {
	t.Helper()
	ctx := context.Background()
	now := apitype.Now()
	c := &apitype.Credential{Type: apitype.ObjectCredential, ID: apitype.NewID(apitype.PrefixCredential), VaultID: vaultID,
		Metadata: map[string]string{}, CreatedAt: now, UpdatedAt: now,
		Auth: apitype.CredentialAuth{Type: apitype.AuthStaticBearer, MCPServerURL: "https://" + apitype.NewID("") + "/"}}
	var sealed []store.SealedSecret
	for name, val := range secrets {
		s, err := v.Seal(c.ID, name, []byte(val))
		if err != nil {
			t.Fatal(err)
		}
		sealed = append(sealed, *s)
	}
	if err := st.CredentialCreate(ctx, &store.CredentialCreateParams{Credential: c, MatchKey: c.Auth.MCPServerURL,
		Secrets: sealed}); err != nil {
		t.Fatal(err)
	}
	return c.ID
}

func TestOpenChecksTheKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openStore(t)
	good := vault.NewKey()
	v, err := vault.Open(ctx, st, good)
	if err != nil {
		t.Fatalf("first open: %v", err)
	}
	// Reopening with the same key works.
	if _, err := vault.Open(ctx, st, good); err != nil {
		t.Fatalf("reopen: %v", err)
	}
	// A wrong key is refused at open, before any secret exists.
	_, err = vault.Open(ctx, st, vault.NewKey())
	if !errors.Is(err, vault.ErrWrongKey) || !strings.Contains(err.Error(), good.ID()) {
		t.Fatalf("open with a wrong key: %v", err)
	}
	if strings.Contains(err.Error(), good.Encode()) {
		t.Fatal("the error carries the key")
	}
	now := apitype.Now()
	vlt := &apitype.Vault{Type: apitype.ObjectVault, ID: apitype.NewID(apitype.PrefixVault), DisplayName: "v",
		Metadata: map[string]string{}, CreatedAt: now, UpdatedAt: now}
	if err := st.VaultCreate(ctx, vlt); err != nil {
		t.Fatal(err)
	}
	putCredential(t, st, v, vlt.ID, map[string]string{"token": "t0k3n"})

	// A keyring whose primary is new but that still holds the old key opens: secrets stay readable.
	if _, err := vault.Open(ctx, st, vault.NewKey(), good); err != nil {
		t.Fatalf("open with a new primary and the old key: %v", err)
	}
	// A keyring that has seen the new key but lost the old one is refused: secrets are under the old key.
	next := vault.NewKey()
	if _, err := vault.Open(ctx, st, next, good); err != nil {
		t.Fatal(err)
	}
	_, err = vault.Open(ctx, st, next)
	if !errors.Is(err, vault.ErrWrongKey) || !strings.Contains(err.Error(), good.ID()) {
		t.Fatalf("open without the key the secrets are under: %v", err)
	}
}

func TestRotate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openStore(t)
	oldKey := vault.NewKey()
	old, err := vault.Open(ctx, st, oldKey)
	if err != nil {
		t.Fatal(err)
	}
	now := apitype.Now()
	vlt := &apitype.Vault{Type: apitype.ObjectVault, ID: apitype.NewID(apitype.PrefixVault), DisplayName: "v",
		Metadata: map[string]string{}, CreatedAt: now, UpdatedAt: now}
	if err := st.VaultCreate(ctx, vlt); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{} // credential id/name -> plaintext
	for range 120 {             // more than a page
		secret := "secret-" + apitype.NewID("")
		id := putCredential(t, st, old, vlt.ID, map[string]string{"access_token": secret, "refresh_token": secret + "-r"})
		want[id+"/access_token"], want[id+"/refresh_token"] = secret, secret+"-r"
	}
	before, err := st.SecretList(ctx, &store.SecretListParams{})
	if err != nil {
		t.Fatal(err)
	}

	newKey := vault.NewKey()
	both, err := vault.Open(ctx, st, newKey, oldKey)
	if err != nil {
		t.Fatal(err)
	}
	// A reader holding only the old key reads everything before the rotation; one holding both reads
	// everything before, during and after.
	res, err := vault.Rotate(ctx, st, both)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rewrapped != len(want) || res.Remaining != 0 {
		t.Fatalf("rotate: %+v, want %d rewrapped", res, len(want))
	}
	after, err := st.SecretList(ctx, &store.SecretListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Fatalf("%d secrets after rotation, %d before", len(after), len(before))
	}
	onlyNew := mustVault(t, newKey)
	for i, s := range after {
		if s.KeyID != newKey.ID() {
			t.Fatalf("secret %s/%s still under %s", s.CredentialID, s.Name, s.KeyID)
		}
		if !bytes.Equal(s.Ciphertext, before[i].Ciphertext) {
			t.Fatal("rotation changed a ciphertext")
		}
		for _, r := range []*vault.Vault{onlyNew, both} {
			got, err := r.Open(&s)
			if err != nil || string(got) != want[s.CredentialID+"/"+s.Name] {
				t.Fatalf("open %s/%s after rotation: %q, %v", s.CredentialID, s.Name, got, err)
			}
		}
		if _, err := old.Open(&s); !errors.Is(err, vault.ErrUnknownKey) {
			t.Fatalf("the old key alone opens a rewrapped secret: %v", err)
		}
	}
	// The old key can go now: a vault with only the new key opens the store.
	if _, err := vault.Open(ctx, st, newKey); err != nil {
		t.Fatalf("open with the new key alone after rotation: %v", err)
	}
	// Rotating again has nothing to do.
	res, err = vault.Rotate(ctx, st, both)
	if err != nil || res.Rewrapped != 0 || res.Remaining != 0 {
		t.Fatalf("second rotation: %+v, %v", res, err)
	}
}

// TestRotateConditional: a secret rewritten between the rotation's read and its rewrap is not clobbered.
func TestRotateConditional(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openStore(t)
	oldKey, newKey := vault.NewKey(), vault.NewKey()
	old, err := vault.Open(ctx, st, oldKey)
	if err != nil {
		t.Fatal(err)
	}
	now := apitype.Now()
	vlt := &apitype.Vault{Type: apitype.ObjectVault, ID: apitype.NewID(apitype.PrefixVault), DisplayName: "v",
		Metadata: map[string]string{}, CreatedAt: now, UpdatedAt: now}
	if err := st.VaultCreate(ctx, vlt); err != nil {
		t.Fatal(err)
	}
	id := putCredential(t, st, old, vlt.ID, map[string]string{"token": "first"})
	both := mustVault(t, newKey, oldKey)
	read, err := st.SecretList(ctx, &store.SecretListParams{CredentialID: id})
	if err != nil {
		t.Fatal(err)
	}
	// The API replaces the token (under the old key, as a server not yet restarted would).
	replaced, err := old.Seal(id, "token", []byte("second"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CredentialUpdate(ctx, &store.CredentialUpdateParams{CredentialRef: store.CredentialRef{VaultID: vlt.ID, ID: id},
		Update: func(*apitype.Credential) ([]store.SealedSecret, error) { return []store.SealedSecret{*replaced}, nil }}); err != nil {
		t.Fatal(err)
	}
	stale, err := both.Rewrap(&read[0])
	if err != nil {
		t.Fatal(err)
	}
	err = st.SecretRewrap(ctx, &store.SecretRewrapParams{CredentialID: id, Name: "token", OldKeyID: read[0].KeyID,
		OldWrappedKey: read[0].WrappedKey, KeyID: stale.KeyID, WrappedKey: stale.WrappedKey})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale rewrap: %v, want ErrConflict", err)
	}
	// A full rotation then rewraps the new token, which still reads "second".
	if _, err := vault.Rotate(ctx, st, both); err != nil {
		t.Fatal(err)
	}
	cur, err := st.SecretList(ctx, &store.SecretListParams{CredentialID: id})
	if err != nil {
		t.Fatal(err)
	}
	got, err := mustVault(t, newKey).Open(&cur[0])
	if err != nil || string(got) != "second" {
		t.Fatalf("after rotation: %q, %v", got, err)
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// racingStore records another server's master key just as this one records its own.
type racingStore struct {
	store.Store
	other vault.Key
}

func (r *racingStore) MasterKeyAdd(ctx context.Context, k *store.MasterKey) error {
	if _, err := vault.Open(ctx, r.Store, r.other); err != nil {
		return err
	}
	return r.Store.MasterKeyAdd(ctx, k)
}

func TestOpenRefusesAConcurrentFirstStartWithAnotherKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openStore(t)
	other := vault.NewKey()
	_, err := vault.Open(ctx, &racingStore{Store: st, other: other}, vault.NewKey())
	if !errors.Is(err, vault.ErrWrongKey) || !strings.Contains(err.Error(), other.ID()) {
		t.Fatalf("concurrent first start with another key: %v", err)
	}
	if _, err := vault.Open(ctx, st, other); err != nil {
		t.Fatalf("the server that won still opens: %v", err)
	}
}

// TestRotateResourceSecrets: a rotation rewraps the sealed tokens of session resources too, and Open refuses
// keys that do not unwrap them.
func TestRotateResourceSecrets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openStore(t)
	oldKey := vault.NewKey()
	old, err := vault.Open(ctx, st, oldKey)
	if err != nil {
		t.Fatal(err)
	}
	now := apitype.Now()
	sess := &apitype.Session{Type: apitype.ObjectSession, ID: apitype.NewID(apitype.PrefixSession), EnvironmentID: "env_x",
		Status: apitype.StatusIdle, Agent: apitype.SessionAgent{Type: apitype.ObjectAgent, ID: "agent_x", Version: 1, Name: "a"},
		Metadata: map[string]string{}, CreatedAt: now, UpdatedAt: now}
	if _, _, err := st.SessionCreate(ctx, &store.SessionCreateParams{Session: sess}); err != nil {
		t.Fatal(err)
	}
	rid := apitype.NewID(apitype.PrefixResource)
	sealed, err := old.Seal(rid, "authorization_token", []byte("ghp_rotateMe"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.ResourceSecretPut(ctx, sess.ID, sealed); err != nil {
		t.Fatal(err)
	}
	newKey := vault.NewKey()
	if _, err := vault.Open(ctx, st, newKey); !errors.Is(err, vault.ErrWrongKey) {
		t.Fatalf("open with a key that unwraps no repository token: %v", err)
	}
	both, err := vault.Open(ctx, st, newKey, oldKey)
	if err != nil {
		t.Fatal(err)
	}
	res, err := vault.Rotate(ctx, st, both)
	if err != nil || res.Rewrapped != 1 || res.Remaining != 0 {
		t.Fatalf("rotate: %+v, %v", res, err)
	}
	got, err := st.ResourceSecretGet(ctx, &store.ResourceSecretRef{SessionID: sess.ID, ResourceID: rid, Name: "authorization_token"})
	if err != nil || got.KeyID != newKey.ID() || !bytes.Equal(got.Ciphertext, sealed.Ciphertext) {
		t.Fatalf("after rotation: %+v, %v", got, err)
	}
	onlyNew, err := vault.Open(ctx, st, newKey)
	if err != nil {
		t.Fatalf("open with the new key alone after rotation: %v", err)
	}
	if plain, err := onlyNew.Open(got); err != nil || string(plain) != "ghp_rotateMe" {
		t.Fatalf("open the rotated token: %q, %v", plain, err)
	}
}

// TestRotateRecordSecrets: a rotation rewraps the secrets kept in records too: a deployment's repository tokens
// a webhook endpoint's signing secret and an (archived) tunnel's token, which open with the new key alone
// afterwards.
func TestRotateRecordSecrets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openStore(t)
	oldKey := vault.NewKey()
	old, err := vault.Open(ctx, st, oldKey)
	if err != nil {
		t.Fatal(err)
	}
	now := apitype.Now()
	depID := apitype.NewID(apitype.PrefixDeployment)
	token, err := old.Seal(depID, "authorization_token/0", []byte("ghp_deployed"))
	if err != nil {
		t.Fatal(err)
	}
	dep := &store.DeploymentRecord{Deployment: apitype.Deployment{Type: apitype.ObjectDeployment, ID: depID, Name: "d",
		Agent: apitype.AgentRef{Type: apitype.ObjectAgent, ID: "agent_x", Version: 1}, EnvironmentID: "env_x",
		Status: apitype.DeploymentActive, CreatedAt: now, UpdatedAt: now}, Tokens: []store.SealedSecret{*token}}
	if err := st.DeploymentCreate(ctx, dep); err != nil {
		t.Fatal(err)
	}
	epID := apitype.NewID(apitype.PrefixWebhookEndpoint)
	secret, err := old.Seal(epID, "signing_secret", []byte("whsec_signing"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.WebhookEndpointCreate(ctx, &store.WebhookEndpointRecord{Endpoint: apitype.WebhookEndpoint{
		Type: apitype.ObjectWebhookEndpoint, ID: epID, URL: "https://example.com/hook", EnabledEvents: []string{"agent.created"},
		State: apitype.WebhookEnabled, CreatedAt: now, UpdatedAt: now}, Secret: *secret}); err != nil {
		t.Fatal(err)
	}
	tnlID := apitype.NewID(apitype.PrefixTunnel)
	tnlToken, err := old.Seal(tnlID, "tunnel_token", []byte("ctt_tunnel"))
	if err != nil {
		t.Fatal(err)
	}
	// Archived: its token is kept sealed all the same.
	if err := st.TunnelCreate(ctx, &store.TunnelRecord{Tunnel: apitype.Tunnel{Type: apitype.ObjectTunnel, ID: tnlID,
		Domain: "t.tunnels.corral.internal", CreatedAt: now, ArchivedAt: &now}, TokenID: "tnltok_1", TokenHash: "h", Token: *tnlToken}); err != nil {
		t.Fatal(err)
	}
	newKey := vault.NewKey()
	both, err := vault.Open(ctx, st, newKey, oldKey)
	if err != nil {
		t.Fatal(err)
	}
	// The new key is recorded now; alone, before the rotation, it does not unwrap the records' secrets.
	if _, err := vault.Open(ctx, st, newKey); !errors.Is(err, vault.ErrWrongKey) || !strings.Contains(err.Error(), depID) {
		t.Fatalf("open with a key that unwraps no deployment token: %v", err)
	}
	res, err := vault.Rotate(ctx, st, both)
	if err != nil || res.Rewrapped != 3 || res.Remaining != 0 {
		t.Fatalf("rotate: %+v, %v", res, err)
	}
	onlyNew, err := vault.Open(ctx, st, newKey)
	if err != nil {
		t.Fatal(err)
	}
	d, err := st.DeploymentGet(ctx, depID)
	if err != nil || len(d.Tokens) != 1 || d.Tokens[0].KeyID != newKey.ID() {
		t.Fatalf("deployment after rotation: %+v, %v", d, err)
	}
	if plain, err := onlyNew.Open(&d.Tokens[0]); err != nil || string(plain) != "ghp_deployed" {
		t.Fatalf("open the rotated token: %q, %v", plain, err)
	}
	ep, err := st.WebhookEndpointGet(ctx, epID)
	if err != nil || ep.Secret.KeyID != newKey.ID() {
		t.Fatalf("endpoint after rotation: %+v, %v", ep, err)
	}
	if plain, err := onlyNew.Open(&ep.Secret); err != nil || string(plain) != "whsec_signing" {
		t.Fatalf("open the rotated signing secret: %q, %v", plain, err)
	}
	tnl, err := st.TunnelGet(ctx, tnlID)
	if err != nil || tnl.Token.KeyID != newKey.ID() {
		t.Fatalf("tunnel after rotation: %+v, %v", tnl, err)
	}
	if plain, err := onlyNew.Open(&tnl.Token); err != nil || string(plain) != "ctt_tunnel" {
		t.Fatalf("open the rotated tunnel token: %q, %v", plain, err)
	}
	if res, err := vault.Rotate(ctx, st, both); err != nil || res.Rewrapped != 0 {
		t.Errorf("a second rotation rewrapped %d: %v", res.Rewrapped, err)
	}
}
