package fakemodel_test

import (
	"io"
	"testing"

	"github.com/corralhq/corral/internal/model/fakemodel"
)

func TestObserver(t *testing.T) {
	t.Parallel()
	got := make(chan fakemodel.Timing, 1)
	s := newServer(t, fakemodel.WithObserver(func(tm fakemodel.Timing) { got <- tm }))
	resp := post(t, s.URL+"/v1/messages", `{"model":"m","max_tokens":1,"stream":true,"messages":[{"role":"user","content":"marker-1"}]}`)
	_, _ = io.Copy(io.Discard, resp.Body)
	tm := <-got
	if tm.Request.LastUserText() != "marker-1" || tm.Done.Before(tm.Received) || tm.Received.IsZero() {
		t.Fatalf("timing = %+v", tm)
	}
}
