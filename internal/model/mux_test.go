package model_test

import (
	"context"
	"errors"
	"testing"

	"github.com/corralhq/corral/internal/model"
)

// recorder is a Model that records the model ids it is called with.
type recorder struct{ ids []string }

func (r *recorder) Call(_ context.Context, req *model.Request, _ func(model.Delta)) (*model.Response, error) {
	r.ids = append(r.ids, req.Model)
	return &model.Response{StopReason: "end_turn"}, nil
}

func TestMux(t *testing.T) {
	t.Parallel()
	anth, oai := &recorder{}, &recorder{}
	mux, err := model.NewMux(model.MuxConfig{Default: anth, Routes: map[string]model.Model{"openai": oai}})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"claude-sonnet-4-5", "openai/gpt-4o", "openai/org/model", "other/x"} {
		req := &model.Request{Model: id}
		if _, err := mux.Call(context.Background(), req, nil); err != nil {
			t.Fatal(err)
		}
		if req.Model != id {
			t.Fatalf("the caller's request was changed to %q", req.Model)
		}
	}
	if got := anth.ids; len(got) != 2 || got[0] != "claude-sonnet-4-5" || got[1] != "other/x" {
		t.Fatalf("default got %q", got)
	}
	if got := oai.ids; len(got) != 2 || got[0] != "gpt-4o" || got[1] != "org/model" {
		t.Fatalf("openai got %q", got)
	}
}

func TestMuxNoDefault(t *testing.T) {
	t.Parallel()
	mux, err := model.NewMux(model.MuxConfig{Routes: map[string]model.Model{"openai": &recorder{}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = mux.Call(context.Background(), &model.Request{Model: "claude"}, nil)
	var me *model.Error
	if !errors.As(err, &me) || me.Kind != model.ErrInvalid {
		t.Fatalf("got %v, want ErrInvalid", err)
	}
}

func TestMuxInvalidRoutes(t *testing.T) {
	t.Parallel()
	for _, routes := range []map[string]model.Model{{"": &recorder{}}, {"a/b": &recorder{}}, {"openai": nil}} {
		if _, err := model.NewMux(model.MuxConfig{Routes: routes}); err == nil {
			t.Errorf("NewMux accepted routes %v", routes)
		}
	}
}
