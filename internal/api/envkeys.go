package api

import (
	"net/http"
	"strings"

	"github.com/corralhq/corral/internal/apitype"
)

// The keys of a self-hosted environment's workers (what they may reach is in auth.go).

type envKeyCreateRequest struct {
	Name *string `json:"name"`
}

func (s *Server) envKeyCreate(w http.ResponseWriter, r *http.Request) error {
	var req envKeyCreateRequest
	body, err := readBody(r)
	if err != nil {
		return err
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		if err := decodeJSON(body, &req); err != nil {
			return err
		}
	}
	name := ""
	if req.Name != nil {
		name = *req.Name
	}
	if err := checkString("name", name, false, maxNameLen); err != nil {
		return err
	}
	e, err := s.selfHostedEnv(r)
	if err != nil {
		return err
	}
	secret := apitype.NewEnvironmentKeySecret()
	k := &apitype.EnvironmentKey{Type: apitype.ObjectEnvironmentKey, ID: apitype.NewID(apitype.PrefixEnvironmentKey),
		EnvironmentID: e.ID, Name: name, Hash: apitype.HashAPIKey(secret), Hint: secret[len(secret)-4:], CreatedAt: s.now()}
	if err := s.store.EnvironmentKeyCreate(r.Context(), k); err != nil {
		return lookup(err, "environment", e.ID)
	}
	k.Key = secret
	return writeJSON(w, http.StatusOK, k)
}

func (s *Server) envKeyList(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("environment_id")
	if _, err := s.store.EnvironmentGet(r.Context(), id); err != nil {
		return lookup(err, "environment", id)
	}
	keys, err := s.store.EnvironmentKeyList(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, listPage[apitype.EnvironmentKey]{Data: keys})
}

func (s *Server) envKeyRevoke(w http.ResponseWriter, r *http.Request) error {
	env, id := r.PathValue("environment_id"), r.PathValue("key_id")
	if err := s.store.EnvironmentKeyRevoke(r.Context(), env, id, s.now()); err != nil {
		return lookup(err, "environment key", id)
	}
	return writeJSON(w, http.StatusOK, map[string]string{"id": id, "type": "environment_key_revoked"})
}
