package proxy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/corralhq/corral/internal/sandbox"
)

// Join is an EgressSource that merges what each of sources adds to a sandbox's network (the git endpoint, the
// credential injection): the AllowInternal pairs and Env of all of them; RootCAs, CACertPEM, Local and Intercept
// from the one source that sets each (RootCAs may be set by several if they are the same pool; two that set
// the same one, or the same Env name differently, are an
// error: a wiring mistake). A nil Egress of a source adds nothing.
func Join(sources ...sandbox.EgressSource) sandbox.EgressSource { return joined(sources) }

type joined []sandbox.EgressSource

func (j joined) Egress(ctx context.Context, r *sandbox.Recipe) (*sandbox.Egress, error) {
	out := &sandbox.Egress{}
	for i, src := range j {
		e, err := src.Egress(ctx, r)
		if err != nil {
			return nil, err
		}
		if e == nil {
			continue
		}
		for _, hp := range e.AllowInternal {
			if !slices.Contains(out.AllowInternal, hp) {
				out.AllowInternal = append(out.AllowInternal, hp)
			}
		}
		for k, v := range e.Env {
			if old, ok := out.Env[k]; ok && old != v {
				return nil, fmt.Errorf("proxy: egress sources %d and another set %s differently", i, k)
			}
			if out.Env == nil {
				out.Env = map[string]string{}
			}
			out.Env[k] = v
		}
		switch {
		case e.RootCAs == nil || e.RootCAs == out.RootCAs:
		case out.RootCAs != nil && !out.RootCAs.Equal(e.RootCAs):
			return nil, errors.New("proxy: two egress sources set different RootCAs")
		default:
			out.RootCAs = e.RootCAs
		}
		if err := setOnce(&out.Local, e.Local, "Local"); err != nil {
			return nil, err
		}
		if err := setOnce(&out.Intercept, e.Intercept, "Intercept"); err != nil {
			return nil, err
		}
		if len(e.CACertPEM) > 0 {
			if len(out.CACertPEM) > 0 {
				return nil, errors.New("proxy: two egress sources set CACertPEM")
			}
			out.CACertPEM = e.CACertPEM
		}
	}
	out.Env = maps.Clone(out.Env)
	return out, nil
}

// setOnce sets *dst to v if v is set; an error if both are.
func setOnce[T comparable](dst *T, v T, what string) error {
	var zero T
	switch {
	case v == zero:
		return nil
	case *dst != zero:
		return fmt.Errorf("proxy: two egress sources set %s", what)
	}
	*dst = v
	return nil
}
