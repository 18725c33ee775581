package server

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// recorder is a service that records its starts and stops in a shared log.
type recorder struct {
	name string
	log  *[]string
	fail error
}

func (r *recorder) Start(context.Context) error {
	*r.log = append(*r.log, "start "+r.name)
	return r.fail
}

func (r *recorder) Stop() { *r.log = append(*r.log, "stop "+r.name) }

func TestServicesOrder(t *testing.T) {
	t.Parallel()
	var log []string
	s := &services{list: []service{&recorder{name: "a", log: &log}, &recorder{name: "b", log: &log}, &recorder{name: "c", log: &log}}}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	s.Stop() // idempotent: nothing is stopped twice
	want := []string{"start a", "start b", "start c", "stop c", "stop b", "stop a"}
	if !slices.Equal(log, want) {
		t.Errorf("log %q, want %q", log, want)
	}
	if err := s.Start(context.Background()); err == nil {
		t.Error("Start after Stop succeeded")
	}
}

func TestServicesUnwind(t *testing.T) {
	t.Parallel()
	var log []string
	boom := errors.New("boom")
	s := &services{list: []service{&recorder{name: "a", log: &log}, &recorder{name: "b", log: &log},
		&recorder{name: "c", log: &log, fail: boom}, &recorder{name: "d", log: &log}}}
	if err := s.Start(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("Start: %v, want boom", err)
	}
	// The failed service and those after it are not stopped; those started are, in reverse.
	want := []string{"start a", "start b", "start c", "stop b", "stop a"}
	if !slices.Equal(log, want) {
		t.Errorf("log %q, want %q", log, want)
	}
	s.Stop() // after a failed Start: stops nothing again
	if !slices.Equal(log, want) {
		t.Errorf("Stop after a failed Start: log %q, want %q", log, want)
	}
}

func TestNamedService(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	err := namedService{name: "images", start: func(context.Context) error { return boom }}.Start(context.Background())
	if !errors.Is(err, boom) || err.Error() != "images: boom" {
		t.Errorf("err %v, want images: boom", err)
	}
	namedService{name: "nothing"}.Stop() // no stop function: no panic
	if err := (namedService{name: "nothing"}).Start(context.Background()); err != nil {
		t.Error(err)
	}
}
