package store

import (
	"context"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/apitype"
)

// VaultStore keeps vaults, their credentials, the credentials' sealed secrets and the check values of the
// master keys that wrap them. The store never sees a plaintext secret: SealedSecret is ciphertext, a wrapped
// data key and the id of the master key that wrapped it (package vault makes and opens them).
type VaultStore interface {
	VaultCreate(ctx context.Context, v *apitype.Vault) error
	VaultGet(ctx context.Context, id string) (*apitype.Vault, error)
	// VaultUpdate reads the vault, applies fn and writes the result, atomically.
	VaultUpdate(ctx context.Context, id string, fn func(*apitype.Vault) error) (*apitype.Vault, error)
	VaultList(ctx context.Context, p *ListParams) ([]apitype.Vault, error)
	// VaultDelete removes the vault with its credentials and their secrets.
	VaultDelete(ctx context.Context, id string) error
	// VaultArchive marks the vault and its unarchived credentials archived at p.At (idempotent: an archived
	// vault keeps its time) and removes those credentials' secrets, in one transaction.
	VaultArchive(ctx context.Context, p *ArchiveParams) (*apitype.Vault, error)

	// CredentialCreate stores a new credential of an existing, unarchived vault with its sealed secrets.
	// ErrNotFound if the vault does not exist; ErrConflict if the id exists or an unarchived credential of the
	// vault has the same MatchKey.
	CredentialCreate(ctx context.Context, p *CredentialCreateParams) error
	// CredentialGet returns a credential of a vault (ErrNotFound if the vault has no such credential).
	CredentialGet(ctx context.Context, p *CredentialRef) (*apitype.Credential, error)
	// CredentialUpdate reads the credential, applies p.Update and writes the result with the secrets it
	// returns, atomically.
	CredentialUpdate(ctx context.Context, p *CredentialUpdateParams) (*apitype.Credential, error)
	// CredentialList lists a vault's credentials; ErrNotFound if the vault does not exist.
	CredentialList(ctx context.Context, p *CredentialListParams) ([]apitype.Credential, error)
	// CredentialDelete removes a credential and its secrets.
	CredentialDelete(ctx context.Context, p *CredentialRef) error
	// CredentialArchive marks the credential archived at p.At (idempotent) and removes its secrets: an
	// archived credential keeps its record, not its secret.
	CredentialArchive(ctx context.Context, p *CredentialArchiveParams) (*apitype.Credential, error)

	// SecretList lists sealed secrets ordered by (credential id, name).
	SecretList(ctx context.Context, p *SecretListParams) ([]SealedSecret, error)
	// SecretRewrap replaces a secret's wrapped data key (and key id) if it is still wrapped as p.Old says:
	// ErrConflict if it was rewritten since (or ErrNotFound if it is gone). The ciphertext is untouched.
	SecretRewrap(ctx context.Context, p *SecretRewrapParams) error

	// ResourceSecretPut stores the sealed secret of a session's resource (a repository's authorization_token;
	// SealedSecret.CredentialID is the resource's id), replacing the one of the same name. ErrNotFound if the
	// session does not exist. A resource's secrets go when the session is deleted.
	ResourceSecretPut(ctx context.Context, sessionID string, s *SealedSecret) error
	// ResourceSecretGet returns a session resource's sealed secret; ErrNotFound if it has none of that name.
	ResourceSecretGet(ctx context.Context, p *ResourceSecretRef) (*SealedSecret, error)
	// ResourceSecretDelete removes every secret of a session's resource. Idempotent.
	ResourceSecretDelete(ctx context.Context, sessionID, resourceID string) error

	// MasterKeyList returns the check values of every master key the store has seen.
	MasterKeyList(ctx context.Context) ([]MasterKey, error)
	// MasterKeyAdd records a master key's check value; ErrConflict if its id is recorded.
	MasterKeyAdd(ctx context.Context, k *MasterKey) error
}

// ArchiveParams archives a resource by id.
type ArchiveParams struct {
	ID string
	At time.Time
}

// CredentialRef names a credential of a vault.
type CredentialRef struct {
	VaultID string
	ID      string
}

// CredentialCreateParams creates a credential.
type CredentialCreateParams struct {
	Credential *apitype.Credential
	// MatchKey is what must be unique among a vault's unarchived credentials (the MCP server URL, or the
	// environment variable's name), as the caller spells it.
	MatchKey string
	Secrets  []SealedSecret
}

// CredentialUpdateParams updates a credential.
type CredentialUpdateParams struct {
	CredentialRef
	// Update changes the credential in place and returns the secrets to store: each replaces the credential's
	// secret of its name (Ciphertext nil removes it). An error aborts the update and is returned as is.
	Update func(c *apitype.Credential) ([]SealedSecret, error)
}

// CredentialListParams pages a vault's credentials.
type CredentialListParams struct {
	ListParams
	VaultID string
}

// CredentialArchiveParams archives a credential.
type CredentialArchiveParams struct {
	CredentialRef
	At time.Time
}

// SealedSecret is one secret of a credential (Name: "token", "access_token", "refresh_token",
// "client_secret", "secret_value") as the store keeps it: sealed under a data key of its own, the data key
// wrapped under the master key KeyID.
type SealedSecret struct {
	CredentialID string
	Name         string
	KeyID        string
	WrappedKey   []byte
	Ciphertext   []byte
}

// ResourceSecretRef names a secret of a session's resource.
type ResourceSecretRef struct {
	SessionID, ResourceID, Name string
}

// SecretListParams selects sealed secrets.
type SecretListParams struct {
	CredentialID string   // only this credential's, if set
	NotKeyIDs    []string // only those wrapped under another master key than these
	// After continues after this (credential id, name).
	AfterCredentialID, AfterName string
	Limit                        int // 0 = all
	// Resources lists the sealed secrets of session resources (ResourceSecretPut) instead of the
	// credentials'; CredentialID then means the resource's id.
	Resources bool
}

// SecretRewrapParams rewraps a secret's data key.
type SecretRewrapParams struct {
	CredentialID, Name string
	// OldKeyID and OldWrappedKey are what the caller read: the rewrap applies only if they still hold.
	OldKeyID      string
	OldWrappedKey []byte
	KeyID         string
	WrappedKey    []byte
	// Resources rewraps a session resource's secret (CredentialID is the resource's id) instead of a
	// credential's.
	Resources bool
}

// MasterKey is a master key's check value: a known constant sealed under the key, so that a wrong key is
// recognised at start instead of producing garbage.
type MasterKey struct {
	ID         string
	CheckValue []byte
	CreatedAt  time.Time
}

// VaultTx is what the rules of VaultStore need of an adapter's write transaction. The rows it reads are locked
// against concurrent writers until the transaction ends (where the adapter has any).
type VaultTx interface {
	// Vault reads a vault (ErrNotFound); with share, a lock that only keeps it from being archived or deleted.
	Vault(id string, share bool) (*apitype.Vault, error)
	PutVault(v *apitype.Vault) error
	// Credential reads a credential of a vault (ErrNotFound); ActiveCredentials a vault's unarchived ones.
	Credential(ref *CredentialRef) (*apitype.Credential, error)
	ActiveCredentials(vaultID string) ([]apitype.Credential, error)
	InsertCredential(c *apitype.Credential, matchKey string) error
	PutCredential(c *apitype.Credential) error
	// PutSecret stores a credential's secret, replacing the one of its name; DeleteSecrets removes the
	// credential's secrets of these names, or every one of them if names is empty.
	PutSecret(s *SealedSecret) error
	DeleteSecrets(credentialID string, names ...string) error
}

// KeepVault is what VaultUpdate keeps of the vault read: its id.
func KeepVault(next, cur *apitype.Vault) { next.ID = cur.ID }

// ArchiveVault is VaultArchive's rule: archiving is idempotent, and cascades to the vault's unarchived
// credentials, whose secrets go.
func ArchiveVault(tx VaultTx, p *ArchiveParams) (*apitype.Vault, error) {
	v, err := tx.Vault(p.ID, false)
	if err != nil || !Archive(&v.ArchivedAt, &v.UpdatedAt, p.At) {
		return v, err
	}
	if err := tx.PutVault(v); err != nil {
		return nil, err
	}
	creds, err := tx.ActiveCredentials(v.ID)
	if err != nil {
		return nil, err
	}
	for i := range creds {
		if err := archiveCredential(tx, &creds[i], p.At); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// CreateCredential is CredentialCreate's rule: only an unarchived vault takes a credential, and the secrets
// stored with it are sealed for it.
func CreateCredential(tx VaultTx, p *CredentialCreateParams) error {
	c := p.Credential
	// A share lock on the vault: an archive or delete running beside this create waits for it.
	v, err := tx.Vault(c.VaultID, true)
	if err != nil {
		return err
	}
	if v.ArchivedAt != nil {
		return fmt.Errorf("vault %s is archived: %w", c.VaultID, ErrConflict)
	}
	if err := tx.InsertCredential(c, p.MatchKey); err != nil {
		return err
	}
	return putSecrets(tx, c.ID, p.Secrets)
}

// UpdateCredential is CredentialUpdate's rule: p.Update changes the credential (not its id or vault) and
// returns the secrets to store with it.
func UpdateCredential(tx VaultTx, p *CredentialUpdateParams) (*apitype.Credential, error) {
	c, err := tx.Credential(&p.CredentialRef)
	if err != nil {
		return nil, err
	}
	secrets, err := p.Update(c)
	if err != nil {
		return nil, err
	}
	c.ID, c.VaultID = p.ID, p.VaultID
	if err := tx.PutCredential(c); err != nil {
		return nil, err
	}
	return c, putSecrets(tx, c.ID, secrets)
}

// ArchiveCredential is CredentialArchive's rule: archiving is idempotent, and an archived credential keeps its
// record, not its secrets.
func ArchiveCredential(tx VaultTx, p *CredentialArchiveParams) (*apitype.Credential, error) {
	c, err := tx.Credential(&p.CredentialRef)
	if err != nil {
		return nil, err
	}
	return c, archiveCredential(tx, c, p.At)
}

func archiveCredential(tx VaultTx, c *apitype.Credential, at time.Time) error {
	if !Archive(&c.ArchivedAt, &c.UpdatedAt, at) {
		return nil
	}
	if err := tx.PutCredential(c); err != nil {
		return err
	}
	return tx.DeleteSecrets(c.ID)
}

// putSecrets stores each of a credential's secrets, replacing the one of its name; a nil Ciphertext removes it.
func putSecrets(tx VaultTx, credentialID string, secrets []SealedSecret) error {
	for i := range secrets {
		sec := &secrets[i]
		if sec.CredentialID != credentialID || sec.Name == "" {
			return fmt.Errorf("secret %q is not sealed for credential %s", sec.Name, credentialID)
		}
		var err error
		if sec.Ciphertext == nil {
			err = tx.DeleteSecrets(credentialID, sec.Name)
		} else {
			err = tx.PutSecret(sec)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
