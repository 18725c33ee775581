package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/corralhq/corral/internal/sandbox"
)

// Fixed is an EgressSource that gives every sandbox the same Egress: the operator's trusted internal
// destinations and upstream roots (corral serve --egress-allow-internal, --egress-ca-file).
type Fixed sandbox.Egress

// Egress returns a copy of f.
func (f *Fixed) Egress(context.Context, *sandbox.Recipe) (*sandbox.Egress, error) {
	eg := sandbox.Egress(*f)
	eg.AllowInternal = append([]string(nil), f.AllowInternal...)
	eg.AllowHosts = append([]string(nil), f.AllowHosts...)
	return &eg, nil
}

// Merge is an EgressSource that asks each of srcs in turn and merges their answers (nil ones are skipped; all
// nil is nil): AllowInternal and AllowHosts are joined; RootCAs, CACertPEM, Local and Intercept are taken from the one source
// that sets each (two differing ones are an error, never a silent choice); Env variables are joined, a name
// set twice to different values is an error.
func Merge(srcs ...sandbox.EgressSource) sandbox.EgressSource { return merged(srcs) }

type merged []sandbox.EgressSource

func (m merged) Egress(ctx context.Context, r *sandbox.Recipe) (*sandbox.Egress, error) {
	var out *sandbox.Egress
	for _, src := range m {
		eg, err := src.Egress(ctx, r)
		if err != nil {
			return nil, err
		}
		if eg == nil {
			continue
		}
		if out == nil {
			out = &sandbox.Egress{}
		}
		if err := mergeInto(out, eg); err != nil {
			return nil, fmt.Errorf("proxy: merge egress: %w", err)
		}
	}
	return out, nil
}

func mergeInto(out, eg *sandbox.Egress) error {
	out.AllowInternal = append(out.AllowInternal, eg.AllowInternal...)
	out.AllowHosts = append(out.AllowHosts, eg.AllowHosts...)
	if eg.RootCAs != nil {
		if out.RootCAs != nil && !out.RootCAs.Equal(eg.RootCAs) {
			return errors.New("two sources set RootCAs")
		}
		out.RootCAs = eg.RootCAs
	}
	if len(eg.CACertPEM) > 0 {
		if len(out.CACertPEM) > 0 && !bytes.Equal(out.CACertPEM, eg.CACertPEM) {
			return errors.New("two sources set different CA certificates")
		}
		out.CACertPEM = eg.CACertPEM
	}
	if eg.Local != nil {
		if out.Local != nil {
			return errors.New("two sources set Local")
		}
		out.Local = eg.Local
	}
	if eg.Intercept != nil {
		if out.Intercept != nil {
			return errors.New("two sources set Intercept")
		}
		out.Intercept = eg.Intercept
	}
	for k, v := range eg.Env {
		if out.Env == nil {
			out.Env = map[string]string{}
		}
		if old, ok := out.Env[k]; ok && old != v {
			return fmt.Errorf("two sources set the variable %s", k)
		}
		out.Env[k] = v
	}
	return nil
}
