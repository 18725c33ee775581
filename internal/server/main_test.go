package server_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Stop waits for every goroutine the server owns.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
