package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

var (
	vaults = &table[apitype.Vault]{
		what: "vault", name: "vaults", alias: "v", archivable: true,
		sel:  `SELECT v.doc FROM vaults v`,
		scan: scanDoc[apitype.Vault]("vault", nil),
		put:  func(w *wtx, v, _ *apitype.Vault) error { return putDoc(w, "vaults", v.ID, v.ArchivedAt, v) },
	}
	credentials = &table[apitype.Credential]{
		what: "credential", name: "vault_credentials", alias: "c", archivable: true,
		sel:  `SELECT c.doc, c.archived_at FROM vault_credentials c`,
		scan: scanDoc("credential", func(c *apitype.Credential, at *time.Time) { c.ArchivedAt = at }),
	}
)

// VaultCreate stores a new vault.
func (s *Store) VaultCreate(ctx context.Context, v *apitype.Vault) error {
	doc, err := json.Marshal(v)
	if err != nil {
		return writeErr(err, "create vault %s", v.ID)
	}
	return vaults.create(ctx, s, v.ID, `INSERT INTO vaults (id, created_at, archived_at, doc) VALUES (?, ?, ?, ?)`,
		v.ID, micros(v.CreatedAt), nullMicros(v.ArchivedAt), doc)
}

// VaultGet returns a vault.
func (s *Store) VaultGet(ctx context.Context, id string) (*apitype.Vault, error) {
	return vaults.get(ctx, s, id, "v.id = ?", id)
}

// VaultUpdate applies fn to the vault and stores the result, atomically.
func (s *Store) VaultUpdate(ctx context.Context, id string, fn func(*apitype.Vault) error) (*apitype.Vault, error) {
	return vaults.update(ctx, s, id, fn, store.KeepVault)
}

// VaultList lists vaults.
func (s *Store) VaultList(ctx context.Context, p *store.ListParams) ([]apitype.Vault, error) {
	return vaults.list(ctx, s, &filter{}, p)
}

// VaultDelete removes a vault with its credentials and their secrets (by cascade).
func (s *Store) VaultDelete(ctx context.Context, id string) error {
	return vaults.delete(ctx, s, id, "id = ?", id)
}

// VaultArchive archives a vault and its credentials under store.ArchiveVault's rule.
func (s *Store) VaultArchive(ctx context.Context, p *store.ArchiveParams) (*apitype.Vault, error) {
	return writeResult(ctx, s, func(w *wtx) (*apitype.Vault, error) {
		return store.ArchiveVault(vaultTx{w}, p)
	}, "archive vault %s", p.ID)
}

// CredentialCreate stores a new credential and its sealed secrets under store.CreateCredential's rule.
func (s *Store) CredentialCreate(ctx context.Context, p *store.CredentialCreateParams) error {
	err := s.write(ctx, func(w *wtx) error { return store.CreateCredential(vaultTx{w}, p) }, nil)
	return writeErr(err, "create credential %s", p.Credential.ID)
}

// CredentialGet returns a credential of a vault.
func (s *Store) CredentialGet(ctx context.Context, p *store.CredentialRef) (*apitype.Credential, error) {
	return credentials.get(ctx, s, p.ID, "c.id = ? AND c.vault_id = ?", p.ID, p.VaultID)
}

// CredentialUpdate applies p.Update to the credential and stores the result and the secrets it returns.
func (s *Store) CredentialUpdate(ctx context.Context, p *store.CredentialUpdateParams) (*apitype.Credential, error) {
	return writeResult(ctx, s, func(w *wtx) (*apitype.Credential, error) {
		return store.UpdateCredential(vaultTx{w}, p)
	}, "update credential %s", p.ID)
}

// CredentialList lists a vault's credentials.
func (s *Store) CredentialList(ctx context.Context, p *store.CredentialListParams) ([]apitype.Credential, error) {
	var f filter
	f.add("c.vault_id = ?", p.VaultID)
	out, err := credentials.list(ctx, s, &f, &p.ListParams)
	if err == nil && len(out) == 0 {
		_, err = s.VaultGet(ctx, p.VaultID)
	}
	return out, err
}

// CredentialDelete removes a credential and its secrets (by cascade).
func (s *Store) CredentialDelete(ctx context.Context, p *store.CredentialRef) error {
	return credentials.delete(ctx, s, p.ID, "id = ? AND vault_id = ?", p.ID, p.VaultID)
}

// CredentialArchive archives a credential and removes its secrets under store.ArchiveCredential's rule.
func (s *Store) CredentialArchive(ctx context.Context, p *store.CredentialArchiveParams) (*apitype.Credential, error) {
	return writeResult(ctx, s, func(w *wtx) (*apitype.Credential, error) {
		return store.ArchiveCredential(vaultTx{w}, p)
	}, "archive credential %s", p.ID)
}

// vaultTx is store.VaultTx over a write transaction (the single writer needs no row locks).
type vaultTx struct{ w *wtx }

func (t vaultTx) Vault(id string, _ bool) (*apitype.Vault, error) {
	return vaults.read(t.w, "v.id = ?", id)
}

func (t vaultTx) PutVault(v *apitype.Vault) error { return vaults.put(t.w, v, nil) }

func (t vaultTx) Credential(p *store.CredentialRef) (*apitype.Credential, error) {
	return credentials.read(t.w, "c.id = ? AND c.vault_id = ?", p.ID, p.VaultID)
}

func (t vaultTx) ActiveCredentials(vaultID string) ([]apitype.Credential, error) {
	rows, err := t.w.query(credentials.sel+` WHERE c.vault_id = ? AND c.archived_at IS NULL`, vaultID)
	if err != nil {
		return nil, err
	}
	return collect(rows, credentials.scan)
}

func (t vaultTx) InsertCredential(c *apitype.Credential, matchKey string) error {
	doc, err := json.Marshal(c)
	if err != nil {
		return err
	}
	_, err = t.w.exec(`INSERT INTO vault_credentials (id, vault_id, created_at, archived_at, match_key, doc)
		VALUES (?, ?, ?, ?, ?, ?)`, c.ID, c.VaultID, micros(c.CreatedAt), nullMicros(c.ArchivedAt), matchKey, doc)
	return err
}

func (t vaultTx) PutCredential(c *apitype.Credential) error {
	return putDoc(t.w, "vault_credentials", c.ID, c.ArchivedAt, c)
}

func (t vaultTx) PutSecret(sec *store.SealedSecret) error {
	_, err := t.w.exec(`INSERT INTO vault_secrets (credential_id, name, key_id, wrapped_key, ciphertext)
		VALUES (?, ?, ?, ?, ?) ON CONFLICT (credential_id, name) DO UPDATE SET
		key_id = excluded.key_id, wrapped_key = excluded.wrapped_key, ciphertext = excluded.ciphertext`,
		sec.CredentialID, sec.Name, sec.KeyID, sec.WrappedKey, sec.Ciphertext)
	return err
}

func (t vaultTx) DeleteSecrets(credentialID string, names ...string) error {
	if len(names) == 0 {
		_, err := t.w.exec(`DELETE FROM vault_secrets WHERE credential_id = ?`, credentialID)
		return err
	}
	for _, name := range names {
		if _, err := t.w.exec(`DELETE FROM vault_secrets WHERE credential_id = ? AND name = ?`, credentialID, name); err != nil {
			return err
		}
	}
	return nil
}

// SecretList lists sealed secrets.
func (s *Store) SecretList(ctx context.Context, p *store.SecretListParams) ([]store.SealedSecret, error) {
	table, idCol := secretTable(p.Resources)
	var f filter
	if p.CredentialID != "" {
		f.add(idCol+" = ?", p.CredentialID)
	}
	if len(p.NotKeyIDs) > 0 {
		f.add("key_id NOT IN ("+placeholders(len(p.NotKeyIDs))+")", anys(p.NotKeyIDs)...)
	}
	if p.AfterCredentialID != "" {
		f.add("("+idCol+", name) > (?, ?)", p.AfterCredentialID, p.AfterName)
	}
	rows, err := s.readQuery(ctx, `SELECT `+idCol+`, name, key_id, wrapped_key, ciphertext FROM `+table+
		f.where()+` ORDER BY `+idCol+`, name LIMIT ?`, append(f.args, limitArg(p.Limit))...)
	if err != nil {
		return nil, s.readErr("list secrets", err)
	}
	defer rows.Close()
	out := []store.SealedSecret{}
	for rows.Next() {
		var sec store.SealedSecret
		if err := rows.Scan(&sec.CredentialID, &sec.Name, &sec.KeyID, &sec.WrappedKey, &sec.Ciphertext); err != nil {
			return nil, s.readErr("list secrets", err)
		}
		out = append(out, sec)
	}
	if err := rows.Err(); err != nil {
		return nil, s.readErr("list secrets", err)
	}
	return out, nil
}

// SecretRewrap replaces a secret's wrapped data key if it is still wrapped as the caller read it.
func (s *Store) SecretRewrap(ctx context.Context, p *store.SecretRewrapParams) error {
	table, idCol := secretTable(p.Resources)
	err := s.write(ctx, func(w *wtx) error {
		var keyID string
		var wrapped []byte
		err := w.queryRow(`SELECT key_id, wrapped_key FROM `+table+` WHERE `+idCol+` = ? AND name = ?`,
			p.CredentialID, p.Name).Scan(&keyID, &wrapped)
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		if keyID != p.OldKeyID || !bytes.Equal(wrapped, p.OldWrappedKey) {
			return store.ErrConflict
		}
		_, err = w.exec(`UPDATE `+table+` SET key_id = ?, wrapped_key = ? WHERE `+idCol+` = ? AND name = ?`,
			p.KeyID, p.WrappedKey, p.CredentialID, p.Name)
		return err
	}, nil)
	if err != nil {
		return fmt.Errorf("sqlite: rewrap secret %s/%s: %w", p.CredentialID, p.Name, err)
	}
	return nil
}

// secretTable is the table of credentials' secrets, or of session resources' secrets, and its id column.
func secretTable(resources bool) (table, idCol string) {
	if resources {
		return "resource_secrets", "resource_id"
	}
	return "vault_secrets", "credential_id"
}

// MasterKeyList returns the recorded master key check values.
func (s *Store) MasterKeyList(ctx context.Context) ([]store.MasterKey, error) {
	rows, err := s.readQuery(ctx, `SELECT id, check_value, created_at FROM vault_master_keys ORDER BY created_at, id`)
	if err != nil {
		return nil, s.readErr("list master keys", err)
	}
	defer rows.Close()
	out := []store.MasterKey{}
	for rows.Next() {
		var k store.MasterKey
		var at int64
		if err := rows.Scan(&k.ID, &k.CheckValue, &at); err != nil {
			return nil, s.readErr("list master keys", err)
		}
		k.CreatedAt = fromMicros(at)
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, s.readErr("list master keys", err)
	}
	return out, nil
}

// MasterKeyAdd records a master key's check value.
func (s *Store) MasterKeyAdd(ctx context.Context, k *store.MasterKey) error {
	err := s.write(ctx, func(w *wtx) error {
		_, err := w.exec(`INSERT INTO vault_master_keys (id, check_value, created_at) VALUES (?, ?, ?)`,
			k.ID, k.CheckValue, micros(k.CreatedAt))
		if isConstraint(err) {
			return store.ErrConflict
		}
		return err
	}, nil)
	if err != nil {
		return fmt.Errorf("sqlite: add master key %s: %w", k.ID, err)
	}
	return nil
}

// ResourceSecretPut stores a session resource's sealed secret, replacing the one of the same name.
func (s *Store) ResourceSecretPut(ctx context.Context, sessionID string, sec *store.SealedSecret) error {
	err := s.write(ctx, func(w *wtx) error {
		var n int
		if err := w.queryRow(`SELECT count(*) FROM sessions WHERE id = ?`, sessionID).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return store.ErrNotFound
		}
		_, err := w.exec(`INSERT INTO resource_secrets (session_id, resource_id, name, key_id, wrapped_key, ciphertext)
			VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (session_id, resource_id, name) DO UPDATE
			SET key_id = excluded.key_id, wrapped_key = excluded.wrapped_key, ciphertext = excluded.ciphertext`,
			sessionID, sec.CredentialID, sec.Name, sec.KeyID, sec.WrappedKey, sec.Ciphertext)
		return err
	}, nil)
	if err != nil {
		return fmt.Errorf("sqlite: put secret of resource %s: %w", sec.CredentialID, err)
	}
	return nil
}

// ResourceSecretGet returns a session resource's sealed secret.
func (s *Store) ResourceSecretGet(ctx context.Context, p *store.ResourceSecretRef) (*store.SealedSecret, error) {
	sec := store.SealedSecret{CredentialID: p.ResourceID, Name: p.Name}
	err := s.readRow(ctx, `SELECT key_id, wrapped_key, ciphertext FROM resource_secrets
		WHERE session_id = ? AND resource_id = ? AND name = ?`, p.SessionID, p.ResourceID, p.Name).
		Scan(&sec.KeyID, &sec.WrappedKey, &sec.Ciphertext)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlite: get secret of resource %s: %w", p.ResourceID, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.readErr("get secret of resource "+p.ResourceID, err)
	}
	return &sec, nil
}

// ResourceSecretDelete removes a session resource's secrets.
func (s *Store) ResourceSecretDelete(ctx context.Context, sessionID, resourceID string) error {
	err := s.write(ctx, func(w *wtx) error {
		_, err := w.exec(`DELETE FROM resource_secrets WHERE session_id = ? AND resource_id = ?`, sessionID, resourceID)
		return err
	}, nil)
	if err != nil {
		return fmt.Errorf("sqlite: delete secrets of resource %s: %w", resourceID, err)
	}
	return nil
}
