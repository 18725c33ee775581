package model_test

import (
	"testing"

	"github.com/corralhq/corral/internal/model"
)

// TestStatusKind: the HTTP status rule both adapters fall back on.
func TestStatusKind(t *testing.T) {
	t.Parallel()
	for status, want := range map[int]model.ErrorKind{
		0: model.ErrUnknown, 200: model.ErrUnknown, 302: model.ErrUnknown,
		400: model.ErrInvalid, 404: model.ErrInvalid, 422: model.ErrInvalid,
		401: model.ErrAuth, 403: model.ErrAuth,
		402: model.ErrBilling,
		408: model.ErrServer, 500: model.ErrServer, 503: model.ErrServer,
		413: model.ErrContextTooLong,
		429: model.ErrRateLimited,
		529: model.ErrOverloaded,
	} {
		if got := model.StatusKind(status); got != want {
			t.Errorf("StatusKind(%d) = %v, want %v", status, got, want)
		}
	}
}
