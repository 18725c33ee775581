package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/files"
	corral "github.com/corralhq/corral/internal/server"
	"github.com/corralhq/corral/internal/vault"
	"github.com/corralhq/corral/internal/webhook"
)

// fleetFlags configure the fleet's unattended work, which serve and harness processes run on whichever holds
// the store's leader lease: dreams, deployments' schedules, webhook deliveries.
type fleetFlags struct {
	dreamTimeout time.Duration
	catchUp      time.Duration
	retryPeriod  time.Duration
}

func (f *fleetFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&f.dreamTimeout, "dream-timeout", api.DefaultDreamTimeout, "how long a dream may run before it fails with a timeout error and its session is interrupted")
	fs.DurationVar(&f.catchUp, "deployment-catch-up", api.DefaultCatchUp, "how old a deployment's scheduled time, missed while no server ran, may be and still fire when one comes back (older ones are recorded as missed)")
	fs.DurationVar(&f.retryPeriod, "webhook-retry-period", webhook.DefaultRetryPeriod, "how long a webhook delivery is retried, with exponential back-off, before it is given up and its endpoint disabled")
}

// config builds the server's FleetConfig; the webhooks' targets obey the egress flags of hf.
func (f *fleetFlags) config(hf *handsFlags, v *vault.Vault, fsvc *files.Service) (*corral.FleetConfig, error) {
	if f.catchUp <= 0 || f.retryPeriod <= 0 || f.dreamTimeout <= 0 {
		return nil, fmt.Errorf("--dream-timeout, --deployment-catch-up and --webhook-retry-period must be positive")
	}
	eo, err := hf.egress.parse()
	if err != nil {
		return nil, err
	}
	return &corral.FleetConfig{Sealer: v, Files: fsvc, DreamTimeout: f.dreamTimeout, DeploymentCatchUp: f.catchUp,
		Webhooks:           webhook.SenderConfig{AllowInternal: eo.AllowInternal, RootCAs: eo.RootCAs},
		WebhookRetryPeriod: f.retryPeriod}, nil
}
