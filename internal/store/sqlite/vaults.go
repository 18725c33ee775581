package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// VaultCreate stores a new vault.
func (s *Store) VaultCreate(ctx context.Context, v *apitype.Vault) error {
	doc, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("sqlite: create vault %s: %w", v.ID, err)
	}
	err = s.write(ctx, func(w *wtx) error {
		_, err := w.exec(`INSERT INTO vaults (id, created_at, archived_at, doc) VALUES (?, ?, ?, ?)`,
			v.ID, micros(v.CreatedAt), nullMicros(v.ArchivedAt), doc)
		return err
	}, nil)
	return writeErr(err, "create vault %s", v.ID)
}

// VaultGet returns a vault.
func (s *Store) VaultGet(ctx context.Context, id string) (*apitype.Vault, error) {
	return getOne(ctx, s, "vault "+id, scanVault, `SELECT doc FROM vaults WHERE id = ?`, id)
}

// VaultUpdate applies fn to the vault and stores the result, atomically.
func (s *Store) VaultUpdate(ctx context.Context, id string, fn func(*apitype.Vault) error) (*apitype.Vault, error) {
	var v *apitype.Vault
	err := s.write(ctx, func(w *wtx) error {
		var err error
		if v, err = w.vault(id); err != nil {
			return err
		}
		if err := fn(v); err != nil {
			return err
		}
		v.ID = id
		return w.putVault(v)
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("sqlite: update vault %s: %w", id, err)
	}
	return v, nil
}

// VaultList lists vaults.
func (s *Store) VaultList(ctx context.Context, p *store.ListParams) ([]apitype.Vault, error) {
	var f filter
	tail := f.addList("v", p)
	rows, err := s.readQuery(ctx, `SELECT v.doc FROM vaults v`+f.where()+tail, append(f.args, limitArg(p.Limit))...)
	if err != nil {
		return nil, s.readErr("list vaults", err)
	}
	out, err := collect(rows, scanVault)
	if err != nil {
		return nil, s.readErr("list vaults", err)
	}
	return out, nil
}

// VaultDelete removes a vault with its credentials and their secrets.
func (s *Store) VaultDelete(ctx context.Context, id string) error {
	err := s.write(ctx, func(w *wtx) error {
		if _, err := w.exec(`DELETE FROM vault_secrets WHERE credential_id IN
			(SELECT id FROM vault_credentials WHERE vault_id = ?)`, id); err != nil {
			return err
		}
		if _, err := w.exec(`DELETE FROM vault_credentials WHERE vault_id = ?`, id); err != nil {
			return err
		}
		n, err := w.execN(`DELETE FROM vaults WHERE id = ?`, id)
		if err == nil && n == 0 {
			err = store.ErrNotFound
		}
		return err
	}, nil)
	if err != nil {
		return fmt.Errorf("sqlite: delete vault %s: %w", id, err)
	}
	return nil
}

// VaultArchive archives a vault and its credentials, removing their secrets.
func (s *Store) VaultArchive(ctx context.Context, p *store.ArchiveParams) (*apitype.Vault, error) {
	var v *apitype.Vault
	err := s.write(ctx, func(w *wtx) error {
		var err error
		if v, err = w.vault(p.ID); err != nil {
			return err
		}
		if v.ArchivedAt != nil {
			return nil
		}
		at := p.At
		v.ArchivedAt, v.UpdatedAt = &at, at
		if err := w.putVault(v); err != nil {
			return err
		}
		rows, err := w.query(`SELECT doc, archived_at FROM vault_credentials WHERE vault_id = ? AND archived_at IS NULL`, p.ID)
		if err != nil {
			return err
		}
		creds, err := collect(rows, scanCredential)
		if err != nil {
			return err
		}
		for i := range creds {
			c := &creds[i]
			c.ArchivedAt, c.UpdatedAt = &at, at
			if err := w.archiveCredential(c); err != nil {
				return err
			}
		}
		return nil
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("sqlite: archive vault %s: %w", p.ID, err)
	}
	return v, nil
}

func (w *wtx) vault(id string) (*apitype.Vault, error) {
	v, err := scanVault(w.queryRow(`SELECT doc FROM vaults WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	return v, err
}

func (w *wtx) putVault(v *apitype.Vault) error {
	doc, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.exec(`UPDATE vaults SET archived_at = ?, doc = ? WHERE id = ?`, nullMicros(v.ArchivedAt), doc, v.ID)
	return err
}

var scanVault = scanDoc[apitype.Vault]("vault")

// CredentialCreate stores a new credential and its sealed secrets.
func (s *Store) CredentialCreate(ctx context.Context, p *store.CredentialCreateParams) error {
	c := p.Credential
	doc, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("sqlite: create credential %s: %w", c.ID, err)
	}
	err = s.write(ctx, func(w *wtx) error {
		v, err := w.vault(c.VaultID)
		if err != nil {
			return err
		}
		if v.ArchivedAt != nil {
			return fmt.Errorf("vault %s is archived: %w", c.VaultID, store.ErrConflict)
		}
		if _, err := w.exec(`INSERT INTO vault_credentials (id, vault_id, created_at, archived_at, match_key, doc)
			VALUES (?, ?, ?, ?, ?, ?)`, c.ID, c.VaultID, micros(c.CreatedAt), nullMicros(c.ArchivedAt), p.MatchKey, doc); err != nil {
			if isConstraint(err) {
				return store.ErrConflict
			}
			return err
		}
		return w.putSecrets(c.ID, p.Secrets)
	}, nil)
	if err != nil {
		return fmt.Errorf("sqlite: create credential %s: %w", c.ID, err)
	}
	return nil
}

// CredentialGet returns a credential of a vault.
func (s *Store) CredentialGet(ctx context.Context, p *store.CredentialRef) (*apitype.Credential, error) {
	return getOne(ctx, s, "credential "+p.ID, scanCredential, `SELECT doc, archived_at FROM vault_credentials WHERE id = ? AND vault_id = ?`,
		p.ID, p.VaultID)
}

// CredentialUpdate applies p.Update to the credential and stores the result and the secrets it returns.
func (s *Store) CredentialUpdate(ctx context.Context, p *store.CredentialUpdateParams) (*apitype.Credential, error) {
	var c *apitype.Credential
	err := s.write(ctx, func(w *wtx) error {
		var err error
		if c, err = w.credential(&p.CredentialRef); err != nil {
			return err
		}
		secrets, err := p.Update(c)
		if err != nil {
			return err
		}
		c.ID, c.VaultID = p.ID, p.VaultID
		doc, err := json.Marshal(c)
		if err != nil {
			return err
		}
		if _, err := w.exec(`UPDATE vault_credentials SET archived_at = ?, doc = ? WHERE id = ?`,
			nullMicros(c.ArchivedAt), doc, c.ID); err != nil {
			return err
		}
		return w.putSecrets(c.ID, secrets)
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("sqlite: update credential %s: %w", p.ID, err)
	}
	return c, nil
}

// CredentialList lists a vault's credentials.
func (s *Store) CredentialList(ctx context.Context, p *store.CredentialListParams) ([]apitype.Credential, error) {
	var f filter
	f.add("c.vault_id = ?", p.VaultID)
	tail := f.addList("c", &p.ListParams)
	rows, err := s.readQuery(ctx, `SELECT c.doc, c.archived_at FROM vault_credentials c`+f.where()+tail,
		append(f.args, limitArg(p.Limit))...)
	if err != nil {
		return nil, s.readErr("list credentials", err)
	}
	out, err := collect(rows, scanCredential)
	if err != nil {
		return nil, s.readErr("list credentials", err)
	}
	if len(out) == 0 {
		if _, err := s.VaultGet(ctx, p.VaultID); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// CredentialDelete removes a credential and its secrets.
func (s *Store) CredentialDelete(ctx context.Context, p *store.CredentialRef) error {
	err := s.write(ctx, func(w *wtx) error {
		if _, err := w.credential(p); err != nil {
			return err
		}
		if _, err := w.exec(`DELETE FROM vault_secrets WHERE credential_id = ?`, p.ID); err != nil {
			return err
		}
		_, err := w.exec(`DELETE FROM vault_credentials WHERE id = ?`, p.ID)
		return err
	}, nil)
	if err != nil {
		return fmt.Errorf("sqlite: delete credential %s: %w", p.ID, err)
	}
	return nil
}

// CredentialArchive archives a credential and removes its secrets.
func (s *Store) CredentialArchive(ctx context.Context, p *store.CredentialArchiveParams) (*apitype.Credential, error) {
	var c *apitype.Credential
	err := s.write(ctx, func(w *wtx) error {
		var err error
		if c, err = w.credential(&p.CredentialRef); err != nil {
			return err
		}
		if c.ArchivedAt != nil {
			return nil
		}
		at := p.At
		c.ArchivedAt, c.UpdatedAt = &at, at
		return w.archiveCredential(c)
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("sqlite: archive credential %s: %w", p.ID, err)
	}
	return c, nil
}

func (w *wtx) credential(p *store.CredentialRef) (*apitype.Credential, error) {
	c, err := scanCredential(w.queryRow(`SELECT doc, archived_at FROM vault_credentials WHERE id = ? AND vault_id = ?`,
		p.ID, p.VaultID))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	return c, err
}

// archiveCredential writes c (archived) and removes its secrets.
func (w *wtx) archiveCredential(c *apitype.Credential) error {
	doc, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if _, err := w.exec(`UPDATE vault_credentials SET archived_at = ?, doc = ? WHERE id = ?`,
		nullMicros(c.ArchivedAt), doc, c.ID); err != nil {
		return err
	}
	_, err = w.exec(`DELETE FROM vault_secrets WHERE credential_id = ?`, c.ID)
	return err
}

// putSecrets upserts (or, with nil Ciphertext, removes) a credential's secrets.
func (w *wtx) putSecrets(credentialID string, secrets []store.SealedSecret) error {
	for _, sec := range secrets {
		if sec.CredentialID != credentialID || sec.Name == "" {
			return fmt.Errorf("secret %q is not sealed for credential %s", sec.Name, credentialID)
		}
		if sec.Ciphertext == nil {
			if _, err := w.exec(`DELETE FROM vault_secrets WHERE credential_id = ? AND name = ?`, credentialID, sec.Name); err != nil {
				return err
			}
			continue
		}
		if _, err := w.exec(`INSERT INTO vault_secrets (credential_id, name, key_id, wrapped_key, ciphertext)
			VALUES (?, ?, ?, ?, ?) ON CONFLICT (credential_id, name) DO UPDATE SET
			key_id = excluded.key_id, wrapped_key = excluded.wrapped_key, ciphertext = excluded.ciphertext`,
			credentialID, sec.Name, sec.KeyID, sec.WrappedKey, sec.Ciphertext); err != nil {
			return err
		}
	}
	return nil
}

func scanCredential(row scanner) (*apitype.Credential, error) {
	var doc []byte
	var archived sql.NullInt64
	if err := row.Scan(&doc, &archived); err != nil {
		return nil, err
	}
	var c apitype.Credential
	if err := json.Unmarshal(doc, &c); err != nil {
		return nil, fmt.Errorf("decode credential: %w", err)
	}
	c.ArchivedAt = timePtr(archived)
	return &c, nil
}

// SecretList lists sealed secrets.
func (s *Store) SecretList(ctx context.Context, p *store.SecretListParams) ([]store.SealedSecret, error) {
	table, idCol := secretTable(p.Resources)
	var f filter
	if p.CredentialID != "" {
		f.add(idCol+" = ?", p.CredentialID)
	}
	if len(p.NotKeyIDs) > 0 {
		args := make([]any, len(p.NotKeyIDs))
		for i, id := range p.NotKeyIDs {
			args[i] = id
		}
		f.add("key_id NOT IN ("+placeholders(len(args))+")", args...)
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
