package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

type envCreateRequest struct {
	Name        string            `json:"name"`
	Description *string           `json:"description"`
	Config      json.RawMessage   `json:"config"`
	Scope       string            `json:"scope"`
	Metadata    map[string]string `json:"metadata"`
}

type envUpdateRequest struct {
	Name        nullable[string]          `json:"name"`
	Description nullable[string]          `json:"description"`
	Config      nullable[json.RawMessage] `json:"config"`
	Scope       nullable[string]          `json:"scope"`
	Metadata    map[string]*string        `json:"metadata"`
}

type envConfigIn struct {
	Type       apitype.EnvironmentType `json:"type"`
	Networking json.RawMessage         `json:"networking"`
	Packages   *apitype.Packages       `json:"packages"` // a nil list is "omitted" (kept on update)
}

// validHost reports whether h is an allowed_hosts entry: a host name of at most 253 characters of
// [A-Za-z0-9.-] that starts and ends with a letter or digit, optionally preceded by "*." and followed by a
// port of 1-5 digits. (A regular expression with these bounded repetitions took milliseconds to compile at
// every start of the binary, which is also the sandbox agent.)
func validHost(h string) bool {
	h = strings.TrimPrefix(h, "*.")
	if name, port, ok := strings.Cut(h, ":"); ok {
		if len(port) < 1 || len(port) > 5 || strings.Trim(port, "0123456789") != "" {
			return false
		}
		h = name
	}
	if len(h) < 1 || len(h) > 253 || !isAlnum(h[0]) || !isAlnum(h[len(h)-1]) {
		return false
	}
	for i := range len(h) {
		if !isAlnum(h[i]) && h[i] != '.' && h[i] != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// defaultEnvConfig is a cloud environment with unrestricted networking and no packages.
func defaultEnvConfig() apitype.EnvConfig {
	return apitype.EnvConfig{Type: apitype.EnvironmentCloud, Networking: &apitype.Networking{Type: apitype.NetworkingUnrestricted},
		Packages: emptyPackages()}
}

func emptyPackages() *apitype.Packages {
	return &apitype.Packages{Type: apitype.PackagesList, Apt: []string{}, Cargo: []string{}, Gem: []string{}, Go: []string{},
		Npm: []string{}, Pip: []string{}}
}

// resolveEnvConfig validates «EnvConfigIn» and merges it over prev (nil on create): on update, omitted fields
// keep their value and the type may not change.
func resolveEnvConfig(p string, raw json.RawMessage, prev *apitype.EnvConfig) (apitype.EnvConfig, error) {
	var in envConfigIn
	if err := strictUnmarshal(p, raw, &in); err != nil {
		return apitype.EnvConfig{}, err
	}
	if in.Type == "" {
		return apitype.EnvConfig{}, invalid(path(p, "type"), "required")
	}
	if !in.Type.Valid() {
		return apitype.EnvConfig{}, invalid(path(p, "type"), `must be "cloud" or "self_hosted"`)
	}
	if prev != nil && prev.Type != in.Type {
		return apitype.EnvConfig{}, invalidCode("invalid_config_type_change",
			"config.type: cannot change an environment from %s to %s", prev.Type, in.Type)
	}
	if in.Type == apitype.EnvironmentSelfHosted {
		if !isNull(in.Networking) || in.Packages != nil {
			return apitype.EnvConfig{}, invalid(p, "self_hosted environments take no networking or packages")
		}
		return apitype.EnvConfig{Type: apitype.EnvironmentSelfHosted}, nil
	}
	out := defaultEnvConfig()
	if prev != nil && prev.Type == apitype.EnvironmentCloud {
		out = cloneEnvConfig(*prev)
	}
	if !isNull(in.Networking) {
		n, err := resolveNetworking(path(p, "networking"), in.Networking)
		if err != nil {
			return apitype.EnvConfig{}, err
		}
		out.Networking = n
	}
	if in.Packages != nil {
		pp := path(p, "packages")
		if in.Packages.Type != "" && !in.Packages.Type.Valid() {
			return apitype.EnvConfig{}, invalid(path(pp, "type"), `must be "packages"`)
		}
		for _, f := range []struct {
			key string
			in  []string
			dst *[]string
		}{
			{"apt", in.Packages.Apt, &out.Packages.Apt}, {"cargo", in.Packages.Cargo, &out.Packages.Cargo},
			{"gem", in.Packages.Gem, &out.Packages.Gem}, {"go", in.Packages.Go, &out.Packages.Go},
			{"npm", in.Packages.Npm, &out.Packages.Npm}, {"pip", in.Packages.Pip, &out.Packages.Pip},
		} {
			if f.in == nil {
				continue
			}
			if len(f.in) > apitype.MaxPackages {
				return apitype.EnvConfig{}, invalid(path(pp, f.key), "at most %d packages", apitype.MaxPackages)
			}
			for j, pkg := range f.in {
				if err := checkString(index(path(pp, f.key), j), pkg, true, 256); err != nil {
					return apitype.EnvConfig{}, err
				}
			}
			*f.dst = append([]string{}, f.in...)
		}
	}
	n := out.Networking
	if n.Type == apitype.NetworkingLimited && (n.AllowPackageManagers == nil || !*n.AllowPackageManagers) && hasPackages(out.Packages) {
		return apitype.EnvConfig{}, invalid(path(p, "networking.allow_package_managers"),
			"must be true when packages are listed with limited networking")
	}
	return out, nil
}

func resolveNetworking(p string, raw json.RawMessage) (*apitype.Networking, error) {
	var in apitype.Networking
	if err := strictUnmarshal(p, raw, &in); err != nil {
		return nil, err
	}
	switch in.Type {
	case apitype.NetworkingUnrestricted:
		if in.AllowedHosts != nil || in.AllowMCPServers != nil || in.AllowPackageManagers != nil {
			return nil, invalid(p, "unrestricted networking takes no other fields")
		}
		return &apitype.Networking{Type: apitype.NetworkingUnrestricted}, nil
	case apitype.NetworkingLimited:
		if len(in.AllowedHosts) > 256 {
			return nil, invalid(path(p, "allowed_hosts"), "at most 256 hosts")
		}
		for i, h := range in.AllowedHosts {
			if !validHost(h) {
				return nil, invalid(index(path(p, "allowed_hosts"), i), "invalid host %q", h)
			}
		}
		f := false
		n := &apitype.Networking{Type: apitype.NetworkingLimited, AllowedHosts: append([]string{}, in.AllowedHosts...),
			AllowMCPServers: &f, AllowPackageManagers: new(bool)}
		if in.AllowMCPServers != nil {
			n.AllowMCPServers = in.AllowMCPServers
		}
		if in.AllowPackageManagers != nil {
			n.AllowPackageManagers = in.AllowPackageManagers
		}
		return n, nil
	case "":
		return nil, invalid(path(p, "type"), "required")
	}
	return nil, invalid(path(p, "type"), `must be "unrestricted" or "limited"`)
}

func hasPackages(p *apitype.Packages) bool {
	return p != nil && len(p.Apt)+len(p.Cargo)+len(p.Gem)+len(p.Go)+len(p.Npm)+len(p.Pip) > 0
}

func cloneEnvConfig(c apitype.EnvConfig) apitype.EnvConfig {
	out := c
	if c.Networking != nil {
		n := *c.Networking
		n.AllowedHosts = append([]string{}, c.Networking.AllowedHosts...)
		out.Networking = &n
	} else {
		out.Networking = &apitype.Networking{Type: apitype.NetworkingUnrestricted}
	}
	if c.Packages != nil {
		pk := *c.Packages
		out.Packages = &pk
	} else {
		out.Packages = emptyPackages()
	}
	return out
}

// environmentView is the response form of an environment: the config fully resolved, as «EnvConfig».
type environmentView struct {
	apitype.Environment
	Config map[string]any `json:"config"` // shadows Environment.Config
}

func viewEnvironment(e *apitype.Environment) environmentView {
	if e.Metadata == nil {
		e.Metadata = map[string]string{}
	}
	return environmentView{Environment: *e, Config: envConfigView(e.Config)}
}

func envConfigView(c apitype.EnvConfig) map[string]any {
	if c.Type == apitype.EnvironmentSelfHosted {
		return map[string]any{"type": apitype.EnvironmentSelfHosted}
	}
	c = cloneEnvConfig(c)
	net := map[string]any{"type": c.Networking.Type}
	if c.Networking.Type == apitype.NetworkingLimited {
		net["allowed_hosts"] = c.Networking.AllowedHosts
		net["allow_mcp_servers"] = c.Networking.AllowMCPServers != nil && *c.Networking.AllowMCPServers
		net["allow_package_managers"] = c.Networking.AllowPackageManagers != nil && *c.Networking.AllowPackageManagers
	}
	pk := c.Packages
	for _, l := range []*[]string{&pk.Apt, &pk.Cargo, &pk.Gem, &pk.Go, &pk.Npm, &pk.Pip} {
		if *l == nil {
			*l = []string{}
		}
	}
	pk.Type = apitype.PackagesList
	return map[string]any{"type": apitype.EnvironmentCloud, "networking": net, "packages": pk}
}

func checkScope(p, scope string) error {
	if scope != "organization" && scope != "account" {
		return invalid(p, `must be "organization" or "account"`)
	}
	return nil
}

func (s *Server) envCreate(w http.ResponseWriter, r *http.Request) error {
	var req envCreateRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	if err := checkString("name", req.Name, true, maxNameLen); err != nil {
		return err
	}
	e := &apitype.Environment{Type: apitype.ObjectEnvironment, Name: req.Name, Scope: "organization",
		Config: defaultEnvConfig(), Metadata: req.Metadata}
	if req.Description != nil {
		if err := checkString("description", *req.Description, false, maxDescriptionLen); err != nil {
			return err
		}
		e.Description = req.Description
	}
	if !isNull(req.Config) {
		cfg, err := resolveEnvConfig("config", req.Config, nil)
		if err != nil {
			return err
		}
		e.Config = cfg
	}
	if req.Scope != "" {
		if err := checkScope("scope", req.Scope); err != nil {
			return err
		}
		e.Scope = req.Scope
	}
	if err := s.checkPackages(&e.Config); err != nil {
		return err
	}
	if s.images != nil {
		e.Image = s.images.Image(&e.Config)
	}
	if err := validateMetadata("metadata", req.Metadata); err != nil {
		return err
	}
	if e.Metadata == nil {
		e.Metadata = map[string]string{}
	}
	now := s.now()
	e.ID = apitype.NewID(apitype.PrefixEnvironment)
	e.CreatedAt, e.UpdatedAt = now, now
	if err := s.own(r.Context(), e.ID); err != nil {
		return err
	}
	if err := s.store.EnvironmentCreate(r.Context(), e); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return nameTaken(e.Name)
		}
		return err
	}
	if s.images != nil {
		s.images.Build(e)
	}
	s.emitWebhook(r.Context(), "environment.created", e.ID)
	return writeJSON(w, http.StatusOK, viewEnvironment(e))
}

func (s *Server) envGet(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("environment_id")
	e, err := s.store.EnvironmentGet(r.Context(), id)
	if err != nil {
		return lookup(err, "environment", id)
	}
	return writeJSON(w, http.StatusOK, viewEnvironment(e))
}

func (s *Server) envUpdate(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("environment_id")
	var req envUpdateRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	now := s.now()
	e, err := s.store.EnvironmentUpdate(r.Context(), id, func(e *apitype.Environment) error {
		if e.ArchivedAt != nil {
			return invalidCode("environment_archived", "environment %s is archived and cannot be updated", id)
		}
		if req.Name.Set {
			if req.Name.Null {
				return invalid("name", "cannot be cleared")
			}
			if err := checkString("name", req.Name.Value, true, maxNameLen); err != nil {
				return err
			}
			e.Name = req.Name.Value
		}
		if req.Description.Set {
			if req.Description.Null {
				e.Description = nil
			} else {
				if err := checkString("description", req.Description.Value, false, maxDescriptionLen); err != nil {
					return err
				}
				d := req.Description.Value
				e.Description = &d
			}
		}
		if req.Config.Set && !req.Config.Null {
			cfg, err := resolveEnvConfig("config", req.Config.Value, &e.Config)
			if err != nil {
				return err
			}
			if err := s.checkPackages(&cfg); err != nil {
				return err
			}
			e.Config = cfg
			if s.images != nil {
				// A new package list (or type) has a new image: its status replaces the old one's. Running
				// sandboxes keep the image they run on; new ones get the new image.
				if img := s.images.Image(&cfg); img == nil || e.Image == nil || img.ID != e.Image.ID {
					e.Image = img
				}
			}
		}
		if req.Scope.Set && !req.Scope.Null {
			if err := checkScope("scope", req.Scope.Value); err != nil {
				return err
			}
			e.Scope = req.Scope.Value
		}
		if req.Metadata != nil {
			md, err := patchMetadata("metadata", e.Metadata, req.Metadata)
			if err != nil {
				return err
			}
			e.Metadata = md
		}
		e.UpdatedAt = now
		return nil
	})
	if errors.Is(err, store.ErrConflict) {
		return nameTaken(req.Name.Value)
	}
	if err != nil {
		return lookup(err, "environment", id)
	}
	if s.images != nil && req.Config.Set {
		s.images.Build(e)
	}
	s.emitWebhook(r.Context(), "environment.updated", id)
	return writeJSON(w, http.StatusOK, viewEnvironment(e))
}

// checkPackages refuses a cloud environment's package spec that no build could install (an option, a second
// word, a go package without a version) with a 400 naming it.
func (s *Server) checkPackages(c *apitype.EnvConfig) error {
	if s.images == nil || c.Type == apitype.EnvironmentSelfHosted {
		return nil
	}
	if err := s.images.Check(c); err != nil {
		return invalid("config.packages", "%v", err)
	}
	return nil
}

// nameTaken is the 409 of an environment create or rename whose name another environment that is not archived
// has: names are unique.
func nameTaken(name string) error {
	return conflict("name: an environment named %q already exists", name)
}

func (s *Server) envList(w http.ResponseWriter, r *http.Request) error {
	p, limit, c, err := listParams(newQuery(r.URL), defaultLimit, maxLimit)
	if err != nil {
		return err
	}
	p.Desc = true
	data, next, _, err := listByCreated(p, limit, c, false,
		func(p *store.ListParams) ([]apitype.Environment, error) {
			return s.store.EnvironmentList(r.Context(), inWorkspace(r, p))
		},
		func(e *apitype.Environment) (time.Time, string) { return e.CreatedAt, e.ID })
	if err != nil {
		return err
	}
	views := make([]environmentView, len(data))
	for i := range data {
		views[i] = viewEnvironment(&data[i])
	}
	return writeJSON(w, http.StatusOK, listPage[environmentView]{Data: views, NextPage: next})
}

func (s *Server) envDelete(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("environment_id")
	if err := s.store.EnvironmentDelete(r.Context(), id); err != nil {
		return lookup(err, "environment", id)
	}
	s.emitWebhook(r.Context(), "environment.deleted", id)
	return writeJSON(w, http.StatusOK, map[string]string{"id": id, "type": "environment_deleted"})
}

func (s *Server) envArchive(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("environment_id")
	now := s.now()
	e, err := s.store.EnvironmentUpdate(r.Context(), id, func(e *apitype.Environment) error {
		if e.ArchivedAt == nil {
			e.ArchivedAt = &now
			e.UpdatedAt = now
		}
		return nil
	})
	if err != nil {
		return lookup(err, "environment", id)
	}
	s.emitWebhook(r.Context(), "environment.archived", id)
	return writeJSON(w, http.StatusOK, viewEnvironment(e))
}
