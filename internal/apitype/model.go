package apitype

import "time"

// ModelInfo is a model the server can route: «ModelInfo» of Anthropic's Models API (GET /v1/models), so that
// an official SDK's models.list() works against Corral. Of its fields Corral serves those it knows of every
// model it routes.
type ModelInfo struct {
	Type        ObjectType `json:"type"` // "model"
	ID          string     `json:"id"`
	DisplayName string     `json:"display_name"`
	// CreatedAt is when the model was released; the Unix epoch when that is unknown, as the Models API does.
	CreatedAt time.Time `json:"created_at"`
}

// ModelPage is a page of GET /v1/models, the Models API's paging: the page's first and last ids (null on an
// empty page) are the before_id and after_id of the pages beside it.
type ModelPage struct {
	Data    []ModelInfo `json:"data"`
	HasMore bool        `json:"has_more"`
	FirstID *string     `json:"first_id"`
	LastID  *string     `json:"last_id"`
}
