package bwrap_test

import (
	"testing"

	"github.com/corralhq/corral/internal/proxy/proxytest"
	"github.com/corralhq/corral/internal/sandbox/sandboxtest"
)

func TestSecrets(t *testing.T) { sandboxtest.RunSecrets(t, newProvider, proxytest.Setup) }
