package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

func decodeVault(doc []byte, archived *time.Time) (apitype.Vault, error) {
	var v apitype.Vault
	if err := json.Unmarshal(doc, &v); err != nil {
		return v, fmt.Errorf("decode vault: %w", err)
	}
	v.ArchivedAt = utc(archived)
	return v, nil
}

func decodeCredential(doc []byte, archived *time.Time) (apitype.Credential, error) {
	var c apitype.Credential
	if err := json.Unmarshal(doc, &c); err != nil {
		return c, fmt.Errorf("decode credential: %w", err)
	}
	c.ArchivedAt = utc(archived)
	return c, nil
}

// VaultCreate stores a new vault; ErrConflict if the id exists.
func (s *Store) VaultCreate(ctx context.Context, v *apitype.Vault) error {
	if err := s.check(); err != nil {
		return err
	}
	doc, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("vault create: encode: %w", err)
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO vaults (id, created_at, archived_at, doc) VALUES ($1, $2, $3, $4)`,
		v.ID, v.CreatedAt, v.ArchivedAt, doc)
	return s.dbErr("vault create", err)
}

// VaultGet returns a vault.
func (s *Store) VaultGet(ctx context.Context, id string) (*apitype.Vault, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	v, err := getVault(ctx, s.pool, id, "")
	if err != nil {
		return nil, s.dbErr("vault get", err)
	}
	return v, nil
}

// querier is what a pool and a transaction share.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func getVault(ctx context.Context, q querier, id, lock string) (*apitype.Vault, error) {
	var (
		doc      []byte
		archived *time.Time
	)
	if err := q.QueryRow(ctx, `SELECT doc, archived_at FROM vaults WHERE id = $1`+lock, id).Scan(&doc, &archived); err != nil {
		return nil, err
	}
	v, err := decodeVault(doc, archived)
	return &v, err
}

func getCredential(ctx context.Context, q querier, p *store.CredentialRef, lock string) (*apitype.Credential, error) {
	var (
		doc      []byte
		archived *time.Time
	)
	if err := q.QueryRow(ctx, `SELECT doc, archived_at FROM vault_credentials WHERE id = $1 AND vault_id = $2`+lock,
		p.ID, p.VaultID).Scan(&doc, &archived); err != nil {
		return nil, err
	}
	c, err := decodeCredential(doc, archived)
	return &c, err
}

func putVault(ctx context.Context, tx pgx.Tx, v *apitype.Vault) error {
	doc, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	_, err = tx.Exec(ctx, `UPDATE vaults SET doc = $2, archived_at = $3 WHERE id = $1`, v.ID, doc, v.ArchivedAt)
	return err
}

func putCredential(ctx context.Context, tx pgx.Tx, c *apitype.Credential) error {
	doc, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	_, err = tx.Exec(ctx, `UPDATE vault_credentials SET doc = $2, archived_at = $3 WHERE id = $1`, c.ID, doc, c.ArchivedAt)
	return err
}

// VaultUpdate applies fn to the vault under a row lock and stores the result.
func (s *Store) VaultUpdate(ctx context.Context, id string, fn func(*apitype.Vault) error) (*apitype.Vault, error) {
	var out *apitype.Vault
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		v, err := getVault(ctx, tx, id, " FOR NO KEY UPDATE")
		if err != nil {
			return err
		}
		if err := fn(v); err != nil {
			return err
		}
		v.ID = id
		out = v
		return putVault(ctx, tx, v)
	})
	if err != nil {
		return nil, s.dbErr("vault update", err)
	}
	return out, nil
}

// VaultList lists vaults.
func (s *Store) VaultList(ctx context.Context, p *store.ListParams) ([]apitype.Vault, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	var q query
	q.sql.WriteString(`SELECT v.doc, v.archived_at FROM vaults v WHERE true`)
	q.listFilter(p, "v", true)
	out, err := collectDocs(ctx, s, &q, decodeVault)
	return out, s.dbErr("vault list", err)
}

// VaultDelete removes a vault with its credentials and their secrets (by cascade).
func (s *Store) VaultDelete(ctx context.Context, id string) error {
	if err := s.check(); err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM vaults WHERE id = $1`, id)
	if err == nil && tag.RowsAffected() == 0 {
		err = store.ErrNotFound
	}
	return s.dbErr("vault delete", err)
}

// VaultArchive archives a vault and its credentials, removing their secrets.
func (s *Store) VaultArchive(ctx context.Context, p *store.ArchiveParams) (*apitype.Vault, error) {
	var out *apitype.Vault
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		v, err := getVault(ctx, tx, p.ID, " FOR NO KEY UPDATE")
		if err != nil {
			return err
		}
		out = v
		if v.ArchivedAt != nil {
			return nil
		}
		at := p.At
		v.ArchivedAt, v.UpdatedAt = &at, at
		if err := putVault(ctx, tx, v); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT doc, archived_at FROM vault_credentials
			WHERE vault_id = $1 AND archived_at IS NULL FOR NO KEY UPDATE`, p.ID)
		if err != nil {
			return err
		}
		var (
			doc      []byte
			archived *time.Time
			creds    []apitype.Credential
		)
		if _, err := pgx.ForEachRow(rows, []any{&doc, &archived}, func() error {
			c, err := decodeCredential(doc, archived)
			creds = append(creds, c)
			return err
		}); err != nil {
			return err
		}
		for i := range creds {
			c := &creds[i]
			c.ArchivedAt, c.UpdatedAt = &at, at
			if err := putCredential(ctx, tx, c); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, `DELETE FROM vault_secrets WHERE credential_id IN
			(SELECT id FROM vault_credentials WHERE vault_id = $1)`, p.ID)
		return err
	})
	if err != nil {
		return nil, s.dbErr("vault archive", err)
	}
	return out, nil
}

// CredentialCreate stores a new credential and its sealed secrets.
func (s *Store) CredentialCreate(ctx context.Context, p *store.CredentialCreateParams) error {
	c := p.Credential
	doc, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("credential create: encode: %w", err)
	}
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		// A share lock on the vault: an archive or delete running beside this create waits for it.
		v, err := getVault(ctx, tx, c.VaultID, " FOR KEY SHARE")
		if err != nil {
			return err
		}
		if v.ArchivedAt != nil {
			return fmt.Errorf("vault %s is archived: %w", c.VaultID, store.ErrConflict)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO vault_credentials (id, vault_id, created_at, archived_at, match_key, doc)
			VALUES ($1, $2, $3, $4, $5, $6)`, c.ID, c.VaultID, c.CreatedAt, c.ArchivedAt, p.MatchKey, doc); err != nil {
			return err
		}
		return putSecrets(ctx, tx, c.ID, p.Secrets)
	})
	return s.dbErr("credential create", err)
}

// CredentialGet returns a credential of a vault.
func (s *Store) CredentialGet(ctx context.Context, p *store.CredentialRef) (*apitype.Credential, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	c, err := getCredential(ctx, s.pool, p, "")
	if err != nil {
		return nil, s.dbErr("credential get", err)
	}
	return c, nil
}

// CredentialUpdate applies p.Update under a row lock and stores the result and the secrets it returns.
func (s *Store) CredentialUpdate(ctx context.Context, p *store.CredentialUpdateParams) (*apitype.Credential, error) {
	var out *apitype.Credential
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		c, err := getCredential(ctx, tx, &p.CredentialRef, " FOR NO KEY UPDATE")
		if err != nil {
			return err
		}
		secrets, err := p.Update(c)
		if err != nil {
			return err
		}
		c.ID, c.VaultID = p.ID, p.VaultID
		out = c
		if err := putCredential(ctx, tx, c); err != nil {
			return err
		}
		return putSecrets(ctx, tx, c.ID, secrets)
	})
	if err != nil {
		return nil, s.dbErr("credential update", err)
	}
	return out, nil
}

// CredentialList lists a vault's credentials.
func (s *Store) CredentialList(ctx context.Context, p *store.CredentialListParams) ([]apitype.Credential, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	var q query
	fmt.Fprintf(&q.sql, `SELECT c.doc, c.archived_at FROM vault_credentials c WHERE c.vault_id = %s`, q.arg(p.VaultID))
	q.listFilter(&p.ListParams, "c", true)
	out, err := collectDocs(ctx, s, &q, decodeCredential)
	if err == nil && len(out) == 0 {
		err = s.exists(ctx, "vaults", p.VaultID)
	}
	return out, s.dbErr("credential list", err)
}

// CredentialDelete removes a credential and its secrets (by cascade).
func (s *Store) CredentialDelete(ctx context.Context, p *store.CredentialRef) error {
	if err := s.check(); err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM vault_credentials WHERE id = $1 AND vault_id = $2`, p.ID, p.VaultID)
	if err == nil && tag.RowsAffected() == 0 {
		err = store.ErrNotFound
	}
	return s.dbErr("credential delete", err)
}

// CredentialArchive archives a credential and removes its secrets.
func (s *Store) CredentialArchive(ctx context.Context, p *store.CredentialArchiveParams) (*apitype.Credential, error) {
	var out *apitype.Credential
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		c, err := getCredential(ctx, tx, &p.CredentialRef, " FOR NO KEY UPDATE")
		if err != nil {
			return err
		}
		out = c
		if c.ArchivedAt != nil {
			return nil
		}
		at := p.At
		c.ArchivedAt, c.UpdatedAt = &at, at
		if err := putCredential(ctx, tx, c); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM vault_secrets WHERE credential_id = $1`, c.ID)
		return err
	})
	if err != nil {
		return nil, s.dbErr("credential archive", err)
	}
	return out, nil
}

// putSecrets upserts (or, with nil Ciphertext, removes) a credential's secrets.
func putSecrets(ctx context.Context, tx pgx.Tx, credentialID string, secrets []store.SealedSecret) error {
	for _, sec := range secrets {
		if sec.CredentialID != credentialID || sec.Name == "" {
			return fmt.Errorf("secret %q is not sealed for credential %s", sec.Name, credentialID)
		}
		var err error
		if sec.Ciphertext == nil {
			_, err = tx.Exec(ctx, `DELETE FROM vault_secrets WHERE credential_id = $1 AND name = $2`, credentialID, sec.Name)
		} else {
			_, err = tx.Exec(ctx, `INSERT INTO vault_secrets (credential_id, name, key_id, wrapped_key, ciphertext)
				VALUES ($1, $2, $3, $4, $5) ON CONFLICT (credential_id, name) DO UPDATE SET
				key_id = excluded.key_id, wrapped_key = excluded.wrapped_key, ciphertext = excluded.ciphertext`,
				credentialID, sec.Name, sec.KeyID, sec.WrappedKey, sec.Ciphertext)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// SecretList lists sealed secrets.
func (s *Store) SecretList(ctx context.Context, p *store.SecretListParams) ([]store.SealedSecret, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	table, idCol := secretTable(p.Resources)
	var q query
	q.sql.WriteString(`SELECT ` + idCol + `, name, key_id, wrapped_key, ciphertext FROM ` + table + ` WHERE true`)
	if p.CredentialID != "" {
		fmt.Fprintf(&q.sql, " AND %s = %s", idCol, q.arg(p.CredentialID))
	}
	if len(p.NotKeyIDs) > 0 {
		fmt.Fprintf(&q.sql, " AND NOT (key_id = ANY(%s))", q.arg(p.NotKeyIDs))
	}
	if p.AfterCredentialID != "" {
		fmt.Fprintf(&q.sql, " AND (%s COLLATE \"C\", name COLLATE \"C\") > (%s, %s)", idCol, q.arg(p.AfterCredentialID), q.arg(p.AfterName))
	}
	q.sql.WriteString(" ORDER BY " + idCol + " COLLATE \"C\", name COLLATE \"C\"")
	if p.Limit > 0 {
		fmt.Fprintf(&q.sql, " LIMIT %s", q.arg(p.Limit))
	}
	rows, err := s.pool.Query(ctx, q.sql.String(), q.args...)
	if err != nil {
		return nil, s.dbErr("secret list", err)
	}
	var sec store.SealedSecret
	out := []store.SealedSecret{}
	_, err = pgx.ForEachRow(rows, []any{&sec.CredentialID, &sec.Name, &sec.KeyID, &sec.WrappedKey, &sec.Ciphertext},
		func() error {
			c := sec
			c.WrappedKey = bytes.Clone(sec.WrappedKey)
			c.Ciphertext = bytes.Clone(sec.Ciphertext)
			out = append(out, c)
			return nil
		})
	return out, s.dbErr("secret list", err)
}

// SecretRewrap replaces a secret's wrapped data key if it is still wrapped as the caller read it.
func (s *Store) SecretRewrap(ctx context.Context, p *store.SecretRewrapParams) error {
	table, idCol := secretTable(p.Resources)
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE `+table+` SET key_id = $3, wrapped_key = $4
			WHERE `+idCol+` = $1 AND name = $2 AND key_id = $5 AND wrapped_key = $6`,
			p.CredentialID, p.Name, p.KeyID, p.WrappedKey, p.OldKeyID, p.OldWrappedKey)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
		var ok bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+table+` WHERE `+idCol+` = $1 AND name = $2)`,
			p.CredentialID, p.Name).Scan(&ok); err != nil {
			return err
		}
		if !ok {
			return store.ErrNotFound
		}
		return store.ErrConflict
	})
	return s.dbErr("secret rewrap", err)
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
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT id, check_value, created_at FROM vault_master_keys ORDER BY created_at, id`)
	if err != nil {
		return nil, s.dbErr("master key list", err)
	}
	var k store.MasterKey
	out := []store.MasterKey{}
	_, err = pgx.ForEachRow(rows, []any{&k.ID, &k.CheckValue, &k.CreatedAt}, func() error {
		out = append(out, store.MasterKey{ID: k.ID, CheckValue: bytes.Clone(k.CheckValue), CreatedAt: k.CreatedAt.UTC()})
		return nil
	})
	return out, s.dbErr("master key list", err)
}

// MasterKeyAdd records a master key's check value.
func (s *Store) MasterKeyAdd(ctx context.Context, k *store.MasterKey) error {
	if err := s.check(); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO vault_master_keys (id, check_value, created_at) VALUES ($1, $2, $3)`,
		k.ID, k.CheckValue, k.CreatedAt)
	return s.dbErr("master key add", err)
}

// ResourceSecretPut stores a session resource's sealed secret, replacing the one of the same name.
func (s *Store) ResourceSecretPut(ctx context.Context, sessionID string, sec *store.SealedSecret) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var ok bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM sessions WHERE id = $1)`, sessionID).Scan(&ok); err != nil {
			return err
		}
		if !ok {
			return store.ErrNotFound
		}
		_, err := tx.Exec(ctx, `INSERT INTO resource_secrets (session_id, resource_id, name, key_id, wrapped_key, ciphertext)
			VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (session_id, resource_id, name) DO UPDATE
			SET key_id = excluded.key_id, wrapped_key = excluded.wrapped_key, ciphertext = excluded.ciphertext`,
			sessionID, sec.CredentialID, sec.Name, sec.KeyID, sec.WrappedKey, sec.Ciphertext)
		return err
	})
	return s.dbErr("resource secret put", err)
}

// ResourceSecretGet returns a session resource's sealed secret.
func (s *Store) ResourceSecretGet(ctx context.Context, p *store.ResourceSecretRef) (*store.SealedSecret, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	sec := store.SealedSecret{CredentialID: p.ResourceID, Name: p.Name}
	err := s.pool.QueryRow(ctx, `SELECT key_id, wrapped_key, ciphertext FROM resource_secrets
		WHERE session_id = $1 AND resource_id = $2 AND name = $3`, p.SessionID, p.ResourceID, p.Name).
		Scan(&sec.KeyID, &sec.WrappedKey, &sec.Ciphertext)
	if err != nil {
		return nil, s.dbErr("resource secret get", err)
	}
	return &sec, nil
}

// ResourceSecretDelete removes a session resource's secrets.
func (s *Store) ResourceSecretDelete(ctx context.Context, sessionID, resourceID string) error {
	if err := s.check(); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `DELETE FROM resource_secrets WHERE session_id = $1 AND resource_id = $2`, sessionID, resourceID)
	return s.dbErr("resource secret delete", err)
}
