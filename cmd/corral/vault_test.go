package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/vault"
)

func TestOpenVault(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := openStore(ctx, "sqlite://"+filepath.Join(dir, "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	// First start without a key: a key file is created, mode 0600, and stderr says so.
	var stderr bytes.Buffer
	v, err := openVault(ctx, st, dir, "", "", &stderr)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "vault.key")
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v", err, fi.Mode())
	}
	if !strings.Contains(stderr.String(), path) || !strings.Contains(stderr.String(), "0600") {
		t.Fatalf("stderr does not announce the key file: %q", stderr.String())
	}
	keyBytes, _ := os.ReadFile(path)
	// Second start: the same key, nothing announced.
	stderr.Reset()
	again, err := openVault(ctx, st, dir, "", "", &stderr)
	if err != nil || again.PrimaryKeyID() != v.PrimaryKeyID() || stderr.Len() != 0 {
		t.Fatalf("second start: %v, %s vs %s, %q", err, again.PrimaryKeyID(), v.PrimaryKeyID(), stderr.String())
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, keyBytes) {
		t.Fatal("the second start rewrote the key file")
	}

	// A wrong key, from the environment or a file: a clear error naming both key ids, not the key.
	wrong := vault.NewKey()
	_, err = openVault(ctx, st, dir, "", wrong.Encode(), &stderr)
	if !errors.Is(err, vault.ErrWrongKey) || !strings.Contains(err.Error(), v.PrimaryKeyID()) ||
		!strings.Contains(err.Error(), wrong.ID()) || strings.Contains(err.Error(), wrong.Encode()) {
		t.Fatalf("wrong CORRAL_VAULT_KEY: %v", err)
	}
	wrongFile := filepath.Join(t.TempDir(), "wrong.key")
	if err := vault.WriteKeyFile(wrongFile, wrong); err != nil {
		t.Fatal(err)
	}
	if _, err := openVault(ctx, st, dir, wrongFile, "", &stderr); !errors.Is(err, vault.ErrWrongKey) {
		t.Fatalf("wrong --vault-key-file: %v", err)
	}
	// The right key from the environment works.
	keys, err := vault.ReadKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := openVault(ctx, st, dir, "", keys[0].Encode(), &stderr); err != nil {
		t.Fatalf("right CORRAL_VAULT_KEY: %v", err)
	}
	// Garbage and ambiguity are refused.
	for name, c := range map[string][2]string{
		"not base64": {"", "not a key"},
		"short key":  {"", "c2hvcnQ="},
		"both":       {path, keys[0].Encode()},
		"missing":    {filepath.Join(dir, "missing.key"), ""},
	} {
		if _, err := openVault(ctx, st, dir, c[0], c[1], &stderr); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// A lost key file is not silently replaced while the database has secrets sealed under it.
	if err := os.Rename(path, path+".moved"); err != nil {
		t.Fatal(err)
	}
	_, err = openVault(ctx, st, dir, "", "", &stderr)
	if err == nil || !strings.Contains(err.Error(), v.PrimaryKeyID()) {
		t.Fatalf("lost key file: %v", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatal("a new key file was created for a database sealed under another key")
	}
}

func TestVaultRotateKey(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	st, err := openStore(ctx, "sqlite://"+filepath.Join(dir, "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	old, err := openVault(ctx, st, dir, "", "", &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	now := apitype.Now()
	vlt := &apitype.Vault{Type: apitype.ObjectVault, ID: apitype.NewID(apitype.PrefixVault), DisplayName: "v", Metadata: map[string]string{},
		CreatedAt: now, UpdatedAt: now}
	if err := st.VaultCreate(ctx, vlt); err != nil {
		t.Fatal(err)
	}
	c := &apitype.Credential{Type: apitype.ObjectCredential, ID: apitype.NewID(apitype.PrefixCredential), VaultID: vlt.ID,
		Metadata: map[string]string{}, CreatedAt: now, UpdatedAt: now,
		Auth: apitype.CredentialAuth{Type: apitype.AuthStaticBearer, MCPServerURL: "https://mcp/"}}
	sealed, err := old.Seal(c.ID, "token", []byte("tok"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CredentialCreate(ctx, &store.CredentialCreateParams{Credential: c, MatchKey: "mcp:https://mcp/",
		Secrets: []store.SealedSecret{*sealed}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	newFile := filepath.Join(t.TempDir(), "new.key")
	var out, errb bytes.Buffer
	if code := run(ctx, &stdio{out: &out, err: &errb}, []string{"vault", "rotate-key", "--data", dir, "--new-key-file", newFile}); code != 0 {
		t.Fatalf("rotate-key: exit %d: %s", code, errb.String())
	}
	keys, err := vault.ReadKeyFile(newFile)
	if err != nil || len(keys) != 2 || keys[1].ID() != old.PrimaryKeyID() {
		t.Fatalf("new key file: %v, %d keys", err, len(keys))
	}
	if !strings.Contains(out.String(), "rewrapped 1 data keys under master key "+keys[0].ID()) {
		t.Fatalf("rotate-key output: %q", out.String())
	}

	st, err = openStore(ctx, "sqlite://"+filepath.Join(dir, "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	secs, err := st.SecretList(ctx, &store.SecretListParams{})
	if err != nil || len(secs) != 1 || secs[0].KeyID != keys[0].ID() {
		t.Fatalf("after rotation: %v %+v", err, secs)
	}
	// The new key alone opens the store and the secret.
	onlyNew, err := vault.Open(ctx, st, keys[0])
	if err != nil {
		t.Fatal(err)
	}
	if pt, err := onlyNew.Open(&secs[0]); err != nil || string(pt) != "tok" {
		t.Fatalf("open after rotation: %q %v", pt, err)
	}
	// Running it again with the new file as the current key has nothing left to do.
	out.Reset()
	if code := run(ctx, &stdio{out: &out, err: &errb}, []string{"vault", "rotate-key", "--data", dir,
		"--vault-key-file", newFile, "--new-key-file", newFile}); code != 0 || !strings.Contains(out.String(), "rewrapped 0") {
		t.Fatalf("second rotate-key: exit %d: %s %s", code, out.String(), errb.String())
	}
	if code := run(ctx, &stdio{out: &out, err: &errb}, []string{"vault", "rotate-key", "--data", dir}); code == 0 {
		t.Fatal("rotate-key without --new-key-file succeeded")
	}
}

// TestServeVault: serve creates the key file on first start and seals credentials with it; a wrong key at the
// next start stops it with a clear error.
func TestServeVault(t *testing.T) {
	t.Parallel()
	model := modeltest.NewServer(t)
	data := t.TempDir()
	s := startServer(t, data, model)
	keyFile := filepath.Join(data, "vault.key")
	if !strings.Contains(s.stderr.String(), "created the vault master key file "+keyFile) {
		t.Fatalf("serve did not announce the key file:\n%s", s.stderr.String())
	}
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(s.url),
		option.WithAPIKey(testKey), option.WithMaxRetries(0))
	v, err := client.Beta.Vaults.New(ctx, anthropic.BetaVaultNewParams{DisplayName: "serve"})
	if err != nil {
		t.Fatal(err)
	}
	const secret = "serve-secret-7f3a91"
	if _, err := client.Beta.Vaults.Credentials.New(ctx, v.ID, anthropic.BetaVaultCredentialNewParams{
		Auth: anthropic.BetaVaultCredentialNewParamsAuthUnion{OfStaticBearer: &anthropic.BetaManagedAgentsStaticBearerCreateParams{
			Token: secret, MCPServerURL: "https://mcp.example.com/"}}}); err != nil {
		t.Fatal(err)
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	if strings.Contains(s.stderr.String(), secret) || strings.Contains(s.stdout.String(), secret) {
		t.Fatal("serve's output carries the secret")
	}

	// A wrong key: serve refuses to start, and says why.
	cmd := exec.Command(filepath.Join(binDir, "corral"), "serve", "--listen", "127.0.0.1:0", "--data", data,
		"--sandbox", sandboxKind())
	cmd.Env = append(serverEnv(model, testKey), "CORRAL_VAULT_KEY="+vault.NewKey().Encode())
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "wrong master key") || !strings.Contains(string(out), "CORRAL_VAULT_KEY") {
		t.Fatalf("serve with a wrong key: %v\n%s", err, out)
	}
}
