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

var (
	vaults = &table[apitype.Vault]{
		what: "vault", name: "vaults", alias: "v", archivable: true,
		sel:  `SELECT v.doc, v.archived_at FROM vaults v`,
		scan: scanDoc("vault", func(v *apitype.Vault, at *time.Time) { v.ArchivedAt = at }),
		put: func(ctx context.Context, tx pgx.Tx, v, _ *apitype.Vault) error {
			return putDoc(ctx, tx, "vaults", v.ID, v.ArchivedAt, v)
		},
	}
	credentials = &table[apitype.Credential]{
		what: "credential", name: "vault_credentials", alias: "c", archivable: true,
		sel:  `SELECT c.doc, c.archived_at FROM vault_credentials c`,
		scan: scanDoc("credential", func(c *apitype.Credential, at *time.Time) { c.ArchivedAt = at }),
	}
)

// VaultCreate stores a new vault; ErrConflict if the id exists.
func (s *Store) VaultCreate(ctx context.Context, v *apitype.Vault) error {
	doc, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("vault create: encode: %w", err)
	}
	return vaults.create(ctx, s, `INSERT INTO vaults (id, created_at, archived_at, doc) VALUES ($1, $2, $3, $4)`,
		v.ID, v.CreatedAt, v.ArchivedAt, doc)
}

// VaultGet returns a vault.
func (s *Store) VaultGet(ctx context.Context, id string) (*apitype.Vault, error) {
	return vaults.get(ctx, s, "v.id = $1", id)
}

// VaultUpdate applies fn to the vault under a row lock and stores the result.
func (s *Store) VaultUpdate(ctx context.Context, id string, fn func(*apitype.Vault) error) (*apitype.Vault, error) {
	return vaults.update(ctx, s, id, fn, store.KeepVault)
}

// VaultList lists vaults.
func (s *Store) VaultList(ctx context.Context, p *store.ListParams) ([]apitype.Vault, error) {
	return vaults.list(ctx, s, vaults.query(), p)
}

// VaultDelete removes a vault with its credentials and their secrets (by cascade).
func (s *Store) VaultDelete(ctx context.Context, id string) error {
	return vaults.delete(ctx, s, "id = $1", id)
}

// VaultArchive archives a vault and its credentials under store.ArchiveVault's rule.
func (s *Store) VaultArchive(ctx context.Context, p *store.ArchiveParams) (*apitype.Vault, error) {
	return txResult(ctx, s, "vault archive", func(tx pgx.Tx) (*apitype.Vault, error) {
		return store.ArchiveVault(vaultTx{ctx, tx}, p)
	})
}

// CredentialCreate stores a new credential and its sealed secrets under store.CreateCredential's rule.
func (s *Store) CredentialCreate(ctx context.Context, p *store.CredentialCreateParams) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error { return store.CreateCredential(vaultTx{ctx, tx}, p) })
	return s.dbErr("credential create", err)
}

// CredentialGet returns a credential of a vault.
func (s *Store) CredentialGet(ctx context.Context, p *store.CredentialRef) (*apitype.Credential, error) {
	return credentials.get(ctx, s, "c.id = $1 AND c.vault_id = $2", p.ID, p.VaultID)
}

// CredentialUpdate applies p.Update under store.UpdateCredential's rule.
func (s *Store) CredentialUpdate(ctx context.Context, p *store.CredentialUpdateParams) (*apitype.Credential, error) {
	return txResult(ctx, s, "credential update", func(tx pgx.Tx) (*apitype.Credential, error) {
		return store.UpdateCredential(vaultTx{ctx, tx}, p)
	})
}

// CredentialList lists a vault's credentials.
func (s *Store) CredentialList(ctx context.Context, p *store.CredentialListParams) ([]apitype.Credential, error) {
	q := credentials.query()
	fmt.Fprintf(&q.sql, ` AND c.vault_id = %s`, q.arg(p.VaultID))
	out, err := credentials.list(ctx, s, q, &p.ListParams)
	if err == nil && len(out) == 0 {
		_, err = s.VaultGet(ctx, p.VaultID)
	}
	return out, err
}

// CredentialDelete removes a credential and its secrets (by cascade).
func (s *Store) CredentialDelete(ctx context.Context, p *store.CredentialRef) error {
	return credentials.delete(ctx, s, "id = $1 AND vault_id = $2", p.ID, p.VaultID)
}

// CredentialArchive archives a credential and removes its secrets under store.ArchiveCredential's rule.
func (s *Store) CredentialArchive(ctx context.Context, p *store.CredentialArchiveParams) (*apitype.Credential, error) {
	return txResult(ctx, s, "credential archive", func(tx pgx.Tx) (*apitype.Credential, error) {
		return store.ArchiveCredential(vaultTx{ctx, tx}, p)
	})
}

// vaultTx is store.VaultTx over a transaction, which locks the rows it reads.
type vaultTx struct {
	ctx context.Context
	tx  pgx.Tx
}

func (t vaultTx) Vault(id string, share bool) (*apitype.Vault, error) {
	lock := " FOR NO KEY UPDATE"
	if share {
		lock = " FOR KEY SHARE"
	}
	return vaults.read(t.ctx, t.tx, lock, "v.id = $1", id)
}

func (t vaultTx) PutVault(v *apitype.Vault) error { return vaults.put(t.ctx, t.tx, v, nil) }

func (t vaultTx) Credential(p *store.CredentialRef) (*apitype.Credential, error) {
	return credentials.read(t.ctx, t.tx, " FOR NO KEY UPDATE", "c.id = $1 AND c.vault_id = $2", p.ID, p.VaultID)
}

func (t vaultTx) ActiveCredentials(vaultID string) ([]apitype.Credential, error) {
	return credentials.all(t.ctx, t.tx, credentials.sel+` WHERE c.vault_id = $1 AND c.archived_at IS NULL FOR NO KEY UPDATE`,
		vaultID)
}

func (t vaultTx) InsertCredential(c *apitype.Credential, matchKey string) error {
	doc, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	_, err = t.tx.Exec(t.ctx, `INSERT INTO vault_credentials (id, vault_id, created_at, archived_at, match_key, doc)
		VALUES ($1, $2, $3, $4, $5, $6)`, c.ID, c.VaultID, c.CreatedAt, c.ArchivedAt, matchKey, doc)
	return err
}

func (t vaultTx) PutCredential(c *apitype.Credential) error {
	return putDoc(t.ctx, t.tx, "vault_credentials", c.ID, c.ArchivedAt, c)
}

func (t vaultTx) PutSecret(sec *store.SealedSecret) error {
	_, err := t.tx.Exec(t.ctx, `INSERT INTO vault_secrets (credential_id, name, key_id, wrapped_key, ciphertext)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT (credential_id, name) DO UPDATE SET
		key_id = excluded.key_id, wrapped_key = excluded.wrapped_key, ciphertext = excluded.ciphertext`,
		sec.CredentialID, sec.Name, sec.KeyID, sec.WrappedKey, sec.Ciphertext)
	return err
}

func (t vaultTx) DeleteSecrets(credentialID string, names ...string) error {
	var err error
	if len(names) == 0 {
		_, err = t.tx.Exec(t.ctx, `DELETE FROM vault_secrets WHERE credential_id = $1`, credentialID)
	} else {
		_, err = t.tx.Exec(t.ctx, `DELETE FROM vault_secrets WHERE credential_id = $1 AND name = ANY($2)`, credentialID, names)
	}
	return err
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
