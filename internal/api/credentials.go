package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// The credentials of a vault: their handlers and the sealing of their secrets. Each auth type's fields are
// decoded and checked by its entry of credAuthTypes (credauth.go).

// Sealer encrypts a credential's secret for storage. The API only seals: it never needs, and never gets, a way
// to read a secret back. *vault.Vault implements it.
type Sealer interface {
	Seal(credentialID, name string, plaintext []byte) (*store.SealedSecret, error)
	// Reseal seals a sealed secret's plaintext anew for another credential id and name, without handing the
	// plaintext out.
	Reseal(s *store.SealedSecret, credentialID, name string) (*store.SealedSecret, error)
	// Open returns a sealed secret's plaintext: only for what the server itself must use (a webhook's
	// signing secret), never a credential.
	Open(s *store.SealedSecret) ([]byte, error)
}

// Vault and credential field limits.
type credentialCreateRequest struct {
	Auth        json.RawMessage   `json:"auth"`
	DisplayName *string           `json:"display_name"`
	Metadata    map[string]string `json:"metadata"`
}

type credentialUpdateRequest struct {
	Auth        nullable[json.RawMessage] `json:"auth"`
	DisplayName nullable[string]          `json:"display_name"`
	Metadata    map[string]*string        `json:"metadata"`
}

func viewCredential(c *apitype.Credential) *apitype.Credential {
	if c.Metadata == nil {
		c.Metadata = map[string]string{}
	}
	return c
}

// seal seals a credential's secrets.
func (s *Server) seal(credentialID string, secrets []plain) ([]store.SealedSecret, error) {
	if len(secrets) > 0 && s.sealer == nil {
		return nil, errNoSealer
	}
	out := make([]store.SealedSecret, 0, len(secrets))
	for _, p := range secrets {
		sealed, err := s.sealer.Seal(credentialID, p.name, []byte(p.value))
		if err != nil {
			return nil, fmt.Errorf("seal %s of %s: %w", p.name, credentialID, err)
		}
		out = append(out, *sealed)
	}
	return out, nil
}

var errNoSealer = &apiError{status: http.StatusInternalServerError, typ: apitype.ErrAPI,
	msg: "this server has no vault key configured; it cannot store credentials"}

func (s *Server) credentialCreate(w http.ResponseWriter, r *http.Request) error {
	vaultID := r.PathValue("vault_id")
	var req credentialCreateRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	now := s.now()
	auth, secrets, match, err := parseCredAuth("auth", req.Auth, now)
	if err != nil {
		return err
	}
	c := &apitype.Credential{Type: apitype.ObjectCredential, ID: apitype.NewID(apitype.PrefixCredential), VaultID: vaultID,
		Metadata: req.Metadata, Auth: auth, CreatedAt: now, UpdatedAt: now}
	if req.DisplayName != nil {
		if err := checkString("display_name", *req.DisplayName, false, maxVaultNameLen); err != nil {
			return err
		}
		if *req.DisplayName != "" {
			c.DisplayName = req.DisplayName
		}
	}
	if err := validateMetadata("metadata", req.Metadata); err != nil {
		return err
	}
	viewCredential(c)
	v, err := s.store.VaultGet(r.Context(), vaultID)
	if err != nil {
		return lookup(err, "vault", vaultID)
	}
	if v.ArchivedAt != nil {
		return invalid("", "vault %s is archived; it takes no new credentials", vaultID)
	}
	sealed, err := s.seal(c.ID, secrets)
	if err != nil {
		return err
	}
	err = s.store.CredentialCreate(r.Context(), &store.CredentialCreateParams{Credential: c, MatchKey: match, Secrets: sealed})
	switch {
	case errors.Is(err, store.ErrConflict):
		if auth.Type == apitype.AuthEnvironmentVariable {
			return conflict("vault %s already has an active credential for the environment variable %s", vaultID, auth.SecretName)
		}
		return conflict("vault %s already has an active credential for the MCP server %s", vaultID, auth.MCPServerURL)
	case err != nil:
		return lookup(err, "vault", vaultID)
	}
	s.emitCredentialWebhook(r.Context(), "vault_credential.created", vaultID, c.ID)
	return writeJSON(w, http.StatusOK, c)
}

func (s *Server) credentialGet(w http.ResponseWriter, r *http.Request) error {
	ref := &store.CredentialRef{VaultID: r.PathValue("vault_id"), ID: r.PathValue("credential_id")}
	c, err := s.store.CredentialGet(r.Context(), ref)
	if err != nil {
		return lookup(err, "credential", ref.ID)
	}
	return writeJSON(w, http.StatusOK, viewCredential(c))
}

func (s *Server) credentialUpdate(w http.ResponseWriter, r *http.Request) error {
	ref := store.CredentialRef{VaultID: r.PathValue("vault_id"), ID: r.PathValue("credential_id")}
	var req credentialUpdateRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	now := s.now()
	c, err := s.store.CredentialUpdate(r.Context(), &store.CredentialUpdateParams{CredentialRef: ref,
		Update: func(c *apitype.Credential) ([]store.SealedSecret, error) {
			if c.ArchivedAt != nil {
				return nil, invalid("", "credential %s is archived and cannot be updated", ref.ID)
			}
			var secrets []plain
			if req.Auth.Set && !req.Auth.Null {
				var err error
				if secrets, err = updateCredAuth("auth", req.Auth.Value, &c.Auth, now); err != nil {
					return nil, err
				}
			}
			if req.DisplayName.Set {
				if req.DisplayName.Null || req.DisplayName.Value == "" {
					c.DisplayName = nil
				} else {
					if err := checkString("display_name", req.DisplayName.Value, false, maxVaultNameLen); err != nil {
						return nil, err
					}
					d := req.DisplayName.Value
					c.DisplayName = &d
				}
			}
			if req.Metadata != nil {
				md, err := patchMetadata("metadata", c.Metadata, req.Metadata)
				if err != nil {
					return nil, err
				}
				c.Metadata = md
			}
			c.UpdatedAt = now
			return s.seal(c.ID, secrets)
		}})
	if err != nil {
		return lookup(err, "credential", ref.ID)
	}
	return writeJSON(w, http.StatusOK, viewCredential(c))
}

func (s *Server) credentialList(w http.ResponseWriter, r *http.Request) error {
	vaultID := r.PathValue("vault_id")
	p, limit, c, err := listParams(newQuery(r.URL), defaultLimit, maxLimit)
	if err != nil {
		return err
	}
	p.Desc = true
	data, next, _, err := listByCreated(p, limit, c, false,
		func(p *store.ListParams) ([]apitype.Credential, error) {
			return s.store.CredentialList(r.Context(), &store.CredentialListParams{ListParams: *p, VaultID: vaultID})
		},
		func(c *apitype.Credential) (time.Time, string) { return c.CreatedAt, c.ID })
	if err != nil {
		return lookup(err, "vault", vaultID)
	}
	for i := range data {
		viewCredential(&data[i])
	}
	return writeJSON(w, http.StatusOK, listPage[apitype.Credential]{Data: data, NextPage: next})
}

func (s *Server) credentialDelete(w http.ResponseWriter, r *http.Request) error {
	ref := &store.CredentialRef{VaultID: r.PathValue("vault_id"), ID: r.PathValue("credential_id")}
	if err := s.store.CredentialDelete(r.Context(), ref); err != nil {
		return lookup(err, "credential", ref.ID)
	}
	s.emitCredentialWebhook(r.Context(), "vault_credential.deleted", ref.VaultID, ref.ID)
	return writeJSON(w, http.StatusOK, map[string]string{"id": ref.ID, "type": "vault_credential_deleted"})
}

func (s *Server) credentialArchive(w http.ResponseWriter, r *http.Request) error {
	ref := store.CredentialRef{VaultID: r.PathValue("vault_id"), ID: r.PathValue("credential_id")}
	c, err := s.store.CredentialArchive(r.Context(), &store.CredentialArchiveParams{CredentialRef: ref, At: s.now()})
	if err != nil {
		return lookup(err, "credential", ref.ID)
	}
	s.emitCredentialWebhook(r.Context(), "vault_credential.archived", ref.VaultID, ref.ID)
	return writeJSON(w, http.StatusOK, viewCredential(c))
}

// CredentialValidator probes an MCP credential against its server (the MCP proxy, which can open its secrets;
// the API cannot). The answer holds nothing secret.
type CredentialValidator interface {
	Validate(ctx context.Context, vaultID, credentialID string) (*apitype.CredentialValidation, error)
}

// credentialValidate answers mcp_oauth_validate for a static_bearer or mcp_oauth credential.
func (s *Server) credentialValidate(w http.ResponseWriter, r *http.Request) error {
	ref := &store.CredentialRef{VaultID: r.PathValue("vault_id"), ID: r.PathValue("credential_id")}
	c, err := s.store.CredentialGet(r.Context(), ref)
	if err != nil {
		return lookup(err, "credential", ref.ID)
	}
	if c.Auth.Type != apitype.AuthMCPOAuth && c.Auth.Type != apitype.AuthStaticBearer {
		return invalid("", "credential %s is an %s credential; only mcp_oauth and static_bearer credentials can be validated", c.ID, c.Auth.Type)
	}
	if c.ArchivedAt != nil {
		return invalid("", "credential %s is archived", c.ID)
	}
	if s.validator == nil {
		return &apiError{status: http.StatusInternalServerError, typ: apitype.ErrAPI,
			msg: "this server has no MCP proxy configured; it cannot validate credentials"}
	}
	v, err := s.validator.Validate(r.Context(), ref.VaultID, ref.ID)
	if err != nil {
		return lookup(err, "credential", ref.ID)
	}
	return writeJSON(w, http.StatusOK, v)
}
