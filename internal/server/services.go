package server

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// service is one part of a running server with a lifecycle: Start starts it (and returns once it runs), Stop
// stops it and waits for the goroutines it owns. Stop is called only after a successful Start, once.
type service interface {
	Start(ctx context.Context) error
	Stop()
}

// namedService is a service made of two functions, named (if at all) in the error of a failed start.
type namedService struct {
	name  string
	start func(ctx context.Context) error // nil: nothing to start
	stop  func()                          // nil: nothing to stop
}

func (s namedService) Start(ctx context.Context) error {
	if s.start == nil {
		return nil
	}
	err := s.start(ctx)
	if err != nil && s.name != "" {
		return fmt.Errorf("%s: %w", s.name, err)
	}
	return err
}

func (s namedService) Stop() {
	if s.stop != nil {
		s.stop()
	}
}

// services runs an ordered list of services (River's startstop, for a list): Start starts them in order and,
// when one fails, stops the ones it started in reverse before it returns the error; Stop stops the started
// ones in reverse. Each service is stopped at most once, so Stop is idempotent and safe after a failed Start.
type services struct {
	list []service

	mu      sync.Mutex
	started []service // in start order; what Stop still has to stop
	done    bool      // Stop ran: nothing starts any more
}

// Start starts every service in order. On failure, the started ones are stopped in reverse.
func (s *services) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done || len(s.started) > 0 {
		return fmt.Errorf("services already started")
	}
	for _, svc := range s.list {
		if err := svc.Start(ctx); err != nil {
			s.stopLocked()
			return err
		}
		s.started = append(s.started, svc)
	}
	return nil
}

// Stop stops the started services in reverse order. Idempotent.
func (s *services) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = true
	s.stopLocked()
}

func (s *services) stopLocked() {
	started := s.started
	s.started = nil
	for _, svc := range slices.Backward(started) {
		svc.Stop()
	}
}
