package sqlite

import (
	"context"
	"errors"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// errThreadsTODO: the thread store is being built (issue 22).
var errThreadsTODO = errors.New("sqlite: threads not implemented yet")

func (s *Store) ThreadGet(context.Context, string, string) (*apitype.SessionThread, error) {
	return nil, errThreadsTODO
}

func (s *Store) ThreadList(context.Context, *store.ThreadListParams) ([]apitype.SessionThread, error) {
	return nil, errThreadsTODO
}

func (s *Store) ThreadArchive(context.Context, string, string, func(*apitype.SessionThread) error) (*apitype.SessionThread, error) {
	return nil, errThreadsTODO
}
