package chaostest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/example/payments/internal/stripesim"
)

// The simulator's fault kinds (API.md section 4).
var faultKinds = []stripesim.FaultKind{
	stripesim.FaultError500, stripesim.FaultLostResponse, stripesim.FaultDropConnection, stripesim.FaultDelay, stripesim.FaultRateLimit,
	stripesim.FaultStoredError500, stripesim.FaultLate500,
}

// injectFaults arms a random simulator fault every so often (exponential
// gaps, rate per second on average) until ctx ends. Delays are sometimes
// longer than the service's lock timeout, so a request outlives its lock
// unless the heartbeat keeps it.
func injectFaults(ctx context.Context, simURL string, rate float64, lockTimeout time.Duration, rng *rand.Rand, stats *Stats, logf func(string, ...any)) {
	if rate <= 0 {
		return
	}
	for {
		gap := time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		select {
		case <-ctx.Done():
			return
		case <-time.After(min(gap, 10*time.Second)):
		}
		f := stripesim.Fault{
			PathPrefix: []string{"/v1/payment_intents", "/v1/payment_intents", "/v1/refunds", "/v1/"}[rng.IntN(4)],
			Method:     []string{"POST", "POST", ""}[rng.IntN(3)],
			Kind:       faultKinds[rng.IntN(len(faultKinds))],
			Count:      1 + rng.IntN(3),
		}
		if f.Kind == stripesim.FaultLate500 {
			// The request's work lands after its stored 500 was answered
			// (and, often, replayed): mostly well inside the service's
			// grace for a spent key (5 s, cluster.go), which must find it
			// rather than act again; one in three past it, after the
			// service acted again under a new child key, so Stripe does it
			// twice: the service must record the second refund, and refund
			// the second charge, once (the checker's duplicate-refund and
			// charged-twice). The grace runs from the first replayed 500,
			// which the client's retry meets about 2 s after the first 500
			// (its Retry-After), so the next child key acts about 7 s after
			// it: 10 to 15 s lands after that. (6 to 9 s, tried first in a
			// 30 s run, landed inside the grace every time: 6 armed, no
			// second object.)
			f.DelayMS = rng.IntN(3000)
			if rng.IntN(3) == 0 {
				f.DelayMS = 10_000 + rng.IntN(5000)
				stats.Add("late_500 armed past the grace", 1)
			}
		}
		if f.Kind == stripesim.FaultDelay {
			f.DelayMS = 100 + rng.IntN(900)
			if rng.IntN(3) == 0 {
				f.DelayMS = int(lockTimeout/time.Millisecond) + 200 + rng.IntN(1300)
				stats.Add("faults armed: delay longer than the lock timeout", 1)
			}
		}
		if err := simControl(ctx, http.MethodPost, simURL+"/_sim/faults", mustJSON(f)); err != nil {
			if ctx.Err() == nil {
				logf("chaos: arming a fault: %v", err)
			}
			continue
		}
		stats.Add("faults armed: "+string(f.Kind), 1)
	}
}

// webhookFaultKinds are the ways Stripe's webhooks arrive besides once and
// in order (API.md section 4): twice, after the next event about the same
// object, late.
var webhookFaultKinds = []stripesim.WebhookFaultKind{stripesim.WebhookDuplicate, stripesim.WebhookReorder, stripesim.WebhookDelay}

// injectWebhookFaults arms a random webhook fault at the simulator every
// second or so until ctx ends. (The relay in front of the instances
// duplicates deliveries too; these come from Stripe's side, in its order.)
func injectWebhookFaults(ctx context.Context, simURL string, rng *rand.Rand, stats *Stats, logf func(string, ...any)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(500+rng.IntN(1500)) * time.Millisecond):
		}
		f := stripesim.WebhookFault{Kind: webhookFaultKinds[rng.IntN(len(webhookFaultKinds))], Count: 1 + rng.IntN(3)}
		if f.Kind == stripesim.WebhookDelay {
			f.DelayMS = 200 + rng.IntN(3000)
		}
		if err := simControl(ctx, http.MethodPost, simURL+"/_sim/webhook_faults", mustJSON(f)); err != nil {
			if ctx.Err() == nil {
				logf("chaos: arming a webhook fault: %v", err)
			}
			continue
		}
		stats.Add("webhook faults armed: "+string(f.Kind), 1)
	}
}

// clearFaults disarms every fault, and releases the webhooks held back.
func clearFaults(ctx context.Context, simURL string) error {
	return errors.Join(simControl(ctx, http.MethodDelete, simURL+"/_sim/faults", nil),
		simControl(ctx, http.MethodDelete, simURL+"/_sim/webhook_faults", nil))
}

func simControl(ctx context.Context, method, url string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := controlClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s", method, url, resp.Status)
	}
	return nil
}
