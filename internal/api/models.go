package api

import (
	"net/http"
	"slices"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/price"
)

// Page sizes of GET /v1/models, the Models API's.
const (
	defaultModelLimit = 20
	maxModelLimit     = 1000
)

// modelInfo is the wire form of a model of the price table: the models this server can route and price.
func modelInfo(m price.Model) apitype.ModelInfo {
	return apitype.ModelInfo{Type: apitype.ObjectModel, ID: m.ID, DisplayName: m.DisplayName, CreatedAt: m.Released}
}

// modelList is GET /v1/models: the models of the price table (the built-in Claude models and a --prices file's),
// most recently released first, paged as the Models API pages: limit, and after_id or before_id, the id of the
// model the page starts after or ends before.
func (s *Server) modelList(w http.ResponseWriter, r *http.Request) error {
	q := newQuery(r.URL)
	limit, err := q.limit(defaultModelLimit, maxModelLimit)
	if err != nil {
		return err
	}
	models := s.prices.Models()
	lo, hi, more, err := idPage(q, len(models), limit, func(id string) int {
		return slices.IndexFunc(models, func(m price.Model) bool { return m.ID == id })
	})
	if err != nil {
		return err
	}
	page := apitype.ModelPage{Data: make([]apitype.ModelInfo, 0, hi-lo), HasMore: more}
	for _, m := range models[lo:hi] {
		page.Data = append(page.Data, modelInfo(m))
	}
	if n := len(page.Data); n > 0 {
		page.FirstID, page.LastID = &page.Data[0].ID, &page.Data[n-1].ID
	}
	return writeJSON(w, http.StatusOK, page)
}

// modelGet is GET /v1/models/{model_id}: a listed model, or one its id names as an alias (a date suffix,
// -latest), under the id asked for; another id is a 404.
func (s *Server) modelGet(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("model_id")
	m, ok := s.prices.Model(id)
	if !ok {
		return notFound("model", id)
	}
	return writeJSON(w, http.StatusOK, modelInfo(m))
}
