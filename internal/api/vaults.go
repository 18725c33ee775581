package api

import (
	"context"
	"net/http"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// The vaults: the named sets of credentials a session may use (their credentials are in credentials.go).

// maxVaultNameLen caps a vault's and a credential's display name.
const maxVaultNameLen = 255

type vaultCreateRequest struct {
	DisplayName string            `json:"display_name"`
	Metadata    map[string]string `json:"metadata"`
}

type vaultUpdateRequest struct {
	DisplayName nullable[string]   `json:"display_name"`
	Metadata    map[string]*string `json:"metadata"`
}

func viewVault(v *apitype.Vault) *apitype.Vault {
	if v.Metadata == nil {
		v.Metadata = map[string]string{}
	}
	return v
}

func (s *Server) vaultCreate(w http.ResponseWriter, r *http.Request) error {
	var req vaultCreateRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	if err := checkString("display_name", req.DisplayName, true, maxVaultNameLen); err != nil {
		return err
	}
	if err := validateMetadata("metadata", req.Metadata); err != nil {
		return err
	}
	now := s.now()
	v := &apitype.Vault{Type: apitype.ObjectVault, ID: apitype.NewID(apitype.PrefixVault), DisplayName: req.DisplayName,
		Metadata: req.Metadata, CreatedAt: now, UpdatedAt: now}
	viewVault(v)
	if err := s.own(r.Context(), v.ID); err != nil {
		return err
	}
	if err := s.store.VaultCreate(r.Context(), v); err != nil {
		return err
	}
	s.emitWebhook(r.Context(), "vault.created", v.ID)
	return writeJSON(w, http.StatusOK, v)
}

func (s *Server) vaultGet(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("vault_id")
	v, err := s.store.VaultGet(r.Context(), id)
	if err != nil {
		return lookup(err, "vault", id)
	}
	return writeJSON(w, http.StatusOK, viewVault(v))
}

func (s *Server) vaultUpdate(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("vault_id")
	var req vaultUpdateRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	now := s.now()
	v, err := s.store.VaultUpdate(r.Context(), id, func(v *apitype.Vault) error {
		if v.ArchivedAt != nil {
			return invalid("", "vault %s is archived and cannot be updated", id)
		}
		if req.DisplayName.Set {
			if req.DisplayName.Null {
				return invalid("display_name", "cannot be cleared")
			}
			if err := checkString("display_name", req.DisplayName.Value, true, maxVaultNameLen); err != nil {
				return err
			}
			v.DisplayName = req.DisplayName.Value
		}
		if req.Metadata != nil {
			md, err := patchMetadata("metadata", v.Metadata, req.Metadata)
			if err != nil {
				return err
			}
			v.Metadata = md
		}
		v.UpdatedAt = now
		return nil
	})
	if err != nil {
		return lookup(err, "vault", id)
	}
	return writeJSON(w, http.StatusOK, viewVault(v))
}

func (s *Server) vaultList(w http.ResponseWriter, r *http.Request) error {
	p, limit, c, err := listParams(newQuery(r.URL), defaultLimit, maxLimit)
	if err != nil {
		return err
	}
	p.Desc = true
	data, next, _, err := listByCreated(p, limit, c, false,
		func(p *store.ListParams) ([]apitype.Vault, error) {
			return s.store.VaultList(r.Context(), inWorkspace(r, p))
		},
		func(v *apitype.Vault) (time.Time, string) { return v.CreatedAt, v.ID })
	if err != nil {
		return err
	}
	for i := range data {
		viewVault(&data[i])
	}
	return writeJSON(w, http.StatusOK, listPage[apitype.Vault]{Data: data, NextPage: next})
}

func (s *Server) vaultDelete(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("vault_id")
	if err := s.store.VaultDelete(r.Context(), id); err != nil {
		return lookup(err, "vault", id)
	}
	s.emitWebhook(r.Context(), "vault.deleted", id)
	return writeJSON(w, http.StatusOK, map[string]string{"id": id, "type": "vault_deleted"})
}

func (s *Server) vaultArchive(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("vault_id")
	v, err := s.store.VaultArchive(r.Context(), &store.ArchiveParams{ID: id, At: s.now()})
	if err != nil {
		return lookup(err, "vault", id)
	}
	s.emitWebhook(r.Context(), "vault.archived", id)
	return writeJSON(w, http.StatusOK, viewVault(v))
}

// checkSessionVaults checks a new session's vault_ids: each names an existing, unarchived vault, once.
func (s *Server) checkSessionVaults(ctx context.Context, ids []string) error {
	seen := map[string]bool{}
	for i, id := range ids {
		p := index("vault_ids", i)
		if err := checkString(p, id, true, 256); err != nil {
			return err
		}
		if seen[id] {
			return invalid(p, "vault %s is listed twice", id)
		}
		seen[id] = true
		v, err := s.store.VaultGet(ctx, id)
		if err != nil {
			return lookup(err, "vault", id)
		}
		if v.ArchivedAt != nil {
			return invalid(p, "vault %s is archived and cannot be attached to a new session", id)
		}
	}
	return nil
}
